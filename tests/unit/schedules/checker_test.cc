// The symbolic checker catches broken schedules, and says where.
#include "tests/support/checker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "algorithms/common/chunking.h"
#include "algorithms/registry.h"
#include "tests/support/quant_schedules.h"

namespace chorus::sched {
namespace {

// The failure message contains `part` (shown in full when it does not).
testing::AssertionResult mentions(const Status& st, const std::string& part) {
  if (st.message().find(part) != std::string::npos) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "message lacks \"" << part << "\":\n  " << st.toString();
}

CollDesc desc(Coll coll, uint64_t count, size_t elemSize = 4, bool inPlace = false,
              uint64_t chunkBytes = 1 << 20, int root = 0) {
  CollDesc d;
  d.coll = coll;
  d.count = count;
  d.elemSize = elemSize;
  d.inPlace = inPlace;
  d.chunkBytes = chunkBytes;
  d.root = root;
  return d;
}

std::vector<Schedule> build(Coll coll, const char* name, const CollDesc& d, int n) {
  const algo::AlgoInfo* a = algo::findAlgorithm(coll, name);
  EXPECT_NE(a, nullptr);
  std::vector<Schedule> s;
  for (int r = 0; r < n; ++r) s.push_back(algo::makeSchedule(*a, d, r, n));
  return s;
}

Status check(Coll coll, int n, const CollDesc& d, const std::vector<Schedule>& s,
             CheckOptions opts = {}) {
  std::vector<CollDesc> descs(static_cast<size_t>(n), d);
  return checkSchedules(coll, n, descs, s, opts);
}

void refinalize(std::vector<Schedule>& s) {
  for (Schedule& x : s) x.finalize();
}

TEST(Checker, AcceptsTheRingAllReduce) {
  const CollDesc d = desc(Coll::kAllReduce, 40, 4, false, 12);
  auto s = build(Coll::kAllReduce, "ring", d, 4);
  Status st = check(Coll::kAllReduce, 4, d, s);
  EXPECT_TRUE(st.ok()) << st.toString();
}

TEST(Checker, MissingStep) {
  const CollDesc d = desc(Coll::kAllReduce, 40, 4);
  auto s = build(Coll::kAllReduce, "ring", d, 4);
  s[2].steps.pop_back();  // rank 2's last all-gather receive
  Status st = check(Coll::kAllReduce, 4, d, s);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "rank 1 step"));
  EXPECT_TRUE(mentions(st, "never receives"));
}

TEST(Checker, MissingStepLeavesOutputUnwritten) {
  const CollDesc d = desc(Coll::kGather, 5, 4, false, 1 << 20, 1);
  auto s = build(Coll::kGather, "linear", d, 3);
  ASSERT_EQ(s[1].steps.front().kind, StepKind::kCopy);  // the root's own block
  s[1].steps.erase(s[1].steps.begin());
  refinalize(s);
  Status st = check(Coll::kGather, 3, d, s);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "rank 1 output element 5 (byte 20) was never written"));
}

TEST(Checker, WrongPeer) {
  const CollDesc d = desc(Coll::kAllReduce, 30, 4);
  auto s = build(Coll::kAllReduce, "ring", d, 3);
  ASSERT_EQ(s[0].steps[0].kind, StepKind::kSend);
  s[0].steps[0].peer = 2;  // should go to 1; 2 is also a peer of rank 0 in a ring of 3
  Status st = check(Coll::kAllReduce, 3, d, s);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "deadlock"));
  EXPECT_TRUE(mentions(st, "waits for a message rank 0 never sends"));
}

TEST(Checker, PeerOutsideThePeerList) {
  const CollDesc d = desc(Coll::kAllReduce, 40, 4);
  auto s = build(Coll::kAllReduce, "ring", d, 4);
  s[0].steps[0].peer = 2;  // not a ring neighbour of 0
  Status st = check(Coll::kAllReduce, 4, d, s);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "rank 0 step 0"));
  EXPECT_TRUE(mentions(st, "peer missing from Schedule::peers"));
}

TEST(Checker, DoubleReduce) {
  const CollDesc d = desc(Coll::kAllReduce, 9, 4);
  auto s = build(Coll::kAllReduce, "ring", d, 3);
  // Fold the input in once more at the end.
  s[1].reduce(Range{kInput, 0, 36}, Range{kOutput, 0, 36}, Range{kOutput, 0, 36});
  refinalize(s);
  Status st = check(Coll::kAllReduce, 3, d, s);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "counts contribution r1[0] twice"));
  EXPECT_TRUE(mentions(st, "rank 1 step"));
}

