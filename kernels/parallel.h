// A fixed team of threads for the data-parallel parts of a training step: the caller and
// threads-1 helpers, which wait between runs. Run(n, fn) calls fn(i) for every i in [0, n),
// task i on team member i % threads (the caller is member 0), and returns when all are done:
// a task's thread depends only on n and the team's size, so work that writes disjoint outputs
// per task gives the same bits on every run with the same thread count.
#ifndef ECPS_KERNELS_PARALLEL_H_
#define ECPS_KERNELS_PARALLEL_H_

#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ecps {

class ParallelRunner {
 public:
  explicit ParallelRunner(int threads);
  ~ParallelRunner();
  ParallelRunner(const ParallelRunner&) = delete;
  ParallelRunner& operator=(const ParallelRunner&) = delete;

  int threads() const { return threads_; }

  // Not reentrant: one Run at a time, from one thread (the step's).
  void Run(int n, const std::function<void(int)>& fn);

  // [begin, end) of part `part` of `parts` equal parts of [0, n).
  static int64_t PartBegin(int64_t n, int parts, int part) { return n * part / parts; }

 private:
  void Help(int member);

  const int threads_;
  absl::Mutex mu_;
  absl::CondVar start_, done_;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // one per Run
  int pending_ ABSL_GUARDED_BY(mu_) = 0;          // helpers still working on this Run
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int tasks_ ABSL_GUARDED_BY(mu_) = 0;            // read by helpers after a new generation
  const std::function<void(int)>* fn_ ABSL_GUARDED_BY(mu_) = nullptr;  // likewise
  std::vector<std::thread> helpers_;
};

}  // namespace ecps

#endif  // ECPS_KERNELS_PARALLEL_H_
