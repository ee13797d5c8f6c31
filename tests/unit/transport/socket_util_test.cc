// Socket helpers: address parsing, interface selection, and the deadline-bounded primitives.
// Loopback addresses only.
#include "src/base/socket_util.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include <gtest/gtest.h>

namespace chorus::net {
namespace {

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool haveIpv6Loopback() {
  auto a = parseHostPort("[::1]:0");
  if (!a.ok()) return false;
  SockAddr bound;
  auto fd = listenOn(*a, 1, &bound);
  if (!fd.ok()) return false;
  ::close(*fd);
  return true;
}

// A loopback port with nothing listening: bind one, remember it, close it.
uint16_t deadPort() {
  SockAddr bound;
  auto fd = listenOn(parseHostPort("127.0.0.1:0").value(), 1, &bound);
  EXPECT_TRUE(fd.ok());
  ::close(*fd);
  return bound.port();
}

TEST(SocketUtil, ParsesIpv4HostPort) {
  auto a = parseHostPort("127.0.0.1:4242");
  ASSERT_TRUE(a.ok()) << a.status().toString();
  EXPECT_EQ(a->family(), AF_INET);
  EXPECT_EQ(a->port(), 4242);
  EXPECT_EQ(a->toString(), "127.0.0.1:4242");
  EXPECT_TRUE(a->isLoopback());
}

TEST(SocketUtil, ParsesBracketedIpv6) {
  auto a = parseHostPort("[::1]:65535");
  ASSERT_TRUE(a.ok()) << a.status().toString();
  EXPECT_EQ(a->family(), AF_INET6);
  EXPECT_EQ(a->port(), 65535);
  EXPECT_EQ(a->toString(), "[::1]:65535");
  EXPECT_TRUE(a->isLoopback());
}

TEST(SocketUtil, ResolvesLocalhostToLoopback) {
  auto a = parseHostPort("localhost:80");
  ASSERT_TRUE(a.ok()) << a.status().toString();
  EXPECT_TRUE(a->isLoopback()) << a->toString();
  EXPECT_EQ(a->port(), 80);
  auto b = resolve("[::1]", 7);
  ASSERT_TRUE(b.ok()) << b.status().toString();
  EXPECT_EQ(b->toString(), "[::1]:7");
}

TEST(SocketUtil, RejectsMalformedHostPort) {
  for (const char* bad : {"127.0.0.1", "127.0.0.1:", ":80", "127.0.0.1:99999", "127.0.0.1:8x",
                          "::1:80", "[::1]80", "[::1", "[]:80", "127.0.0.1:-1"}) {
    auto a = parseHostPort(bad);
    ASSERT_FALSE(a.ok()) << bad;
    EXPECT_EQ(a.status().code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(a.status().message().find(bad), std::string::npos) << a.status().message();
  }
}

TEST(SocketUtil, UnknownHostNamesTheCall) {
  auto a = resolve("no-such-host.invalid", 1);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("getaddrinfo(no-such-host.invalid)"), std::string::npos)
      << a.status().message();
}

TEST(SocketUtil, IfSpecPrefix) {
  EXPECT_TRUE(matchesIfSpec("eth0", "eth"));
  EXPECT_TRUE(matchesIfSpec("eth12", "eth1"));
  EXPECT_FALSE(matchesIfSpec("ib0", "eth"));
  EXPECT_TRUE(matchesIfSpec("ib0", "eth,ib"));
  EXPECT_TRUE(matchesIfSpec("ib0", " eth , ib "));
  EXPECT_TRUE(matchesIfSpec("anything", ""));
}

TEST(SocketUtil, IfSpecExclude) {
  EXPECT_FALSE(matchesIfSpec("docker0", "^docker,lo"));
  EXPECT_FALSE(matchesIfSpec("lo", "^docker,lo"));
  EXPECT_TRUE(matchesIfSpec("eth0", "^docker,lo"));
}

TEST(SocketUtil, IfSpecExact) {
  EXPECT_TRUE(matchesIfSpec("eth0", "=eth0"));
  EXPECT_FALSE(matchesIfSpec("eth01", "=eth0"));
  EXPECT_TRUE(matchesIfSpec("eth1", "=eth0,eth1"));
  EXPECT_FALSE(matchesIfSpec("eth0", "^=eth0"));
  EXPECT_TRUE(matchesIfSpec("eth01", "^=eth0"));
}

TEST(SocketUtil, ListsLoopbackBySpec) {
  auto ifs = listInterfaces("=lo");
  ASSERT_TRUE(ifs.ok()) << ifs.status().toString();
  ASSERT_FALSE(ifs->empty());
  for (const Interface& i : *ifs) {
    EXPECT_EQ(i.name, "lo");
    EXPECT_TRUE(i.addr.isLoopback()) << i.addr.toString();
    EXPECT_EQ(i.addr.port(), 0);
  }
  // IPv4 comes first.
  EXPECT_EQ(ifs->front().addr.family(), AF_INET);
}

TEST(SocketUtil, ExcludingLoopbackNeverReturnsIt) {
  auto ifs = listInterfaces("^lo");
  if (!ifs.ok()) GTEST_SKIP() << "no interface besides lo: " << ifs.status().toString();
  for (const Interface& i : *ifs) EXPECT_NE(i.name, "lo");
}

TEST(SocketUtil, NoMatchingInterfaceIsAnError) {
  auto ifs = listInterfaces("=chorus-no-such-if");
  ASSERT_FALSE(ifs.ok());
  EXPECT_EQ(ifs.status().code(), Code::kInvalidArgument);
  EXPECT_NE(ifs.status().message().find("chorus-no-such-if"), std::string::npos);
  EXPECT_NE(ifs.status().message().find("lo"), std::string::npos) << "should list what is up";
}

TEST(SocketUtil, FamilyFromEnvironment) {
  ::setenv("CHORUS_SOCKET_FAMILY", "AF_INET6", 1);
  auto v6 = listInterfaces("=lo");
  ::setenv("CHORUS_SOCKET_FAMILY", "bogus", 1);
  auto bad = listInterfaces("=lo");
  ::unsetenv("CHORUS_SOCKET_FAMILY");
  if (v6.ok()) {
    for (const Interface& i : *v6) EXPECT_EQ(i.addr.family(), AF_INET6);
  }
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("CHORUS_SOCKET_FAMILY"), std::string::npos);
}

TEST(SocketUtil, LocalAddressTowardLoopback) {
  auto a = localAddressToward(parseHostPort("127.0.0.1:9").value());
  ASSERT_TRUE(a.ok()) << a.status().toString();
  EXPECT_EQ(a->toString(), "127.0.0.1:0");
}

void roundTrip(const std::string& host) {
  SockAddr bound;
  auto lfd = listenOn(parseHostPort(host + ":0").value(), 4, &bound);
  ASSERT_TRUE(lfd.ok()) << lfd.status().toString();
  Fd listener(*lfd);
  ASSERT_NE(bound.port(), 0);

  auto cfd = connectTo(bound, deadlineIn(2));
  ASSERT_TRUE(cfd.ok()) << cfd.status().toString();
  Fd client(*cfd);
  SockAddr from;
  auto afd = acceptOne(listener.get(), deadlineIn(2), &from);
  ASSERT_TRUE(afd.ok()) << afd.status().toString();
  Fd server(*afd);
  EXPECT_TRUE(from.isLoopback());

  std::string msg(100000, '\0');
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<char>(std::rand());
  std::thread writer([&] { ASSERT_TRUE(sendAll(client.get(), msg.data(), msg.size(),
                                               deadlineIn(2), "test peer").ok()); });
  std::string got(msg.size(), '\x5a');
  Status s = recvAll(server.get(), got.data(), got.size(), deadlineIn(2), "test peer");
  writer.join();
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(got, msg);
}

TEST(SocketUtil, ListenConnectAcceptIpv4) { roundTrip("127.0.0.1"); }

TEST(SocketUtil, ListenConnectAcceptIpv6) {
  if (!haveIpv6Loopback()) GTEST_SKIP() << "no IPv6 loopback";
  roundTrip("[::1]");
}

TEST(SocketUtil, ConnectToNothingTimesOut) {
  SockAddr dead = parseHostPort("127.0.0.1:" + std::to_string(deadPort())).value();
  auto start = Clock::now();
  auto fd = connectTo(dead, deadlineIn(0.3));
  double took = secondsSince(start);
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().code(), Code::kTimeout);
  EXPECT_NE(fd.status().message().find(dead.toString()), std::string::npos);
  EXPECT_NE(fd.status().message().find("refused"), std::string::npos) << fd.status().message();
  EXPECT_GE(took, 0.25);
  EXPECT_LT(took, 1.5);
}