// A plausible bug: a ring reduce-scatter that keeps partials in the output instead of scratch.
// In place the output is input block r, which the last step still reads — by then it holds
// another block's partial. Out of place the values are right, but one partial buffer means each
// receive waits for this round's send, a cycle around the ring when sends are rendezvous.
Schedule partialsInOutput(const CollDesc& d, int rank, int n) {
  Schedule s;
  s.algo = "ring";
  const uint64_t es = d.elemSize, c = d.count;
  if (d.inPlace) s.outputInInput = static_cast<int64_t>(static_cast<uint64_t>(rank) * c * es);
  const int next = algo::modRank(rank + 1, n), prev = algo::modRank(rank - 1, n);
  auto block = [&](int64_t k) {
    return Range{kInput, static_cast<uint64_t>(algo::modRank(k, n)) * c * es, c * es};
  };
  const Range out{kOutput, 0, c * es};
  for (int st = 0; st < n - 1; ++st) {
    s.send(next, st == 0 ? block(rank - 1) : out);
    s.recvReduce(prev, block(rank - st - 2), out);
  }
  return s;
}

TEST(Checker, ReadingOverwrittenInput) {
  CollDesc d = desc(Coll::kReduceScatter, 6, 4);
  CheckOptions programOrderOnly;
  programOrderOnly.concurrent = false;
  Status ok = checkAlgorithm(Coll::kReduceScatter, 4, d, partialsInOutput, programOrderOnly);
  EXPECT_TRUE(ok.ok()) << ok.toString();
  d.inPlace = true;
  Status st = checkAlgorithm(Coll::kReduceScatter, 4, d, partialsInOutput, programOrderOnly);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "rank 0 output element 0 (byte 0) holds"));
  EXPECT_TRUE(mentions(st, "missing r0[0]"));
}

TEST(Checker, SingleBufferRingDeadlocksWithRendezvousSends) {
  const CollDesc d = desc(Coll::kReduceScatter, 6, 4);
  Status st = checkAlgorithm(Coll::kReduceScatter, 4, d, partialsInOutput);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "concurrent execution (seed 1): deadlock with rendezvous sends"));
}

TEST(Checker, MissingDependencyIsProvenUnordered) {
  const CollDesc d = desc(Coll::kAllReduce, 40, 4, false, 8);
  auto s = build(Coll::kAllReduce, "ring", d, 4);
  // The reduce-scatter's second send forwards what the first recvReduce produced.
  Schedule& r1 = s[1];
  uint32_t fwd = 0;
  for (uint32_t i = 1; i < r1.steps.size(); ++i)
    if (r1.steps[i].kind == StepKind::kSend && r1.steps[i].a.buf == kOutput) {
      fwd = i;
      break;
    }
  ASSERT_GT(fwd, 0u);
  auto& deps = r1.steps[fwd].deps;
  ASSERT_EQ(deps.size(), 2u);  // the partial it forwards, and the previous send to that peer
  deps.erase(deps.begin() + 1);  // keep FIFO, drop the data dependency
  Status st = check(Coll::kAllReduce, 4, d, s);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "rank 1 step " + std::to_string(fwd)));
  EXPECT_TRUE(mentions(st, "does not depend on it"));
}

TEST(Checker, MissingDependenciesBreakTheConcurrentExecution) {
  const CollDesc d = desc(Coll::kAllReduce, 40, 4, false, 8);
  auto s = build(Coll::kAllReduce, "ring", d, 4);
  for (Schedule& x : s)
    for (Step& st : x.steps) st.deps.clear();
  CheckOptions opts;
  opts.proveOrder = false;  // let the random execution find it on its own
  Status st = check(Coll::kAllReduce, 4, d, s, opts);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "concurrent execution (seed 1)"));
  // Program order alone is still right: that is exactly what deps must preserve.
  opts.concurrent = false;
  Status po = check(Coll::kAllReduce, 4, d, s, opts);
  EXPECT_TRUE(po.ok()) << po.toString();
}

TEST(Checker, MissingFifoDependency) {
  const CollDesc d = desc(Coll::kBroadcast, 10, 4, false, 8);
  auto s = build(Coll::kBroadcast, "chain", d, 2);
  // The root sends chunks 0, 1, 2 from disjoint input bytes: only FIFO orders them.
  Schedule& root = s[0];
  ASSERT_EQ(root.steps[2].kind, StepKind::kSend);
  ASSERT_EQ(root.steps[2].deps, std::vector<uint32_t>{1});
  root.steps[2].deps.clear();
  Status st = check(Coll::kBroadcast, 2, d, s);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "rank 0 step 2 (send to 1"));
  EXPECT_TRUE(mentions(st, "sends to the same peer after rank 0 step 1"));
}

// A dissemination barrier whose rounds all send the same never-written byte: every round's send
// is ready at once, so a rank can finish before hearing from everyone.
Schedule barrierWithoutDataDependency(const CollDesc&, int rank, int n) {
  Schedule s;
  s.algo = "dissemination";
  uint64_t round = 0;
  for (int dist = 1; dist < n; dist *= 2, ++round) {
    s.send(algo::modRank(rank + dist, n), Range{kScratch, 0, 1});
    s.recv(algo::modRank(rank - dist, n), Range{kScratch, round + 1, 1});
  }
  s.scratchBytes = round + 1;
  return s;
}

