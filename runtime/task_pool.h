// A fixed set of threads that runs groups of blocking tasks (RPCs to several peers at once)
// without starting a thread per task. Run() hands over a group and returns when every task
// of it has finished; several callers may run groups at the same time, and their tasks share
// the threads. Thread-safe.
#ifndef ECPS_RUNTIME_TASK_POOL_H_
#define ECPS_RUNTIME_TASK_POOL_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

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
  struct Group {
    size_t left = 0;  // guarded by TaskPool::mu_
    std::condition_variable done;
  };
  struct Task {
    std::function<void()> fn;
    Group* group;
  };
  void Work();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;  // guarded by mu_
  bool stopping_ = false;   // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace ecps

#endif  // ECPS_RUNTIME_TASK_POOL_H_
