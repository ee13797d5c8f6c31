// Schedule builders, queries and finalize(): the dependency graph an executor relies on.
#include "algorithms/common/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "algorithms/registry.h"

namespace chorus::sched {
namespace {

using Deps = std::vector<uint32_t>;

Range in(uint64_t off, uint64_t bytes) { return Range{kInput, off, bytes}; }
Range out(uint64_t off, uint64_t bytes) { return Range{kOutput, off, bytes}; }
Range scr(uint64_t off, uint64_t bytes) { return Range{kScratch, off, bytes}; }

TEST(ScheduleBuilders, EmptyStepsAreDroppedButTheirPeerIsRecorded) {
  Schedule s;
  s.send(3, in(0, 0));
  s.recv(1, out(0, 0));
  s.recvReduce(2, in(0, 0), out(0, 0));
  s.copy(in(0, 0), out(0, 0));
  s.reduce(in(0, 0), out(0, 0), out(0, 0));
  EXPECT_TRUE(s.steps.empty());
  EXPECT_EQ(s.peers, (std::vector<int>{3, 1, 2}));
}

TEST(ScheduleBuilders, PeersAreUniqueInFirstUseOrder) {
  Schedule s;
  s.send(5, in(0, 4));
  s.recv(2, out(0, 4));
  s.send(5, in(4, 4));
  s.addPeer(7);
  s.recvReduce(2, in(0, 4), out(0, 4));
  s.addPeer(5);
  EXPECT_EQ(s.peers, (std::vector<int>{5, 2, 7}));
  ASSERT_EQ(s.steps.size(), 4u);
  EXPECT_EQ(s.steps[0].kind, StepKind::kSend);
  EXPECT_EQ(s.steps[0].peer, 5);
  EXPECT_EQ(s.steps[3].kind, StepKind::kRecvReduce);
}

TEST(ScheduleBuilders, TrafficQueries) {
  Schedule s;
  s.send(1, in(0, 8));
  s.send(1, in(8, 4));
  s.send(2, in(0, 16));
  s.recv(1, out(0, 3));
  s.recvReduce(1, in(0, 5), out(0, 5));
  s.copy(in(0, 100), out(0, 100));
  EXPECT_EQ(s.bytesTo(1), 12u);
  EXPECT_EQ(s.messagesTo(1), 2u);
  EXPECT_EQ(s.bytesTo(2), 16u);
  EXPECT_EQ(s.bytesFrom(1), 8u);
  EXPECT_EQ(s.messagesFrom(1), 2u);
  EXPECT_EQ(s.bytesFrom(2), 0u);
  EXPECT_EQ(s.messagesFrom(3), 0u);
}

TEST(ScheduleBuilders, QuantizationSteps) {
  Schedule s;
  s.quantize(in(0, 400), scr(0, 104), 100, 7);
  s.dequantize(scr(0, 208), 2, out(0, 400), 100);
  s.requantize(scr(0, 208), 2, scr(208, 104), 100, 9);
  s.quantize(in(0, 0), scr(0, 0), 0, 0);  // nothing to do: dropped, like an empty copy
  s.dequantize(scr(0, 0), 0, out(0, 0), 0);
  ASSERT_EQ(s.steps.size(), 3u);
  EXPECT_EQ(s.steps[0].kind, StepKind::kQuantize);
  EXPECT_EQ(s.steps[0].quant.count, 100u);
  EXPECT_EQ(s.steps[0].quant.index, 7u);
  EXPECT_EQ(s.steps[1].quant.sources, 2u);
  EXPECT_EQ(s.steps[2].kind, StepKind::kRequantize);
  EXPECT_EQ(s.steps[2].quant.index, 9u);
  EXPECT_TRUE(s.peers.empty());  // local steps
  EXPECT_TRUE(isQuantStep(StepKind::kRequantize));
  EXPECT_FALSE(isQuantStep(StepKind::kCopy));
  // Reads of a, writes of dst: the dequantize waits for the quantize that wrote its first
  // source, the requantize (same sources, other destination) only for that quantize too.
  s.finalize();
  EXPECT_EQ(s.steps[1].deps, Deps{0});
  EXPECT_EQ(s.steps[2].deps, Deps{0});
  EXPECT_STREQ(stepKindName(StepKind::kDequantize), "dequantize");
}

TEST(ScheduleBuilders, Names) {
  EXPECT_STREQ(stepKindName(StepKind::kRecvReduce), "recvReduce");
  EXPECT_STREQ(collName(Coll::kReduceScatter), "reducescatter");
  EXPECT_STREQ(collName(Coll::kAllToAllv), "alltoallv");
}

TEST(ScheduleCanonical, MapsAliasedBuffers) {
  Schedule s;
  Range r = s.canonical(out(8, 4));
  EXPECT_EQ(r.buf, kOutput);
  s.outputInInput = 64;
  r = s.canonical(out(8, 4));
  EXPECT_EQ(r.buf, kInput);
  EXPECT_EQ(r.offset, 72u);
  EXPECT_EQ(s.canonical(in(8, 4)).buf, kInput);
  Schedule t;
  t.inputInOutput = 32;
  r = t.canonical(in(0, 4));
  EXPECT_EQ(r.buf, kOutput);
  EXPECT_EQ(r.offset, 32u);
  EXPECT_EQ(t.canonical(scr(4, 4)).buf, kScratch);
  EXPECT_EQ(t.canonical(scr(4, 4)).offset, 4u);
}

TEST(ScheduleFinalize, ReadAfterWrite) {
  Schedule s;
  s.recv(1, scr(0, 8));       // 0
  s.send(2, scr(0, 8));       // 1: forwards what 0 received
  s.send(3, scr(8, 8));       // 2: other bytes
  s.finalize();
  EXPECT_EQ(s.steps[0].deps, Deps{});
  EXPECT_EQ(s.steps[1].deps, Deps{0});
  EXPECT_EQ(s.steps[2].deps, Deps{});
}

TEST(ScheduleFinalize, WriteAfterReadAndWriteAfterWrite) {
  Schedule s;
  s.send(1, out(0, 8));          // 0 reads out[0,8)
  s.send(2, out(0, 8));          // 1 reads out[0,8)
  s.recv(3, out(4, 8));          // 2 overwrites out[4,12): after both readers
  s.copy(in(0, 4), out(8, 4));   // 3 overwrites out[8,12): after writer 2
  s.copy(in(0, 4), out(16, 4));  // 4 independent
  s.finalize();
  EXPECT_EQ(s.steps[2].deps, (Deps{0, 1}));
  EXPECT_EQ(s.steps[3].deps, Deps{2});
  EXPECT_EQ(s.steps[4].deps, Deps{});
}

TEST(ScheduleFinalize, PartialOverlapOnly) {
  Schedule s;
  s.recv(1, out(0, 8));   // 0
  s.send(2, out(4, 8));   // 1 overlaps [4,8)
  s.send(3, out(8, 8));   // 2 disjoint from 0
  s.finalize();
  EXPECT_EQ(s.steps[1].deps, Deps{0});
  EXPECT_EQ(s.steps[2].deps, Deps{});
}

TEST(ScheduleFinalize, FifoPerPeerAndDirection) {
  Schedule s;
  s.send(1, in(0, 4));                    // 0
  s.send(2, in(4, 4));                    // 1: other peer
  s.send(1, in(8, 4));                    // 2: after 0
  s.recv(1, out(0, 4));                   // 3: recvs are their own queue
  s.recvReduce(1, in(0, 4), out(4, 4));   // 4: after 3 (same queue as recv)
  s.recv(2, out(8, 4));                   // 5
  s.finalize();
  EXPECT_EQ(s.steps[1].deps, Deps{});
  EXPECT_EQ(s.steps[2].deps, Deps{0});
  EXPECT_EQ(s.steps[3].deps, Deps{});
  EXPECT_EQ(s.steps[4].deps, Deps{3});
  EXPECT_EQ(s.steps[5].deps, Deps{});
}

TEST(ScheduleFinalize, InPlaceAliasingCreatesHazards) {
  Schedule s;
  s.outputInInput = 16;
  s.send(1, in(16, 4));   // 0 reads input[16,20) == output[0,4)
  s.recv(1, out(0, 4));   // 1 must wait for 0
  s.recv(1, out(4, 4));   // 2 FIFO only
  s.finalize();
  EXPECT_EQ(s.steps[1].deps, Deps{0});
  EXPECT_EQ(s.steps[2].deps, Deps{1});

  Schedule t;  // the same steps out of place are independent
  t.send(1, in(16, 4));
  t.recv(1, out(0, 4));
  t.finalize();
  EXPECT_EQ(t.steps[1].deps, Deps{});
}

TEST(ScheduleFinalize, ReadModifyWriteStep) {
  Schedule s;
  s.send(1, out(0, 4));                   // 0 reads
  s.recvReduce(2, out(0, 4), out(0, 4));  // 1 reads and writes what 0 reads: after 0 (WAR)
  s.send(3, out(0, 4));                   // 2 reads 1's result
  s.recv(2, out(0, 4));                   // 3 after 2 (WAR; 1 implied) and 1 (FIFO)
  s.finalize();
  EXPECT_EQ(s.steps[1].deps, Deps{0});
  EXPECT_EQ(s.steps[2].deps, Deps{1});
  EXPECT_EQ(s.steps[3].deps, (Deps{1, 2}));
}

TEST(ScheduleBuilders, OneSidedStepsAndFences) {
  Schedule s;
  s.get(4, in(0, 0), out(0, 0));                   // dropped, peer kept
  s.getReduce(5, in(0, 0), out(0, 0), out(0, 0));  // dropped, peer kept
  EXPECT_FALSE(s.needsOneSided());
  s.notify(1);  // never dropped: they carry no bytes by design
  s.wait(1);
  EXPECT_FALSE(s.needsOneSided());
  s.get(1, out(8, 8), scr(0, 8));
  EXPECT_TRUE(s.needsOneSided());
  s.notify(1);
  EXPECT_EQ(s.peers, (std::vector<int>{4, 5, 1}));
  ASSERT_EQ(s.steps.size(), 4u);
  EXPECT_EQ(s.steps[2].kind, StepKind::kGet);
  EXPECT_EQ(s.steps[2].a.offset, 8u);  // the peer's range, kept as given
  EXPECT_EQ(s.messagesTo(1), 2u);      // notifies are messages of zero bytes
  EXPECT_EQ(s.messagesFrom(1), 1u);
  EXPECT_EQ(s.bytesTo(1), 0u);
  EXPECT_EQ(s.bytesFrom(1), 0u);
  EXPECT_STREQ(stepKindName(StepKind::kGetReduce), "getReduce");
  EXPECT_STREQ(stepKindName(StepKind::kWait), "wait");
}

TEST(ScheduleFinalize, GetsHaveOnlyLocalHazards) {
  Schedule s;
  s.get(1, out(0, 8), scr(0, 8));                     // 0: the peer's output is not ours
  s.send(2, out(0, 8));                               // 1: independent of 0
  s.getReduce(2, in(0, 8), scr(0, 8), scr(0, 8));     // 2: reads and writes what 0 wrote
  s.copy(scr(0, 8), out(8, 8));                       // 3: reads 2's result
  s.getReduce(1, scr(0, 8), in(0, 8), out(0, 8));     // 4: WAR on out[0,8) after 1 only
  s.finalize();
  EXPECT_EQ(s.steps[1].deps, Deps{});
  EXPECT_EQ(s.steps[2].deps, Deps{0});
  EXPECT_EQ(s.steps[3].deps, Deps{2});
  EXPECT_EQ(s.steps[4].deps, Deps{1});
}

TEST(ScheduleFinalize, NotifyFencesBackwardsWaitFencesForwards) {
  Schedule s;
  s.get(1, in(0, 8), out(0, 8));   // 0
  s.get(2, in(0, 8), out(8, 8));   // 1
  s.copy(out(0, 4), scr(0, 4));    // 2: after 0
  s.notify(1);                     // 3: 1 and 2 (0 through 2)
  s.notify(2);                     // 4: the previous notify covers everything before it
  s.wait(1);                       // 5: free to complete early
  s.wait(2);                       // 6: after the earlier wait
  s.copy(in(16, 4), scr(8, 4));    // 7: touches nothing else, still after the waits
  s.notify(1);                     // 8: FIFO 3; 4 (nobody depends on it yet); 7 (6, 5 through it)
  s.send(2, in(0, 4));             // 9: FIFO after notify 4; after the last wait
  s.finalize();
  EXPECT_EQ(s.steps[3].deps, (Deps{1, 2}));
  EXPECT_EQ(s.steps[4].deps, Deps{3});
  EXPECT_EQ(s.steps[5].deps, Deps{});
  EXPECT_EQ(s.steps[6].deps, Deps{5});
  EXPECT_EQ(s.steps[7].deps, Deps{6});
  EXPECT_EQ(s.steps[8].deps, (Deps{3, 4, 6, 7}));
  EXPECT_EQ(s.steps[9].deps, (Deps{4, 6}));
  const Deps before = s.steps[8].deps;
  s.finalize();
  EXPECT_EQ(s.steps[8].deps, before);
}

TEST(ScheduleFinalize, IsIdempotent) {
  Schedule s;
  s.recv(1, scr(0, 8));
  s.send(2, scr(0, 8));
  s.finalize();
  s.finalize();
  EXPECT_EQ(s.steps[1].deps, Deps{0});
}

// Property test against a brute-force reference: every dep is a real conflict (data hazard on
// canonical ranges, or same peer and direction), and every conflicting pair is ordered by the
// transitive closure of deps.
bool overlaps(const Range& x, const Range& y) {
  return x.bytes && y.bytes && x.buf == y.buf && x.offset < y.offset + y.bytes &&
         y.offset < x.offset + x.bytes;
}

struct Access {
  std::vector<Range> reads, writes;
};

Access accessOf(const Schedule& s, const Step& st) {
  Access a;
  switch (st.kind) {
    case StepKind::kSend: a.reads = {s.canonical(st.a)}; break;
    case StepKind::kRecv: a.writes = {s.canonical(st.dst)}; break;
    case StepKind::kRecvReduce:
    case StepKind::kCopy:
    case StepKind::kQuantize:
    case StepKind::kDequantize:
    case StepKind::kRequantize:
      a.reads = {s.canonical(st.a)};
      a.writes = {s.canonical(st.dst)};
      break;
    case StepKind::kReduce:
      a.reads = {s.canonical(st.a), s.canonical(st.b)};
      a.writes = {s.canonical(st.dst)};
      break;
    case StepKind::kGet: a.writes = {s.canonical(st.dst)}; break;  // st.a is the peer's
    case StepKind::kGetReduce:
      a.reads = {s.canonical(st.b)};
      a.writes = {s.canonical(st.dst)};
      break;
    case StepKind::kNotify:
    case StepKind::kWait:
    case StepKind::kSignal:
    case StepKind::kAwait: break;
  }
  return a;
}

// x comes before y in program order.
bool conflict(const Schedule& s, const Step& x, const Step& y) {
  const bool xr = x.kind == StepKind::kRecv || x.kind == StepKind::kRecvReduce ||
                  x.kind == StepKind::kWait;
  const bool yr = y.kind == StepKind::kRecv || y.kind == StepKind::kRecvReduce ||
                  y.kind == StepKind::kWait;
  const bool xs = x.kind == StepKind::kSend || x.kind == StepKind::kNotify;
  const bool ys = y.kind == StepKind::kSend || y.kind == StepKind::kNotify;
  if (xs && ys && x.peer == y.peer) return true;
  if (xr && yr && x.peer == y.peer) return true;
  // Fences: a notify follows everything before it, everything follows a wait before it.
  if (y.kind == StepKind::kNotify || x.kind == StepKind::kWait || y.kind == StepKind::kSignal ||
      x.kind == StepKind::kAwait)
    return true;
  const Access ax = accessOf(s, x), ay = accessOf(s, y);
  for (const Range& w : ax.writes) {
    for (const Range& r : ay.reads) if (overlaps(w, r)) return true;
    for (const Range& r : ay.writes) if (overlaps(w, r)) return true;
  }
  for (const Range& w : ay.writes)
    for (const Range& r : ax.reads) if (overlaps(w, r)) return true;
  return false;
}

TEST(ScheduleFinalize, MatchesBruteForceOnRandomSchedules) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 300; ++trial) {
    Schedule s;
    if (trial % 3 == 1) s.outputInInput = 8 * (rng() % 4);
    if (trial % 3 == 2) s.inputInOutput = 8 * (rng() % 4);
    auto range = [&]() {
      const BufId b = static_cast<BufId>(rng() % 3);
      const uint64_t off = 4 * (rng() % 12), len = 4 * (1 + rng() % 4);
      return Range{b, off, len};
    };
    const int n = 5 + static_cast<int>(rng() % 60);
    for (int i = 0; i < n; ++i) {
      const int peer = static_cast<int>(rng() % 3);
      Range d = range();
      // One trial in two also mixes in one-sided steps, fences and quantization steps.
      switch (rng() % (trial % 2 ? 13 : 5)) {
        case 0: s.send(peer, range()); break;
        case 1: s.recv(peer, d); break;
        case 2: {
          const Range other{static_cast<BufId>(d.buf ^ 1), d.offset, d.bytes};
          s.recvReduce(peer, rng() % 2 ? d : other, d);
          break;
        }
        case 3: s.copy(Range{kInput, d.offset, d.bytes}, d); break;
        case 4: s.reduce(d, Range{kScratch, d.offset, d.bytes}, d); break;
        case 5:
        case 6: s.get(peer, range(), d); break;
        case 7: s.getReduce(peer, range(), rng() % 2 ? d : range(), d); break;
        case 8: s.notify(peer); break;
        case 9: s.wait(peer); break;
        case 10: s.quantize(range(), d, 1 + rng() % 4, 0); break;
        case 11: s.dequantize(range(), 1, d, 1 + rng() % 4); break;
        case 12: s.requantize(range(), 1 + rng() % 2, d, 1 + rng() % 4, 0); break;
      }
    }
    s.finalize();
    const size_t m = s.steps.size();
    std::vector<std::vector<bool>> reach(m, std::vector<bool>(m, false));
    for (size_t i = 0; i < m; ++i) {
      for (uint32_t d : s.steps[i].deps) {
        ASSERT_LT(d, i);
        ASSERT_TRUE(conflict(s, s.steps[d], s.steps[i]))
            << "trial " << trial << ": spurious dep " << i << " -> " << d;
        reach[i][d] = true;
        for (size_t k = 0; k < d; ++k)
          if (reach[d][k]) reach[i][k] = true;
      }
      EXPECT_TRUE(std::is_sorted(s.steps[i].deps.begin(), s.steps[i].deps.end()));
      for (size_t j = 0; j < i; ++j) {
        if (conflict(s, s.steps[j], s.steps[i])) {
          ASSERT_TRUE(reach[i][j]) << "trial " << trial << ": step " << i
                                   << " not ordered after conflicting step " << j;
        }
      }
    }
  }
}

