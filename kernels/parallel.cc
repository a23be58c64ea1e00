#include "kernels/parallel.h"

#include <algorithm>

namespace ecps {

ParallelRunner::ParallelRunner(int threads) : threads_(std::max(1, threads)) {
  for (int m = 1; m < threads_; ++m) helpers_.emplace_back([this, m] { Help(m); });
}

ParallelRunner::~ParallelRunner() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    start_.SignalAll();
  }
  for (std::thread& t : helpers_) t.join();
}

void ParallelRunner::Run(int n, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  const int helpers = std::min(threads_, n) - 1;
  if (helpers > 0) {
    absl::MutexLock lock(&mu_);
    tasks_ = n;
    fn_ = &fn;
    pending_ = threads_ - 1;
    ++generation_;
    start_.SignalAll();
  }
  for (int i = 0; i < n; i += threads_) fn(i);
  if (helpers > 0) {
    absl::MutexLock lock(&mu_);
    while (pending_ != 0) done_.Wait(&mu_);
    fn_ = nullptr;
  }
}

void ParallelRunner::Help(int member) {
  uint64_t seen = 0;
  while (true) {
    int n = 0;
    const std::function<void(int)>* fn = nullptr;
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && generation_ == seen) start_.Wait(&mu_);
      if (stopping_) return;
      seen = generation_;
      n = tasks_;
      fn = fn_;
    }
    for (int i = member; i < n; i += threads_) (*fn)(i);
    {
      absl::MutexLock lock(&mu_);
      if (--pending_ == 0) done_.Signal();
    }
  }
}

}  // namespace ecps
