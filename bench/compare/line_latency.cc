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
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "bench/compare/cpu_pair.h"

using chorus::bench::Counter;
using chorus::bench::pingPong;
using chorus::bench::pinTo;

int main(int argc, char** argv) {
  long trips = 100000, reps = 5;
  chorus::bench::parseCountAndReps(argc, argv, "line_latency",
                                   "line_latency [-n ROUND_TRIPS] [-r REPS]", &trips, &reps);
  const std::vector<int> cpus = chorus::bench::firstTwoCpus();
  if (cpus.size() < 2) {
    std::printf("line_latency one-way-ns n/a\n");
    return 0;
  }

  Counter ping, pong;
  std::vector<double> oneWay;
  long base = 0;
  std::thread echo([&] {
    pinTo(cpus[1]);
    pingPong(pong, ping, 1, trips * reps, false);
  });
  pinTo(cpus[0]);
  for (long r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    pingPong(ping, pong, base + 1, base + trips, true);
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
