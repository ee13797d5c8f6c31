// Point-to-point throughput of the TCP transport between two processes over loopback.
// Not a test (nothing asserted on timing); run by hand:
//
//   tcp_throughput [bytes=64M] [iterations=20] [host=127.0.0.1]
//
// Rank 0 (parent) streams `iterations` messages to rank 1 (forked child), one in flight at a
// time, as an executor would post them; then both send to each other at once. Waits block in
// poll() on the connection's pollInfo(), so no core is burnt spinning.
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "src/base/socket_util.h"
#include "transports/tcp/tcp_transport.h"

namespace {

using chorus::Connection;
using chorus::Op;
using chorus::Status;

Status wait(Connection& c, Op op) {
  for (;;) {
    bool done = false;
    Status s = c.test(op, &done);
    if (!s.ok() || done) return s;
    pollfd p{-1, 0, 0};
    c.pollInfo(&p.fd, &p.events);
    if (p.fd >= 0) ::poll(&p, 1, 1000);
  }
}

Status waitBoth(Connection& c, Op a, Op b) {
  bool da = false, db = false;
  for (;;) {
    if (!da) {
      Status s = c.test(a, &da);
      if (!s.ok()) return s;
    }
    if (!db) {
      Status s = c.test(b, &db);
      if (!s.ok()) return s;
    }
    if (da && db) return Status();
    pollfd p{-1, 0, 0};
    c.pollInfo(&p.fd, &p.events);
    if (p.fd >= 0) ::poll(&p, 1, 1000);
  }
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int fail(const char* what, const Status& s) {
  std::fprintf(stderr, "%s: %s\n", what, s.toString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = 64u << 20;
  int iters = 20;
  std::string host = "127.0.0.1";
  if (argc > 1) bytes = std::strtoull(argv[1], nullptr, 10) << (std::strchr(argv[1], 'M') ? 20 : 0);
  if (argc > 2) iters = std::atoi(argv[2]);
  if (argc > 3) host = argv[3];
  const uint64_t comm = 0x0123456789abcdefull ^ static_cast<uint64_t>(::getpid());

  auto addr = chorus::net::parseHostPort(host + ":0");
  if (!addr.ok()) return fail("address", addr.status());
  auto t0 = chorus::makeTcpTransport(0, comm, *addr);
  auto t1 = chorus::makeTcpTransport(1, comm, *addr);
  chorus::EndpointBlob b0, b1;
  if (Status s = t0->listen(&b0); !s.ok()) return fail("listen", s);
  if (Status s = t1->listen(&b1); !s.ok()) return fail("listen", s);

  const pid_t child = ::fork();
  const int rank = child == 0 ? 1 : 0;
  auto& mine = rank == 0 ? t0 : t1;
  (rank == 0 ? t1 : t0).reset();
  auto conn = mine->connect(1 - rank, rank == 0 ? b1 : b0, 10.0);
  if (!conn.ok()) return fail("connect", conn.status());
  Connection& c = **conn;

  std::vector<uint8_t> out(bytes), in(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(i * 131 + rank);

  // One-way stream, rank 0 -> rank 1. Two warm-up messages grow the TCP window first.
  double start = 0;
  for (int i = -2; i < iters; ++i) {
    if (i == 0) start = now();
    auto op = rank == 0 ? c.postSend(out.data(), bytes, i) : c.postRecv(in.data(), bytes, i);
    if (!op.ok()) return fail("post", op.status());
    if (Status s = wait(c, *op); !s.ok()) return fail("wait", s);
  }
  double oneWay = now() - start;
  if (rank == 1 && in[bytes - 1] != static_cast<uint8_t>((bytes - 1) * 131)) {
    std::fprintf(stderr, "payload corrupted\n");
    return 1;
  }

  // Both directions at once.
  start = now();
  for (int i = 0; i < iters; ++i) {
    auto r = c.postRecv(in.data(), bytes, i);
    auto s = c.postSend(out.data(), bytes, i);
    if (!r.ok() || !s.ok()) return fail("post", r.ok() ? s.status() : r.status());
    if (Status st = waitBoth(c, *r, *s); !st.ok()) return fail("wait", st);
  }
  double bothWays = now() - start;

  if (rank == 1) {
    const double gb = static_cast<double>(bytes) * iters / 1e9;
    std::printf("tcp loopback (%s), %zu-byte messages x %d:\n", host.c_str(), bytes, iters);
    std::printf("  one way:   %.2f GB/s (%.2f ms per message)\n", gb / oneWay,
                oneWay * 1e3 / iters);
    std::printf("  both ways: %.2f GB/s each direction (%.2f ms per exchange)\n", gb / bothWays,
                bothWays * 1e3 / iters);
    return 0;
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
