// Futex waits and wakes on 32-bit words in memory shared between processes.
//
// Shared-memory transports publish progress by changing a word (a ring's head or tail); a waiter
// with nothing else to do sleeps until one of the words it watches changes. The words live in a
// MAP_SHARED segment, so these are the process-shared (non-private) futex operations.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>

namespace chorus {

// A 32-bit word in shared memory whose change from `value` means progress may be possible: a
// blocked waiter sleeps on it with a futex (transports without file descriptors).
struct WaitWord {
  const std::atomic<uint32_t>* addr = nullptr;
  uint32_t value = 0;
};

}  // namespace chorus

namespace chorus::futex {

// The word's address as the futex system call takes it.
inline uint32_t* raw(const std::atomic<uint32_t>* word) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return const_cast<uint32_t*>(reinterpret_cast<const uint32_t*>(word));
}

// Wakes every waiter sleeping on `word`.
void wakeAll(const std::atomic<uint32_t>* word);

// Sleeps until one of `words` no longer holds its value, `timeoutMs` has passed, or a signal
// arrives; returns at once when one already differs. Uses futex_waitv (Linux 5.16) for several
// words; on older kernels it sleeps on the first word for at most 1 ms at a time.
void waitAny(std::span<const WaitWord> words, int timeoutMs);

}  // namespace chorus::futex
