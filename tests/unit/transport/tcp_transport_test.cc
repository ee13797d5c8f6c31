// The TCP transport over loopback: ranks are transports in one process, driven by threads for
// the blocking connect() and by one thread for data (test() never blocks, so one loop can drive
// both ends). Addresses: 127.0.0.1 and ::1 only. Every wait is bounded.
#include "transports/tcp/tcp_transport.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <latch>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "src/base/socket_util.h"
#include "tests/support/scoped_env.h"

namespace chorus {
namespace {

using net::Clock;

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::mt19937_64& rng() {
  static std::mt19937_64 gen{std::random_device{}()};
  return gen;
}

uint64_t randomCommId() { return rng()(); }

std::vector<uint8_t> randomBytes(size_t n) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 gen(rng()());
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x = gen();
    std::memcpy(&v[i], &x, 8);
  }
  for (; i < n; ++i) v[i] = static_cast<uint8_t>(gen());
  return v;
}

bool haveIpv6Loopback() {
  net::SockAddr bound;
  auto fd = net::listenOn(net::parseHostPort("[::1]:0").value(), 1, &bound);
  if (!fd.ok()) return false;
  ::close(*fd);
  return true;
}

struct Rank {
  std::unique_ptr<Transport> transport;
  EndpointBlob blob;
};

Rank makeRank(int rank, uint64_t commId, const std::string& host = "127.0.0.1") {
  Rank r;
  r.transport = makeTcpTransport(rank, commId, net::parseHostPort(host + ":0").value());
  Status s = r.transport->listen(&r.blob);
  EXPECT_TRUE(s.ok()) << s.toString();
  return r;
}

std::vector<Rank> makeRanks(int n, uint64_t commId, const std::string& host = "127.0.0.1") {
  std::vector<Rank> ranks;
  for (int i = 0; i < n; ++i) ranks.push_back(makeRank(i, commId, host));
  return ranks;
}

using ConnPtr = std::unique_ptr<Connection>;

// Both ends call connect() at the same moment, from two threads.
std::pair<ConnPtr, ConnPtr> connectPair(std::vector<Rank>& ranks, int a, int b) {
  std::latch go(2);
  auto other = std::async(std::launch::async, [&] {
    go.arrive_and_wait();
    return ranks[b].transport->connect(a, ranks[a].blob, 3.0);
  });
  go.arrive_and_wait();
  auto ca = ranks[a].transport->connect(b, ranks[b].blob, 3.0);
  auto cb = other.get();
  EXPECT_TRUE(ca.ok()) << ca.status().toString();
  EXPECT_TRUE(cb.ok()) << cb.status().toString();
  if (!ca.ok() || !cb.ok()) return {};
  return {std::move(ca).value(), std::move(cb).value()};
}

struct Pending {
  Connection* conn;
  Op op;
};

// Drives every listed op to completion, from one thread; the first failure is returned.
Status waitAll(std::vector<Pending> ops, double seconds = 4.0) {
  const auto deadline = net::deadlineIn(seconds);
  std::vector<bool> done(ops.size(), false);
  size_t left = ops.size();
  while (left > 0) {
    std::vector<pollfd> fds;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (done[i]) continue;
      bool d = false;
      Status s = ops[i].conn->test(ops[i].op, &d);
      if (!s.ok()) return s;
      if (d) {
        done[i] = true;
        --left;
        continue;
      }
      pollfd p{-1, 0, 0};
      ops[i].conn->pollInfo(&p.fd, &p.events);
      if (p.fd >= 0) fds.push_back(p);
    }
    if (left == 0) break;
    if (Clock::now() > deadline)
      return timeoutError(std::to_string(left) + " ops still pending at the test deadline");
    ::poll(fds.data(), fds.size(), 5);
  }
  return Status();
}

Status waitOne(Connection& c, Op op, double seconds = 4.0) { return waitAll({{&c, op}}, seconds); }

// Sends `v` one way and checks it arrives intact.
void expectTransfer(Connection& from, Connection& to, const std::vector<uint8_t>& v, Tag tag) {
  std::vector<uint8_t> got(v.size(), 0xEE);
  auto r = to.postRecv(got.data(), got.size(), tag);
  auto s = from.postSend(v.data(), v.size(), tag);
  ASSERT_TRUE(r.ok() && s.ok());
  Status st = waitAll({{&from, *s}, {&to, *r}});
  ASSERT_TRUE(st.ok()) << st.toString();
  EXPECT_TRUE(got == v);
}

