// A fixed set of threads that runs groups of blocking tasks (RPCs to several peers at once)
// without starting a thread per task. Run() hands over a group and returns when every task
// of it has finished; several callers may run groups at the same time, and their tasks share
// the threads. Thread-safe.
#ifndef ECPS_RUNTIME_TASK_POOL_H_
#define ECPS_RUNTIME_TASK_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ecps {

class TaskPool {
 public:
  explicit TaskPool(int threads);
  ~TaskPool();  // waits for the tasks already handed over
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // Runs every task, in parallel as far as the threads allow; returns once all are done.
  void Run(std::vector<std::function<void()>> tasks);

 private:
  // Its fields are TaskPool::mu_'s (the annotations cannot name another class's member).
  struct Group {
    size_t left = 0;
    absl::CondVar done;
  };
  struct Task {
    std::function<void()> fn;
    Group* group;
  };
  void Work();

  absl::Mutex mu_;
  absl::CondVar work_;  // a task queued, or stopping
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace ecps

#endif  // ECPS_RUNTIME_TASK_POOL_H_
