#include "src/bootstrap/store.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "src/bootstrap/wire.h"
#include "tests/unit/bootstrap/test_util.h"

namespace chorus::bootstrap {
namespace {

using testing::loopback;
using testing::runForked;
using Bytes = std::vector<uint8_t>;

Bytes bytesOf(const std::string& s) { return Bytes(s.begin(), s.end()); }

Bytes randomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = randomSecret();
    ASSERT_TRUE(s.ok());
    secret_ = *s;
    auto server = StoreServer::start(loopback(0), secret_);
    ASSERT_TRUE(server.ok()) << server.status().toString();
    server_ = *server;
  }

  std::unique_ptr<StoreClient> client(double timeout = 5.0) {
    auto c = StoreClient::connect(server_->address(), secret_, net::deadlineIn(5.0));
    EXPECT_TRUE(c.ok()) << c.status().toString();
    if (!c.ok()) return nullptr;
    (*c)->setTimeout(timeout);
    return std::move(*c);
  }

  // A raw TCP connection to the server, for speaking garbage.
  net::Fd rawConnection() {
    auto fd = net::connectTo(server_->address(), net::deadlineIn(5.0));
    EXPECT_TRUE(fd.ok()) << fd.status().toString();
    return net::Fd(fd.ok() ? *fd : -1);
  }

  // The server answers a good client: the check every robustness test ends with.
  void expectServerHealthy() {
    auto c = client();
    ASSERT_NE(c, nullptr);
    Bytes v = randomBytes(100, 7);
    ASSERT_TRUE(c->set("health", v).ok());
    auto got = c->get("health");
    ASSERT_TRUE(got.ok()) << got.status().toString();
    EXPECT_EQ(*got, v);
  }

  Secret secret_{};
  std::shared_ptr<StoreServer> server_;
};

TEST_F(StoreTest, SetGetAddCheckMultiGet) {
  auto c = client();
  ASSERT_NE(c, nullptr);
  Bytes a = randomBytes(13, 1), b = randomBytes(1000, 2);
  ASSERT_TRUE(c->set("a", a).ok());
  ASSERT_TRUE(c->set("b", b).ok());
  ASSERT_TRUE(c->set("empty", {}).ok());
  auto got = c->get("a");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, a);
  auto empty = c->get("empty");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());

  // Overwrite.
  ASSERT_TRUE(c->set("a", b).ok());
  EXPECT_EQ(c->get("a").value(), b);

  auto n = c->add("counter", 5);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 5);
  n = c->add("counter", -7);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, -2);
  // A counter is an 8-byte little-endian value, visible through get.
  auto raw = c->get("counter");
  ASSERT_TRUE(raw.ok());
  ASSERT_EQ(raw->size(), 8u);
  EXPECT_EQ(static_cast<int64_t>(wire::loadLe(raw->data(), 8)), -2);

  auto all = c->check({"a", "b", "counter"});
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(*all);
  auto some = c->check({"a", "nope"});
  ASSERT_TRUE(some.ok());
  EXPECT_FALSE(*some);
  auto none = c->check({});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(*none);
  auto each = c->exists({"nope", "b"});
  ASSERT_TRUE(each.ok());
  EXPECT_EQ(*each, (std::vector<bool>{false, true}));

  auto many = c->multiGet({"b", "a", "empty", "b"});
  ASSERT_TRUE(many.ok()) << many.status().toString();
  ASSERT_EQ(many->size(), 4u);
  EXPECT_EQ((*many)[0], b);
  EXPECT_EQ((*many)[1], b);
  EXPECT_TRUE((*many)[2].empty());
  EXPECT_EQ((*many)[3], b);
}

TEST_F(StoreTest, LargeValue) {
  auto c = client();
  ASSERT_NE(c, nullptr);
  Bytes big = randomBytes(12 << 20, 3);
  ASSERT_TRUE(c->set("big", big).ok());
  auto got = client()->get("big");
  ASSERT_TRUE(got.ok()) << got.status().toString();
  EXPECT_EQ(*got, big);
}

TEST_F(StoreTest, AddToNonCounterIsAnErrorAndConnectionSurvives) {
  auto c = client();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->set("text", bytesOf("hello")).ok());
  auto n = c->add("text", 1);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), Code::kInvalidUsage);
  EXPECT_NE(n.status().message().find("'text'"), std::string::npos) << n.status().message();
  auto got = c->get("text");
  ASSERT_TRUE(got.ok()) << got.status().toString();
  EXPECT_EQ(*got, bytesOf("hello"));
}