TEST(TcpTransport, NameAndReach) {
  auto t = makeTcpTransport(0, 1, net::parseHostPort("127.0.0.1:0").value());
  EXPECT_EQ(t->name(), "tcp");
  PeerIdentity a, b;
  a.hostId = 1;
  b.hostId = 2;
  Reach r = t->canConnect(a, b, EndpointBlob{1});
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.score, 10);
  EXPECT_EQ(r.link, cost::LinkClass::kEthernet);
  EXPECT_EQ(t->canConnect(a, a, EndpointBlob{1}).link, cost::LinkClass::kTcpLoopback);
  EXPECT_FALSE(t->canConnect(a, b, EndpointBlob{}).ok);  // it published nothing
}

// The congestion control of CHORUS_TCP_CONGESTION, resolved once per transport (reno is built
// into every kernel, so the test does not depend on what this one offers), reaches both ends of
// a connection: the dialed one and the accepted one.
TEST(TcpTransport, CongestionControlFromTheEnvironment) {
  const char* kVar = "CHORUS_TCP_CONGESTION";
  testing::ScopedEnv env;
  env.unset(kVar);
  StatusOr<std::string> dflt = net::congestionControl();
  ASSERT_TRUE(dflt.ok()) << dflt.status().toString();
  EXPECT_TRUE(*dflt == "cubic" || dflt->empty()) << *dflt;  // empty: the kernel lacks cubic
  env.set(kVar, "system");
  EXPECT_EQ(net::congestionControl().value(), "");
  env.set(kVar, "reno");
  EXPECT_EQ(net::congestionControl().value(), "reno");
  for (const char* bad : {"no_such_cc", "Reno!", "a_name_far_too_long_for_tcp"}) {
    env.set(kVar, bad);
    StatusOr<std::string> r = net::congestionControl();
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find(std::string(kVar) + "=" + bad), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("offers"), std::string::npos) << r.status().message();
  }

  const uint64_t id = randomCommId();
  std::vector<Rank> ranks;
  for (int i = 0; i < 2; ++i) {
    Rank r;
    r.transport = makeTcpTransport(i, id, net::parseHostPort("127.0.0.1:0").value(), "reno");
    ASSERT_TRUE(r.transport->listen(&r.blob).ok());
    ranks.push_back(std::move(r));
  }
  auto [c0, c1] = connectPair(ranks, 0, 1);
  ASSERT_TRUE(c0 && c1);
  for (Connection* c : {c0.get(), c1.get()}) {
    int fd = -1;
    short events = 0;
    c->pollInfo(&fd, &events);
    ASSERT_GE(fd, 0);
    char name[16] = {};
    socklen_t len = sizeof name;
    ASSERT_EQ(::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len), 0)
        << std::strerror(errno);
    EXPECT_STREQ(name, "reno") << "rank " << (c == c0.get() ? 0 : 1);
  }
  expectTransfer(*c0, *c1, randomBytes(100'000), 7);
}

TEST(TcpTransport, BadArguments) {
  auto ranks = makeRanks(2, randomCommId());
  auto self = ranks[0].transport->connect(0, ranks[0].blob, 0.5);
  EXPECT_EQ(self.status().code(), Code::kInvalidArgument);
  auto garbage = ranks[0].transport->connect(1, EndpointBlob{1, 2, 3}, 0.5);
  EXPECT_EQ(garbage.status().code(), Code::kInvalidArgument);
  EXPECT_NE(garbage.status().message().find("malformed"), std::string::npos);
  auto unlistened = makeTcpTransport(0, 1, net::parseHostPort("127.0.0.1:0").value());
  EXPECT_EQ(unlistened->connect(1, ranks[1].blob, 0.5).status().code(), Code::kInvalidUsage);
}

TEST(TcpTransport, SimultaneousConnectBothSides) {
  for (int iter = 0; iter < 10; ++iter) {
    auto ranks = makeRanks(2, randomCommId());
    auto [c0, c1] = connectPair(ranks, 0, 1);
    ASSERT_TRUE(c0 && c1);
    EXPECT_EQ(c0->peer(), 1);
    EXPECT_EQ(c1->peer(), 0);
    expectTransfer(*c0, *c1, randomBytes(1000), 1);
    expectTransfer(*c1, *c0, randomBytes(1000), 2);
  }
}

TEST(TcpTransport, SimultaneousConnectIpv6) {
  if (!haveIpv6Loopback()) GTEST_SKIP() << "no IPv6 loopback";
  auto ranks = makeRanks(2, randomCommId(), "[::1]");
  auto [c0, c1] = connectPair(ranks, 0, 1);
  ASSERT_TRUE(c0 && c1);
  expectTransfer(*c0, *c1, randomBytes(70000), 9);
  expectTransfer(*c1, *c0, randomBytes(3), 9);
}

// Every rank connects to every other, each in its own order, all at once; then every pair
// exchanges a message naming sender and receiver, so a crossed connection is caught.
void allToAllConnect(int n, const std::vector<std::vector<int>>& orders) {
  auto ranks = makeRanks(n, randomCommId());
  std::vector<std::vector<ConnPtr>> conns(n);
  std::vector<std::thread> threads;
  std::latch go(n);
  std::vector<std::string> errors(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      conns[r].resize(n);
      go.arrive_and_wait();
      for (int p : orders[r]) {
        auto c = ranks[r].transport->connect(p, ranks[p].blob, 3.0);
        if (!c.ok()) {
          errors[r] = c.status().toString();
          return;
        }
        conns[r][p] = std::move(c).value();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;

  std::vector<std::vector<uint64_t>> sent(n, std::vector<uint64_t>(n)),
      got(n, std::vector<uint64_t>(n, ~0ull));
  std::vector<Pending> ops;
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      ASSERT_EQ(conns[r][p]->peer(), p);
      sent[r][p] = (uint64_t(r) << 32) | uint64_t(p);
      auto rv = conns[r][p]->postRecv(&got[r][p], 8, 77);
      auto sd = conns[r][p]->postSend(&sent[r][p], 8, 77);
      ASSERT_TRUE(rv.ok() && sd.ok());
      ops.push_back({conns[r][p].get(), *rv});
      ops.push_back({conns[r][p].get(), *sd});
    }
  }
  Status s = waitAll(ops);
  ASSERT_TRUE(s.ok()) << s.toString();
  for (int r = 0; r < n; ++r)
    for (int p = 0; p < n; ++p)
      if (p != r) {
        EXPECT_EQ(got[r][p], (uint64_t(p) << 32) | uint64_t(r)) << r << "<-" << p;
      }
}

TEST(TcpTransport, ThreeRanksCyclicOrder) {
  // 0 dials 1 first, 1 dials 2 first, 2 waits for 0 first: a cycle a naive blocking handshake
  // deadlocks on.
  allToAllConnect(3, {{1, 2}, {2, 0}, {0, 1}});
  allToAllConnect(3, {{2, 1}, {0, 2}, {1, 0}});
}

TEST(TcpTransport, ManyRanksRandomOrders) {
  for (int n : {3, 4, 5}) {
    for (int trial = 0; trial < 3; ++trial) {
      std::vector<std::vector<int>> orders(n);
      for (int r = 0; r < n; ++r) {
        for (int p = 0; p < n; ++p)
          if (p != r) orders[r].push_back(p);
        std::shuffle(orders[r].begin(), orders[r].end(), rng());
      }
      SCOPED_TRACE("n=" + std::to_string(n) + " trial " + std::to_string(trial));
      allToAllConnect(n, orders);
    }
  }
}

TEST(TcpTransport, FifoMixedSizesIncludingEmptyAnd64MiB) {
  auto ranks = makeRanks(2, randomCommId());
  auto [c0, c1] = connectPair(ranks, 0, 1);
  ASSERT_TRUE(c0 && c1);

  std::vector<size_t> sizes = {0, 1, 7, 24, 0, 4096, 65537, 1 << 20, 64 << 20, 0, 3, 300001};
  std::uniform_int_distribution<size_t> small(0, 20000);
  for (int i = 0; i < 200; ++i) sizes.push_back(i % 17 == 0 ? 0 : small(rng()));
  std::shuffle(sizes.begin() + 12, sizes.end(), rng());

  // Forward carries everything; the reverse direction runs at the same time with small ones.
  std::vector<std::vector<uint8_t>> src, dst, backSrc, backDst;
  for (size_t n : sizes) {
    src.push_back(randomBytes(n));
    dst.emplace_back(n, 0xA5);
    size_t m = n % 5000;
    backSrc.push_back(randomBytes(m));
    backDst.emplace_back(m, 0x5A);
  }
  std::vector<Pending> ops;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Tag tag = 1000 + i;
    auto s = c0->postSend(src[i].data(), src[i].size(), tag);
    auto b = c1->postSend(backSrc[i].data(), backSrc[i].size(), tag);
    ASSERT_TRUE(s.ok() && b.ok());
    ops.push_back({c0.get(), *s});
    ops.push_back({c1.get(), *b});
  }
  // Receives are posted after the sends are queued: the early frames wait in back-pressure.
  for (size_t i = 0; i < sizes.size(); ++i) {
    Tag tag = 1000 + i;
    auto r = c1->postRecv(dst[i].data(), dst[i].size(), tag);
    auto b = c0->postRecv(backDst[i].data(), backDst[i].size(), tag);
    ASSERT_TRUE(r.ok() && b.ok());
    ops.push_back({c1.get(), *r});
    ops.push_back({c0.get(), *b});
  }
  Status st = waitAll(ops, 4.5);
  ASSERT_TRUE(st.ok()) << st.toString();
  uint64_t total = 0, backTotal = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE(dst[i] == src[i]) << "message " << i << " of " << sizes[i] << " bytes";
    ASSERT_TRUE(backDst[i] == backSrc[i]) << "reverse message " << i;
    total += sizes[i];
    backTotal += backSrc[i].size();
  }
  EXPECT_EQ(c0->stats().bytesSent, total);
  EXPECT_EQ(c1->stats().bytesRecv, total);
  EXPECT_EQ(c1->stats().bytesSent, backTotal);
  EXPECT_EQ(c0->stats().bytesRecv, backTotal);
}

