#include "coordinator/final_scrub.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ecps {

absl::Status FinalScrub::Finish(const v1::ScrubReport& report) {
  pending_ = false;
  done_ = true;
  if (report.clean()) return absl::OkStatus();
  if (!report.error().empty()) {
    return absl::FailedPreconditionError("final scrub failed: " + report.error());
  }
  return absl::FailedPreconditionError(
      absl::StrCat("final scrub found ", report.parity_mismatches(), " parity and ",
                   report.dense_mismatches(), " dense replica mismatches"));
}

std::string FinalScrub::Summary(const v1::ScrubReport& report) {
  return absl::StrFormat(
      "scrub: %d stripes, %d parity mismatches, %d dense replicas, %d mismatches, %.2f s%s",
      report.stripes_checked(), report.parity_mismatches(), report.dense_checked(),
      report.dense_mismatches(), report.seconds(),
      report.error().empty() ? "" : "; error: " + report.error());
}

}  // namespace ecps
