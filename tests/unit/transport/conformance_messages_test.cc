// The message half of the transport contract, on every registered kind: connecting, data of
// every size arriving intact, FIFO order, size and tag mismatches, what progress() and check()
// promise, byte counters, and forSplit(). See conformance.h for how ranks are made and driven.
#include <algorithm>
#include <string>
#include <vector>

#include "tests/unit/transport/conformance.h"

namespace chorus::conformance {
namespace {

class ConformanceMessages : public ConformanceTest {};

// 0 and 1 byte; 7 and 4099, ragged against every word and page; 64 KiB + 1, just past the
// common buffer and threshold sizes; 1 MiB, many buffers' worth.
const size_t kSizes[] = {0, 1, 7, 4099, (64u << 10) + 1, 1u << 20};

TEST_P(ConformanceMessages, ThreeRanksConnectAtOnceAndReachEachOther) {
  Group g = connectedGroup(3);
  ASSERT_TRUE(g.connected());
  // One message on every ordered pair, all posted before any is driven.
  std::vector<std::vector<uint8_t>> sent, got;
  std::vector<Pending> ops;
  sent.reserve(6);
  got.reserve(6);
  for (int from = 0; from < 3; ++from)
    for (int to = 0; to < 3; ++to) {
      if (from == to) continue;
      sent.push_back(randomBytes(100 + static_cast<size_t>(10 * from + to)));
      got.emplace_back(sent.back().size(), kPoison);
      const Tag tag = static_cast<Tag>(10 * from + to);
      auto r = g.c[to][from]->postRecv(got.back().data(), got.back().size(), tag);
      auto s = g.c[from][to]->postSend(sent.back().data(), sent.back().size(), tag);
      ASSERT_TRUE(r.ok() && s.ok());
      ops.push_back({g.c[to][from].get(), *r});
      ops.push_back({g.c[from][to].get(), *s});
    }
  Status st = driveAll(ops);
  ASSERT_TRUE(st.ok()) << st.toString();
  for (size_t i = 0; i < sent.size(); ++i) EXPECT_TRUE(got[i] == sent[i]) << "message " << i;
}

TEST_P(ConformanceMessages, MessagesOfEverySizeArriveIntactBothWays) {
  Group g = connectedGroup();
  ASSERT_TRUE(g.connected());
  Connection& c0 = *g.c[0][1];
  Connection& c1 = *g.c[1][0];
  Tag tag = 100;
  for (size_t n : kSizes) {
    SCOPED_TRACE(std::to_string(n) + " bytes");
    // Both directions at once: the receive posted before the send one way, after it the other.
    const std::vector<uint8_t> a = randomBytes(n), b = randomBytes(n);
    std::vector<uint8_t> gotA(n, kPoison), gotB(n, kPoison);
    auto ra = c1.postRecv(gotA.data(), n, tag);
    auto sa = c0.postSend(a.data(), n, tag);
    auto sb = c1.postSend(b.data(), n, tag + 1);
    auto rb = c0.postRecv(gotB.data(), n, tag + 1);
    ASSERT_TRUE(ra.ok() && sa.ok() && sb.ok() && rb.ok());
    Status st = driveAll({{&c0, *sa}, {&c1, *ra}, {&c1, *sb}, {&c0, *rb}});
    ASSERT_TRUE(st.ok()) << st.toString();
    EXPECT_TRUE(gotA == a) << "rank 0 -> rank 1 changed the data";
    EXPECT_TRUE(gotB == b) << "rank 1 -> rank 0 changed the data";
    // A completed op stays completed, tested or checked again.
    for (auto [conn, op] : {std::pair{&c1, *ra}, std::pair{&c0, *sa}}) {
      bool done = false;
      ASSERT_TRUE(conn->test(op, &done).ok());
      EXPECT_TRUE(done);
      done = false;
      ASSERT_TRUE(conn->check(op, &done).ok());
      EXPECT_TRUE(done);
    }
    tag += 2;
  }
}

TEST_P(ConformanceMessages, ManyMessagesKeepTheirOrder) {
  Group g = connectedGroup();
  ASSERT_TRUE(g.connected());
  Connection* c[2] = {g.c[0][1].get(), g.c[1][0].get()};
  // Mostly small messages (many to a buffer), with larger ones among them.
  constexpr int kCount = 300;
  auto sizeOf = [](int i, int d) -> size_t {
    const int k = (i * 7 + d * 3) % 50;
    if (k == 0) return (1u << 20) + 3;
    if (k < 4) return 40000 + static_cast<size_t>(k);
    return static_cast<size_t>((i * 37 + d) % 300);
  };
  std::vector<std::vector<uint8_t>> out[2], in[2];
  for (int d = 0; d < 2; ++d)
    for (int i = 0; i < kCount; ++i) {
      out[d].push_back(randomBytes(sizeOf(i, d)));
      in[d].emplace_back(out[d].back().size(), kPoison);
    }
  std::vector<Pending> ops;
  // Rank 0 -> 1: every send posted before any receive. Rank 1 -> 0: every receive first.
  for (int i = 0; i < kCount; ++i) {
    auto s = c[0]->postSend(out[0][i].data(), out[0][i].size(), 5000 + i);
    auto r = c[0]->postRecv(in[1][i].data(), in[1][i].size(), 9000 + i);
    ASSERT_TRUE(s.ok() && r.ok());
    ops.push_back({c[0], *s});
    ops.push_back({c[0], *r});
  }
  for (int i = 0; i < kCount; ++i) {
    auto r = c[1]->postRecv(in[0][i].data(), in[0][i].size(), 5000 + i);
    auto s = c[1]->postSend(out[1][i].data(), out[1][i].size(), 9000 + i);
    ASSERT_TRUE(r.ok() && s.ok());
    ops.push_back({c[1], *r});
    ops.push_back({c[1], *s});
  }
  Status st = driveAll(ops);
  ASSERT_TRUE(st.ok()) << st.toString();
  for (int d = 0; d < 2; ++d)
    for (int i = 0; i < kCount; ++i)
      EXPECT_TRUE(in[d][i] == out[d][i]) << "message " << i << " from rank " << d << " ("
                                         << out[d][i].size() << " bytes) arrived changed";
}

// A mismatch fails the receive with kInvalidUsage, and the message lets a user find the two
// calls: both ranks, both sizes and both tags. Each direction gets a pair of its own (a failed
// connection stays failed).
struct Mismatch {
  size_t sendBytes, recvBytes;
  Tag sendTag, recvTag;
};

void expectMismatchReported(Group& g, int from, int to, const Mismatch& m) {
  SCOPED_TRACE("rank " + std::to_string(from) + " sends to rank " + std::to_string(to));
  Connection& sender = *g.c[from][to];
  Connection& receiver = *g.c[to][from];
  const std::vector<uint8_t> v = randomBytes(m.sendBytes);
  std::vector<uint8_t> got(m.recvBytes, kPoison);
  auto s = sender.postSend(v.data(), v.size(), m.sendTag);
  auto r = receiver.postRecv(got.data(), got.size(), m.recvTag);
  ASSERT_TRUE(s.ok() && r.ok());
  // The sender's op may complete, or fail with the receiver's verdict: only the receive's
  // outcome is the contract's, but the sender is progressed so its message can leave.
  Status st = outcome(receiver, r, kPromptSeconds, {&sender});
  ASSERT_EQ(st.code(), Code::kInvalidUsage) << st.toString();
  for (const std::string& part :
       {"rank " + std::to_string(from), "rank " + std::to_string(to),
        std::to_string(m.sendBytes), std::to_string(m.recvBytes), std::to_string(m.sendTag),
        std::to_string(m.recvTag)})
    EXPECT_TRUE(contains(st.message(), part)) << "no '" << part << "' in: " << st.message();
  // Nothing of the mismatched message landed in the receive's buffer.
  EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](uint8_t b) { return b == kPoison; }));
  // The stream cannot be matched any more: a later receive fails too.
  uint64_t x = 0;
  Status later = outcome(receiver, receiver.postRecv(&x, 8, m.sendTag), kPromptSeconds);
  EXPECT_FALSE(later.ok()) << "a receive after the mismatch succeeded";
}

