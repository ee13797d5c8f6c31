// A lock for critical sections of a few pointer swaps, where a pthread mutex's lock and unlock
// cost more than the work they protect (the block pool's free lists, the operation queue).
// Not for anything that may be held long: a holder preempted mid-section is waited out with
// sched_yield, never by sleeping in the kernel.
#pragma once

#include <sched.h>

#include <atomic>

namespace chorus {

class SpinLock {
 public:
  void lock() {
    for (int spins = 0; flag_.exchange(true, std::memory_order_acquire); ++spins) {
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins > 64) sched_yield();
      }
    }
  }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

}  // namespace chorus