TEST(TcpTransport, ManySmallMessagesKeepOrder) {
  auto ranks = makeRanks(2, randomCommId());
  auto [c0, c1] = connectPair(ranks, 0, 1);
  ASSERT_TRUE(c0 && c1);
  constexpr int kCount = 5000;
  const uint64_t base = rng()();
  std::vector<uint64_t> out(kCount), in(kCount, 0);
  std::vector<Pending> ops;
  for (int i = 0; i < kCount; ++i) {
    out[i] = base + i;
    auto s = c0->postSend(&out[i], 8, i);
    auto r = c1->postRecv(&in[i], 8, i);
    ASSERT_TRUE(s.ok() && r.ok());
    ops.push_back({c0.get(), *s});
    ops.push_back({c1.get(), *r});
  }
  Status st = waitAll(ops);
  ASSERT_TRUE(st.ok()) << st.toString();
  EXPECT_EQ(in, out);
}

TEST(TcpTransport, RecvPostedBeforeSend) {
  auto ranks = makeRanks(2, randomCommId());
  auto [c0, c1] = connectPair(ranks, 0, 1);
  ASSERT_TRUE(c0 && c1);
  std::vector<uint8_t> v = randomBytes(5000), got(5000, 0);
  auto r = c1->postRecv(got.data(), got.size(), 3);
  ASSERT_TRUE(r.ok());
  bool done = true;
  ASSERT_TRUE(c1->test(*r, &done).ok());
  EXPECT_FALSE(done);
  int fd;
  short ev;
  c1->pollInfo(&fd, &ev);
  EXPECT_GE(fd, 0);
  EXPECT_TRUE(ev & POLLIN);
  EXPECT_FALSE(ev & POLLOUT);
  auto s = c0->postSend(v.data(), v.size(), 3);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(waitAll({{c0.get(), *s}, {c1.get(), *r}}).ok());
  EXPECT_TRUE(got == v);
  // A completed op may be tested again; an op never posted may not.
  ASSERT_TRUE(c1->test(*r, &done).ok());
  EXPECT_TRUE(done);
  Op bogus{12345};
  EXPECT_EQ(c1->test(bogus, &done).code(), Code::kInvalidUsage);
}

