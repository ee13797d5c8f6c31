// The memory half of the transport contract, on every registered kind whose caps() offer it:
// one-sided reads through an exposed range (caps().oneSidedRead) and the host window
// (caps().hostWindow: regions every rank maps, signals, headers, failure and death). A kind
// without the feature skips these tests, saying which cap is false. The one-sided read of a
// peer in another process is in conformance_failure_test.cc (the killed-peer test).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "src/base/shared_alloc.h"
#include "tests/unit/transport/conformance.h"
#include "transports/shm/shm_connection.h"

namespace chorus::conformance {
namespace {

class ConformanceMemory : public ConformanceTest {};

TEST_P(ConformanceMemory, OneSidedReadThroughAnExposedRange) {
  Group g = connectedGroup();
  ASSERT_TRUE(g.connected());
  if (!g.t[0]->caps().oneSidedRead) GTEST_SKIP() << "caps().oneSidedRead is false";
  bool any = false;
  for (int owner = 0; owner < 2; ++owner) {
    Connection& mine = *g.c[owner][1 - owner];
    Connection& reader = *g.c[1 - owner][owner];
    if (!reader.canRead()) continue;  // e.g. the system refuses it
    any = true;
    SCOPED_TRACE("rank " + std::to_string(1 - owner) + " reads rank " + std::to_string(owner));
    constexpr size_t kBytes = (1u << 20) + 3;
    const std::vector<uint8_t> exposed = randomBytes(kBytes);
    auto h = mine.expose(exposed.data(), exposed.size());
    ASSERT_TRUE(h.ok()) << h.status().toString();
    const MemHandle handle = *h;  // what travels to the peer
    ASSERT_LE(handle.size, MemHandle::kMaxBytes);
    {
      // The owner keeps progressing its connection while the peer reads (and nothing else uses
      // it meanwhile), as a rank's executor does while it waits for its peers: a transport may
      // serve reads from the owner's progress (UCX without RDMA emulates them so).
      ProgressOnThread serving(mine);
      for (auto [offset, len] : {std::pair<size_t, size_t>{0, kBytes}, {12345, 70001},
                                 {kBytes - 1, 1}, {4096, 0}, {7, 4099}}) {
        std::vector<uint8_t> got(len, kPoison);
        Status st = reader.read(got.data(), handle, offset, len);
        ASSERT_TRUE(st.ok()) << "[" << offset << ", +" << len << "): " << st.toString();
        EXPECT_TRUE(
            std::equal(got.begin(), got.end(), exposed.begin() + static_cast<long>(offset)))
            << "[" << offset << ", +" << len << ") read wrong bytes";
      }
    }
    // Past the exposed range: refused as a usage error, nothing written.
    std::vector<uint8_t> sink(64, kPoison);
    Status past = reader.read(sink.data(), handle, kBytes - 10, 11);
    EXPECT_EQ(past.code(), Code::kInvalidUsage) << past.toString();
    Status beyond = reader.read(sink.data(), handle, kBytes + 1, 1);
    EXPECT_EQ(beyond.code(), Code::kInvalidUsage) << beyond.toString();
    EXPECT_TRUE(std::all_of(sink.begin(), sink.end(), [](uint8_t b) { return b == kPoison; }))
        << "a refused read wrote into its destination";
    // Messages still flow on a connection used for reads.
    expectTransfer(mine, reader, randomBytes(999), 77);
  }
  if (!any) GTEST_SKIP() << "neither connection can read its peer (canRead() is false)";
}

// A range of a chorusMemAlloc segment (src/base/shared_alloc.h) reads like any other; over
// shared memory it goes the zero-copy way: a segment handle, and reads from a mapping of the
// owner's segment (counted by shm::segmentReads), made once and reused.
TEST_P(ConformanceMemory, OneSidedReadOfASharedSegment) {
  Group g = connectedGroup();
  ASSERT_TRUE(g.connected());
  if (!g.t[0]->caps().oneSidedRead) GTEST_SKIP() << "caps().oneSidedRead is false";
  const bool shm = std::string_view(kind().name) == "shm";
  constexpr size_t kBytes = (3u << 20) + 5;
  auto seg = mem::allocate(kBytes);
  ASSERT_TRUE(seg.ok()) << seg.status().toString();
  auto* base = static_cast<uint8_t*>(*seg);
  const std::vector<uint8_t> data = randomBytes(kBytes);
  std::memcpy(base, data.data(), kBytes);
  bool any = false;
  for (int owner = 0; owner < 2; ++owner) {
    Connection& mine = *g.c[owner][1 - owner];
    Connection& reader = *g.c[1 - owner][owner];
    if (!reader.canRead()) continue;
    any = true;
    SCOPED_TRACE("rank " + std::to_string(1 - owner) + " reads rank " + std::to_string(owner));
    // A range inside the segment, not at its start.
    constexpr size_t kAt = 4096 + 17;
    constexpr size_t kLen = kBytes - kAt - 3;
    auto h = mine.expose(base + kAt, kLen);
    ASSERT_TRUE(h.ok()) << h.status().toString();
    const MemHandle handle = *h;
    ASSERT_LE(handle.size, MemHandle::kMaxBytes);
    if (shm) {
      EXPECT_TRUE(shm::isSegmentHandle(handle)) << "a segment range got a CMA handle";
    }
    ProgressOnThread serving(mine);
    const uint64_t readsBefore = shm::segmentReads();
    int reads = 0;
    for (auto [offset, len] : {std::pair<size_t, size_t>{0, kLen}, {12345, 70001},
                               {kLen - 1, 1}, {7, 4099}}) {
      std::vector<uint8_t> got(len, kPoison);
      Status st = reader.read(got.data(), handle, offset, len);
      ASSERT_TRUE(st.ok()) << "[" << offset << ", +" << len << "): " << st.toString();
      ++reads;
      EXPECT_TRUE(std::equal(got.begin(), got.end(),
                             data.begin() + static_cast<long>(kAt + offset)))
          << "[" << offset << ", +" << len << ") read wrong bytes";
    }
    if (shm) {
      EXPECT_EQ(shm::segmentReads() - readsBefore, static_cast<uint64_t>(reads));
    }
    // The owner writes; the reader's mapping (kept from the reads above) sees the new bytes.
    base[kAt + 100] = static_cast<uint8_t>(data[kAt + 100] ^ 0xff);
    uint8_t one = kPoison;
    ASSERT_TRUE(reader.read(&one, handle, 100, 1).ok());
    EXPECT_EQ(one, static_cast<uint8_t>(data[kAt + 100] ^ 0xff));
    base[kAt + 100] = data[kAt + 100];
    // Past the exposed range (though inside the segment): refused, nothing written.
    std::vector<uint8_t> sink(64, kPoison);
    Status past = reader.read(sink.data(), handle, kLen - 10, 11);
    EXPECT_EQ(past.code(), Code::kInvalidUsage) << past.toString();
    EXPECT_TRUE(std::all_of(sink.begin(), sink.end(), [](uint8_t b) { return b == kPoison; }));
    if (shm) {
      // A forged handle naming a segment id the owner never had: refused, not mapped.
      MemHandle forged = handle;
      uint64_t id = 0;
      std::memcpy(&id, forged.bytes + 16, sizeof id);  // SegHandle::id
      id += 1000000;
      std::memcpy(forged.bytes + 16, &id, sizeof id);
      Status bad = reader.read(sink.data(), forged, 0, 8);
      EXPECT_FALSE(bad.ok()) << "a handle of a segment that does not exist was read";
      // Malloc'd memory still gets the cross-memory-attach kind.
      auto cma = mine.expose(data.data(), 64);
      ASSERT_TRUE(cma.ok());
      EXPECT_FALSE(shm::isSegmentHandle(*cma));
    }
  }
  EXPECT_TRUE(mem::release(base).ok());
  if (!any) GTEST_SKIP() << "neither connection can read its peer (canRead() is false)";
}

// Over shared memory the reader keeps its mappings of the owner's segments: a segment freed
// and replaced (its fd number reused) is told apart by its id, and more segments than the
// connection keeps mapped are evicted and mapped again, bytes right each time.
TEST_P(ConformanceMemory, SharedSegmentMappingsFollowReplacementAndEviction) {
  if (std::string_view(kind().name) != "shm") GTEST_SKIP() << "segment handles are shm's";
  Group g = connectedGroup();
  ASSERT_TRUE(g.connected());
  Connection& mine = *g.c[0][1];
  Connection& reader = *g.c[1][0];
  if (!reader.canRead()) GTEST_SKIP() << "cross-memory attach is refused here";
  auto readAll = [&](const uint8_t* base, size_t bytes, const std::vector<uint8_t>& expect) {
    auto h = mine.expose(base, bytes);
    ASSERT_TRUE(h.ok()) << h.status().toString();
    ASSERT_TRUE(shm::isSegmentHandle(*h));
    std::vector<uint8_t> got(bytes, kPoison);
    Status st = reader.read(got.data(), *h, 0, bytes);
    ASSERT_TRUE(st.ok()) << st.toString();
    EXPECT_EQ(got, expect);
  };
  constexpr size_t kBytes = 8192 + 11;
  // Replacement: the second segment most likely gets the first one's fd number.
  for (int round = 0; round < 2; ++round) {
    auto seg = mem::allocate(kBytes);
    ASSERT_TRUE(seg.ok()) << seg.status().toString();
    const std::vector<uint8_t> data = randomBytes(kBytes);
    std::memcpy(*seg, data.data(), kBytes);
    readAll(static_cast<uint8_t*>(*seg), kBytes, data);
    ASSERT_TRUE(mem::release(*seg).ok());
  }
  // More live segments than a connection keeps mapped, read twice round.
  constexpr int kSegments = 80;
  std::vector<uint8_t*> segs;
  std::vector<std::vector<uint8_t>> datas;
  for (int i = 0; i < kSegments; ++i) {
    auto seg = mem::allocate(kBytes);
    ASSERT_TRUE(seg.ok()) << seg.status().toString();
    segs.push_back(static_cast<uint8_t*>(*seg));
    datas.push_back(randomBytes(kBytes));
    std::memcpy(segs.back(), datas.back().data(), kBytes);
  }
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < kSegments; ++i) readAll(segs[i], kBytes, datas[i]);
  for (uint8_t* p : segs) EXPECT_TRUE(mem::release(p).ok());
}

// ---- The host window ------------------------------------------------------------------------

WaitPolicy policyFor(double limitSeconds) {
  WaitPolicy w;
  w.spinUs = 0;  // the machine may have fewer free cores than ranks
  w.timeoutSeconds = limitSeconds;
  w.deadline = Clock::now() + seconds(limitSeconds);
  return w;
}

WindowHeader headerFor(uint64_t seq, int rank) {
  WindowHeader h;
  h.seq = static_cast<uint32_t>(seq);
  h.setCount((uint64_t{1} << 33) + 1000 * seq + static_cast<uint64_t>(rank));
  h.root = rank;
  h.coll = static_cast<uint8_t>(seq);
  h.dtype = static_cast<uint8_t>(3 + rank);
  h.op = 2;
  h.algo = static_cast<uint16_t>(40 + seq);
  return h;
}

using WindowPtr = std::unique_ptr<HostWindow>;

// Three ranks, connected, with a window each: rank 0 creates it while the others attach.
class ConformanceWindow : public ConformanceTest {
 protected:
  static constexpr int kRanks = 3;

