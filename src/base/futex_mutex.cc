#include "src/base/futex_mutex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "src/base/futex.h"

namespace chorus {

void FutexMutex::lockContended() {
  // Mark the word "held with sleepers" and sleep while someone else holds it; whoever gets it
  // this way leaves it at 2, so its unlock wakes the next sleeper (at worst one wake too many).
  while (word_.exchange(2, std::memory_order_acquire) != 0)
    ::syscall(SYS_futex, futex::raw(&word_), FUTEX_WAIT_PRIVATE, 2, nullptr, nullptr, 0);
}

void FutexMutex::wakeOne() {
  ::syscall(SYS_futex, futex::raw(&word_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

}  // namespace chorus
