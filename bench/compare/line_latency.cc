// Core-to-core cache-line latency: the floor under every small shared-memory exchange.
//
//   line_latency [-n ROUND_TRIPS] [-r REPS]
//
// Two threads, pinned to the first two CPUs this process may run on, hand one counter back and
// forth through two cache lines: each writes its own line and spins until the other's line
// shows the answer. The one-way time (half a round trip) is what a rank waits between a peer
// writing its window line and seeing it, however fast the library around it is. Output: one
// line, the median over -r batches of -n round trips (default 5 x 100000), and the min and max:
//
//   line_latency one-way-ns MEDIAN min MIN max MAX cpus A B
//
// On a virtual machine it is not a constant: the same two vCPUs measured 70 ns and 310 ns within
// minutes of each other here (the host moved them between cores that share a cache and cores
// that do not). A small-message time measured at one moment is that floor plus the library's
// own work, so latency.sh records this before every repetition.
//
// Fewer than two CPUs: prints "line_latency one-way-ns n/a" and exits 0 (nothing to measure).
// Every spin gives up the CPU now and then, so a batch ends even when the host stalls a thread.
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <thread>
#include <vector>

namespace {

struct alignas(64) Line {
  std::atomic<long> value{0};
};

void pinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until `line` holds at least `v`; yields every 4096 looks.
void awaitValue(const Line& line, long v) {
  for (unsigned spins = 1; line.value.load(std::memory_order_acquire) < v; ++spins) {
    relax();
    if (spins % 4096 == 0) sched_yield();
  }
}

long parse(const char* text, const char* flag) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (!end || *end || v <= 0) {
    std::fprintf(stderr, "line_latency: %s needs a positive number, not '%s'\n", flag, text);
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  long trips = 100000, reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if ((a == "-n" || a == "-r") && i + 1 < argc) {
      (a == "-n" ? trips : reps) = parse(argv[i + 1], argv[i]);
      ++i;
    } else {
      std::fprintf(stderr, "usage: line_latency [-n ROUND_TRIPS] [-r REPS]\n");
      return 2;
    }
  }
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  sched_getaffinity(0, sizeof allowed, &allowed);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  if (cpus.size() < 2) {
    std::printf("line_latency one-way-ns n/a\n");
    return 0;
  }

  Line ping, pong;
  std::vector<double> oneWay;
  long base = 0;
  std::thread echo([&] {
    pinTo(cpus[1]);
    for (long i = 1; i <= trips * reps; ++i) {
      awaitValue(ping, i);
      pong.value.store(i, std::memory_order_release);
    }
  });
  pinTo(cpus[0]);
  for (long r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (long i = base + 1; i <= base + trips; ++i) {
      ping.value.store(i, std::memory_order_release);
      awaitValue(pong, i);
    }
    const auto end = std::chrono::steady_clock::now();
    base += trips;
    oneWay.push_back(std::chrono::duration<double, std::nano>(end - start).count() / trips / 2);
  }
  echo.join();
  std::sort(oneWay.begin(), oneWay.end());
  std::printf("line_latency one-way-ns %.0f min %.0f max %.0f cpus %d %d\n",
              oneWay[oneWay.size() / 2], oneWay.front(), oneWay.back(), cpus[0], cpus[1]);
  return 0;
}
