// The host window's small exchange against the bare cache-line latency, in one process.
//
//   window_exchange [-n CALLS] [-r ROUNDS]
//
// Two threads, pinned to the first two CPUs this process may run on, map one shared-memory
// host window (transports/shm/shm_window.h, the real class) as ranks 0 and 1 and make calls
// the way a 2-rank 8 B all-reduce on the window does: wait for the peer to have entered the
// previous call, write 8 bytes into the call's region (whose first 32 bytes share the signal's
// line), enter the call (header and signal), await the peer's signal, read its 8 bytes. In
// between, as a yardstick, the same two threads hand a counter back and forth through two
// plain cache lines (line_latency's measure). Both are alternated ROUNDS times (default 5) over
// CALLS calls (default 200000), so a VM whose core-to-core latency moves from minute to minute
// moves both alike. Output:
//
//   window_exchange call-ns MEDIAN line-ns MEDIAN ratio R
//
// R is the part of a call that is the window's own, in line latencies: 1 would be a call that
// costs one transfer each way and nothing else. What the library adds on top (the API, the
// queue, plans, the executor) is not here: chorus-perf measures that.
//
// Fewer than two CPUs: prints "window_exchange n/a" and exits 0.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "bench/compare/cpu_pair.h"
#include "transports/shm/shm_window.h"

namespace {

using chorus::HostWindow;
using chorus::Status;
using chorus::WaitPolicy;
using chorus::WindowHeader;
using chorus::bench::Counter;
using chorus::bench::pingPong;
using chorus::bench::pinTo;
using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char* what, const Status& st) {
  std::fprintf(stderr, "window_exchange: %s: %s\n", what, st.toString().c_str());
  std::exit(1);
}

// One rank's calls first..last on the window: as the executor runs a window all-reduce.
void calls(HostWindow& w, int rank, uint64_t first, uint64_t last, const WaitPolicy& policy) {
  const int peer = 1 - rank;
  float mine[2] = {1.0f + static_cast<float>(rank), 2.0f}, sum[2];
  for (uint64_t s = first; s <= last; ++s) {
    if (s > 1) {
      Status st = w.await(peer, s - 1, 1, policy);
      if (!st.ok()) die("waiting for the previous call", st);
    }
    std::memcpy(w.region(rank, static_cast<int>(s & 1)), mine, sizeof mine);
    WindowHeader h;
    h.seq = static_cast<uint32_t>(s);
    h.setCount(2);
    w.enter(s, h);
    Status st = w.await(peer, s, 1, policy);
    if (!st.ok()) die("waiting for the peer's signal", st);
    if (!(w.header(peer, s) == h)) {
      std::fprintf(stderr, "window_exchange: call %llu: the peer's header differs\n",
                   static_cast<unsigned long long>(s));
      std::exit(1);
    }
    const auto* theirs = reinterpret_cast<const float*>(w.region(peer, static_cast<int>(s & 1)));
    sum[0] = mine[0] + theirs[0];
    sum[1] = mine[1] + theirs[1];
    if (sum[0] != 3.0f || sum[1] != 4.0f) {
      std::fprintf(stderr, "window_exchange: call %llu: wrong sum\n",
                   static_cast<unsigned long long>(s));
      std::exit(1);
    }
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  long n = 200000, rounds = 5;
  chorus::bench::parseCountAndReps(argc, argv, "window_exchange",
                                   "window_exchange [-n CALLS] [-r ROUNDS]", &n, &rounds);
  const std::vector<int> cpus = chorus::bench::firstTwoCpus();
  if (cpus.size() < 2) {
    std::printf("window_exchange n/a\n");
    return 0;
  }

  WaitPolicy policy;
  policy.timeoutSeconds = 60;
  std::unique_ptr<chorus::shm::ShmWindow> windows[2];
  const uint64_t commId = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  const int32_t pid = static_cast<int32_t>(::getpid());
  Counter ping, pong;
  std::vector<double> callNs, lineNs;

  std::thread other([&] {
    pinTo(cpus[1]);
    auto w = chorus::shm::ShmWindow::create(1, 2, commId, pid, 4096, 4096, policy);
    if (!w.ok()) die("mapping the window as rank 1", w.status());
    windows[1] = std::move(w).value();
    for (long r = 0; r < rounds; ++r) {
      calls(*windows[1], 1, static_cast<uint64_t>(r * n + 1), static_cast<uint64_t>((r + 1) * n),
            policy);
      pingPong(pong, ping, r * n + 1, (r + 1) * n, false);
    }
  });
  pinTo(cpus[0]);
  auto w = chorus::shm::ShmWindow::create(0, 2, commId, pid, 4096, 4096, policy);
  if (!w.ok()) die("creating the window as rank 0", w.status());
  windows[0] = std::move(w).value();
  for (long r = 0; r < rounds; ++r) {
    auto t0 = Clock::now();
    calls(*windows[0], 0, static_cast<uint64_t>(r * n + 1), static_cast<uint64_t>((r + 1) * n),
          policy);
    auto t1 = Clock::now();
    pingPong(ping, pong, r * n + 1, (r + 1) * n, true);
    auto t2 = Clock::now();
    callNs.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / n);
    // One way: half a round trip.
    lineNs.push_back(std::chrono::duration<double, std::nano>(t2 - t1).count() / n / 2);
  }
  other.join();
  const double c = median(callNs), l = median(lineNs);
  std::printf("window_exchange call-ns %.0f line-ns %.0f ratio %.2f\n", c, l, c / l);
  return 0;
}