TEST(Checker, BarrierNeedsCausality) {
  const CollDesc d = desc(Coll::kBarrier, 0, 1);
  const algo::AlgoInfo* a = algo::findAlgorithm(Coll::kBarrier, "dissemination");
  ASSERT_NE(a, nullptr);
  for (int n : {2, 4, 5, 8}) {
    Status good = checkAlgorithm(Coll::kBarrier, n, d, a->build);
    EXPECT_TRUE(good.ok()) << good.toString();
  }
  Status two = checkAlgorithm(Coll::kBarrier, 2, d, barrierWithoutDataDependency);
  EXPECT_TRUE(two.ok()) << "one round needs no ordering: " << two.toString();
  Status st = checkAlgorithm(Coll::kBarrier, 5, d, barrierWithoutDataDependency);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "concurrent execution"));
  EXPECT_TRUE(mentions(st, "before hearing (even indirectly) from rank"));
}

// The shorter barrier: every round sends and then receives into one byte. Each receive now
// waits (write after read) for its own round's send; with sends that complete only when matched
// that is a cycle around the ranks — fine in program order with buffered sends, a deadlock here.
Schedule barrierThroughOneByte(const CollDesc&, int rank, int n) {
  Schedule s;
  s.algo = "dissemination";
  for (int dist = 1; dist < n; dist *= 2) {
    s.send(algo::modRank(rank + dist, n), Range{kScratch, 0, 1});
    s.recv(algo::modRank(rank - dist, n), Range{kScratch, 0, 1});
  }
  s.scratchBytes = 1;
  return s;
}

TEST(Checker, RendezvousDeadlock) {
  const CollDesc d = desc(Coll::kBarrier, 0, 1);
  CheckOptions programOrderOnly;
  programOrderOnly.concurrent = false;
  Status po = checkAlgorithm(Coll::kBarrier, 4, d, barrierThroughOneByte, programOrderOnly);
  EXPECT_TRUE(po.ok()) << po.toString();
  Status st = checkAlgorithm(Coll::kBarrier, 4, d, barrierThroughOneByte);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "deadlock with rendezvous sends: rank 0 step 0 (send to 1"));
}

TEST(Checker, OutOfBoundsAndUnaligned) {
  const CollDesc d = desc(Coll::kAllReduce, 8, 4);
  auto s = build(Coll::kAllReduce, "ring", d, 2);
  s[1].steps[0].a.offset = 28;  // 8 bytes from offset 28 of a 32-byte input
  s[1].steps[0].a.bytes = 8;
  Status st = check(Coll::kAllReduce, 2, d, s);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "rank 1 step 0"));
  EXPECT_TRUE(mentions(st, "out of bounds of input (32 bytes on this rank)"));

  s = build(Coll::kAllReduce, "ring", d, 2);
  s[0].steps[0].a.offset = 2;
  st = check(Coll::kAllReduce, 2, d, s);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "not aligned to the 4-byte element"));
}

TEST(Checker, RootOnlyBuffersAreAbsentElsewhere) {
  const CollDesc d = desc(Coll::kBroadcast, 8, 4);
  auto s = build(Coll::kBroadcast, "chain", d, 3);
  // Rank 1 forwards from its (nonexistent) input instead of its output.
  for (Step& st : s[1].steps)
    if (st.kind == StepKind::kSend) st.a.buf = kInput;
  Status st = check(Coll::kBroadcast, 3, d, s);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "out of bounds of input (0 bytes on this rank)"));
}

TEST(Checker, SizeMismatch) {
  const CollDesc d = desc(Coll::kBroadcast, 8, 4);
  auto s = build(Coll::kBroadcast, "chain", d, 2);
  s[1].steps[0].dst.bytes = 16;
  Status st = check(Coll::kBroadcast, 2, d, s);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "16 bytes expected, 32 sent"));
}

TEST(Checker, Deadlock) {
  // Both ranks receive before sending.
  auto recvFirst = [](const CollDesc& d, int rank, int) {
    Schedule s;
    const Range all{kInput, 0, d.count * d.elemSize};
    s.recvReduce(1 - rank, all, Range{kOutput, 0, all.bytes});
    s.send(1 - rank, all);
    return s;
  };
  Status st = checkAlgorithm(Coll::kAllReduce, 2, desc(Coll::kAllReduce, 4), recvFirst);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "deadlock: rank 0 step 0 (recvReduce from 1"));
}

TEST(Checker, WritesOutOfPlaceInput) {
  auto scribble = [](const CollDesc& d, int rank, int n) {
    Schedule s = algo::findAlgorithm(Coll::kAllGather, "ring")->build(d, rank, n);
    s.copy(Range{kOutput, 0, 4}, Range{kInput, 0, 4});
    return s;
  };
  Status st = checkAlgorithm(Coll::kAllGather, 2, desc(Coll::kAllGather, 4), scribble);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "writes the input of an out-of-place call"));
}

TEST(Checker, WrongAliasing) {
  auto noAlias = [](const CollDesc& d, int rank, int n) {
    Schedule s = algo::findAlgorithm(Coll::kAllGather, "ring")->build(d, rank, n);
    s.inputInOutput = -1;
    return s;
  };
  Status st = checkAlgorithm(Coll::kAllGather, 2, desc(Coll::kAllGather, 4, 4, true), noAlias);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "rank 0: schedule declares inputInOutput=-1"));
}