TEST_P(ConformanceMessages, SizeMismatchIsInvalidUsageNamingRanksAndSizes) {
  for (int to = 0; to < 2; ++to) {
    Group g = connectedGroup();
    ASSERT_TRUE(g.connected());
    expectMismatchReported(g, 1 - to, to, {1000, 999, 12, 12});
  }
  // A receive larger than the message is a mismatch too, not "enough room".
  Group g = connectedGroup();
  ASSERT_TRUE(g.connected());
  expectMismatchReported(g, 0, 1, {4099, 4100, 13, 13});
  // The same both ways for small messages, which a transport may take in by another path (UCX:
  // a receive of up to 256 bytes is posted before its message arrives, into a bounce buffer).
  for (const Mismatch& m : {Mismatch{100, 99, 14, 14}, Mismatch{48, 64, 15, 15}}) {
    Group small = connectedGroup();
    ASSERT_TRUE(small.connected());
    expectMismatchReported(small, 1, 0, m);
  }
}

TEST_P(ConformanceMessages, TagMismatchIsInvalidUsageNamingRanksAndTags) {
  for (int to = 0; to < 2; ++to) {
    Group g = connectedGroup();
    ASSERT_TRUE(g.connected());
    expectMismatchReported(g, 1 - to, to, {64, 64, 7001, 7002});
  }
}