// The largest schedules in practice: 256 MiB of float over 8 ranks in 1 MiB chunks. Records the
// step count and finalize() time (not asserted: timing belongs to benchmarks).
TEST(ScheduleFinalize, LargeRingAllReduce) {
  CollDesc d;
  d.coll = Coll::kAllReduce;
  d.count = (256u << 20) / 4;
  d.elemSize = 4;
  d.chunkBytes = 1 << 20;
  const algo::AlgoInfo* a = algo::findAlgorithm(Coll::kAllReduce, "ring");
  ASSERT_NE(a, nullptr);
  Schedule s = a->build(d, 3, 8);
  const auto t0 = std::chrono::steady_clock::now();
  s.finalize();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  size_t deps = 0;
  for (const Step& st : s.steps) deps += st.deps.size();
  EXPECT_EQ(s.steps.size(), 32u * 4 * 7);  // 32 chunks per slice x 2 phases x 7 (send+recv)
  EXPECT_EQ(s.bytesTo(4), 2ull * 7 * (32u << 20));
  RecordProperty("steps", static_cast<int>(s.steps.size()));
  RecordProperty("deps", static_cast<int>(deps));
  RecordProperty("finalize_us", static_cast<int>(ms * 1000));
  std::printf("256 MiB float allreduce, 8 ranks, 1 MiB chunks: %zu steps, %zu deps, "
              "finalize %.3f ms\n", s.steps.size(), deps, ms);
}

}  // namespace
}  // namespace chorus::sched