TEST_F(StoreTest, GetWaitsForALaterSet) {
  auto waiter = client();
  ASSERT_NE(waiter, nullptr);
  Bytes value = randomBytes(64, 4);
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    auto c = client();
    if (c) {
      EXPECT_TRUE(c->set("late", value).ok());
    }
  });
  auto start = std::chrono::steady_clock::now();
  auto got = waiter->get("late");
  auto waited = std::chrono::steady_clock::now() - start;
  setter.join();
  ASSERT_TRUE(got.ok()) << got.status().toString();
  EXPECT_EQ(*got, value);
  EXPECT_GE(waited, std::chrono::milliseconds(100));
}

TEST_F(StoreTest, MultiGetWaitsForAll) {
  auto waiter = client();
  ASSERT_NE(waiter, nullptr);
  std::thread setter([&] {
    auto c = client();
    if (!c) return;
    for (int i = 0; i < 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      EXPECT_TRUE(c->set("k" + std::to_string(i), Bytes(i + 1, static_cast<uint8_t>(i))).ok());
    }
    EXPECT_TRUE(c->add("k3", 41).ok());
  });
  auto got = waiter->multiGet({"k0", "k1", "k2", "k3"});
  setter.join();
  ASSERT_TRUE(got.ok()) << got.status().toString();
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*got)[i], Bytes(i + 1, static_cast<uint8_t>(i)));
  EXPECT_EQ(wire::loadLe((*got)[3].data(), 8), 41u);
}

TEST_F(StoreTest, SetAndMultiGet) {
  constexpr int kThreads = 3;
  std::vector<std::thread> threads;
  std::vector<StatusOr<std::vector<Bytes>>> results(kThreads, Status());
  std::vector<std::string> keys = {"x/0", "x/1", "x/2"};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto c = client();
      if (c) results[t] = c->setAndMultiGet(keys[t], randomBytes(t * 5, 70 + t), keys);
    });
  }
  for (auto& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(results[t].ok()) << results[t].status().toString();
    for (int u = 0; u < kThreads; ++u) EXPECT_EQ((*results[t])[u], randomBytes(u * 5, 70 + u));
  }
}

TEST_F(StoreTest, GetTimesOutNamingTheKey) {
  auto c = client(0.3);
  ASSERT_NE(c, nullptr);
  auto start = std::chrono::steady_clock::now();
  auto got = c->get("never/set/key");
  auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Code::kTimeout);
  EXPECT_NE(got.status().message().find("'never/set/key'"), std::string::npos)
      << got.status().message();
  EXPECT_GE(waited, std::chrono::milliseconds(250));
  EXPECT_LT(waited, std::chrono::seconds(2));

  // The timed-out connection is out of step with the server and says so...
  auto again = c->set("x", {});
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.message().find("earlier failure"), std::string::npos) << again.message();
  // ...and its parked request must not bother anyone once the key appears.
  auto other = client();
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(other->set("never/set/key", bytesOf("now")).ok());
  expectServerHealthy();
}

TEST_F(StoreTest, MultiGetTimeoutNamesKeys) {
  auto c = client(0.2);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->set("present", {}).ok());
  auto got = c->multiGet({"present", "absent-one"});
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Code::kTimeout);
  EXPECT_NE(got.status().message().find("'absent-one'"), std::string::npos)
      << got.status().message();
}

TEST_F(StoreTest, WrongSecretIsRefusedWhileGoodClientsWork) {
  auto good = client();
  ASSERT_NE(good, nullptr);
  ASSERT_TRUE(good->set("before", bytesOf("1")).ok());

  Secret wrong = secret_;
  wrong[3] ^= 0x10;
  ::testing::internal::CaptureStderr();
  auto bad = StoreClient::connect(server_->address(), wrong, net::deadlineIn(2.0));
  // The server logs before it replies, so the line is there once the client has its answer.
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("WARN"), std::string::npos) << log;
  EXPECT_NE(log.find("wrong job secret"), std::string::npos) << log;
  EXPECT_NE(log.find("client 127.0.0.1:"), std::string::npos) << log;
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidUsage);
  EXPECT_NE(bad.status().message().find("store at " + server_->address().toString() +
                                        " refused the job secret"),
            std::string::npos)
      << bad.status().message();

  // The existing connection and new ones are unaffected.
  auto got = good->get("before");
  ASSERT_TRUE(got.ok()) << got.status().toString();
  EXPECT_EQ(*got, bytesOf("1"));
  expectServerHealthy();
}

