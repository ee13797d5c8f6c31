// The execution lock's mutex (src/base/futex_mutex.h): mutual exclusion under contention, a
// sleeping waiter is woken by the unlock, and try_lock never waits.
#include "src/base/futex_mutex.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace chorus {
namespace {

TEST(FutexMutex, ExcludesUnderContention) {
  FutexMutex mu;
  uint64_t counter = 0;  // plain: only the lock keeps the increments from racing
  constexpr int kThreads = 4, kRounds = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        std::lock_guard<FutexMutex> lock(mu);
        const uint64_t seen = counter;
        if (i % 64 == 0) std::this_thread::yield();  // hold it across a reschedule now and then
        counter = seen + 1;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter, uint64_t{kThreads} * kRounds);
}

TEST(FutexMutex, TryLockFailsWhileHeldAndSucceedsAfter) {
  FutexMutex mu;
  ASSERT_TRUE(mu.try_lock());
  std::atomic<int> got{-1};
  std::thread([&] { got = mu.try_lock() ? 1 : 0; }).join();
  EXPECT_EQ(got.load(), 0);
  mu.unlock();
  std::thread([&] {
    got = mu.try_lock() ? 1 : 0;
    if (got.load()) mu.unlock();
  }).join();
  EXPECT_EQ(got.load(), 1);
}

TEST(FutexMutex, AWaiterAsleepOnTheLockGetsItWhenItIsReleased) {
  FutexMutex mu;
  mu.lock();
  std::atomic<bool> acquired{false};
  std::thread waiter([&] {
    std::lock_guard<FutexMutex> lock(mu);
    acquired = true;
  });
  // Whether or not the waiter is asleep yet, it must not get the lock while it is held, and
  // must get it after the unlock (join below would hang otherwise; ctest's timeout ends that).
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(acquired.load());
  mu.unlock();
  waiter.join();
  EXPECT_TRUE(acquired.load());
}

}  // namespace
}  // namespace chorus
