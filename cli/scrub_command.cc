#include "cli/scrub_command.h"

#include <cstdio>

#include "cli/operator_call.h"
#include "proto/ecps.grpc.pb.h"
#include "runtime/rpc.h"

namespace ecps {

int RunScrubCommand(const std::string& address, const std::string& token) {
  OperatorCall coordinator(address);
  v1::ScrubRequest request;
  FillHeader(request.mutable_header(), token, 0, "ecps-scrub");
  v1::ScrubReport report;
  RpcOptions rpc;
  rpc.deadline_ms = 10 * 60 * 1000;
  rpc.max_attempts = 1;
  const absl::Status status = coordinator.Call(rpc, [&](grpc::ClientContext* context) {
    return coordinator.stub()->Scrub(context, request, &report);
  });
  if (!status.ok()) return coordinator.Fail("scrub", status);
  std::printf("stripes checked      %lld\nparity mismatches    %lld\n"
              "dense replicas       %lld\ndense mismatches     %lld\nseconds              %.2f\n",
              static_cast<long long>(report.stripes_checked()),
              static_cast<long long>(report.parity_mismatches()),
              static_cast<long long>(report.dense_checked()),
              static_cast<long long>(report.dense_mismatches()), report.seconds());
  for (const std::string& m : report.mismatches()) std::printf("mismatch: %s\n", m.c_str());
  if (!report.error().empty()) std::printf("error: %s\n", report.error().c_str());
  std::printf("%s\n", report.clean() ? "clean" : "NOT CLEAN");
  return report.clean() ? 0 : 1;
}

}  // namespace ecps
