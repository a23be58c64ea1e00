#include "runtime/coordinator_grace.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ecps {

CoordinatorGrace::CoordinatorGrace(std::chrono::milliseconds interval, std::chrono::seconds grace,
                                   Clock::time_point start)
    : interval_(interval), grace_(grace), last_answer_(start) {}

void CoordinatorGrace::Answered(Clock::time_point now) {
  last_answer_ = now;
  failures_ = 0;
}

void CoordinatorGrace::Failed(Clock::time_point /*now*/) { failures_ = std::min(failures_ + 1, 30); }

std::chrono::milliseconds CoordinatorGrace::NextWait() const {
  if (failures_ == 0) return interval_;
  // The interval doubled per failure in a row, capped (never below the interval itself).
  const int shift = std::min(failures_, 16);
  return std::max(interval_, std::min(interval_ * (int64_t{1} << shift), kMaxHeartbeatBackoff));
}

std::chrono::milliseconds CoordinatorGrace::Silent(Clock::time_point now) const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - last_answer_);
}

std::string CoordinatorGrace::LostMessage(const std::string& coordinator,
                                          Clock::time_point now) const {
  return absl::StrCat("no answer from the coordinator at ", coordinator, " for ",
                      Silent(now).count() / 1000, " s (cluster.coordinator_grace_s = ",
                      grace_.count(), "): it is not coming back; stopping");
}

}  // namespace ecps