TEST(Checker, AsymmetricPeerLists) {
  auto extraPeer = [](const CollDesc& d, int rank, int n) {
    Schedule s = algo::findAlgorithm(Coll::kAllReduce, "ring")->build(d, rank, n);
    if (rank == 0) s.addPeer(2);
    return s;
  };
  Status st = checkAlgorithm(Coll::kAllReduce, 4, desc(Coll::kAllReduce, 0), extraPeer);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "rank 0: lists peer 2 but rank 2 does not list it back"));
}

TEST(Checker, WrongResultNamesTheElement) {
  // An allgather that forgets to forward: ring step 0 only.
  auto oneStep = [](const CollDesc& d, int rank, int n) {
    Schedule s;
    s.addPeer((rank + 1) % n);
    s.addPeer((rank + n - 1) % n);
    const uint64_t b = d.count * d.elemSize;
    s.copy(Range{kInput, 0, b}, Range{kOutput, rank * b, b});
    s.send((rank + 1) % n, Range{kInput, 0, b});
    s.recv((rank + n - 1) % n, Range{kOutput, ((rank + n - 1) % n) * b, b});
    return s;
  };
  Status st = checkAlgorithm(Coll::kAllGather, 3, desc(Coll::kAllGather, 2), oneStep);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "rank 0 output element 2 (byte 8) was never written; "
                                      "expected {r1[0]}"));
}

TEST(Checker, AllToAllvGapsMustStayUntouched) {
  const int n = 2;
  std::vector<CollDesc> d(n, desc(Coll::kAllToAllv, 0));
  for (int r = 0; r < n; ++r) {
    d[r].sendCounts = {1, 1};
    d[r].sendDispls = {0, 1};
    d[r].recvCounts = {1, 1};
    d[r].recvDispls = {0, 2};  // element 1 is a gap
  }
  auto spill = [](const CollDesc& x, int rank, int nr) {
    Schedule s = algo::findAlgorithm(Coll::kAllToAllv, "pairwise")->build(x, rank, nr);
    s.copy(Range{kInput, 0, 4}, Range{kOutput, 4, 4});
    return s;
  };
  Status st = checkAlgorithm(Coll::kAllToAllv, n, d, spill);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "output element 1 (byte 4) lies outside every block"));
  const algo::AlgoInfo* a = algo::findAlgorithm(Coll::kAllToAllv, "pairwise");
  Status ok = checkAlgorithm(Coll::kAllToAllv, n, d, a->build);
  EXPECT_TRUE(ok.ok()) << ok.toString();
}

TEST(Checker, RejectsInconsistentArguments) {
  std::vector<CollDesc> d(2, desc(Coll::kAllReduce, 4));
  d[1].count = 5;
  const algo::AlgoInfo* a = algo::findAlgorithm(Coll::kAllReduce, "ring");
  Status st = checkAlgorithm(Coll::kAllReduce, 2, d, a->build);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
}


// ---- One-sided steps ----

// Index of the `nth` (0-based; -1 for the last) step of `kind` with `peer` in s.
uint32_t findStep(const Schedule& s, StepKind kind, int peer, int nth) {
  std::vector<uint32_t> hits;
  for (uint32_t i = 0; i < s.steps.size(); ++i)
    if (s.steps[i].kind == kind && s.steps[i].peer == peer) hits.push_back(i);
  EXPECT_FALSE(hits.empty());
  if (hits.empty()) return 0;
  return nth < 0 ? hits.back() : hits.at(static_cast<size_t>(nth));
}

// Removes the `nth` notify from rank `from` to `to` and the wait that takes it, and refinalizes.
void dropNotifyPair(std::vector<Schedule>& s, int from, int to, int nth) {
  Schedule& f = s[static_cast<size_t>(from)];
  Schedule& t = s[static_cast<size_t>(to)];
  f.steps.erase(f.steps.begin() + findStep(f, StepKind::kNotify, to, nth));
  t.steps.erase(t.steps.begin() + findStep(t, StepKind::kWait, from, nth));
  refinalize(s);
}

TEST(OneSided, AcceptsTheDirectAlgorithms) {
  for (bool inPlace : {false, true}) {
    const CollDesc d = desc(Coll::kAllReduce, 10, 4, inPlace, 8);
    auto s = build(Coll::kAllReduce, "twoshot", d, 3);
    Status st = check(Coll::kAllReduce, 3, d, s);
    EXPECT_TRUE(st.ok()) << st.toString();
  }
}

TEST(OneSided, WithoutTheLastNotifyAPeerReturnsWhileRead) {
  const CollDesc d = desc(Coll::kAllReduce, 9, 4);
  auto s = build(Coll::kAllReduce, "twoshot", d, 3);
  // Rank 1's "done reading your output" to rank 0.
  dropNotifyPair(s, 1, 0, -1);
  Status st = check(Coll::kAllReduce, 3, d, s);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "rank 0 can return while rank 1 step"));
  EXPECT_TRUE(mentions(st, "(get from 0 output[0, 12) -> output[0, 12)) still reads its output "
                           "element 0"));
}