TEST(SocketUtil, PersistentRefusalEndsEarly) {
  SockAddr dead = parseHostPort("127.0.0.1:" + std::to_string(deadPort())).value();
  auto start = Clock::now();
  auto fd = connectTo(dead, deadlineIn(3), deadlineIn(0.2));
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().code(), Code::kRemoteError);
  EXPECT_NE(fd.status().message().find(dead.toString()), std::string::npos);
  EXPECT_LT(secondsSince(start), 1.0);
}

TEST(SocketUtil, ConnectRetriesUntilListenerAppears) {
  uint16_t port = deadPort();
  SockAddr addr = parseHostPort("127.0.0.1:" + std::to_string(port)).value();
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    SockAddr bound;
    auto lfd = listenOn(addr, 4, &bound);
    ASSERT_TRUE(lfd.ok()) << lfd.status().toString();
    Fd listener(*lfd);
    auto afd = acceptOne(listener.get(), deadlineIn(2), nullptr);
    EXPECT_TRUE(afd.ok()) << afd.status().toString();
    if (afd.ok()) ::close(*afd);
  });
  auto fd = connectTo(addr, deadlineIn(3));
  late.join();
  ASSERT_TRUE(fd.ok()) << fd.status().toString();
  ::close(*fd);
}

TEST(SocketUtil, AcceptTimesOut) {
  SockAddr bound;
  auto lfd = listenOn(parseHostPort("127.0.0.1:0").value(), 4, &bound);
  ASSERT_TRUE(lfd.ok());
  Fd listener(*lfd);
  auto start = Clock::now();
  auto afd = acceptOne(listener.get(), deadlineIn(0.2), nullptr);
  ASSERT_FALSE(afd.ok());
  EXPECT_EQ(afd.status().code(), Code::kTimeout);
  EXPECT_LT(secondsSince(start), 1.0);
}

