#include "runtime/task_pool.h"

#include <algorithm>
#include <utility>

namespace ecps {

TaskPool::TaskPool(int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { Work(); });
}

TaskPool::~TaskPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void TaskPool::Run(std::vector<std::function<void()>> tasks) {
  if (tasks.empty()) return;
  Group group;
  std::unique_lock<std::mutex> lock(mu_);
  group.left = tasks.size();
  for (auto& fn : tasks) queue_.push_back(Task{std::move(fn), &group});
  lock.unlock();
  cv_.notify_all();
  lock.lock();
  group.done.wait(lock, [&] { return group.left == 0; });
}

void TaskPool::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to run
    Task task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    task.fn();
    lock.lock();
    if (--task.group->left == 0) task.group->done.notify_all();
  }
}

}  // namespace ecps
