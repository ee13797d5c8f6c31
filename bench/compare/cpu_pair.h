// What line_latency and window_exchange share: the first two CPUs this process may run on, a
// thread pinned to one, a cache line to hand a counter through, and their -n / -r flags.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace chorus::bench {

inline void pinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/// The first two CPUs of this process's affinity mask; fewer when it has fewer.
inline std::vector<int> firstTwoCpus() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  sched_getaffinity(0, sizeof allowed, &allowed);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  return cpus;
}

struct alignas(64) Counter {
  std::atomic<long> value{0};
};

/// Spins until `c` holds at least `v`; gives up the CPU every 4096 looks, so a stalled partner
/// thread still gets to run.
inline void awaitAtLeast(const Counter& c, long v) {
  for (unsigned spins = 1; c.value.load(std::memory_order_acquire) < v; ++spins) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (spins % 4096 == 0) sched_yield();
  }
}

/// Hands the counter back and forth for values first..last: the side that `starts` writes
/// each value and waits for the other's echo; the other waits for it and echoes it.
inline void pingPong(Counter& mine, const Counter& theirs, long first, long last, bool starts) {
  for (long i = first; i <= last; ++i) {
    if (starts) mine.value.store(i, std::memory_order_release);
    awaitAtLeast(theirs, i);
    if (!starts) mine.value.store(i, std::memory_order_release);
  }
}

/// -n COUNT and -r REPS, both positive; anything else prints `usage` and exits 2.
inline void parseCountAndReps(int argc, char** argv, const char* tool, const char* usage,
                              long* count, long* reps) {
  for (int i = 1; i < argc; i += 2) {
    const std::string_view a = argv[i];
    if ((a != "-n" && a != "-r") || i + 1 >= argc) {
      std::fprintf(stderr, "usage: %s\n", usage);
      std::exit(2);
    }
    char* end = nullptr;
    const long v = std::strtol(argv[i + 1], &end, 10);
    if (!end || *end || v <= 0) {
      std::fprintf(stderr, "%s: %s needs a positive number, not '%s'\n", tool, argv[i],
                   argv[i + 1]);
      std::exit(2);
    }
    *(a == "-n" ? count : reps) = v;
  }
}

}  // namespace chorus::bench