TEST(TcpTransport, RecvPostedAfterArrivalAppliesBackPressure) {
  auto ranks = makeRanks(2, randomCommId());
  auto [c0, c1] = connectPair(ranks, 0, 1);
  ASSERT_TRUE(c0 && c1);
  // One exchange first, so c1 has an op to drive progress with.
  std::vector<uint8_t> warm = randomBytes(16), warmGot(16);
  auto wr = c1->postRecv(warmGot.data(), 16, 0);
  auto ws = c0->postSend(warm.data(), 16, 0);
  ASSERT_TRUE(waitAll({{c0.get(), *ws}, {c1.get(), *wr}}).ok());

  std::vector<uint8_t> v = randomBytes(100000), got(100000, 0);
  auto s = c0->postSend(v.data(), v.size(), 42);
  ASSERT_TRUE(s.ok());
  // Once the header has been read with no receive posted, c1 stops asking for input.
  int fd = -1;
  short ev = POLLIN;
  const auto deadline = net::deadlineIn(2);
  while ((ev & POLLIN) && Clock::now() < deadline) {
    bool done;
    ASSERT_TRUE(c1->test(*wr, &done).ok());
    bool sdone;
    ASSERT_TRUE(c0->test(*s, &sdone).ok());
    c1->pollInfo(&fd, &ev);
    if (ev & POLLIN) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_FALSE(ev & POLLIN) << "receiver kept polling for input with no receive posted";
  EXPECT_EQ(c1->stats().bytesRecv, 16u) << "payload read before a receive was posted";

  auto r = c1->postRecv(got.data(), got.size(), 42);
  ASSERT_TRUE(r.ok());
  c1->pollInfo(&fd, &ev);
  EXPECT_TRUE((ev & POLLIN) || fd < 0);
  Status st = waitAll({{c0.get(), *s}, {c1.get(), *r}});
  ASSERT_TRUE(st.ok()) << st.toString();
  EXPECT_TRUE(got == v);
}

TEST(TcpTransport, SizeMismatchIsInvalidUsageOnBothSides) {
  auto ranks = makeRanks(2, randomCommId());
  auto [c0, c1] = connectPair(ranks, 0, 1);
  ASSERT_TRUE(c0 && c1);
  std::vector<uint8_t> v = randomBytes(100), got(64);
  auto s = c0->postSend(v.data(), v.size(), 5);
  auto r = c1->postRecv(got.data(), got.size(), 5);
  ASSERT_TRUE(s.ok() && r.ok());
  ASSERT_TRUE(c0->progress().ok());  // a posted send leaves at its connection's next progress
  Status st = waitOne(*c1, *r);
  ASSERT_EQ(st.code(), Code::kInvalidUsage) << st.toString();
  EXPECT_EQ(st.message(),
            "rank 0 sent a message of 100 bytes (tag 5) but rank 1 posted a receive of 64 bytes "
            "(tag 5)");
  // Later ops fail the same way; the sender learns it too, as a usage error.
  EXPECT_EQ(c1->postSend(v.data(), 1, 0).status().code(), Code::kInvalidUsage);
  auto r0 = c0->postRecv(got.data(), 1, 0);
  ASSERT_TRUE(r0.ok());
  Status peer = waitOne(*c0, *r0);
  EXPECT_EQ(peer.code(), Code::kInvalidUsage) << peer.toString();
  EXPECT_NE(peer.message().find("rank 1 aborted: rank 0 sent a message of 100 bytes"),
            std::string::npos)
      << peer.message();
}

TEST(TcpTransport, TagMismatchIsInvalidUsage) {
  auto ranks = makeRanks(2, randomCommId());
  auto [c0, c1] = connectPair(ranks, 0, 1);
  ASSERT_TRUE(c0 && c1);
  uint32_t x = 1, y = 0;
  auto s = c0->postSend(&x, 4, 7);
  auto r = c1->postRecv(&y, 4, 8);
  ASSERT_TRUE(s.ok() && r.ok());
  ASSERT_TRUE(c0->progress().ok());
  Status st = waitOne(*c1, *r);
  ASSERT_EQ(st.code(), Code::kInvalidUsage);
  EXPECT_NE(st.message().find("4 bytes (tag 7)"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("4 bytes (tag 8)"), std::string::npos) << st.message();
}

TEST(TcpTransport, PeerCloseFailsPendingRecvQuickly) {
  auto ranks = makeRanks(2, randomCommId());
  auto conns = connectPair(ranks, 0, 1);
  ConnPtr& c0 = conns.first;
  ConnPtr& c1 = conns.second;
  ASSERT_TRUE(c0 && c1);
  uint64_t x = 0;
  auto r = c1->postRecv(&x, 8, 0);
  ASSERT_TRUE(r.ok());
  auto start = Clock::now();
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    c0.reset();
  });
  Status st = waitOne(*c1, *r, 3);
  closer.join();
  EXPECT_LT(secondsSince(start), 1.0);
  ASSERT_EQ(st.code(), Code::kRemoteError) << st.toString();
  EXPECT_NE(st.message().find("rank 0 (127.0.0.1:"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("closed the connection"), std::string::npos) << st.message();
  // Any later op fails the same way.
  auto later = c1->postSend(&x, 8, 0);
  EXPECT_EQ(later.status().code(), Code::kRemoteError);
}

TEST(TcpTransport, PeerCloseFailsBlockedSend) {
  auto ranks = makeRanks(2, randomCommId());
  auto [c0, c1] = connectPair(ranks, 0, 1);
  ASSERT_TRUE(c0 && c1);
  // More than the socket buffers hold, so the send is still in flight when the peer goes.
  std::vector<uint8_t> big = randomBytes(48 << 20);
  auto s = c1->postSend(big.data(), big.size(), 0);
  ASSERT_TRUE(s.ok());
  bool done = false;
  ASSERT_TRUE(c1->test(*s, &done).ok());
  ASSERT_FALSE(done);
  // c0 never posted a receive and is destroyed with unread data: the peer gets a reset.
  auto start = Clock::now();
  c0.reset();
  Status st = waitOne(*c1, *s, 3);
  EXPECT_LT(secondsSince(start), 1.0);
  EXPECT_EQ(st.code(), Code::kRemoteError) << st.toString();
  EXPECT_NE(st.message().find("closed the connection"), std::string::npos) << st.message();
}

TEST(TcpTransport, CancelPropagatesCodeAndMessage) {
  auto ranks = makeRanks(2, randomCommId());
  auto [c0, c1] = connectPair(ranks, 0, 1);
  ASSERT_TRUE(c0 && c1);
  uint64_t a = 0, b = 0;
  auto r0 = c0->postRecv(&a, 8, 0);
  auto r1 = c1->postRecv(&b, 8, 0);
  ASSERT_TRUE(r0.ok() && r1.ok());
  Status why = systemError("disk on fire");
  ASSERT_TRUE(c1->cancel(why).ok());
  ASSERT_TRUE(c1->cancel(why).ok()) << "cancel must be idempotent";
  // Locally: exactly `why`.
  Status local = waitOne(*c1, *r1);
  EXPECT_EQ(local.code(), Code::kSystemError);
  EXPECT_EQ(local.message(), "disk on fire");
  EXPECT_EQ(c1->postRecv(&b, 8, 0).status().code(), Code::kSystemError);
  // Remotely: a remote error naming the aborting rank, within a second.
  auto start = Clock::now();
  Status remote = waitOne(*c0, *r0, 3);
  EXPECT_LT(secondsSince(start), 1.0);
  EXPECT_EQ(remote.code(), Code::kRemoteError);
  EXPECT_EQ(remote.message(), "rank 1 aborted: disk on fire");
  EXPECT_EQ(c0->postSend(&a, 8, 0).status().message(), "rank 1 aborted: disk on fire");
}

TEST(TcpTransport, CancelKeepsInvalidUsage) {
  auto ranks = makeRanks(2, randomCommId());
  auto [c0, c1] = connectPair(ranks, 0, 1);
  ASSERT_TRUE(c0 && c1);
  uint64_t a = 0;
  auto r0 = c0->postRecv(&a, 8, 0);
  ASSERT_TRUE(r0.ok());
  ASSERT_TRUE(c1->cancel(invalidUsage("allreduce: count 3 vs 4")).ok());
  Status remote = waitOne(*c0, *r0);
  EXPECT_EQ(remote.code(), Code::kInvalidUsage);
  EXPECT_EQ(remote.message(), "rank 1 aborted: allreduce: count 3 vs 4");
}

TEST(TcpTransport, CancelAfterFramesSentDeliversThemFirst) {
  auto ranks = makeRanks(2, randomCommId());
  auto [c0, c1] = connectPair(ranks, 0, 1);
  ASSERT_TRUE(c0 && c1);
  std::vector<uint8_t> v = randomBytes(1000), got(1000, 0);
  auto s = c1->postSend(v.data(), v.size(), 1);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(waitOne(*c1, *s).ok());
  ASSERT_TRUE(c1->cancel(remoteError("rank 7 died")).ok());
  auto r = c0->postRecv(got.data(), got.size(), 1);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(waitOne(*c0, *r).ok());
  EXPECT_TRUE(got == v);
  // The ABORT frame may already have been read behind the data, failing the post itself.
  uint8_t x;
  auto r2 = c0->postRecv(&x, 1, 2);
  Status st = r2.ok() ? waitOne(*c0, *r2) : r2.status();
  EXPECT_EQ(st.code(), Code::kRemoteError);
  EXPECT_EQ(st.message(), "rank 1 aborted: rank 7 died");
}

TEST(TcpTransport, CancelUnblocksPeerStuckSending) {
  auto ranks = makeRanks(2, randomCommId());
  auto [c0, c1] = connectPair(ranks, 0, 1);
  ASSERT_TRUE(c0 && c1);
  // c0 streams more than the socket buffers hold to c1, which never posts a receive.
  std::vector<uint8_t> big = randomBytes(48 << 20);
  auto s = c0->postSend(big.data(), big.size(), 0);
  ASSERT_TRUE(s.ok());
  bool done = false;
  ASSERT_TRUE(c0->test(*s, &done).ok());
  ASSERT_FALSE(done);
  ASSERT_TRUE(c1->cancel(remoteError("rank 5 is gone")).ok());
  auto start = Clock::now();
  Status st = waitOne(*c0, *s, 3);
  EXPECT_LT(secondsSince(start), 1.0);
  EXPECT_EQ(st.code(), Code::kRemoteError) << st.toString();
  EXPECT_EQ(st.message(), "rank 1 aborted: rank 5 is gone");
}

TEST(TcpTransport, CancelWithHalfSentFrameIsBounded) {
  auto ranks = makeRanks(2, randomCommId());
  auto [c0, c1] = connectPair(ranks, 0, 1);
  ASSERT_TRUE(c0 && c1);
  std::vector<uint8_t> big = randomBytes(64 << 20);
  auto s = c1->postSend(big.data(), big.size(), 0);
  ASSERT_TRUE(s.ok());
  bool done = false;
  ASSERT_TRUE(c1->test(*s, &done).ok());
  ASSERT_FALSE(done);
  auto start = Clock::now();
  ASSERT_TRUE(c1->cancel(systemError("out of memory")).ok());
  EXPECT_LT(secondsSince(start), 0.5);
  Status local = waitOne(*c1, *s);
  EXPECT_EQ(local.code(), Code::kSystemError);
  // The peer reads the truncated frame, then the end of the stream.
  std::vector<uint8_t> got(big.size());
  auto r = c0->postRecv(got.data(), got.size(), 0);
  ASSERT_TRUE(r.ok());
  Status remote = waitOne(*c0, *r, 3);
  EXPECT_EQ(remote.code(), Code::kRemoteError) << remote.toString();
}

TEST(TcpTransport, WrongCommunicatorIsRefused) {
  const uint64_t comm = randomCommId();
  Rank acceptor = makeRank(1, comm);
  Rank stranger = makeRank(0, comm ^ 0x5555);
  Rank friendly = makeRank(0, comm);

  auto accepted = std::async(std::launch::async,
                             [&] { return acceptor.transport->connect(0, friendly.blob, 3.0); });
  auto start = Clock::now();
  auto bad = stranger.transport->connect(1, acceptor.blob, 3.0);
  EXPECT_LT(secondsSince(start), 1.0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kRemoteError);
  EXPECT_NE(bad.status().message().find("another communicator"), std::string::npos)
      << bad.status().message();
  // The acceptor ignored the stranger and still takes the right rank 0.
  auto good = friendly.transport->connect(1, acceptor.blob, 3.0);
  auto c1 = accepted.get();
  ASSERT_TRUE(good.ok()) << good.status().toString();
  ASSERT_TRUE(c1.ok()) << c1.status().toString();
  expectTransfer(**good, **c1, randomBytes(10), 0);
}

TEST(TcpTransport, WrongTargetRankIsRefused) {
  const uint64_t comm = randomCommId();
  auto ranks = makeRanks(3, comm);
  // Rank 1 is inside connect() (waiting for rank 0) and so answers hellos.
  auto waiting = std::async(std::launch::async,
                            [&] { return ranks[1].transport->connect(0, ranks[0].blob, 1.0); });
  // Rank 0 dials rank 2 but is handed rank 1's endpoint.
  auto bad = ranks[0].transport->connect(2, ranks[1].blob, 2.0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kRemoteError);
  EXPECT_NE(bad.status().message().find("not the rank we dialed"), std::string::npos)
      << bad.status().message();
  EXPECT_EQ(waiting.get().status().code(), Code::kTimeout);
}

TEST(TcpTransport, AcceptorTimesOutWhenPeerNeverDials) {
  auto ranks = makeRanks(2, randomCommId());
  auto start = Clock::now();
  auto c = ranks[1].transport->connect(0, ranks[0].blob, 0.5);
  double took = secondsSince(start);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kTimeout);
  EXPECT_NE(c.status().message().find("rank 0 did not connect"), std::string::npos)
      << c.status().message();
  EXPECT_GE(took, 0.45);
  EXPECT_LT(took, 1.5);
}