TEST(OneSided, WithoutTheFirstNotifyAGetRacesWithTheReduction) {
  const CollDesc d = desc(Coll::kAllReduce, 9, 4);
  auto s = build(Coll::kAllReduce, "twoshot", d, 3);
  // Rank 0's "my slice is reduced" to rank 1: rank 1 may now read slice 0 mid-reduction.
  dropNotifyPair(s, 0, 1, 0);
  Status st = check(Coll::kAllReduce, 3, d, s);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "race: rank 1 step"));
  EXPECT_TRUE(mentions(st, "(get from 0 output[0, 12) -> output[0, 12)) reads rank 0's output "
                           "element 0, which rank 0 step 0 (getReduce from 1"));
  EXPECT_TRUE(mentions(st, "no chain of deps and messages orders the two"));
  // In place, rank 1 now also overwrites slice 0 of its input (its output) while rank 0 may
  // still be reading it for the reduction.
  const CollDesc ip = desc(Coll::kAllReduce, 9, 4, true);
  s = build(Coll::kAllReduce, "twoshot", ip, 3);
  dropNotifyPair(s, 0, 1, 0);
  st = check(Coll::kAllReduce, 3, ip, s);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "race: rank 0 step 0 (getReduce from 1 input[0, 12) + input[0, 12) -> "
                           "output[0, 12)) reads rank 1's input element 0 (in-place input "
                           "buffer), which rank 1 step 6 (get from 0 output[0, 12)"));
}

TEST(OneSided, TheRandomOrderSeesTheRaceToo) {
  // Without the proof, the race of the missing notify shows up as a wrong value in some random
  // orders: the concurrent execution really reads the peer's memory when the get runs.
  const CollDesc d = desc(Coll::kAllReduce, 9, 4);
  auto s = build(Coll::kAllReduce, "twoshot", d, 3);
  dropNotifyPair(s, 0, 1, 0);
  CheckOptions opts;
  opts.proveOrder = false;
  int caught = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    opts.seed = seed;
    Status st = check(Coll::kAllReduce, 3, d, s, opts);
    if (st.ok()) continue;
    ++caught;
    EXPECT_TRUE(mentions(st, "concurrent execution (seed " + std::to_string(seed) + ")"));
  }
  EXPECT_GT(caught, 0);
}

TEST(OneSided, ScratchReadBeforeItIsWritten) {
  const CollDesc d = desc(Coll::kReduce, 9, 4, false, 1 << 20, 0);
  auto s = build(Coll::kReduce, "direct", d, 3);
  dropNotifyPair(s, 2, 0, 0);  // rank 2's "my slice is ready" to the root
  Status st = check(Coll::kReduce, 3, d, s);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "race: rank 0 step"));
  EXPECT_TRUE(mentions(st, "(get from 2 scratch[0, 12) -> output[24, 36)) reads rank 2's scratch "
                           "element 0, which rank 2 step 0 (getReduce from 0"));
}

TEST(OneSided, NotifyMustFenceWhatCameBefore) {
  const CollDesc d = desc(Coll::kAllGather, 5, 4);
  auto s = build(Coll::kAllGather, "direct", d, 3);
  for (Step& st : s[2].steps)
    if (st.kind == StepKind::kNotify) st.deps.clear();  // damaged deps, not refinalized
  Status st = check(Coll::kAllGather, 3, d, s);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "can return while rank 2 step"));
  EXPECT_TRUE(mentions(st, "no chain of deps and messages leads from the get to any step of"));
}

TEST(OneSided, WaitMustFenceWhatComesAfter) {
  // In-place direct all-to-all: the copies out of scratch may run only after every peer's
  // "done reading your input". Drop the wait's forward edges.
  const CollDesc d = desc(Coll::kAllToAll, 4, 4, true);
  auto s = build(Coll::kAllToAll, "direct", d, 3);
  for (Step& st : s[0].steps)
    if (st.kind == StepKind::kCopy) st.deps.clear();
  Status st = check(Coll::kAllToAll, 3, d, s);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "race: rank"));
  EXPECT_TRUE(mentions(st, "reads rank 0's input element"));
  EXPECT_TRUE(mentions(st, "which rank 0 step"));
  EXPECT_TRUE(mentions(st, "(copy scratch["));
}

// The obvious in-place all-to-all: get straight into the output block. That block is the input
// block the peer is reading at the same time.
Schedule allToAllIntoOutput(const CollDesc& d, int rank, int n) {
  Schedule s;
  s.algo = "direct";
  s.outputInInput = 0;
  const uint64_t b = d.count * d.elemSize;
  for (int k = 1; k < n; ++k) {
    const int q = (rank + k) % n;
    s.get(q, Range{kInput, static_cast<uint64_t>(rank) * b, b},
          Range{kOutput, static_cast<uint64_t>(q) * b, b});
  }
  for (int k = 1; k < n; ++k) s.notify((rank + k) % n);
  for (int k = 1; k < n; ++k) s.wait((rank + n - k) % n);
  return s;
}

