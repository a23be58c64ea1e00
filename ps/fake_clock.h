// For tests: a steady clock that moves only when told to, for the classes that take their
// `now` as a function (UpdateGate, RebuildQueue). Thread-safe.
#ifndef ECPS_PS_FAKE_CLOCK_H_
#define ECPS_PS_FAKE_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstdint>

namespace ecps {

class FakeSteadyClock {
 public:
  std::chrono::steady_clock::time_point Now() const {
    return std::chrono::steady_clock::time_point(std::chrono::milliseconds(ms_.load()));
  }
  void Advance(std::chrono::milliseconds d) { ms_.fetch_add(d.count()); }

 private:
  std::atomic<int64_t> ms_{1'000'000};
};

}  // namespace ecps

#endif  // ECPS_PS_FAKE_CLOCK_H_