TEST(TcpTransport, DialerTimesOutWhenPeerNeverAnswers) {
  auto ranks = makeRanks(2, randomCommId());
  auto start = Clock::now();
  // Rank 1 listens (the kernel completes the TCP handshake) but never calls connect().
  auto c = ranks[0].transport->connect(1, ranks[1].blob, 0.5);
  double took = secondsSince(start);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kTimeout);
  EXPECT_NE(c.status().message().find("called connect"), std::string::npos)
      << c.status().message();
  EXPECT_LT(took, 1.5);
}

TEST(TcpTransport, DialerTimesOutWhenNobodyListens) {
  auto ranks = makeRanks(1, randomCommId());
  EndpointBlob deadBlob;
  {
    Rank gone = makeRank(1, 0);
    deadBlob = gone.blob;
  }
  auto start = Clock::now();
  auto c = ranks[0].transport->connect(1, deadBlob, 0.5);
  double took = secondsSince(start);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kTimeout);
  EXPECT_NE(c.status().message().find("refused"), std::string::npos) << c.status().message();
  EXPECT_LT(took, 1.5);
}

TEST(TcpTransport, DialerFailsFastWhenPeerIsGone) {
  // The endpoint was published, so its listener was up: a refusal means the peer exited.
  auto ranks = makeRanks(1, randomCommId());
  EndpointBlob deadBlob;
  {
    Rank gone = makeRank(1, 0);
    deadBlob = gone.blob;
  }
  auto start = Clock::now();
  auto c = ranks[0].transport->connect(1, deadBlob, 4.0);
  double took = secondsSince(start);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kRemoteError) << c.status().toString();
  EXPECT_NE(c.status().message().find("refused"), std::string::npos) << c.status().message();
  EXPECT_LT(took, 2.0);
}