TEST(OneSided, InPlaceAllToAllIntoTheOutputRaces) {
  const CollDesc d = desc(Coll::kAllToAll, 3, 4, true);
  Status st = checkAlgorithm(Coll::kAllToAll, 2, d, allToAllIntoOutput);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "race: rank 0 step 0 (get from 1 input[0, 12) -> output[12, 24)) "
                           "reads rank 1's input element 0 (in-place input buffer), which rank 1 "
                           "step 0 (get from 0 input[12, 24) -> output[0, 12)) writes"));
}

// Notifying r+1, r+2, ... but also waiting for r+1, r+2, ...: fine when a notify is buffered,
// a cycle through the ranks when it completes only with its wait.
Schedule allGatherWaitingTheWrongWay(const CollDesc& d, int rank, int n) {
  Schedule s = algo::findAlgorithm(Coll::kAllGather, "direct")->build(d, rank, n);
  for (Step& st : s.steps)
    if (st.kind == StepKind::kWait) st.peer = (2 * rank - st.peer + n) % n;  // r-k -> r+k
  return s;
}

TEST(OneSided, WaitOrderDeadlocksWithRendezvousNotifies) {
  const CollDesc d = desc(Coll::kAllGather, 2, 4);
  CheckOptions programOrderOnly;
  programOrderOnly.concurrent = false;
  Status po = checkAlgorithm(Coll::kAllGather, 3, d, allGatherWaitingTheWrongWay, programOrderOnly);
  EXPECT_TRUE(po.ok()) << po.toString();
  Status st = checkAlgorithm(Coll::kAllGather, 3, d, allGatherWaitingTheWrongWay);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "deadlock with rendezvous sends"));
  EXPECT_TRUE(mentions(st, "(notify "));
  EXPECT_TRUE(mentions(st, "is never received"));
}

TEST(OneSided, RemoteRangeIsCheckedAgainstThePeer) {
  const CollDesc d = desc(Coll::kGather, 4, 4, false, 1 << 20, 0);
  auto s = build(Coll::kGather, "direct", d, 3);
  Step& g = s[0].steps[findStep(s[0], StepKind::kGet, 1, 0)];
  g.a.buf = kOutput;  // a non-root has no gather output
  Status st = check(Coll::kGather, 3, d, s);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "rank 0 step 1 (get from 1 output[0, 16) -> output[16, 32)): a (the "
                           "peer's range) is out of bounds of output (0 bytes on rank 1)"));
}

TEST(OneSided, WaitTakesOnlyANotify) {
  auto sendNotWait = [](const CollDesc& d, int rank, int) {
    Schedule s;
    const Range all{kInput, 0, d.count * d.elemSize};
    if (rank == 0) {
      s.send(1, all);
      s.copy(all, Range{kOutput, 0, all.bytes});
      s.wait(1);
    } else {
      s.wait(0);
      s.get(0, all, Range{kOutput, 0, all.bytes});
      s.notify(0);
    }
    return s;
  };
  Status st = checkAlgorithm(Coll::kBroadcast, 2, desc(Coll::kBroadcast, 4), sendNotWait);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "rank 1 step 0 (wait for 0) is matched with rank 0 step 0 (send to 1 "
                           "input[0, 16)): a wait takes only a notify"));
}

// ---- The host window ------------------------------------------------------------------------

CollDesc windowDesc(Coll coll, uint64_t count) {
  CollDesc d = desc(coll, count);
  d.window = {256, 64};
  return d;
}

std::vector<Schedule> dropSteps(std::vector<Schedule> s, int rank, StepKind kind, int peer) {
  auto& steps = s[static_cast<size_t>(rank)].steps;
  steps.erase(std::remove_if(steps.begin(), steps.end(),
                             [&](const Step& x) { return x.kind == kind && x.peer == peer; }),
              steps.end());
  refinalize(s);
  return s;
}

TEST(Window, AcceptsTheStagedAlgorithms) {
  for (int n : {2, 3, 5}) {
    for (uint64_t count : {0, 1, 16, 40}) {  // 40 floats: rounds of 16 in the 64-byte areas
      const CollDesc d = windowDesc(Coll::kAllReduce, count);
      for (const char* name : {"oneshot_staged", "twoshot_staged"}) {
        Status st = check(Coll::kAllReduce, n, d, build(Coll::kAllReduce, name, d, n));
        EXPECT_TRUE(st.ok()) << name << " n=" << n << " count=" << count << ": " << st.toString();
      }
      const CollDesc g = windowDesc(Coll::kAllGather, count);
      Status st = check(Coll::kAllGather, n, g, build(Coll::kAllGather, "direct_staged", g, n));
      EXPECT_TRUE(st.ok()) << "direct_staged n=" << n << ": " << st.toString();
    }
  }
}

