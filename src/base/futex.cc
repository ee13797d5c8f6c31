#include "src/base/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

namespace chorus::futex {
namespace {

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif

// futex_waitv takes at most 128 words.
constexpr size_t kMaxWaitv = 128;
std::atomic<bool> waitvMissing{false};

void waitOne(const WaitWord& w, int timeoutMs) {
  timespec ts{timeoutMs / 1000, static_cast<long>(timeoutMs % 1000) * 1000000L};
  ::syscall(SYS_futex, raw(w.addr), FUTEX_WAIT, w.value, &ts, nullptr, 0);
}

}  // namespace

void wakeAll(const std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, raw(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void waitAny(std::span<const WaitWord> words, int timeoutMs) {
  if (words.empty() || timeoutMs <= 0) return;
  if (words.size() == 1) return waitOne(words[0], timeoutMs);
  if (!waitvMissing.load(std::memory_order_relaxed)) {
    futex_waitv v[kMaxWaitv] = {};
    const size_t n = std::min(words.size(), kMaxWaitv);
    for (size_t i = 0; i < n; ++i) {
      v[i].val = words[i].value;
      v[i].uaddr = reinterpret_cast<uintptr_t>(raw(words[i].addr));
      v[i].flags = FUTEX_32;
    }
    timespec deadline;
    ::clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeoutMs / 1000;
    deadline.tv_nsec += static_cast<long>(timeoutMs % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
      deadline.tv_sec += 1;
      deadline.tv_nsec -= 1000000000L;
    }
    long r = ::syscall(SYS_futex_waitv, v, n, 0, &deadline, CLOCK_MONOTONIC);
    if (r >= 0 || errno != ENOSYS) return;
    waitvMissing.store(true, std::memory_order_relaxed);
  }
  // No futex_waitv: a short sleep on the first word, so the others are looked at every 1 ms.
  waitOne(words[0], std::min(timeoutMs, 1));
}

}  // namespace chorus::futex