TEST_F(StoreTest, ConnectRetriesUntilTheServerStarts) {
  uint16_t port = testing::freePort();
  std::shared_ptr<StoreServer> late;
  std::thread starter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto s = StoreServer::start(loopback(port), secret_);
    EXPECT_TRUE(s.ok()) << s.status().toString();
    if (s.ok()) late = *s;
  });
  auto c = StoreClient::connect(loopback(port), secret_, net::deadlineIn(5.0));
  starter.join();
  ASSERT_TRUE(c.ok()) << c.status().toString();
  ASSERT_TRUE((*c)->set("k", bytesOf("v")).ok());
  EXPECT_EQ((*c)->get("k").value(), bytesOf("v"));
}

TEST_F(StoreTest, ConnectTimesOutWhenNobodyListens) {
  uint16_t port = testing::freePort();
  auto start = std::chrono::steady_clock::now();
  auto c = StoreClient::connect(loopback(port), secret_, net::deadlineIn(0.3));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kTimeout) << c.status().toString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

TEST_F(StoreTest, SurvivesGarbageAndHalfRequests) {
  auto good = client();
  ASSERT_NE(good, nullptr);
  std::mt19937 rng(2024);
  auto sendRaw = [](net::Fd& fd, const Bytes& b) {
    return ::send(fd.get(), b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size());
  };
  auto frame = [](const Bytes& payload) {
    Bytes f(8);
    wire::storeLe(f.data(), payload.size(), 8);
    f.insert(f.end(), payload.begin(), payload.end());
    return f;
  };
  auto hello = [&](const Secret& s) {
    Bytes p = {1, 1, 0, 0, 0};  // op hello, version 1
    p.insert(p.end(), s.begin(), s.end());
    return frame(p);
  };

  // Random bytes before any hello.
  for (int i = 0; i < 20; ++i) {
    net::Fd fd = rawConnection();
    sendRaw(fd, randomBytes(1 + rng() % 500, rng()));
  }
  // A frame header announcing 2^62 bytes, before and after authenticating.
  {
    net::Fd fd = rawConnection();
    Bytes h(8);
    wire::storeLe(h.data(), uint64_t{1} << 62, 8);
    sendRaw(fd, h);
  }
  {
    net::Fd fd = rawConnection();
    sendRaw(fd, hello(secret_));
    Bytes h(8);
    wire::storeLe(h.data(), (uint64_t{1} << 30) + 1, 8);
    sendRaw(fd, h);
  }
  // Authenticated, then: an unknown op, a malformed set, a multiGet with a huge key count.
  for (const Bytes& payload : {Bytes{99}, Bytes{2, 0xff, 0xff, 0xff, 0xff},
                               Bytes{6, 0xff, 0xff, 0xff, 0x7f, 1, 0, 0, 0}, Bytes{}}) {
    net::Fd fd = rawConnection();
    sendRaw(fd, hello(secret_));
    sendRaw(fd, frame(payload));
  }
  // Half a request, then a hang-up; and a get parked forever, then a hang-up.
  {
    net::Fd fd = rawConnection();
    sendRaw(fd, hello(secret_));
    Bytes full = frame({2, 3, 0, 0, 0, 'a', 'b', 'c', 1, 2, 3});
    full.resize(full.size() - 4);
    sendRaw(fd, full);
  }
  {
    net::Fd fd = rawConnection();
    sendRaw(fd, hello(secret_));
    sendRaw(fd, frame({3, 4, 0, 0, 0, 'g', 'o', 'n', 'e'}));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // A client that connects and says nothing.
  net::Fd silent = rawConnection();

  ASSERT_TRUE(good->set("gone", bytesOf("set after its waiter left")).ok());
  auto got = good->get("gone");
  ASSERT_TRUE(got.ok()) << got.status().toString();
  expectServerHealthy();
}

TEST_F(StoreTest, MalformedRequestGetsAnErrorReply) {
  net::Fd fd = rawConnection();
  Bytes payload = {1, 1, 0, 0, 0};
  payload.insert(payload.end(), secret_.begin(), secret_.end());
  Bytes req(8);
  wire::storeLe(req.data(), payload.size(), 8);
  req.insert(req.end(), payload.begin(), payload.end());
  Bytes bad = {8, 0, 0, 0, 0, 0, 0, 0, 99, 0, 0, 0, 0, 0, 0, 0};  // 8-byte frame, op 99
  req.insert(req.end(), bad.begin(), bad.end());
  ASSERT_TRUE(net::sendAll(fd.get(), req.data(), req.size(), net::deadlineIn(2), "server").ok());
  // Hello reply: a frame of 1 byte, 0 = accepted.
  uint8_t helloReply[9];
  ASSERT_TRUE(net::recvAll(fd.get(), helloReply, sizeof helloReply, net::deadlineIn(2), "server").ok());
  EXPECT_EQ(wire::loadLe(helloReply, 8), 1u);
  EXPECT_EQ(helloReply[8], 0);
  uint8_t header[8];
  ASSERT_TRUE(net::recvAll(fd.get(), header, 8, net::deadlineIn(2), "server").ok());
  Bytes body(wire::loadLe(header, 8));
  ASSERT_TRUE(net::recvAll(fd.get(), body.data(), body.size(), net::deadlineIn(2), "server").ok());
  EXPECT_EQ(body[0], static_cast<uint8_t>(Code::kInvalidUsage));
  std::string message(body.begin() + 1, body.end());
  EXPECT_NE(message.find("unknown request type 99"), std::string::npos) << message;
  // Then the server hangs up.
  uint8_t more;
  EXPECT_FALSE(net::recvAll(fd.get(), &more, 1, net::deadlineIn(2), "server").ok());
}

TEST_F(StoreTest, ManyThreads) {
  constexpr int kThreads = 8, kAdds = 50;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto c = client();
      if (!c) return void(++failures);
      for (int i = 0; i < kAdds; ++i)
        if (!c->add("counter", 1).ok()) ++failures;
      if (!c->set("thread/" + std::to_string(t), randomBytes(10 + t, t)).ok()) ++failures;
      std::vector<std::string> keys;
      for (int u = 0; u < kThreads; ++u) keys.push_back("thread/" + std::to_string(u));
      auto all = c->multiGet(keys);
      if (!all.ok()) return void(++failures);
      for (int u = 0; u < kThreads; ++u)
        if ((*all)[u] != randomBytes(10 + u, u)) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  auto total = client()->add("counter", 0);
  ASSERT_TRUE(total.ok());
  EXPECT_EQ(*total, kThreads * kAdds);
}

TEST(StoreProcesses, ForkedProcesses) {
  // The server runs in a process of its own: the clients are forked, and a fork from a process
  // with the server's thread running can hang (testing::StoreProcess).
  constexpr int kProcs = 4;
  testing::StoreProcess store;
  ASSERT_TRUE(store.ok());
  auto job = decodeUniqueId(store.id());
  ASSERT_TRUE(job.ok()) << job.status().toString();
  const net::SockAddr addr = job->root;
  const Secret secret = job->secret;
  auto codes = runForked(kProcs, [&](int i) {
    auto c = StoreClient::connect(addr, secret, net::deadlineIn(5.0));
    if (!c.ok()) return 10;
    (*c)->setTimeout(5.0);
    if (!(*c)->set("proc/" + std::to_string(i), randomBytes(100 + i, 50 + i)).ok()) return 11;
    if (!(*c)->add("procs", i + 1).ok()) return 12;
    std::vector<std::string> keys;
    for (int u = 0; u < kProcs; ++u) keys.push_back("proc/" + std::to_string(u));
    auto all = (*c)->multiGet(keys);
    if (!all.ok()) return 13;
    for (int u = 0; u < kProcs; ++u)
      if ((*all)[u] != randomBytes(100 + u, 50 + u)) return 14;
    return 0;
  });
  for (int i = 0; i < kProcs; ++i) EXPECT_EQ(codes[i], 0) << "process " << i;
  auto c = StoreClient::connect(addr, secret, net::deadlineIn(5.0));
  ASSERT_TRUE(c.ok()) << c.status().toString();
  auto total = (*c)->add("procs", 0);
  ASSERT_TRUE(total.ok());
  EXPECT_EQ(*total, 1 + 2 + 3 + 4);
  c->reset();
  EXPECT_TRUE(store.stop());
}

TEST_F(StoreTest, ServerShutdownFailsWaitingClients) {
  auto c = client(5.0);
  ASSERT_NE(c, nullptr);
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    server_.reset();
  });
  auto start = std::chrono::steady_clock::now();
  auto got = c->get("never");
  stopper.join();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Code::kRemoteError) << got.status().toString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

