// Heartbeats (src/core/heartbeat.h) between real UDP sockets on loopback: what counts as a beat,
// what is ignored, when a peer counts as silent, and how a failure is announced.
#include "src/core/heartbeat.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "src/base/socket_util.h"

namespace chorus {
namespace {

net::SockAddr loopback() {
  auto a = net::resolve("127.0.0.1", 0);
  EXPECT_TRUE(a.ok());
  return *a;
}

// Sets CHORUS_HEARTBEAT_TIMEOUT for one test.
struct TimeoutEnv {
  explicit TimeoutEnv(const char* v) { ::setenv("CHORUS_HEARTBEAT_TIMEOUT", v, 1); }
  ~TimeoutEnv() { ::unsetenv("CHORUS_HEARTBEAT_TIMEOUT"); }
};

// Polls `cond` every 10 ms for at most `seconds`.
template <class F>
bool eventually(F cond, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

// Ranks 0 and 1 of communicator `comm`, both started, each beating to the other.
void startPair(uint64_t comm, std::unique_ptr<Heartbeat>* a, std::unique_ptr<Heartbeat>* b) {
  auto x = Heartbeat::create(0, comm, loopback());
  auto y = Heartbeat::create(1, comm, loopback());
  ASSERT_TRUE(x.ok() && y.ok() && *x && *y);
  std::vector<std::vector<uint8_t>> eps{(*x)->endpoint(), (*y)->endpoint()};
  ASSERT_TRUE((*x)->start(eps).ok());
  ASSERT_TRUE((*y)->start(eps).ok());
  *a = std::move(*x);
  *b = std::move(*y);
}

TEST(Heartbeat, ZeroTimeoutTurnsItOff) {
  TimeoutEnv env("0");
  auto h = Heartbeat::create(0, 1, loopback());
  ASSERT_TRUE(h.ok()) << h.status().toString();
  EXPECT_EQ(*h, nullptr);
}

TEST(Heartbeat, NegativeOrMalformedTimeoutIsRefusedByName) {
  for (const char* bad : {"-1", "soon"}) {
    TimeoutEnv env(bad);
    auto h = Heartbeat::create(0, 1, loopback());
    ASSERT_FALSE(h.ok()) << bad;
    EXPECT_NE(h.status().toString().find("CHORUS_HEARTBEAT_TIMEOUT"), std::string::npos)
        << h.status().toString();
  }
}

TEST(Heartbeat, PeersThatBeatStayAliveAndOneThatStopsIsNamed) {
  // 3 s: a beat every 375 ms; a loaded machine would have to starve the beating thread for
  // 3 s to make this fail.
  TimeoutEnv env("3");
  std::unique_ptr<Heartbeat> a, b;
  ASSERT_NO_FATAL_FAILURE(startPair(77, &a, &b));
  // A timeout and more of beating: never silent.
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(a->check(1).ok()) << a->check(1).toString();
    ASSERT_TRUE(b->check(0).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(a->check(0).ok());  // itself: never judged
  b.reset();                        // rank 1 stops beating (its thread ends)
  ASSERT_TRUE(eventually([&] { return !a->check(1).ok(); }, 20.0));
  const Status s = a->check(1);
  EXPECT_EQ(s.code(), Code::kRemoteError);
  EXPECT_NE(s.toString().find("rank 1"), std::string::npos) << s.toString();
  EXPECT_NE(s.toString().find("silent"), std::string::npos) << s.toString();
}

TEST(Heartbeat, AnAnnouncedFailureReachesThePeerWithItsReasonAndCode) {
  TimeoutEnv env("30");  // silence cannot be what the peer sees
  std::unique_ptr<Heartbeat> a, b;
  ASSERT_NO_FATAL_FAILURE(startPair(5, &a, &b));
  EXPECT_TRUE(a->check(1).ok());
  b->announceFailure(invalidUsage("rank 1 was given count=3, rank 0 count=4"));
  // Sent at once, not at the next interval (30 s / 8).
  ASSERT_TRUE(eventually([&] { return !a->check(1).ok(); }, 2.0));
  const Status s = a->check(1);
  EXPECT_EQ(s.code(), Code::kInvalidUsage);
  EXPECT_NE(s.toString().find("rank 1 failed"), std::string::npos) << s.toString();
  EXPECT_NE(s.toString().find("count=3"), std::string::npos) << s.toString();
}

// Datagrams that are not beats of this communicator from the peer's own address change
// nothing: another communicator's id, another source address, wrong sizes, garbage.
TEST(Heartbeat, ForgedOrStrayDatagramsAreIgnored) {
  TimeoutEnv env("0.5");
  std::unique_ptr<Heartbeat> a, b;
  ASSERT_NO_FATAL_FAILURE(startPair(0xabcdef, &a, &b));
  ASSERT_TRUE(eventually([&] { return a->heard(1); }, 10.0));
  b.reset();  // rank 1 stops beating; a forger sends what looks like its beats, from elsewhere

  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  const net::SockAddr to = a->address();
  auto beat = [](uint64_t comm, uint32_t from, uint32_t toRank, size_t bytes) {
    std::vector<uint8_t> d(bytes, 0);
    const uint64_t words[] = {0x42484843 | (uint64_t{1} << 32), comm,
                              from | (uint64_t{toRank} << 32), 9};
    for (size_t i = 0; i < 4 && (i + 1) * 8 <= bytes; ++i)
      for (int k = 0; k < 8; ++k) d[i * 8 + k] = static_cast<uint8_t>(words[i] >> (8 * k));
    return d;
  };
  std::vector<std::vector<uint8_t>> forged = {
      beat(0xabcdef, 1, 0, 32),   // right contents, wrong source address
      beat(0x123456, 1, 0, 32),   // another communicator
      beat(0xabcdef, 1, 0, 31),   // short
      beat(0xabcdef, 1, 0, 4096),  // too long
      beat(0xabcdef, 7, 0, 32),   // no such rank
      std::vector<uint8_t>(32, 0xff),
  };
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (std::chrono::steady_clock::now() < until) {
    for (const auto& d : forged)
      (void)::sendto(fd, d.data(), d.size(), 0,
                     reinterpret_cast<const sockaddr*>(&to.storage), to.len);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::close(fd);
  const Status s = a->check(1);
  EXPECT_EQ(s.code(), Code::kRemoteError) << "a forged beat kept rank 1 alive: " << s.toString();
}

// A peer never heard from (UDP blocked where TCP passes) is not judged by its silence: that
// would fail every job on such a network. It is left to its connection and CHORUS_TIMEOUT.
TEST(Heartbeat, APeerNeverHeardFromIsNotJudged) {
  TimeoutEnv env("0.3");
  auto a = Heartbeat::create(0, 9, loopback());
  auto b = Heartbeat::create(1, 9, loopback());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->start({(*a)->endpoint(), (*b)->endpoint()}).ok());  // b never starts
  std::this_thread::sleep_for(std::chrono::milliseconds(900));
  EXPECT_FALSE((*a)->heard(1));
  EXPECT_TRUE((*a)->check(1).ok()) << (*a)->check(1).toString();
}

TEST(Heartbeat, AMalformedPeerEndpointIsRefusedNamingTheRank) {
  TimeoutEnv env("4");
  auto a = Heartbeat::create(0, 1, loopback());
  ASSERT_TRUE(a.ok());
  Status s = (*a)->start({(*a)->endpoint(), {4, 0, 0}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.toString().find("rank 1"), std::string::npos) << s.toString();
}

}  // namespace
}  // namespace chorus
