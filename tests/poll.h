// Waiting on a condition with a deadline, for tests (never a bare sleep).
#ifndef ECPS_TESTS_POLL_H_
#define ECPS_TESTS_POLL_H_

#include <chrono>
#include <functional>
#include <thread>

namespace ecps {
namespace testing_process {

// Polls `done` every 10 ms until it holds (true) or `timeout` passes (false).
inline bool PollUntil(const std::function<bool()>& done, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace testing_process
}  // namespace ecps

#endif  // ECPS_TESTS_POLL_H_