// Peak resident memory (VmHWM) since the last reset: a buffer allocated and freed within one call
// still shows.
long peakResidentKb() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "VmHWM:", 6) == 0) kb = std::atol(line + 6);
  std::fclose(f);
  return kb;
}

void resetPeakResident() {
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return;
  std::fputs("5", f);  // resets VmHWM to the current resident size
  std::fclose(f);
}

// Whatever answers at the store's address can say "ok" to any hello (the secret authenticates
// clients, not the store). A reply announcing 1 GiB of which 1 KiB comes must cost the client
// about 1 KiB, not 1 GiB: before the fix, the client zero-filled the announced size first.
TEST(StoreClientInput, AnnouncedReplySizeIsNotAllocatedUpFront) {
  net::SockAddr bound;
  auto lfd = net::listenOn(loopback(0), 4, &bound);
  ASSERT_TRUE(lfd.ok()) << lfd.status().toString();
  net::Fd listener(*lfd);
  std::atomic<bool> clientDone{false};
  std::thread fake([&] {
    auto fd = net::acceptOne(listener.get(), net::deadlineIn(10), nullptr);
    if (!fd.ok()) return;
    net::Fd c(*fd);
    Bytes hello(8 + 21), ok = {1, 0, 0, 0, 0, 0, 0, 0, 0};
    if (!net::recvAll(c.get(), hello.data(), hello.size(), net::deadlineIn(10), "client").ok())
      return;
    net::sendAll(c.get(), ok.data(), ok.size(), net::deadlineIn(10), "client").ignore();
    Bytes header(8);
    if (!net::recvAll(c.get(), header.data(), 8, net::deadlineIn(10), "client").ok()) return;
    Bytes request(wire::loadLe(header.data(), 8));
    if (!net::recvAll(c.get(), request.data(), request.size(), net::deadlineIn(10), "client").ok())
      return;
    Bytes reply(8 + 1024, 0);
    wire::storeLe(reply.data(), kMaxStoreFrame, 8);
    net::sendAll(c.get(), reply.data(), reply.size(), net::deadlineIn(10), "client").ignore();
    // Hold the connection until the client has given up (bounded).
    for (int i = 0; i < 1000 && !clientDone.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  });
  Secret secret{};
  auto client = StoreClient::connect(bound, secret, net::deadlineIn(10));
  ASSERT_TRUE(client.ok()) << client.status().toString();
  (*client)->setTimeout(1.0);
  resetPeakResident();
  const long before = peakResidentKb();
  auto got = (*client)->get("k");
  const long after = peakResidentKb();
  clientDone.store(true);
  fake.join();
  EXPECT_FALSE(got.ok());
  EXPECT_GT(before, 0);
  EXPECT_LT(after - before, 64 * 1024) << "peak resident memory went from " << before
                                       << " to " << after << " kB";
}

TEST(StoreRegistry, KeepsServersUntilReleased) {
  auto secret = randomSecret();
  ASSERT_TRUE(secret.ok());
  net::SockAddr addr;
  std::weak_ptr<StoreServer> weak;
  {
    auto server = StoreServer::start(loopback(0), *secret);
    ASSERT_TRUE(server.ok());
    addr = (*server)->address();
    weak = *server;
    registerServer(*server);
  }
  EXPECT_FALSE(weak.expired());
  EXPECT_EQ(findServer(addr), weak.lock());
  auto c = StoreClient::connect(addr, *secret, net::deadlineIn(2.0));
  ASSERT_TRUE(c.ok()) << c.status().toString();
  EXPECT_TRUE(releaseServer(addr));
  EXPECT_FALSE(releaseServer(addr));
  EXPECT_TRUE(weak.expired());
  EXPECT_EQ(findServer(addr), nullptr);
}

}  // namespace
}  // namespace chorus::bootstrap