TEST(TcpTransport, StaleHelloFromTimedOutDialerIsSkipped) {
  const uint64_t comm = randomCommId();
  auto ranks = makeRanks(2, comm);
  // Rank 0 dials and gives up before rank 1 ever calls connect(); its socket is closed.
  auto first = ranks[0].transport->connect(1, ranks[1].blob, 0.2);
  ASSERT_EQ(first.status().code(), Code::kTimeout);
  // Both retry: the acceptor must not hand out the dead connection from the first attempt.
  auto [c0, c1] = connectPair(ranks, 0, 1);
  ASSERT_TRUE(c0 && c1);
  expectTransfer(*c0, *c1, randomBytes(64), 1);
  expectTransfer(*c1, *c0, randomBytes(64), 2);
}

TEST(TcpTransport, ReconnectAfterPeerRestart) {
  // A rank whose old connection died may connect again within the same communicator.
  const uint64_t comm = randomCommId();
  auto ranks = makeRanks(2, comm);
  auto [a0, a1] = connectPair(ranks, 0, 1);
  ASSERT_TRUE(a0 && a1);
  auto [b0, b1] = connectPair(ranks, 0, 1);
  ASSERT_TRUE(b0 && b1);
  expectTransfer(*b0, *b1, randomBytes(100), 4);
  expectTransfer(*a1, *a0, randomBytes(100), 4);
}

}  // namespace
}  // namespace chorus
