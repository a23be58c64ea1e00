#include "runtime/task_pool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"

namespace ecps {
namespace {

TEST(TaskPool, RunsEveryTaskBeforeReturning) {
  TaskPool pool(3);
  std::atomic<int> sum{0};
  std::vector<std::function<void()>> tasks;
  for (int i = 1; i <= 50; ++i) tasks.push_back([&sum, i] { sum += i; });
  pool.Run(std::move(tasks));
  EXPECT_EQ(sum.load(), 50 * 51 / 2);
  pool.Run({});  // an empty group returns at once
}

TEST(TaskPool, TasksOfOneGroupRunAtTheSameTime) {
  // Each task waits until all four have started: with one thread per task in flight this
  // finishes, run one after another it would not.
  TaskPool pool(4);
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  bool all_met = true;
  std::vector<std::function<void()>> tasks;
  for (int i = 0; i < 4; ++i) {
    tasks.push_back([&] {
      std::unique_lock<std::mutex> lock(mu);
      ++started;
      cv.notify_all();
      all_met &= cv.wait_for(lock, std::chrono::seconds(10), [&] { return started == 4; });
    });
  }
  pool.Run(std::move(tasks));
  EXPECT_TRUE(all_met);
}

TEST(TaskPool, ConcurrentCallersEachWaitForTheirOwnGroup) {
  TaskPool pool(2);
  std::atomic<int> a{0}, b{0};
  std::thread other([&] {
    std::vector<std::function<void()>> tasks;
    for (int i = 0; i < 100; ++i) tasks.push_back([&] { ++b; });
    pool.Run(std::move(tasks));
    EXPECT_EQ(b.load(), 100);
  });
  std::vector<std::function<void()>> tasks;
  for (int i = 0; i < 100; ++i) tasks.push_back([&] { ++a; });
  pool.Run(std::move(tasks));
  EXPECT_EQ(a.load(), 100);
  other.join();
}

}  // namespace
}  // namespace ecps