// check() reports what the connection's last progress() did and moves nothing itself; only
// progress() (or test()) moves data.
TEST_P(ConformanceMessages, CheckMovesNothingProgressDoes) {
  Group g = connectedGroup();
  ASSERT_TRUE(g.connected());
  Connection& sender = *g.c[0][1];
  Connection& receiver = *g.c[1][0];
  const std::vector<uint8_t> v = randomBytes(64);
  std::vector<uint8_t> got(v.size(), kPoison);
  auto r = receiver.postRecv(got.data(), got.size(), 3);
  auto s = sender.postSend(v.data(), v.size(), 3);
  ASSERT_TRUE(r.ok() && s.ok());
  // Progress the sender alone, as long as its op needs (an eager transport completes a small
  // send by itself; one that needs the receiver leaves it pending, which is allowed: UCX over
  // TCP sometimes needs the receiving worker to finish wiring the endpoint up, so waiting
  // longer than a second for it only slows the test down).
  bool sendDone = false;
  Op sop = *s, rop = *r;
  const auto until = Clock::now() + seconds(1);
  while (!sendDone && Clock::now() < until) {
    ASSERT_TRUE(sender.progress().ok());
    ASSERT_TRUE(sender.check(sop, &sendDone).ok());
    if (!sendDone) std::this_thread::yield();
  }
  // However long the data has been there, the receiver's check() alone never completes it.
  for (int i = 0; i < 1000; ++i) {
    bool done = true;
    ASSERT_TRUE(receiver.check(rop, &done).ok());
    ASSERT_FALSE(done) << "check() completed a receive the connection never progressed";
  }
  EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](uint8_t b) { return b == kPoison; }))
      << "data landed in a receive buffer without progress()";
  // progress() on both ends, check() on each op: everything completes.
  bool recvDone = false;
  const auto deadline = Clock::now() + seconds(kOpSeconds);
  while (!(sendDone && recvDone) && Clock::now() < deadline) {
    ASSERT_TRUE(sender.progress().ok());
    ASSERT_TRUE(receiver.progress().ok());
    ASSERT_TRUE(sender.check(sop, &sendDone).ok());
    ASSERT_TRUE(receiver.check(rop, &recvDone).ok());
    if (!(sendDone && recvDone)) std::this_thread::yield();
  }
  ASSERT_TRUE(sendDone && recvDone) << "not complete after " << kOpSeconds << " s";
  EXPECT_TRUE(got == v);
}

