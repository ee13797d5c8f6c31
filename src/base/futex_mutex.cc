#include "src/base/futex_mutex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace chorus {

void FutexMutex::lockContended() {
  // Mark the word "held with sleepers" and sleep while someone else holds it; whoever gets it
  // this way leaves it at 2, so its unlock wakes the next sleeper (at worst one wake too many).
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  auto* raw = reinterpret_cast<uint32_t*>(&word_);
  while (word_.exchange(2, std::memory_order_acquire) != 0)
    ::syscall(SYS_futex, raw, FUTEX_WAIT_PRIVATE, 2, nullptr, nullptr, 0);
}

void FutexMutex::wakeOne() {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word_), FUTEX_WAKE_PRIVATE, 1, nullptr,
            nullptr, 0);
}

}  // namespace chorus