  void SetUp() override {
    ConformanceTest::SetUp();
    if (IsSkipped()) return;
    g_ = connectedGroup(kRanks);
    ASSERT_TRUE(g_.connected());
    if (!g_.t[0]->caps().hostWindow) GTEST_SKIP() << "caps().hostWindow is false";
    ASSERT_TRUE(makeWindows(kRanks));
  }

  void TearDown() override {
    w_.clear();
    g_ = {};
    ConformanceTest::TearDown();
  }

  bool makeWindows(int n) {
    std::vector<std::future<StatusOr<WindowPtr>>> done;
    for (int r = 0; r < n; ++r)
      done.push_back(onThread([t = g_.t[r], r, n] {
        return t->createWindow(r, n, identity(0), policyFor(kConnectSeconds));
      }));
    w_.clear();
    for (int r = 0; r < n; ++r) {
      auto win = joinWithin(done[r], seconds(kConnectSeconds) + kHangMargin,
                            "createWindow() of rank " + std::to_string(r));
      if (!win) return false;
      EXPECT_TRUE(win->ok()) << "createWindow(rank " << r << "): " << win->status().toString();
      if (!win->ok()) return false;
      w_.push_back(std::move(*win).value());
    }
    return true;
  }

  Group g_;
  std::vector<WindowPtr> w_;
};

TEST_P(ConformanceWindow, RegionsAreDistinctAndSharedByEveryRank) {
  const uint64_t slot = w_[0]->slotBytes(), round = w_[0]->roundBytes();
  ASSERT_GT(slot, 0u);
  for (const WindowPtr& w : w_) {
    ASSERT_EQ(w->slotBytes(), slot);
    ASSERT_EQ(w->roundBytes(), round);
  }
  const size_t len = slot + 2 * round;
  for (int me = 0; me < kRanks; ++me) {
    // The regions of one mapping do not overlap.
    std::vector<std::pair<std::byte*, std::byte*>> ranges;
    for (int r = 0; r < kRanks; ++r)
      for (int parity = 0; parity < 2; ++parity) {
        std::byte* b = w_[me]->region(r, parity);
        ASSERT_NE(b, nullptr);
        ranges.push_back({b, b + len});
      }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
      EXPECT_LE(ranges[i - 1].second, ranges[i].first)
          << "window of rank " << me << ": two regions overlap";
  }
  // Each rank fills its own regions; every other rank sees exactly that through its mapping.
  std::vector<uint8_t> data[kRanks][2];
  for (int r = 0; r < kRanks; ++r)
    for (int parity = 0; parity < 2; ++parity) {
      data[r][parity] = randomBytes(len);
      std::memcpy(w_[r]->region(r, parity), data[r][parity].data(), len);
    }
  for (int me = 0; me < kRanks; ++me)
    for (int r = 0; r < kRanks; ++r)
      for (int parity = 0; parity < 2; ++parity)
        EXPECT_EQ(std::memcmp(w_[me]->region(r, parity), data[r][parity].data(), len), 0)
            << "rank " << me << " does not see rank " << r << "'s region of parity " << parity;
}

TEST_P(ConformanceWindow, EnterSignalAwaitRoundTrip) {
  const size_t len = w_[0]->slotBytes();
  // Calls 1 and 2 use both parities; call 3 puts the ranks past call 1.
  for (uint64_t seq = 1; seq <= 3; ++seq) {
    SCOPED_TRACE("call " + std::to_string(seq));
    const int parity = static_cast<int>(seq & 1);
    std::vector<uint8_t> payload[kRanks];
    for (int r = 0; r < kRanks; ++r) {
      for (int me = 0; me < kRanks; ++me) {
        if (me == r) continue;
        EXPECT_FALSE(w_[me]->reached(r, seq, 1)) << "rank " << r << " has not entered yet";
      }
      payload[r] = randomBytes(len);
      std::memcpy(w_[r]->region(r, parity), payload[r].data(), len);
      w_[r]->enter(seq, headerFor(seq, r));
    }
    for (int me = 0; me < kRanks; ++me)
      for (int other = 0; other < kRanks; ++other) {
        if (other == me) continue;
        Status st = w_[me]->await(other, seq, 1, policyFor(kOpSeconds));
        ASSERT_TRUE(st.ok()) << st.toString();
        EXPECT_TRUE(w_[me]->reached(other, seq, 1));
        EXPECT_FALSE(w_[me]->reached(other, seq, 2));
        EXPECT_TRUE(w_[me]->header(other, seq) == headerFor(seq, other))
            << "rank " << other << "'s header as rank " << me << " sees it";
        // What the peer wrote before entering is visible once its entry is seen.
        EXPECT_EQ(std::memcmp(w_[me]->region(other, parity), payload[other].data(), len), 0);
      }
    for (int r = 0; r < kRanks; ++r) w_[r]->signal(seq, 2);
    for (int me = 0; me < kRanks; ++me)
      for (int other = 0; other < kRanks; ++other) {
        if (other == me) continue;
        Status st = w_[me]->await(other, seq, 2, policyFor(kOpSeconds));
        ASSERT_TRUE(st.ok()) << st.toString();
        EXPECT_TRUE(w_[me]->reached(other, seq, 2));
        EXPECT_FALSE(w_[me]->reached(other, seq, 3));
      }
  }
  // A rank in a later call of the same parity has reached every signal of call 1.
  for (int me = 0; me < kRanks; ++me)
    for (int other = 0; other < kRanks; ++other) {
      if (other == me) continue;
      EXPECT_TRUE(w_[me]->reached(other, 1, 1000));
    }
}

TEST_P(ConformanceWindow, AwaitOfASignalNeverMadeEndsAtTheDeadline) {
  w_[1]->enter(1, headerFor(1, 1));
  const WaitPolicy w = policyFor(0.3);
  Status st = w_[0]->await(1, 1, 5, w);
  EXPECT_GE(Clock::now(), w.deadline) << "gave up before the deadline";
  EXPECT_EQ(st.code(), Code::kTimeout) << st.toString();
  EXPECT_TRUE(contains(st.message(), "rank 1")) << "must name the rank waited for: "
                                                << st.message();
}

TEST_P(ConformanceWindow, MarkFailedEndsThePeersWaits) {
  const Status why = systemError("rank 1 ran out of memory");
  w_[1]->markFailed(why);
  for (int me : {0, 2}) {
    Status st = w_[me]->await(1, 1, 1, policyFor(kOpSeconds));
    EXPECT_EQ(st.code(), Code::kRemoteError) << st.toString();
    EXPECT_TRUE(contains(st.message(), why.message())) << st.message();
    EXPECT_TRUE(contains(st.message(), "rank 1")) << st.message();
  }
  // A usage error stays one on the peers.
  const Status usage = invalidUsage("rank 2 called allreduce with another count");
  w_[2]->markFailed(usage);
  Status st = w_[0]->await(2, 1, 1, policyFor(kOpSeconds));
  EXPECT_EQ(st.code(), Code::kInvalidUsage) << st.toString();
  // A failed rank's later signals are not trusted either.
  w_[1]->enter(2, headerFor(2, 1));
  Status after = w_[0]->await(1, 2, 1, policyFor(kOpSeconds));
  EXPECT_FALSE(after.ok()) << "a failed rank's signal was trusted";
}

TEST_P(ConformanceWindow, AwaitEndsWhenThePeerIsGoneUnlessItArrived) {
  std::atomic<int> asked{0};
  WaitPolicy w = policyFor(kOpSeconds);
  w.checkPeer = [&asked](int rank) {
    ++asked;
    return remoteError("rank " + std::to_string(rank) + " (pid 4242) is gone");
  };
  // Rank 1 never signals and is gone: the wait ends with checkPeer's verdict, not the timeout.
  Status st = w_[0]->await(1, 1, 1, w);
  EXPECT_EQ(st.code(), Code::kRemoteError) << st.toString();
  EXPECT_TRUE(contains(st.message(), "rank 1")) << st.message();
  EXPECT_GT(asked.load(), 0);
  // Rank 2 signalled before it went: reaching the signal is no failure.
  w_[2]->enter(1, headerFor(1, 2));
  Status arrived = w_[0]->await(2, 1, 1, w);
  EXPECT_TRUE(arrived.ok()) << arrived.toString();
}

TEST_P(ConformanceWindow, AbortFlagEndsTheWait) {
  std::atomic<bool> aborted{true};
  WaitPolicy w = policyFor(kOpSeconds);
  w.abortFlag = &aborted;
  Status st = w_[0]->await(1, 1, 1, w);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.code(), Code::kTimeout) << "ended by the deadline, not the abort: " << st.toString();
}

TEST_P(ConformanceWindow, RankZeroAloneGivesUpAtItsDeadlineAndCleansUp) {
  // A second window of the same communicator, which nobody attaches to.
  const WaitPolicy w = policyFor(0.3);
  auto alone = onThread([t = g_.t[0], w] { return t->createWindow(0, kRanks, identity(0), w); });
  auto lonely = joinWithin(alone, seconds(0.3) + kHangMargin, "createWindow()");
  ASSERT_TRUE(lonely);
  EXPECT_EQ(lonely->status().code(), Code::kTimeout) << lonely->status().toString();
  EXPECT_GE(Clock::now(), w.deadline);
  // TearDown checks that its name is gone.
}

CHORUS_INSTANTIATE_FOR_EVERY_KIND(ConformanceMemory);
CHORUS_INSTANTIATE_FOR_EVERY_KIND(ConformanceWindow);

}  // namespace
}  // namespace chorus::conformance
