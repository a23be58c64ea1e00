#include "runtime/task_pool.h"

#include <algorithm>
#include <utility>

namespace ecps {

TaskPool::TaskPool(int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { Work(); });
}

TaskPool::~TaskPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    work_.SignalAll();
  }
  for (std::thread& t : threads_) t.join();
}

void TaskPool::Run(std::vector<std::function<void()>> tasks) {
  if (tasks.empty()) return;
  Group group;
  absl::MutexLock lock(&mu_);
  group.left = tasks.size();
  for (auto& fn : tasks) queue_.push_back(Task{std::move(fn), &group});
  work_.SignalAll();
  while (group.left != 0) group.done.Wait(&mu_);
}

void TaskPool::Work() {
  absl::MutexLock lock(&mu_);
  while (true) {
    while (!stopping_ && queue_.empty()) work_.Wait(&mu_);
    if (queue_.empty()) return;  // stopping, and nothing left to run
    Task task = std::move(queue_.front());
    queue_.pop_front();
    mu_.Unlock();
    task.fn();
    mu_.Lock();
    if (--task.group->left == 0) task.group->done.SignalAll();
  }
}

}  // namespace ecps