// A caller with many ops on a connection progresses it once per pass and checks every op.
TEST_P(ConformanceMessages, OneProgressPerPassServesEveryPostedOp) {
  Group g = connectedGroup();
  ASSERT_TRUE(g.connected());
  Connection* c[2] = {g.c[0][1].get(), g.c[1][0].get()};
  constexpr int kCount = 64;
  std::vector<std::vector<uint8_t>> out[2], in[2];
  std::vector<Pending> ops;
  for (int d = 0; d < 2; ++d)
    for (int i = 0; i < kCount; ++i) {
      out[d].push_back(randomBytes(static_cast<size_t>(i * 13 % 200) + (i == 9 ? 70000 : 0)));
      in[d].emplace_back(out[d].back().size(), kPoison);
    }
  for (int i = 0; i < kCount; ++i)
    for (int d = 0; d < 2; ++d) {
      auto s = c[d]->postSend(out[d][i].data(), out[d][i].size(), static_cast<Tag>(i));
      auto r = c[1 - d]->postRecv(in[d][i].data(), in[d][i].size(), static_cast<Tag>(i));
      ASSERT_TRUE(s.ok() && r.ok());
      ops.push_back({c[d], *s});
      ops.push_back({c[1 - d], *r});
    }
  std::vector<bool> done(ops.size(), false);
  size_t left = ops.size();
  const auto deadline = Clock::now() + seconds(kOpSeconds);
  while (left > 0 && Clock::now() < deadline) {
    for (Connection* conn : c) ASSERT_TRUE(conn->progress().ok());
    for (size_t i = 0; i < ops.size(); ++i) {
      if (done[i]) continue;
      bool d = false;
      Op op = ops[i].op;
      ASSERT_TRUE(ops[i].conn->check(op, &d).ok());
      if (d) {
        done[i] = true;
        --left;
      }
    }
    if (left > 0) std::this_thread::yield();
  }
  ASSERT_EQ(left, 0u) << "ops still pending after " << kOpSeconds << " s";
  for (int d = 0; d < 2; ++d)
    for (int i = 0; i < kCount; ++i) EXPECT_TRUE(in[d][i] == out[d][i]) << d << "/" << i;
}

TEST_P(ConformanceMessages, StatsCountWhatMoved) {
  Group g = connectedGroup();
  ASSERT_TRUE(g.connected());
  Connection* c[2] = {g.c[0][1].get(), g.c[1][0].get()};
  for (Connection* conn : c) {
    EXPECT_EQ(conn->stats().bytesSent, 0u);
    EXPECT_EQ(conn->stats().bytesRecv, 0u);
  }
  uint64_t moved[2] = {0, 0};  // payload bytes sent by each rank
  Tag tag = 1;
  for (size_t n : kSizes) {
    for (int from = 0; from < 2; ++from) {
      const size_t len = n + static_cast<size_t>(from);  // the directions differ
      expectTransfer(*c[from], *c[1 - from], randomBytes(len), tag++);
      moved[from] += len;
    }
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(c[r]->stats().bytesSent, moved[r]) << "rank " << r;
    EXPECT_EQ(c[r]->stats().bytesRecv, moved[1 - r]) << "rank " << r;
  }
}

TEST_P(ConformanceMessages, ForSplitMakesATransportThatConnectsANewPair) {
  Group parent = connectedGroup();
  ASSERT_TRUE(parent.connected());
  // The child communicator numbers the ranks the other way round.
  const uint64_t childComm = randomU64();
  Group child;
  child.t.resize(2);
  child.blob.resize(2);
  for (int r = 0; r < 2; ++r) {
    auto t = parent.t[r]->forSplit(context(1 - r, 2, childComm));
    ASSERT_TRUE(t.ok()) << t.status().toString();
    ASSERT_EQ((*t)->name(), kind().name);
    child.t[1 - r] = std::move(t).value();
  }
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(child.t[r]->listen(&child.blob[r]).ok());
  ASSERT_TRUE(connectAll(child));
  ASSERT_TRUE(child.connected());
  expectTransfer(*child.c[0][1], *child.c[1][0], randomBytes((64u << 10) + 1), 1);
  expectTransfer(*child.c[1][0], *child.c[0][1], randomBytes(333), 2);
  // The parent's connection is independent of the child's.
  expectTransfer(*parent.c[0][1], *parent.c[1][0], randomBytes(777), 3);
}

CHORUS_INSTANTIATE_FOR_EVERY_KIND(ConformanceMessages);

}  // namespace
}  // namespace chorus::conformance
