// The link half of the self-calibration (calibration.h, measureLinks): what a cache line, a
// shared core and a loopback TCP connection cost on this host, measured by two threads of this
// process. Every wait here is bounded by the deadline; a probe that runs out of time (a CPU
// taken by something else, a socket that does not connect) reports 0, "not measured", and the
// cost model keeps its table value for that term.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <system_error>
#include <thread>
#include <vector>

#include "src/base/socket_util.h"
#include "src/core/calibration.h"

namespace chorus::cost {

namespace {

using Clock = std::chrono::steady_clock;

void pinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

// The CPUs this process may run on, in order.
std::vector<int> allowedCpus() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  return cpus;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs `a` on CPU `cpuA` and `b` on `cpuB`, each on a thread of its own, and waits for both.
// Both start together, so neither times the other's creation. False, with neither body run,
// when a thread cannot be made (a process at its thread limit measures nothing).
template <typename A, typename B>
bool onTwoCpus(int cpuA, int cpuB, A&& a, B&& b) {
  std::atomic<int> ready{0};
  std::atomic<bool> abandon{false};
  auto wrap = [&ready, &abandon](int cpu, auto& body) {
    return [&ready, &abandon, cpu, &body] {
      pinTo(cpu);
      ready.fetch_add(1);
      while (ready.load() < 2 && !abandon.load()) sched_yield();
      if (!abandon.load()) body();
    };
  };
  std::thread ta;
  try {
    ta = std::thread(wrap(cpuA, a));
    std::thread tb(wrap(cpuB, b));
    tb.join();
  } catch (const std::system_error&) {
    abandon.store(true);
    if (ta.joinable()) ta.join();
    return false;
  }
  ta.join();
  return true;
}

// A counter alone on its lines, far from the other one (adjacent lines are fetched together
// by the prefetchers, which would hide a transfer).
struct alignas(256) Line {
  std::atomic<long> value{0};
  char pad[256 - sizeof(std::atomic<long>)];
};

// False, and the probe failed, once the deadline has passed: every batch starts by asking.
bool inTime(Clock::time_point deadline, std::atomic<bool>& ok) {
  if (Clock::now() < deadline) return true;
  ok.store(false);
  return false;
}

// Waits until `c` reaches `v`, or fails the probe at the deadline (`ok` false). `yield`: give
// up the CPU between looks (the two threads share it) instead of spinning.
bool awaitLine(const Line& c, long v, Clock::time_point deadline, std::atomic<bool>& ok,
               bool yield) {
  for (unsigned looks = 1; c.value.load(std::memory_order_acquire) < v; ++looks) {
    if (yield) {
      sched_yield();
    } else {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    // A yield can give the CPU away for a scheduler slice: look at the clock after each.
    if ((yield || looks % 1024 == 0) &&
        (!ok.load(std::memory_order_relaxed) || Clock::now() >= deadline)) {
      ok.store(false);
      return false;
    }
  }
  return true;
}

// `batches` timed batches of `rounds` round trips of a counter between threads on `cpuA` and
// `cpuB` (after one untimed batch); the median batch's time per one-way hand-over, µs, or 0
// when the deadline passed first.
double handOverUs(int cpuA, int cpuB, bool yield, int batches, int rounds,
                  Clock::time_point deadline) {
  auto lines = std::make_unique<Line[]>(16);
  Line& ping = lines[0];
  Line& pong = lines[8];
  std::atomic<bool> ok{true};
  std::vector<double> perHandOver;
  auto starter = [&] {
    long v = 0;
    for (int b = 0; b <= batches && ok.load(); ++b) {
      if (!inTime(deadline, ok)) return;
      const auto t0 = Clock::now();
      for (int i = 0; i < rounds; ++i) {
        ping.value.store(++v, std::memory_order_release);
        if (!awaitLine(pong, v, deadline, ok, yield)) return;
      }
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      if (b > 0) perHandOver.push_back(us / (2.0 * rounds));
    }
  };
  auto echo = [&] {
    const long last = static_cast<long>(batches + 1) * rounds;
    for (long v = 1; v <= last; ++v) {
      if (!awaitLine(ping, v, deadline, ok, yield)) return;
      pong.value.store(v, std::memory_order_release);
    }
  };
  if (!onTwoCpus(cpuA, cpuB, starter, echo)) return 0;
  return ok.load() ? median(perHandOver) : 0;
}

// The rate at which a thread on `cpuB` reads 64 KiB that a thread on `cpuA` has just written
// (GB/s, median over 7 batches of 8 rounds, after one untimed batch), as a rank reads a peer's
// area of the host window; 0 when the deadline passed first.
double crossCoreGBps(int cpuA, int cpuB, Clock::time_point deadline) {
  constexpr size_t kBytes = 64 << 10, kWords = kBytes / sizeof(uint64_t);
  constexpr int kBatches = 7, kRounds = 8;
  auto lines = std::make_unique<Line[]>(16);
  Line& written = lines[0];
  Line& read = lines[8];
  std::unique_ptr<uint64_t[]> buf(new uint64_t[kWords]());
  std::atomic<bool> ok{true};
  std::vector<double> rates;
  std::atomic<uint64_t> sink{0};
  const long last = static_cast<long>(kBatches + 1) * kRounds;
  auto writer = [&] {
    for (long v = 1; v <= last; ++v) {
      if (!inTime(deadline, ok)) return;
      for (size_t i = 0; i < kWords; ++i) buf[i] = static_cast<uint64_t>(v) * (i | 1);
      written.value.store(v, std::memory_order_release);
      if (!awaitLine(read, v, deadline, ok, false)) return;
    }
  };
  auto reader = [&] {
    uint64_t sum = 0;
    for (long v = 1; v <= last; ++v) {
      if (!awaitLine(written, v, deadline, ok, false)) return;
      const auto t0 = Clock::now();
      for (size_t i = 0; i < kWords; ++i) sum += buf[i];
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      if (v > kRounds && us > 0) rates.push_back(static_cast<double>(kBytes) / (us * 1e3));
      read.value.store(v, std::memory_order_release);
    }
    sink.store(sum);
  };
  if (!onTwoCpus(cpuA, cpuB, writer, reader)) return 0;
  return ok.load() ? median(rates) : 0;
}

// ---- Loopback TCP ----------------------------------------------------------------------------

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

int msLeft(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1000));
}

// A connected pair of loopback TCP sockets with what chorus's TCP transport sets (4 MiB
// socket buffers, TCP_NODELAY, the congestion control of CHORUS_TCP_CONGESTION), or false.
bool loopbackPair(Fd* a, Fd* b, Clock::time_point deadline) {
  Fd listener;
  listener.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  a->fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listener.fd < 0 || a->fd < 0) return false;
  // Before listen() and connect(), so that the window scale covers them; the accepted socket
  // inherits the listener's.
  const int bufBytes = 4 << 20;
  // A name the kernel refuses fails the transport's creation, not this probe.
  StatusOr<std::string> congestion = net::congestionControl();
  for (int fd : {listener.fd, a->fd}) {
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufBytes, sizeof bufBytes);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufBytes, sizeof bufBytes);
    if (congestion.ok()) net::setCongestion(fd, *congestion);
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listener.fd, 1) != 0 ||
      ::getsockname(listener.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return false;
  if (::connect(a->fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 &&
      errno != EINPROGRESS)
    return false;
  pollfd p{listener.fd, POLLIN, 0};
  if (::poll(&p, 1, msLeft(deadline)) != 1) return false;
  b->fd = ::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (b->fd < 0) return false;
  pollfd q{a->fd, POLLOUT, 0};
  int err = 0;
  socklen_t errLen = sizeof err;
  if (::poll(&q, 1, msLeft(deadline)) != 1 ||
      ::getsockopt(a->fd, SOL_SOCKET, SO_ERROR, &err, &errLen) != 0 || err != 0)
    return false;
  const int one = 1;
  ::setsockopt(a->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(b->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return true;
}

// How long a stalled exchange retries before it sleeps in poll(), as the transport's waits
// spin before they block (CHORUS_SPIN_US): a wake-up from poll() costs more than a message.
constexpr auto kSpin = std::chrono::microseconds(20);

// Sends `sendBytes` from `src` (repeated) and receives `recvBytes` into `dst` (overwritten) on
// the nonblocking `fd`, both at once, as the transport's progress loop does; false on an error,
// a closed peer or the deadline.
bool exchange(int fd, const char* src, size_t srcSize, size_t sendBytes, char* dst,
              size_t dstSize, size_t recvBytes, Clock::time_point deadline) {
  size_t sent = 0, got = 0;
  auto lastMoved = Clock::now();
  while (sent < sendBytes || got < recvBytes) {
    bool moved = false;
    if (sent < sendBytes) {
      const size_t at = sent % srcSize, n = std::min(srcSize - at, sendBytes - sent);
      const ssize_t w = ::send(fd, src + at, n, MSG_NOSIGNAL);
      if (w > 0) sent += static_cast<size_t>(w), moved = true;
      else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    }
    if (got < recvBytes) {
      const size_t at = got % dstSize, n = std::min(dstSize - at, recvBytes - got);
      const ssize_t r = ::recv(fd, dst + at, n, 0);
      if (r > 0) got += static_cast<size_t>(r), moved = true;
      else if (r == 0) return false;
      else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    }
    const auto now = Clock::now();
    if (moved) {
      lastMoved = now;
      continue;
    }
    if (now - lastMoved < kSpin) continue;
    pollfd p{fd, static_cast<short>((got < recvBytes ? POLLIN : 0) | (sent < sendBytes ? POLLOUT : 0)),
             0};
    if (now >= deadline || ::poll(&p, 1, msLeft(deadline)) < 0) return false;
  }
  return true;
}

// Loopback TCP between threads on `cpuA` and `cpuB`: the half round trip of 8 B (median of
// batches) and the rate of each direction while both stream 8 MiB at once (median of three;
// twice the socket buffers, so the buffers cannot absorb a stream), in sends and receives of
// at most 256 KiB, the default pipelining chunk (larger calls measured 1.6-2.0 GB/s where
// these give 3.4-4.2 on the development VM, and chorus's 2-rank ring streams 3-5). Zeros when a step failed or ran out of time.
void tcpLoopback(int cpuA, int cpuB, Clock::time_point deadline, double* latencyUs,
                 double* bwGBps) {
  *latencyUs = 0;
  *bwGBps = 0;
  Fd a, b;
  if (!loopbackPair(&a, &b, deadline)) return;
  constexpr int kBatches = 5, kRounds = 20;
  constexpr size_t kChunk = 256 << 10, kStreamBytes = 8 << 20;
  constexpr int kStreams = 3;
  std::atomic<bool> ok{true};
  std::vector<double> halfTrips, rates;
  auto side = [&](int fd, bool starts) {
    return [&, fd, starts] {
      std::vector<char> src(kChunk, starts ? 'a' : 'b'), dst(kChunk);
      char word[8] = {};
      // Latency: one untimed batch, then kBatches timed.
      for (int batch = 0; batch <= kBatches && ok.load(); ++batch) {
        if (!inTime(deadline, ok)) return;
        const auto t0 = Clock::now();
        for (int i = 0; i < kRounds; ++i) {
          const bool step1 = starts ? exchange(fd, word, 8, 8, dst.data(), 8, 0, deadline)
                                    : exchange(fd, word, 8, 0, dst.data(), 8, 8, deadline);
          const bool step2 = starts ? exchange(fd, word, 8, 0, dst.data(), 8, 8, deadline)
                                    : exchange(fd, word, 8, 8, dst.data(), 8, 0, deadline);
          if (!step1 || !step2) {
            ok.store(false);
            return;
          }
        }
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        if (starts && batch > 0) halfTrips.push_back(us / (2.0 * kRounds));
      }
      // Bandwidth: both directions at once; the starter times from its start to the end of
      // both its directions (its peer's bytes included).
      for (int s = 0; s < kStreams && ok.load(); ++s) {
        if (!inTime(deadline, ok)) return;
        const auto t0 = Clock::now();
        if (!exchange(fd, src.data(), kChunk, kStreamBytes, dst.data(), kChunk, kStreamBytes,
                      deadline)) {
          ok.store(false);
          return;
        }
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        if (starts) rates.push_back(static_cast<double>(kStreamBytes) / (us * 1e3));
      }
    };
  };
  auto starter = side(a.fd, true);
  auto echo = side(b.fd, false);
  if (!onTwoCpus(cpuA, cpuB, starter, echo) || !ok.load() || halfTrips.empty() || rates.empty())
    return;
  *latencyUs = median(halfTrips);
  *bwGBps = median(rates);
}

}  // namespace

LinkCalibration measureLinks(double budgetMs) {
  const auto deadline =
      Clock::now() + std::chrono::microseconds(static_cast<int64_t>(budgetMs * 1e3));
  LinkCalibration l;
  const std::vector<int> cpus = allowedCpus();
  if (cpus.empty()) return l;
  const int a = cpus[0], b = cpus.size() > 1 ? cpus[1] : cpus[0];
  // A line between two CPUs needs two CPUs; a hand-over of one CPU needs one.
  if (a != b) {
    l.lineNs = 1e3 * handOverUs(a, b, /*yield=*/false, 7, 256, deadline);
    l.crossCoreGBps = crossCoreGBps(a, b, deadline);
  }
  l.handoffUs = handOverUs(a, a, /*yield=*/true, 7, 64, deadline);
  tcpLoopback(a, b, deadline, &l.tcpLatencyUs, &l.tcpBwGBps);
  return l;
}

}  // namespace chorus::cost