TEST(Window, ReadingBeforeTheSignalIsARace) {
  // Without rank 0's await of rank 1 its reduction may read rank 1's region before rank 1
  // has written it.
  const CollDesc d = windowDesc(Coll::kAllReduce, 8);
  auto s = dropSteps(build(Coll::kAllReduce, "oneshot_staged", d, 2), 0, StepKind::kAwait, 1);
  Status st = check(Coll::kAllReduce, 2, d, s);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "race")) << st.toString();
}

TEST(Window, RefillingAnAreaBeforePeersFinishedIsARace) {
  // Two-shot: without the awaits of the peers' "reduced" signals, a rank copies slices out
  // while their owners still write them; a round area is refilled while peers still read it.
  const CollDesc d = windowDesc(Coll::kAllReduce, 64);  // 4 rounds of 16 floats
  auto s = build(Coll::kAllReduce, "twoshot_staged", d, 3);
  auto& steps = s[1].steps;
  for (size_t i = 0; i < steps.size(); ++i)
    if (steps[i].kind == StepKind::kAwait && steps[i].target == 2) {  // "reduced" of round 0
      steps.erase(steps.begin() + static_cast<int64_t>(i));
      break;
    }
  refinalize(s);
  Status st = check(Coll::kAllReduce, 3, d, s);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "race")) << st.toString();
}

TEST(Window, AwaitingASignalNeverMadeDeadlocks) {
  const CollDesc d = windowDesc(Coll::kAllReduce, 8);
  auto s = build(Coll::kAllReduce, "oneshot_staged", d, 2);
  for (Step& st : s[0].steps)
    if (st.kind == StepKind::kAwait) st.target = 2;  // rank 1 signals once
  refinalize(s);
  Status st = check(Coll::kAllReduce, 2, d, s);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "never makes")) << st.toString();
}

TEST(Window, AwaitBeforeTheFirstSignalIsRefused) {
  const CollDesc d = windowDesc(Coll::kAllReduce, 8);
  auto s = build(Coll::kAllReduce, "oneshot_staged", d, 2);
  auto& steps = s[0].steps;
  auto sig = std::find_if(steps.begin(), steps.end(),
                          [](const Step& x) { return x.kind == StepKind::kSignal; });
  auto aw = std::find_if(steps.begin(), steps.end(),
                         [](const Step& x) { return x.kind == StepKind::kAwait; });
  std::iter_swap(sig, aw);
  refinalize(s);
  Status st = check(Coll::kAllReduce, 2, d, s);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "before this rank's first signal")) << st.toString();
}

TEST(Window, NeedsTheWindowInTheDescription) {
  CollDesc d = windowDesc(Coll::kAllReduce, 8);
  auto s = build(Coll::kAllReduce, "oneshot_staged", d, 2);
  d.window = {};
  Status st = check(Coll::kAllReduce, 2, d, s);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st, "host window")) << st.toString();
}


// ---- quantization steps ------------------------------------------------------------------------

CollDesc quantDesc(uint64_t count, size_t elemSize, uint32_t bits = 4, uint64_t group = 8) {
  CollDesc d = desc(Coll::kReduceScatter, count, elemSize);
  d.quant = kernels::QuantConfig{.bits = bits, .groupSize = group};
  return d;
}

std::vector<Schedule> oneHop(const CollDesc& d, int n) {
  std::vector<Schedule> s;
  for (int r = 0; r < n; ++r) s.push_back(examples::quantizedReduceScatter(d, r, n));
  refinalize(s);
  return s;
}

// Broken quantized schedules: refinalized (unless the break is in the deps), checked, refused
// with a message naming every part.
void expectRefused(const CollDesc& d, std::vector<Schedule> s,
                   std::initializer_list<const char*> parts, bool keepDeps = false) {
  if (!keepDeps) refinalize(s);
  Status st = check(Coll::kReduceScatter, static_cast<int>(s.size()), d, s);
  EXPECT_FALSE(st.ok());
  for (const char* part : parts) EXPECT_TRUE(mentions(st, part)) << st.toString();
}

// Counts with a short last group (37 = 4 x 8 + 5), two element sizes, both widths.
TEST(CheckerQuantized, AcceptsHandWrittenQuantizedReduceScatters) {
  for (uint32_t bits : {4u, 8u}) {
    for (size_t elem : {size_t{2}, size_t{4}}) {
      for (uint64_t count : {uint64_t{37}, uint64_t{64}}) {
        const CollDesc d = quantDesc(count, elem, bits);
        for (int n : {1, 2, 3, 5}) {
          SCOPED_TRACE("int" + std::to_string(bits) + " elem " + std::to_string(elem) +
                       " count " + std::to_string(count) + " ranks " + std::to_string(n));
          Status st = checkAlgorithm(Coll::kReduceScatter, n, d, examples::quantizedReduceScatter);
          EXPECT_TRUE(st.ok()) << st.toString();
        }
        for (auto [hosts, perHost] : {std::pair{2, 2}, {3, 2}, {2, 3}, {1, 4}, {4, 1}}) {
          SCOPED_TRACE("two hops, " + std::to_string(hosts) + " x " + std::to_string(perHost));
          const ScheduleBuilder twoHop = [perHost = perHost](const CollDesc& x, int r, int n) {
            return examples::twoHopQuantizedReduceScatter(x, r, n, perHost);
          };
          Status st = checkAlgorithm(Coll::kReduceScatter, hosts * perHost, d, twoHop);
          EXPECT_TRUE(st.ok()) << st.toString();
        }
      }
    }
  }
}