TEST(SocketUtil, RecvAllReportsEofAndTimeout) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Fd a(sv[0]), b(sv[1]);
  char buf[16];
  auto start = Clock::now();
  Status s = recvAll(a.get(), buf, sizeof buf, deadlineIn(0.2), "rank 3");
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_NE(s.message().find("rank 3"), std::string::npos);
  EXPECT_LT(secondsSince(start), 1.0);

  ASSERT_TRUE(sendAll(b.get(), "abc", 3, deadlineIn(1), "rank 3").ok());
  b.reset();
  s = recvAll(a.get(), buf, sizeof buf, deadlineIn(1), "rank 3");
  EXPECT_EQ(s.code(), Code::kRemoteError);
  EXPECT_EQ(s.message(), "rank 3 closed the connection");
  s = sendAll(a.get(), buf, sizeof buf, deadlineIn(1), "rank 3");
  EXPECT_EQ(s.code(), Code::kRemoteError) << s.toString();
}

TEST(SocketUtil, FdMovesAndCloses) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Fd a(sv[0]);
  Fd b(std::move(a));
  EXPECT_FALSE(a);
  EXPECT_EQ(b.get(), sv[0]);
  Fd c;
  c = std::move(b);
  EXPECT_EQ(c.get(), sv[0]);
  c.reset();
  // Closed: writing to the other end now fails.
  EXPECT_EQ(::send(sv[1], "x", 1, MSG_NOSIGNAL), -1);
  ::close(sv[1]);
}

}  // namespace
}  // namespace chorus::net
