// A mutex of one 32-bit word, for the lock every call takes (a communicator's execution lock).
//
// Uncontended, lock and unlock are one atomic instruction each; a pthread mutex's are about 30
// and 50 instructions (glibc 2.36), which was a tenth of a blocking 8-byte all-reduce's own
// instructions. Contended, a waiter sleeps on a private futex, as a pthread mutex does — the
// lock may be held for a whole collective, so nobody spins on it. The word is 0 (free), 1 (held)
// or 2 (held, and someone may sleep on it: the unlock wakes one). A BasicLockable with
// try_lock, for std::lock_guard and std::unique_lock; not for std::condition_variable.
#pragma once

#include <atomic>
#include <cstdint>

namespace chorus {

class FutexMutex {
 public:
  FutexMutex() = default;
  FutexMutex(const FutexMutex&) = delete;
  FutexMutex& operator=(const FutexMutex&) = delete;

  void lock() {
    uint32_t free = 0;
    if (!word_.compare_exchange_strong(free, 1, std::memory_order_acquire)) lockContended();
  }
  bool try_lock() {
    uint32_t free = 0;
    return word_.compare_exchange_strong(free, 1, std::memory_order_acquire);
  }
  void unlock() {
    if (word_.exchange(0, std::memory_order_release) == 2) wakeOne();
  }

 private:
  void lockContended();
  void wakeOne();
  std::atomic<uint32_t> word_{0};
};

}  // namespace chorus