TEST(CheckerQuantized, NeedsTheConfigInTheDescription) {
  CollDesc d = quantDesc(37, 4);
  auto s = oneHop(d, 2);
  d.quant.reset();
  expectRefused(d, s, {"has no quantization config"});
}

TEST(CheckerQuantized, BlockOfTheWrongSize) {
  const CollDesc d = quantDesc(37, 4);
  auto s = oneHop(d, 2);
  s[1].steps[0].dst.bytes -= 1;  // rank 1's first quantize
  expectRefused(d, s, {"rank 1 step 0", "quantization config needs 148 and 39"});
}

// Rank 0 overwrites the block it received from rank 1 with its own: its own slice is counted
// twice, rank 1's not at all.
TEST(CheckerQuantized, CountingABlockTwice) {
  const CollDesc d = quantDesc(37, 4);
  auto s = oneHop(d, 2);
  const uint64_t block = kernels::quant::packedBytes(*d.quant, 37);
  s[0].copy(Range{kScratch, 0, block}, Range{kScratch, 3 * block, block});
  std::swap(s[0].steps[s[0].steps.size() - 2], s[0].steps.back());  // before the dequantize
  expectRefused(d, s, {"counts contribution r0[0] twice"});
}

// A receive one byte off: the dequantize reads bytes that are not one whole block.
TEST(CheckerQuantized, ShiftedBlock) {
  const CollDesc d = quantDesc(37, 4);
  auto s = oneHop(d, 2);
  for (Schedule& x : s) x.scratchBytes += 1;
  for (Step& st : s[0].steps) {
    if (st.kind == StepKind::kRecv) st.dst.offset += 1;
  }
  expectRefused(d, s, {"are not one whole quantized block of 37 elements"});
}

// int4, groups of 8: 37 and 38 elements pack into the same 39 bytes. Decoding a 38-element
// block as 37 elements is caught by what the block holds, not by its size.
TEST(CheckerQuantized, BlockOfOtherElements) {
  const CollDesc d = quantDesc(38, 4);
  auto s = oneHop(d, 2);
  Step& last = s[0].steps.back();
  ASSERT_EQ(last.kind, StepKind::kDequantize);
  last.quant.count = 37;
  last.dst.bytes = 37 * 4;
  expectRefused(d, s, {"a quantized block of 38 elements"});
}

TEST(CheckerQuantized, ReducingQuantizedBytes) {
  const CollDesc d = quantDesc(64, 4);
  auto s = oneHop(d, 2);
  const Range bytes{kScratch, 0, 4};
  s[0].steps.insert(s[0].steps.begin() + 1, Step{});  // after the first quantize
  s[0].steps[1].kind = StepKind::kReduce;
  s[0].steps[1].a = s[0].steps[1].b = s[0].steps[1].dst = bytes;
  expectRefused(d, s, {"reduces bytes of a quantized block as elements"});
}

// Without its dependencies the dequantize may run before the blocks have arrived.
TEST(CheckerQuantized, DequantizeNotOrderedAfterItsSources) {
  const CollDesc d = quantDesc(37, 4);
  auto s = oneHop(d, 3);
  s[2].steps.back().deps.clear();
  expectRefused(d, s, {"rank 2 step", "but does not depend on it"}, /*keepDeps=*/true);
}

// A two-hop schedule whose requantize sums one block too few: rank 1 keeps only the block of
// rank 0 (its host's local rank 0), so its own contribution to destinations 1 and 3 is lost.
TEST(CheckerQuantized, RequantizeMissingASource) {
  const CollDesc d = quantDesc(37, 2, 8, 16);
  std::vector<Schedule> s;
  for (int r = 0; r < 4; ++r) s.push_back(examples::twoHopQuantizedReduceScatter(d, r, 4, 2));
  for (Step& st : s[1].steps) {
    if (st.kind == StepKind::kRequantize) {
      st.quant.sources = 1;
      st.a.bytes /= 2;
    }
  }
  expectRefused(d, s, {"rank 1 output element 0", "missing r1[37]"});
}

TEST(CheckerQuantized, SourcesOverlappingTheDestination) {
  const CollDesc d = quantDesc(37, 4);
  auto s = oneHop(d, 2);
  Step& q = s[0].steps[0];
  ASSERT_EQ(q.kind, StepKind::kQuantize);
  q.a = Range{kScratch, 0, 37 * 4};  // reads the bytes it writes
  expectRefused(d, s, {"a and dst overlap"});
}

}  // namespace
}  // namespace chorus::sched
