// The simulator on machines small enough to compute by hand. Units: a flat machine's port of
// 1 GB/s carries 1000 bytes per microsecond, so S bytes take S / 1000 us.
#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "algorithms/kernels/quantize.h"
#include "src/exec/plan.h"
#include "src/topology/placement.h"
#include "tools/chorus-sim/constants.h"
#include "tools/chorus-sim/engine.h"
#include "tools/chorus-sim/init_model.h"
#include "tools/chorus-sim/machine.h"
#include "tools/chorus-sim/scenario.h"

namespace chorus::sim {
namespace {

using sched::Coll;
using sched::kInput;
using sched::kOutput;

constexpr double kTol = 1e-6;  // us; simulated time is exact up to rounding

// Flat hosts with 1 GB/s rank ports; `cores` < 0: no CPUs, else CPUs with that pool (0: none).
Machine flat(int hosts, int perHost, double alpha = 5, double nicGBps = 1,
             double interAlpha = 7, double memGBps = 0, int cores = -1) {
  FlatSpec f;
  f.hosts = hosts;
  f.ranksPerHost = perHost;
  f.intraGBps = 1;
  f.intraLatencyUs = alpha;
  f.nicGBps = nicGBps;
  f.interLatencyUs = interAlpha;
  f.memGBps = memGBps;
  f.cpu = cores >= 0;
  f.cores = std::max(cores, 0);
  StatusOr<Machine> m = Machine::flat(f);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return std::move(m).value();
}

// Hand-written schedules, one per rank, finalized and prepared as the communicator does.
class Plans {
 public:
  explicit Plans(int n) : schedules_(static_cast<size_t>(n)) {}
  sched::Schedule& operator[](int r) { return schedules_[static_cast<size_t>(r)]; }
  std::vector<const exec::Plan*> prepare() {
    std::vector<const exec::Plan*> out;
    const int n = static_cast<int>(schedules_.size());
    for (int r = 0; r < n; ++r) {
      sched::Schedule s = schedules_[static_cast<size_t>(r)];
      s.finalize();
      auto p = exec::prepare(std::move(s), "test", algo::kNoAlgorithm, false, r, n);
      EXPECT_TRUE(p.ok()) << p.status().message();
      owned_.push_back(*p);
      out.push_back(owned_.back().get());
    }
    return out;
  }

 private:
  std::vector<sched::Schedule> schedules_;
  std::vector<std::shared_ptr<const exec::Plan>> owned_;
};

sched::Range in(uint64_t bytes, uint64_t offset = 0) { return {kInput, offset, bytes}; }
sched::Range out(uint64_t bytes, uint64_t offset = 0) { return {kOutput, offset, bytes}; }

Result simulateOk(const Machine& m, Plans& p) {
  StatusOr<Result> r = simulate(m, p.prepare());
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move(r).value() : Result{};
}

Outcome runOk(const Machine& m, Coll coll, uint64_t size, const std::string& algo,
              uint64_t chunk) {
  Case c;
  c.coll = coll;
  c.sizeBytes = size;
  c.algo = algo;
  c.chunkBytes = chunk;
  StatusOr<Outcome> o = runCase(m, c);
  EXPECT_TRUE(o.ok()) << o.status().message();
  return o.ok() ? std::move(o).value() : Outcome{};
}

// One message over one link: alpha + S / beta.
TEST(SimEngine, OneMessageIsAlphaPlusSizeOverBandwidth) {
  const Machine m = flat(1, 2);
  Plans p(2);
  p[0].send(1, in(1'000'000));
  p[1].recv(0, out(1'000'000));
  const Result r = simulateOk(m, p);
  EXPECT_NEAR(r.timeUs, 5 + 1000, kTol);
  EXPECT_NEAR(r.rankDoneUs[0], 1000, kTol);  // the sender is done when its last byte left
  ASSERT_EQ(r.criticalPath.size(), 2u);
  EXPECT_EQ(r.criticalPath[0].kind, sched::StepKind::kSend);
  EXPECT_EQ(r.criticalPath[1].kind, sched::StepKind::kRecv);
}

// Two flows leaving through one port share it: each gets half, both take twice as long.
TEST(SimEngine, TwoFlowsSharingAPortTakeTwiceAsLong) {
  const Machine m = flat(1, 3);
  Plans p(3);
  p[0].send(1, in(1'000'000));
  p[0].send(2, in(1'000'000));
  p[1].recv(0, out(1'000'000));
  p[2].recv(0, out(1'000'000));
  const Result r = simulateOk(m, p);
  EXPECT_NEAR(r.rankDoneUs[1], 5 + 2000, kTol);
  EXPECT_NEAR(r.rankDoneUs[2], 5 + 2000, kTol);
  EXPECT_NEAR(r.timeUs, 5 + 2000, kTol);
}

// Messages to one peer go one after another (one connection); their latencies overlap.
TEST(SimEngine, MessagesToOnePeerAreSerializedAndPipelined) {
  const Machine m = flat(1, 2);
  Plans p(2);
  for (int k = 0; k < 4; ++k) p[0].send(1, in(250'000, 250'000u * k));
  for (int k = 0; k < 4; ++k) p[1].recv(0, out(250'000, 250'000u * k));
  const Result r = simulateOk(m, p);
  EXPECT_NEAR(r.timeUs, 1000 + 5, kTol);
  EXPECT_EQ(r.flows, 4u);
}

// Max-min fairness with different bottlenecks: rank 0 sends to rank 1 (same host, port 1 GB/s)
// and to rank 2 (other host, NIC 0.25 GB/s). Both cross rank 0's out port; the NIC holds the
// second flow at 250 B/us, so the first gets the remaining 750. With 750 KB each, the first is
// done at 1000 us; the second has 250 KB through by then and takes the rest alone at the NIC's
// 250 B/us: 2000 us more.
TEST(SimEngine, MaxMinSharingGivesLeftoverToTheUnconstrainedFlow) {
  const Machine m = flat(2, 2, /*alpha=*/5, /*nicGBps=*/0.25, /*interAlpha=*/7);
  Plans p(4);
  p[0].send(1, in(750'000));
  p[0].send(2, in(750'000));
  p[1].recv(0, out(750'000));
  p[2].recv(0, out(750'000));
  const Result r = simulateOk(m, p);
  EXPECT_NEAR(r.rankDoneUs[1], 1000 + 5, kTol);
  EXPECT_NEAR(r.rankDoneUs[2], 3000 + 7, kTol);
  // The NIC carried exactly the second message, and was busy all the while.
  const int tx = m.route(0, 2).resources[1];
  EXPECT_EQ(m.resourceName(tx), "h0:nic.tx");
  EXPECT_NEAR(r.resourceBytes[static_cast<size_t>(tx)], 750'000, 1e-3);
  EXPECT_NEAR(r.resourceBusyUs[static_cast<size_t>(tx)], 3000, kTol);
}

// Two ranks of one host sending to two ranks of another share the host's NIC.
TEST(SimEngine, FlowsBetweenHostsShareTheNic) {
  const Machine m = flat(2, 2, 5, /*nicGBps=*/1, /*interAlpha=*/7);
  Plans p(4);
  p[0].send(2, in(1'000'000));
  p[1].send(3, in(1'000'000));
  p[2].recv(0, out(1'000'000));
  p[3].recv(1, out(1'000'000));
  EXPECT_NEAR(simulateOk(m, p).timeUs, 2000 + 7, kTol);
}

// A NIC behind a token bucket (an emulated link, tc tbf): the bucket starts empty and fills
// at the NIC's rate less what passes; while it holds tokens the NIC is no bottleneck. Rank 0
// sends A (250 KB) to rank 1 at the NIC's 250 B/us (buckets empty): 1000 us, arriving at 1007.
// Rank 1 copies it (500 KB of memory traffic at 1000 B/us: 1507), then sends B (1 KB) back:
// h1's transmit and h0's receive buckets have filled since 0 (more than 1 KB), so B goes at the
// ports' 1000 B/us (1 us) and arrives at 1515. Then rank 0 sends C (400 KB, after B, which it
// reads): h0's transmit and h1's receive buckets have filled for 515 us since A left (128,750
// B each), so C goes at 1000 B/us while they last, draining them at 750 B/us (171.67 us), and
// the rest (228,333 B) at 250 B/us (913.33 us): it leaves at 2600 and arrives at 2607. Without
// the buckets B takes 4 us and C 1600 us: 3125.
TEST(SimEngine, TokenBucketLetsAnIdleNicBurst) {
  for (const bool bucket : {true, false}) {
    Machine m = flat(2, 1, /*alpha=*/5, /*nicGBps=*/0.25, /*interAlpha=*/7, /*memGBps=*/1);
    ASSERT_TRUE(m.setNicBurst(bucket ? 2000 : 0, 0).ok());  // 2000 us x 250 B/us = 500 KB
    Plans p(2);
    p[0].send(1, in(250'000));
    p[0].recv(1, out(1'000));
    p[0].send(1, out(400'000));
    p[1].recv(0, out(250'000));
    p[1].copy(out(250'000), out(250'000, 250'000));
    p[1].send(0, out(1'000, 250'000));
    p[1].recv(0, out(400'000, 500'000));
    const Result r = simulateOk(m, p);
    EXPECT_NEAR(r.rankDoneUs[1], bucket ? 2607 : 3125, 1e-3) << (bucket ? "bucket" : "none");
  }
  Machine m = flat(2, 1);
  EXPECT_FALSE(m.setNicBurst(-1, 0).ok());
}

// A reduction costs reduceTraffic x bytes at the rank's memory rate, after its message.
TEST(SimEngine, RecvReduceAddsMemoryTime) {
  const Machine m = flat(1, 2, 5, 1, 7, /*memGBps=*/3);
  Plans p(2);
  p[0].send(1, in(1'000'000));
  p[1].recvReduce(0, in(1'000'000), out(1'000'000));
  // 1000 us on the wire, 5 us latency, 3 MB of memory traffic at 3000 B/us: 1000 us.
  EXPECT_NEAR(simulateOk(m, p).timeUs, 1000 + 5 + 1000, kTol);
}

// Window synchronization and a one-sided read: rank 1 awaits rank 0's first signal (which
// reaches it one latency later), then reads 1 MB of rank 0's window: 5 + 1000 + 5 us.
TEST(SimEngine, AwaitThenGet) {
  const Machine m = flat(1, 2);
  Plans p(2);
  const sched::Range window{sched::kWindow, 0, 1'000'000};
  p[0].copy(in(1'000'000), window);
  p[0].signal();
  p[1].signal();
  p[1].await(0, 1);
  p[1].get(0, window, out(1'000'000));
  const Result r = simulateOk(m, p);
  EXPECT_NEAR(r.rankDoneUs[1], 5 + 1000 + 5, kTol);
  ASSERT_GE(r.criticalPath.size(), 2u);
  EXPECT_EQ(r.criticalPath.back().kind, sched::StepKind::kGet);
}

TEST(SimEngine, MismatchedPlansAreRefusedNotHung) {
  const Machine m = flat(1, 2);
  Plans p(2);
  p[0].send(1, in(100));
  p[1].recv(0, out(100));
  p[1].recv(0, out(100, 100));
  StatusOr<Result> r = simulate(m, p.prepare());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("1 messages sent, 2 received"), std::string::npos)
      << r.status().message();
}

// ---- The registered builders, through the communicator's own path ------------------------

// Ring all-reduce of S bytes on 4 ranks, free memory. The ring cuts each slice (S/n) into two
// chunks (ringChunkElems: at most half a slice), so every link carries 2 (n-1) x 2 messages of
// T = S/(2n) / beta. The loop is chunk-major and messages to one peer leave in program order,
// so chunk 1's first send waits until chunk 0's last send has left: chunk 0 costs
// 2(n-1) - 1 hops of (T + alpha) plus T, chunk 1 then 2(n-1) hops of (T + alpha).
TEST(SimBuilders, RingAllReduceOnOneHost) {
  const Machine m = flat(1, 4);
  const uint64_t S = 4'000'000;
  const Outcome o = runOk(m, Coll::kAllReduce, S, "ring", 1'000'000);
  EXPECT_EQ(o.algo, "allreduce:ring");
  const double T = 500, alpha = 5;
  EXPECT_NEAR(o.timeUs, 5 * (T + alpha) + T + 6 * (T + alpha), kTol);
  EXPECT_NEAR(o.algbwGBps, S / (o.timeUs * 1e3), 1e-12);
  EXPECT_NEAR(o.busbwGBps, o.algbwGBps * 2 * 3 / 4, 1e-12);
  // 6 sends and 5 receives of chunk 0 (its last send hands over to chunk 1's first), then 6
  // sends and 6 receives of chunk 1.
  EXPECT_EQ(o.result.criticalPath.size(), 23u);
}

// The same with memory at 3 GB/s: each reduce-scatter step also reduces its chunk, R = 3 x
// 500 KB / 3000 B/us = 500 us, between the receive and the next send.
TEST(SimBuilders, RingAllReduceWithReductions) {
  const Machine m = flat(1, 4, 5, 1, 7, /*memGBps=*/3);
  const Outcome o = runOk(m, Coll::kAllReduce, 4'000'000, "ring", 1'000'000);
  const double T = 500, alpha = 5, R = 500;
  const double chunk0 = 3 * (T + alpha + R) + 2 * (T + alpha) + T;
  const double chunk1 = 3 * (T + alpha + R) + 3 * (T + alpha);
  EXPECT_NEAR(o.timeUs, chunk0 + chunk1, kTol);
}

// Pipelined chain broadcast, 4 ranks, C chunks of time T: the last rank has the last chunk at
// (C + n - 2) T + (n - 1) alpha (latencies do not stack per chunk: links stream).
TEST(SimBuilders, ChainBroadcastPipelines) {
  const Machine m = flat(1, 4);
  const Outcome o = runOk(m, Coll::kBroadcast, 4'000'000, "chain", 500'000);
  EXPECT_NEAR(o.timeUs, (8 + 4 - 2) * 500 + 3 * 5, kTol);
}

// Binomial broadcast on 4 ranks, one chunk: the root sends to 2 and 1 at once (sharing its
// port, 2T), then 2 forwards to 3 (T): 3T + 2 alpha.
TEST(SimBuilders, BinomialTreeBroadcast) {
  const Machine m = flat(1, 4);
  const Outcome o = runOk(m, Coll::kBroadcast, 1'000'000, "binomial", 4 << 20);
  EXPECT_NEAR(o.timeUs, 3 * 1000 + 2 * 5, kTol);
  EXPECT_NEAR(o.result.rankDoneUs[1], 2000 + 5, kTol);
}

// The double binary tree on 4 ranks puts ranks 1 and 2 in opposite places (2 is 1's child in
// one tree, its parent in the other), so 2 -> 1 carries one tree's reduce and the other's
// broadcast. 20 chunks per tree of T = 10 us, alpha = 100 us: were a chunk's reduce queued
// behind the previous chunk's broadcast, every chunk would wait for a round trip (over 2 alpha,
// 20 x 200 us in all). Streamed, rank 2's port carries 60 chunks (its reduce in both trees, its
// broadcast to two children in one): 600 us of sending plus a few latencies.
TEST(SimBuilders, DoubleTreeStreamsThroughAPairThatCarriesBothPhases) {
  const Machine m = flat(1, 4, /*alpha=*/100);
  const Outcome o = runOk(m, Coll::kAllReduce, 400'000, "tree", 10'000);
  EXPECT_EQ(o.algo, "allreduce:tree");
  EXPECT_GT(o.timeUs, 60 * 10.0);
  EXPECT_LT(o.timeUs, 60 * 10.0 + 5 * 100);
}

TEST(SimBuilders, TunerChoosesARegisteredAlgorithm) {
  const Machine m = flat(2, 4);
  const Outcome o = runOk(m, Coll::kAllReduce, 1 << 20, "tuner", 256 << 10);
  EXPECT_EQ(o.algo.rfind("allreduce:", 0), 0u) << o.algo;
  EXPECT_FALSE(o.why.empty());
  EXPECT_GT(o.timeUs, 0);
}

TEST(SimBuilders, UnknownAlgorithmIsNamed) {
  const Machine m = flat(1, 4);
  Case c;
  c.sizeBytes = 1024;
  c.algo = "nosuch";
  StatusOr<Outcome> o = runCase(m, c);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("unknown algorithm 'nosuch' for allreduce"),
            std::string::npos)
      << o.status().message();
  EXPECT_NE(o.status().message().find("ring"), std::string::npos);
}

// Every registered (unquantized) algorithm of every simulated collective runs to completion on
// a two-host machine: the plans fit together and nothing deadlocks.
TEST(SimBuilders, EveryRegisteredAlgorithmRuns) {
  const Machine m = flat(2, 3, 5, 1, 7, 3);
  int ran = 0;
  for (const algo::AlgoInfo* a : algo::allAlgorithms()) {
    if (!parseColl(sched::collName(a->coll))) continue;
    Case c;
    c.coll = a->coll;
    c.sizeBytes = 6 * 4096;
    c.algo = a->name;
    c.chunkBytes = 1024;
    c.oneSided = true;
    StatusOr<Outcome> o = runCase(m, c);
    if (!o.ok() && o.status().message().find("cannot run") != std::string::npos) continue;
    ASSERT_TRUE(o.ok()) << a->name << ": " << o.status().message();
    EXPECT_GT(o->timeUs, 0) << a->name;
    // The critical path ends at the end, and each step on it starts no earlier than the one
    // that released it ended.
    const auto& path = o->result.criticalPath;
    ASSERT_FALSE(path.empty()) << a->name;
    EXPECT_EQ(path.back().endUs, o->timeUs) << a->name;
    for (size_t k = 1; k < path.size(); ++k)
      EXPECT_GE(path[k].startUs, path[k - 1].endUs - 1e-9) << a->name << " at " << k;
    ++ran;
  }
  EXPECT_GT(ran, 20);
}

// ---- Topology files ----------------------------------------------------------------------

std::string topoFile(const char* name) {
  return std::string(CHORUS_TEST_DATA_DIR) + "/topologies/" + name;
}

// `hosts` servers of the DGX-like file with `perHost` ranks each.
StatusOr<Machine> dgxLike(int hosts, int perHost) {
  StatusOr<topo::System> sys = topo::loadTopologyFile(topoFile("dgx-h100-like.xml"));
  if (!sys.ok()) return sys.status();
  return Machine::fromSystem(*sys, hosts, perHost, defaultConstants());
}

TEST(SimTopology, DgxLikeServerRingIsBoundByNvlink) {
  StatusOr<topo::System> sys = topo::loadTopologyFile(topoFile("dgx-h100-like.xml"));
  ASSERT_TRUE(sys.ok()) << sys.status().message();
  StatusOr<Machine> m = Machine::fromSystem(*sys, 1, 8, defaultConstants());
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->intraClass(), cost::LinkClass::kNvlink);
  const Outcome a = runOk(*m, Coll::kAllReduce, 64 << 20, "ring", 8 << 20);
  const Outcome b = runOk(*m, Coll::kAllReduce, 64 << 20, "ring", 8 << 20);
  EXPECT_EQ(a.timeUs, b.timeUs);  // deterministic
  // Every GPU's NVLink egress is 18 links; the ring sends to one peer at a time, at the path's
  // rate. As in RingAllReduceOnOneHost: C = 2 chunks of T per slice, 2(n-1)C T + (2(n-1)C - C +
  // 1) alpha, with alpha the route's latency, plus (n-1)C reductions of a chunk in HBM.
  double nvl = 0;
  for (int r = 0; r < m->numResources(); ++r)
    if (m->resourceName(r).find(".nvl-out") != std::string::npos) nvl = m->capacity(r);
  const Route route = m->route(0, 1);
  ASSERT_GT(nvl, 0);
  const double T = (4 << 20) / std::min(nvl, route.cap), alpha = route.latencyUs;
  const double R = 3.0 * (4 << 20) / m->capacity(m->memory(0));
  EXPECT_NEAR(a.timeUs, 28 * T + 27 * alpha + 14 * R, 1e-6);
  EXPECT_LE(a.busbwGBps, nvl / 1e3);
}

TEST(SimTopology, TwoHostsCrossTheirNics) {
  StatusOr<topo::System> sys = topo::loadTopologyFile(topoFile("dgx-h100-like.xml"));
  ASSERT_TRUE(sys.ok());
  StatusOr<Machine> m = Machine::fromSystem(*sys, 2, 8, defaultConstants());
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->interClass(), cost::LinkClass::kInfiniBand);
  const Route r = m->route(0, 8);
  bool tx = false;
  for (int id : r.resources) tx = tx || m->resourceName(id).find(".tx") != std::string::npos;
  EXPECT_TRUE(tx);
  const Outcome o = runOk(*m, Coll::kAllReduce, 16 << 20, "ring", 1 << 20);
  // One ring crosses each host boundary once: bounded by one 400 Gb/s NIC (50 GB/s).
  EXPECT_GT(o.busbwGBps, 0);
  EXPECT_LE(o.busbwGBps, 50);
}

TEST(SimTopology, CpuOnlyHostRuns) {
  StatusOr<topo::System> sys = topo::loadTopologyFile(topoFile("two-socket-cpu.json"));
  ASSERT_TRUE(sys.ok()) << sys.status().message();
  StatusOr<Machine> m = Machine::fromSystem(*sys, 2, 4, defaultConstants());
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->intraClass(), cost::LinkClass::kShm);
  EXPECT_GT(runOk(*m, Coll::kAllGather, 1 << 20, "tuner", 256 << 10).timeUs, 0);
}

TEST(SimTopology, BadShapesAreRefused) {
  StatusOr<topo::System> sys = topo::loadTopologyFile(topoFile("dgx-h100-like.xml"));
  ASSERT_TRUE(sys.ok());
  StatusOr<Machine> tooMany = Machine::fromSystem(*sys, 1, 9, defaultConstants());
  ASSERT_FALSE(tooMany.ok());
  EXPECT_NE(tooMany.status().message().find("only 8 GPUs"), std::string::npos);
  EXPECT_FALSE(Machine::fromSystem(*sys, 0, 8, defaultConstants()).ok());
  FlatSpec f;
  f.ranksPerHost = 0;
  EXPECT_FALSE(Machine::flat(f).ok());
}


// ---- Folding by host ---------------------------------------------------------------------

Outcome runFold(const Machine& m, Coll coll, uint64_t size, const std::string& algo, bool fold) {
  Case c;
  c.coll = coll;
  c.sizeBytes = size;
  c.algo = algo;
  c.chunkBytes = 64 << 10;
  c.fold = fold;
  StatusOr<Outcome> o = runCase(m, c);
  EXPECT_TRUE(o.ok()) << o.status().message();
  return o.ok() ? std::move(o).value() : Outcome{};
}

// Folded and every-rank simulations of host-shift-symmetric plans agree exactly: the time, every
// rank's finish, every resource's bytes.
TEST(SimFold, FoldedEqualsEveryRank) {
  StatusOr<Machine> dgx = dgxLike(4, 4);
  ASSERT_TRUE(dgx.ok()) << dgx.status().message();
  const Machine flat5 = flat(5, 3, 5, 0.5, 7, 3);
  const Machine flat8 = flat(8, 2, 5, 0.5, 7, 3);
  struct Run {
    const Machine* m;
    Coll coll;
    const char* algo;
    Fold fold;
  };
  const Run runs[] = {
      {&flat5, Coll::kAllReduce, "ring", Fold::kShift},
      {&flat5, Coll::kAllGather, "ring", Fold::kShift},
      {&flat5, Coll::kAllToAll, "pairwise", Fold::kShift},
      {&*dgx, Coll::kAllReduce, "ring", Fold::kShift},
      {&*dgx, Coll::kReduceScatter, "ring", Fold::kShift},
      {&*dgx, Coll::kAllReduce, "hier", Fold::kShift},
      {&*dgx, Coll::kAllReduce, "recursive_doubling", Fold::kXor},
      {&flat8, Coll::kAllReduce, "recursive_doubling", Fold::kXor},
      // Quantized (int8, groups of 256; 15 groups per rank): qgZ, qwZ and the all-reduce of both.
      {&*dgx, Coll::kReduceScatter, "quant_two_hop", Fold::kShift},
      {&*dgx, Coll::kAllGather, "quant_hier", Fold::kShift},
      {&*dgx, Coll::kAllReduce, "quant_two_hop", Fold::kShift},
  };
  for (const Run& r : runs) {
    const uint64_t size = 3 * 5 * 4 * 4096;  // slices divide evenly on 15 and 16 ranks
    const Outcome f = runFold(*r.m, r.coll, size, r.algo, true);
    const Outcome e = runFold(*r.m, r.coll, size, r.algo, false);
    SCOPED_TRACE(f.algo + ": " + f.foldNote);
    ASSERT_TRUE(f.folded);
    EXPECT_EQ(f.fold, r.fold);
    EXPECT_FALSE(e.folded);
    EXPECT_EQ(f.simulatedRanks, r.m->ranksPerHost());
    EXPECT_EQ(e.simulatedRanks, r.m->nranks());
    EXPECT_NEAR(f.timeUs, e.timeUs, 1e-9 * e.timeUs);
    ASSERT_EQ(f.result.rankDoneUs.size(), e.result.rankDoneUs.size());
    for (size_t k = 0; k < e.result.rankDoneUs.size(); ++k)
      EXPECT_NEAR(f.result.rankDoneUs[k], e.result.rankDoneUs[k], 1e-9 * e.timeUs) << k;
    for (size_t k = 0; k < e.result.resourceBytes.size(); ++k)
      EXPECT_NEAR(f.result.resourceBytes[k], e.result.resourceBytes[k], 1e-6) << k;
  }
}

// Rooted collectives and trees over hosts are not the same on every host: every rank runs, and
// the note says which rank broke the symmetry.
TEST(SimFold, FallsBackWhereHostsDiffer) {
  const Machine m = flat(4, 2, 5, 1, 7, 3);
  const Outcome b = runFold(m, Coll::kBroadcast, 1 << 16, "chain", true);
  EXPECT_FALSE(b.folded);
  EXPECT_EQ(b.simulatedRanks, 8);
  EXPECT_NE(b.foldNote.find("is not rank"), std::string::npos) << b.foldNote;
  const Outcome t = runFold(m, Coll::kAllReduce, 1 << 16, "tree", true);
  EXPECT_FALSE(t.folded) << t.foldNote;
  const Outcome one = runFold(flat(1, 4), Coll::kAllReduce, 1 << 16, "ring", true);
  EXPECT_FALSE(one.folded);
  EXPECT_EQ(one.foldNote, "every rank simulated: one host");
}

// An every-rank simulation that would not fit is refused up front, naming the limit.
TEST(SimFold, HugeEveryRankRunsAreRefused) {
  const Machine m = flat(64, 2, 5, 1, 7, 3);
  Case c;
  c.coll = Coll::kBroadcast;
  c.sizeBytes = 1 << 20;
  c.algo = "chain";
  c.chunkBytes = 4096;
  c.maxSteps = 10'000;
  StatusOr<Outcome> o = runCase(m, c);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("over the limit of 10000"), std::string::npos)
      << o.status().message();
}

// Every rank simulated, ranks whose plans are host 0's moved by whole hosts (the chains below
// the tree's host leaders, a chain broadcast's middle ranks, every rank of a ring run without
// folding) run host 0's plan instead of their own (Case::share): the results
// are the same to the bit, and the note counts them.
TEST(SimFold, SharedPlansEqualOwnPlans) {
  StatusOr<Machine> dgx = dgxLike(4, 4);
  ASSERT_TRUE(dgx.ok()) << dgx.status().message();
  const Machine flat43 = flat(4, 3, 5, 0.5, 7, 3);
  FlatSpec spec;  // flat hosts sharing the machine's 2 cores: no folding
  spec.hosts = 3;
  spec.ranksPerHost = 2;
  spec.nicGBps = 0.5;
  spec.cpu = true;
  spec.machineCores = 2;
  StatusOr<Machine> pool = Machine::flat(spec);
  ASSERT_TRUE(pool.ok()) << pool.status().message();
  EngineOptions cpu;
  cpu.msgUs = 3;
  cpu.msgBytesPerUs = 700;
  struct Run {
    const Machine* m;
    Coll coll;
    const char* algo;
    bool fold;
    int shared;  // ranks running host 0's plan
    EngineOptions eo;
  };
  const Run runs[] = {
      {&*dgx, Coll::kAllReduce, "tree", true, 3 * 3, {}},     // local ranks 1-3 of hosts 1-3
      {&flat43, Coll::kAllReduce, "tree", true, 3 * 2, {}},  // local ranks 1-2
      {&flat43, Coll::kBroadcast, "chain", true, 3, {}},  // local rank 1: neither the root's
                                                           // local rank nor the last rank's
      {&flat43, Coll::kAllReduce, "ring", false, 3 * 3, {}},  // folding off
      {&*pool, Coll::kAllReduce, "ring", true, 2 * 2, cpu},
  };
  for (const Run& r : runs) {
    Case c;
    c.coll = r.coll;
    c.sizeBytes = 3 * 5 * 4 * 4096;
    c.algo = r.algo;
    c.chunkBytes = 64 << 10;
    c.fold = r.fold;
    const Machine& m = *r.m;
    StatusOr<Outcome> shared = runCase(m, c, r.eo);
    c.share = false;
    StatusOr<Outcome> own = runCase(m, c, r.eo);
    ASSERT_TRUE(shared.ok() && own.ok());
    SCOPED_TRACE(shared->algo + ": " + shared->foldNote);
    EXPECT_FALSE(shared->folded);
    EXPECT_EQ(shared->sharedRanks, r.shared);
    EXPECT_EQ(own->sharedRanks, 0);
    EXPECT_NE(shared->foldNote.find(std::to_string(r.shared) + " of them run host 0's plan"),
              std::string::npos);
    EXPECT_EQ(shared->steps, own->steps);
    EXPECT_EQ(shared->timeUs, own->timeUs);
    EXPECT_EQ(shared->result.rankDoneUs, own->result.rankDoneUs);
    EXPECT_EQ(shared->result.resourceBytes, own->result.resourceBytes);
    EXPECT_EQ(shared->result.resourceBusyUs, own->result.resourceBusyUs);
    EXPECT_EQ(shared->result.flows, own->result.flows);
    const auto& a = shared->result.criticalPath;
    const auto& b = own->result.criticalPath;
    ASSERT_EQ(a.size(), b.size());
    for (size_t k = 0; k < a.size(); ++k) {
      EXPECT_EQ(std::tie(a[k].rank, a[k].step, a[k].kind, a[k].peer, a[k].bytes),
                std::tie(b[k].rank, b[k].step, b[k].kind, b[k].peer, b[k].bytes)) << k;
      EXPECT_EQ(a[k].startUs, b[k].startUs) << k;
      EXPECT_EQ(a[k].endUs, b[k].endUs) << k;
    }
  }
}

// The engine takes a shared plan only from an earlier rank, and never when folded.
TEST(SimFold, SharedPlansAreChecked) {
  Plans p(2);
  p[0].send(1, in(1024));
  p[1].recv(0, out(1024));
  const auto plans = p.prepare();
  auto source = [&](int like) {
    return [&plans, like](int r) -> StatusOr<RankPlan> {
      if (r == 1 && like >= 0) return RankPlan{nullptr, like};
      return RankPlan{std::shared_ptr<const exec::Plan>(std::shared_ptr<const exec::Plan>(),
                                                        plans[static_cast<size_t>(r)]),
                      -1};
    };
  };
  StatusOr<Result> self = simulate(flat(2, 1), 2, source(1));
  ASSERT_FALSE(self.ok());
  EXPECT_NE(self.status().message().find("rank 1 runs rank 1's plan, which is not an earlier "
                                         "rank"),
            std::string::npos)
      << self.status().message();
  EngineOptions folded;  // two hosts of two ranks: host 0's two plans
  folded.fold = Fold::kShift;
  StatusOr<Result> f = simulate(flat(2, 2), 2, source(0), folded);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("rank 1 runs rank 0's plan, but plans are not shared when "
                                      "folded"),
            std::string::npos)
      << f.status().message();
  StatusOr<Result> ok = simulate(flat(2, 1), 2, source(-1));
  EXPECT_TRUE(ok.ok()) << ok.status().message();
}

// ---- The CPU (EngineOptions::msgUs, msgBytesPerUs, callUs; FlatSpec::cpu, cores) ---------

Machine flatCpu(int hosts, int perHost, int cores, double nicGBps = 1, double memGBps = 0) {
  return flat(hosts, perHost, 5, nicGBps, 7, memGBps, cores);
}

// One message of `bytes` per (sender, receiver) pair, each in its own buffer at both ends.
Plans messages(int n, std::initializer_list<std::pair<int, int>> pairs, uint64_t bytes) {
  Plans p(n);
  std::vector<uint64_t> sent(static_cast<size_t>(n)), received(static_cast<size_t>(n));
  for (const auto& [from, to] : pairs) {
    p[from].send(to, in(bytes, bytes * sent[static_cast<size_t>(from)]++));
    p[to].recv(from, out(bytes, bytes * received[static_cast<size_t>(to)]++));
  }
  return p;
}

StatusOr<Result> simulateCpu(const Machine& m, Plans& p, double msgUs, double copyGBps,
                             double callUs) {
  EngineOptions o;
  o.msgUs = msgUs;
  o.msgBytesPerUs = copyGBps * 1000;
  o.callUs = callUs;
  return simulate(m, p.prepare(), o);
}

// 2 hosts x 1 rank, NIC 1 GB/s (1000 B/us), 7 us between hosts; call 20 us, message 10 us, copy
// 0.5 GB/s (500 B/us at each end). Both ranks spend 0 .. 20 on the call. Rank 0's send: its
// piece 20 .. 30, then 1 MB whose copies hold it to 500 B/us (below the NIC's 1000): 2000 us,
// the last byte leaves at 2030 (rank 0 done). It arrives at 2037; rank 1's receive piece takes
// it to 2047. Each CPU did 20 + 10 us of pieces and 1 MB / 500 B/us = 2000 us of copying.
TEST(SimCpu, OneMessageWithCallMessageAndCopyCosts) {
  const Machine m = flatCpu(2, 1, 0);
  Plans p = messages(2, {{0, 1}}, 1'000'000);
  StatusOr<Result> r = simulateCpu(m, p, 10, 0.5, 20);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_NEAR(r->rankDoneUs[0], 2030, kTol);
  EXPECT_NEAR(r->timeUs, 2047, kTol);
  for (int rank : {0, 1}) {
    const int cpu = m.cpus(rank).at(0);
    EXPECT_TRUE(m.isCpu(cpu));
    EXPECT_NEAR(r->resourceBytes[static_cast<size_t>(cpu)], 2030, 1e-6) << rank;
  }
  // Without CPU costs the same machine gives the plain time: 1000 us on the NIC + 7.
  Plans q = messages(2, {{0, 1}}, 1'000'000);
  StatusOr<Result> plain = simulateCpu(m, q, 0, 0, 0);
  ASSERT_TRUE(plain.ok());
  EXPECT_NEAR(plain->timeUs, 1007, kTol);
}

// 2 hosts x 2 ranks; ranks 0 and 1 each send 1 MB to ranks 2 and 3 (the other host), message
// 10 us, copy 0.8 GB/s (800 B/us). The NIC (1000 B/us) gives each flow 500.
//   cores 0 (a CPU per rank) or 2: each rank's CPU lets its flow copy at 800 > 500, so the NIC
//     rules: pieces 0 .. 10, flows 10 .. 2010, arrival 2017, receive pieces to 2027.
//   cores 1: both ranks of a host share one core. The two send pieces run at half speed,
//     0 .. 20; each flow loads both hosts' core by rate / 800, so 2 rate / 800 <= 1 holds
//     them at 400 (below the NIC's 500): 2500 us, 20 .. 2520, arrival 2527; the two receive
//     pieces share host 1's core again: 20 us, done at 2547.
TEST(SimCpu, RanksSharingCoresSlowDown) {
  for (const auto& [cores, expected] : {std::pair{0, 2027.0}, {2, 2027.0}, {1, 2547.0}}) {
    const Machine m = flatCpu(2, 2, cores);
    Plans p = messages(4, {{0, 2}, {1, 3}}, 1'000'000);
    StatusOr<Result> r = simulateCpu(m, p, 10, 0.8, 0);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_NEAR(r->timeUs, expected, kTol) << cores << " cores";
    EXPECT_NEAR(r->rankDoneUs[2], expected, kTol) << cores << " cores";
  }
}

// The machine's cores (FlatSpec::machineCores): hosts that are namespaces of one machine share
// its CPUs. 4 hosts x 1 rank; rank 0 sends 1 MB to rank 1 and rank 2 to rank 3, message 10 us,
// copy 0.8 GB/s (800 B/us at each end), NICs 1000 B/us, 7 us between hosts.
//   no pool: each flow at its ends' copy rate, 800: pieces 0 .. 10, flows 10 .. 1260, arrival
//     1267, receive pieces to 1277.
//   2 cores: the two send pieces run at once, 0 .. 10; the four ends' copies load the pool by
//     4 rate / 800 <= 2: 400 B/us, 2500 us, 10 .. 2510, arrival 2517, the two receive pieces at
//     once to 2527. The pool did 4 x 10 us of pieces and 4 x 1250 us of copies.
//   1 core: the send pieces share it, 0 .. 20; 4 rate / 800 <= 1: 200 B/us, 5000 us, 20 ..
//     5020, arrival 5027; the receive pieces share it again: done at 5047.
// Such a machine cannot be folded by host: runCase says why and simulates every rank.
TEST(SimCpu, MachineCoresAreSharedByEveryHost) {
  for (const auto& [cores, expected] : {std::pair{0, 1277.0}, {2, 2527.0}, {1, 5047.0}}) {
    FlatSpec f;
    f.hosts = 4;
    f.ranksPerHost = 1;
    f.intraGBps = 1;
    f.intraLatencyUs = 5;
    f.nicGBps = 1;
    f.interLatencyUs = 7;
    f.cpu = true;
    f.machineCores = cores;
    StatusOr<Machine> m = Machine::flat(f);
    ASSERT_TRUE(m.ok()) << m.status().message();
    ASSERT_TRUE(m->setNetwork(NetSpec{}, 0).ok());  // the pool survives a network change
    Plans p = messages(4, {{0, 1}, {2, 3}}, 1'000'000);
    StatusOr<Result> r = simulateCpu(*m, p, 10, 0.8, 0);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_NEAR(r->timeUs, expected, kTol) << cores << " cores";
    EXPECT_NEAR(r->rankDoneUs[3], expected, kTol) << cores << " cores";
    if (cores == 0) {
      EXPECT_EQ(m->cpus(0).size(), 1u);
      EXPECT_TRUE(m->notFoldable().empty()) << m->notFoldable();
      continue;
    }
    const int pool = m->cpus(0).back();
    for (int rank = 1; rank < 4; ++rank) EXPECT_EQ(m->cpus(rank).back(), pool) << rank;
    EXPECT_TRUE(m->isCpu(pool));
    EXPECT_EQ(m->resourceName(pool), "machine:cpus");
    EXPECT_DOUBLE_EQ(m->capacity(pool), cores);
    EXPECT_NEAR(r->resourceBytes[static_cast<size_t>(pool)], 40 + 4 * 1250, 1e-6);
    EXPECT_NE(m->notFoldable().find("share the machine's cores"), std::string::npos);
    Case c;
    c.coll = Coll::kAllReduce;
    c.sizeBytes = 4 * 4096;
    c.algo = "ring";
    c.fold = true;
    EngineOptions eo;
    eo.msgUs = 10;
    StatusOr<Outcome> o = runCase(*m, c, eo);
    ASSERT_TRUE(o.ok()) << o.status().message();
    EXPECT_FALSE(o->folded);
    EXPECT_NE(o->foldNote.find("machine's cores"), std::string::npos) << o->foldNote;
  }
  FlatSpec bad;
  bad.machineCores = 2;  // without CPUs
  EXPECT_FALSE(Machine::flat(bad).ok());
  bad.cpu = true;
  bad.machineCores = -1;
  EXPECT_FALSE(Machine::flat(bad).ok());
}

// Messages between ranks of one host have their own costs (EngineOptions::shmMsgUs,
// shmMsgBytesPerUs; unset, those of messages between hosts). 1 host x 2 ranks, ports 1000
// B/us, 5 us: rank 0 sends 1 MB to rank 1, socket costs 10 us and 0.5 GB/s.
//   unset: piece 0 .. 10, the flow at the copy's 500 B/us 10 .. 2010, arrival 2015, piece to
//     2025.
//   2 us and 4 GB/s: piece 0 .. 2, the flow at the port's 1000 (the copy allows 4000) 2 ..
//     1002, arrival 1007, piece to 1009.
//   0 and free: 1000 us + 5.
// Between hosts the socket costs stay: 2 x 1 ranks as in OneMessageWithCallMessageAndCopyCosts
// without the call piece, 2027 whatever the shared-memory costs.
TEST(SimCpu, SharedMemoryMessagesHaveTheirOwnCosts) {
  for (const auto& [us, gbps, expected] :
       {std::tuple{-1.0, -1.0, 2025.0}, {2.0, 4.0, 1009.0}, {0.0, 0.0, 1005.0}}) {
    EngineOptions o;
    o.msgUs = 10;
    o.msgBytesPerUs = 500;
    o.shmMsgUs = us;
    o.shmMsgBytesPerUs = gbps < 0 ? -1 : gbps * 1000;
    for (const bool between : {false, true}) {
      const Machine m = between ? flatCpu(2, 1, 0) : flatCpu(1, 2, 0);
      Plans p = messages(2, {{0, 1}}, 1'000'000);
      StatusOr<Result> r = simulate(m, p.prepare(), o);
      ASSERT_TRUE(r.ok()) << r.status().message();
      EXPECT_NEAR(r->timeUs, between ? 2027.0 : expected, kTol)
          << "shm " << us << " us, " << gbps << " GB/s, between hosts " << between;
    }
  }
  // Shared-memory costs alone still need CPUs.
  EngineOptions o;
  o.shmMsgUs = 1;
  Plans p = messages(2, {{0, 1}}, 100);
  StatusOr<Result> r = simulate(flat(1, 2), p.prepare(), o);
  ASSERT_FALSE(r.ok());
}

// A rank's pieces run one after another (one thread). 3 hosts x 1 rank; rank 0 sends 1 KB to
// rank 1 and 1 KB to rank 2 (independent steps, ready at once), message 10 us, copy free: its
// pieces take 0 .. 10 and 10 .. 20 (FIFO, in program order), each message 1 us through the
// 1000 B/us port and NIC, arriving 7 us later (18, 28); the receivers' pieces end at 28 and 38.
// Processor sharing would end both pieces at 20, share the port 20 .. 22, and end both
// receivers at 39. Then zero-byte messages: rank 0 notifies rank 1 once, which waits: a piece
// at each end, no copy: 10 + 7 + 10.
TEST(SimCpu, ARanksPiecesRunOneAfterAnother) {
  const Machine m = flatCpu(3, 1, 0);
  Plans p = messages(3, {{0, 1}, {0, 2}}, 1'000);
  StatusOr<Result> r = simulateCpu(m, p, 10, 0, 0);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_NEAR(r->rankDoneUs[0], 21, kTol);
  EXPECT_NEAR(r->rankDoneUs[1], 28, kTol);
  EXPECT_NEAR(r->rankDoneUs[2], 38, kTol);
  Plans q(3);
  q[0].notify(1);
  q[1].wait(0);
  r = simulateCpu(m, q, 10, 0.001, 0);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_NEAR(r->timeUs, 27, kTol);
}

// The buckets at the call's start (EngineOptions::buckets). 2 x 1 ranks, NIC 0.25 GB/s (250
// B/us) with 2000 us buckets (500 KB), ports 1000 B/us, memory 1000 B/us, message 10 us. Rank 0
// sends 20 KB; rank 1 receives it and copies 100 KB (200 KB of memory traffic: 200 us).
//   full:  piece 0 .. 10, the flow at the port's 1000 B/us (the buckets hold enough) 10 .. 30,
//          arrival 37, receive piece 37 .. 47, copy 47 .. 247.
//   empty: the buckets fill to 2500 B during the piece; the flow starts at 1000 B/us and
//          drains them at 750 B/us: dry at 13.333 with 3,333.3 B sent; the other 16,666.7 B at
//          250 B/us take 66.667 us: the last byte leaves at 80, arrival 87, piece to 97, copy
//          to 297.
//   steady: 20 KB over the full run's 247 us is 81 B/us, below the NIC's 250: full, 247.
//          With the copy gone the full run takes 47 us and 20 KB / 47 us is above the rate: the
//          bucket would drain call after call, so steady is the empty run: 80 + 7 + 10 = 97.
TEST(SimCpu, BucketStartEmptyFullAndSteady) {
  Machine m = flatCpu(2, 1, 0, /*nicGBps=*/0.25, /*memGBps=*/1);
  ASSERT_TRUE(m.setNicBurst(2000, 0).ok());
  for (const bool copy : {true, false}) {
    for (const auto& [start, expected] :
         {std::pair{BucketStart::kFull, copy ? 247.0 : 47.0},
          {BucketStart::kEmpty, copy ? 297.0 : 97.0},
          {BucketStart::kSteady, copy ? 247.0 : 97.0}}) {
      Plans p(2);
      p[0].send(1, in(20'000));
      p[1].recv(0, out(20'000));
      if (copy) p[1].copy(out(100'000), out(100'000, 100'000));
      EngineOptions o;
      o.msgUs = 10;
      o.buckets = start;
      StatusOr<Result> r = simulate(m, p.prepare(), o);
      ASSERT_TRUE(r.ok()) << r.status().message();
      EXPECT_NEAR(r->timeUs, expected, 1e-6)
          << "copy " << copy << ", start " << static_cast<int>(start);
    }
  }
}

// Through runCase, whose plan source is asked twice when kSteady runs a call again (its host-0
// plans were once moved out on the first ask): the steady time is the full or the empty one,
// and the steps are counted once. 4 x 2 ranks, ring, NICs at 125 B/us: at 64 KiB a NIC
// carries 2 x 7/8 x 64 KiB in about 0.5 ms, at 64 MiB a thousand times that in about 1 s: both
// above the rate on average, so steady is the empty run; and the full one is faster.
TEST(SimCpu, SteadyBucketsThroughRunCase) {
  Machine m = flatCpu(4, 2, 0, 0.125);
  ASSERT_TRUE(m.setNicBurst(4000, 64 << 10).ok());
  for (const uint64_t size : {uint64_t{64} << 10, uint64_t{64} << 20}) {
    Case c;
    c.coll = Coll::kAllReduce;
    c.sizeBytes = size;
    c.algo = "ring";
    c.chunkBytes = 256 << 10;
    EngineOptions eo;
    eo.msgUs = 10;
    eo.callUs = 30;
    std::vector<Outcome> o;
    for (BucketStart b : {BucketStart::kFull, BucketStart::kEmpty, BucketStart::kSteady}) {
      eo.buckets = b;
      StatusOr<Outcome> r = runCase(m, c, eo);
      ASSERT_TRUE(r.ok()) << r.status().message();
      o.push_back(std::move(r).value());
    }
    EXPECT_LT(o[0].timeUs, o[1].timeUs) << size;
    EXPECT_DOUBLE_EQ(o[2].timeUs, o[1].timeUs) << size;
    EXPECT_EQ(o[2].steps, o[0].steps) << size;
  }
}

// CPU costs on a machine without CPUs are refused, not ignored.
TEST(SimCpu, CostsWithoutCpusAreRefused) {
  const Machine m = flat(2, 1);
  Plans p(2);
  p[0].send(1, in(100));
  p[1].recv(0, out(100));
  StatusOr<Result> r = simulateCpu(m, p, 10, 0, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("CPU costs need a machine with CPUs"), std::string::npos)
      << r.status().message();
}

// The CPU terms keep folding exact: a host's ranks pay the same pieces as host 0's, on their
// own host's CPUs. Folded and every-rank runs agree, with shared cores and with one per rank.
TEST(SimCpu, FoldedEqualsEveryRankWithCpuCosts) {
  EngineOptions eo;
  eo.msgUs = 3;
  eo.msgBytesPerUs = 700;
  eo.callUs = 11;
  for (int cores : {0, 1}) {
    const Machine ring = flatCpu(5, 3, cores, 0.5), xorFold = flatCpu(8, 2, cores, 0.5);
    for (const auto& [mp, algo] : {std::pair{&ring, "ring"}, {&xorFold, "recursive_doubling"}}) {
      const Machine& m = *mp;
      Case c;
      c.coll = Coll::kAllReduce;
      c.sizeBytes = 3 * 5 * 4 * 4096;
      c.algo = algo;
      c.chunkBytes = 64 << 10;
      c.fold = true;
      StatusOr<Outcome> f = runCase(m, c, eo);
      c.fold = false;
      StatusOr<Outcome> e = runCase(m, c, eo);
      ASSERT_TRUE(f.ok() && e.ok());
      SCOPED_TRACE(std::string(algo) + ", cores " + std::to_string(cores));
      ASSERT_TRUE(f->folded) << f->foldNote;
      EXPECT_NEAR(f->timeUs, e->timeUs, 1e-9 * e->timeUs);
      for (size_t k = 0; k < e->result.resourceBytes.size(); ++k)
        EXPECT_NEAR(f->result.resourceBytes[k], e->result.resourceBytes[k], 1e-6) << k;
      // And the CPU costs did something: more than the plain run.
      StatusOr<Outcome> none = runCase(m, c);
      ASSERT_TRUE(none.ok());
      EXPECT_GT(e->timeUs, none->timeUs + 11);
    }
  }
}

// A rate computation starts next to the change and grows where max-min fairness fails
// (engine.h); it must give what a computation over everything connected gives. Every-rank runs
// on machines where many flows meet: a DGX-like topology (NVLink, PCIe, NICs; flows with caps),
// an oversubscribed fat tree, CPUs shared through a pool and by the machine, and emulated NICs
// with token buckets.
TEST(SimEngine, LocalRatesEqualWholeComponents) {
  StatusOr<Machine> dgx = dgxLike(4, 4);
  ASSERT_TRUE(dgx.ok()) << dgx.status().message();
  Machine fat = flat(8, 2, 5, 1, 7, 3);
  NetSpec net;
  net.kind = NetSpec::Kind::kFatTree;
  net.hostsPerLeaf = 2;
  net.oversub = 3;
  ASSERT_TRUE(fat.setNetwork(net, 0.5).ok());
  const Machine cpu = flatCpu(4, 3, 2, 0.5);
  Machine tbf = flatCpu(4, 2, 1, 0.125);
  ASSERT_TRUE(tbf.setNicBurst(4000, 64 << 10).ok());
  EngineOptions costs;
  costs.msgUs = 3;
  costs.msgBytesPerUs = 700;
  costs.callUs = 5;
  // Machine, collective, algorithm, with the CPU costs.
  const std::tuple<const Machine*, Coll, const char*, bool> runs[] = {
      {&*dgx, Coll::kAllReduce, "tree", false},   {&*dgx, Coll::kAllReduce, "hier", false},
      {&*dgx, Coll::kAllToAll, "pairwise", false}, {&fat, Coll::kAllReduce, "tree", false},
      {&fat, Coll::kAllReduce, "ring", false},     {&cpu, Coll::kAllReduce, "tree", true},
      {&tbf, Coll::kAllReduce, "tree", true},      {&tbf, Coll::kAllReduce, "ring", true},
  };
  uint64_t localFlows = 0, wholeFlows = 0, growths = 0;
  for (const auto& [m, coll, algo, cpuCosts] : runs) {
    Case c;
    c.coll = coll;
    c.sizeBytes = 3 << 20;
    c.algo = algo;
    c.chunkBytes = 64 << 10;
    c.fold = false;
    EngineOptions o = cpuCosts ? costs : EngineOptions{};
    StatusOr<Outcome> local = runCase(*m, c, o);
    o.wholeComponents = true;
    StatusOr<Outcome> whole = runCase(*m, c, o);
    ASSERT_TRUE(local.ok() && whole.ok());
    SCOPED_TRACE(local->algo + " on " + m->summary());
    EXPECT_NEAR(local->timeUs, whole->timeUs, 1e-9 * whole->timeUs);
    EXPECT_EQ(local->result.flows, whole->result.flows);
    for (size_t k = 0; k < whole->result.resourceBytes.size(); ++k)
      EXPECT_NEAR(local->result.resourceBytes[k], whole->result.resourceBytes[k],
                  1e-9 * whole->result.resourceBytes[k] + 1e-6)
          << k;
    EXPECT_EQ(whole->result.growths, 0u);
    localFlows += local->result.sharedFlows;
    wholeFlows += whole->result.sharedFlows;
    growths += local->result.growths;
  }
  // The check did grow sets somewhere, and the local computations did less.
  EXPECT_GT(growths, 0u);
  EXPECT_LT(localFlows, wholeFlows);
}

// The network beyond the NICs. Flat hosts, one rank each, NIC 1 GB/s, no latency anywhere but
// the switches, so times are bytes / rate plus the switches' latency.
Machine onNetwork(int hosts, NetSpec::Kind kind, int perLeaf, double oversub, double switchUs) {
  Machine m = flat(hosts, 1, /*alpha=*/0, /*nicGBps=*/1, /*interAlpha=*/0);
  NetSpec net;
  net.kind = kind;
  net.hostsPerLeaf = perLeaf;
  net.oversub = oversub;
  const Status s = m.setNetwork(net, switchUs);
  EXPECT_TRUE(s.ok()) << s.message();
  return m;
}

// 4 hosts, 2 per leaf, oversubscription 2: a leaf's uplink carries 2 x 1 / 2 = 1 GB/s. Hosts 0
// and 1 (leaf 0) each send 1 MB to hosts 2 and 3 (leaf 1): both flows share leaf 0's uplink,
// 500 B/us each, 2000 us, plus two more switches (leaf, spine, leaf) at 0.5 us. At
// oversubscription 1 each flow has its NIC's full 1 GB/s: 1000 us.
TEST(SimNetwork, FatTreeUplinkIsSharedAcrossLeaves) {
  for (double ratio : {1.0, 2.0}) {
    const Machine m = onNetwork(4, NetSpec::Kind::kFatTree, 2, ratio, 0.5);
    EXPECT_TRUE(m.notFoldable().find("2 groups") != std::string::npos) << m.notFoldable();
    Plans p(4);
    p[0].send(2, in(1'000'000));
    p[1].send(3, in(1'000'000));
    p[2].recv(0, out(1'000'000));
    p[3].recv(1, out(1'000'000));
    const Result r = simulateOk(m, p);
    EXPECT_NEAR(r.timeUs, 1000 * ratio + 2 * 0.5, kTol) << "ratio " << ratio;
  }
  // Into one leaf from two others (6 hosts, 3 leaves): the flows share the receiving leaf's
  // downlink, 1 GB/s, and take twice as long.
  {
    const Machine m = onNetwork(6, NetSpec::Kind::kFatTree, 2, 2, 0.5);
    Plans p(6);
    p[0].send(4, in(1'000'000));
    p[2].send(5, in(1'000'000));
    p[4].recv(0, out(1'000'000));
    p[5].recv(2, out(1'000'000));
    EXPECT_NEAR(simulateOk(m, p).timeUs, 2000 + 2 * 0.5, kTol);
  }
  // One leaf for all hosts: a single switch, nothing shared, the hosts still fold.
  const Machine one = onNetwork(4, NetSpec::Kind::kFatTree, 0, 2, 0.5);
  EXPECT_EQ(one.notFoldable(), "");
  EXPECT_EQ(one.numResources(), one.hostResources());
  // Inside a leaf there is no uplink and no extra switch.
  const Machine m = onNetwork(4, NetSpec::Kind::kFatTree, 2, 2, 0.5);
  EXPECT_NEAR(m.route(0, 1).latencyUs, 0, kTol);
  EXPECT_EQ(m.route(0, 1).resources.size(), 4u);  // out port, NIC tx, NIC rx, in port
  EXPECT_NEAR(m.route(1, 2).latencyUs, 1, kTol);
  EXPECT_EQ(m.route(1, 2).resources.size(), 6u);  // and leaf 0's uplink, leaf 1's downlink
}

// A ring all-gather over 4 hosts, 2 per leaf, oversubscription 4 (uplink 0.5 GB/s): the ring
// 0 -> 1 -> 2 -> 3 -> 0 crosses leaves on 1 -> 2 and 3 -> 0, each alone on its uplink at half
// the NIC's rate. With blocks of S/4 = 250 KB, tau = 250 us at 1 GB/s: rank 1 sends three
// blocks to rank 2 one after another, 2 tau each, the third leaving only once rank 0 has
// forwarded the block it got from 3 over the other slow link (at 2 tau, then tau to rank 1):
// rank 2 has its last block at 6 tau = 1500 us, twice the 3 tau of a non-blocking network.
TEST(SimNetwork, CrossLeafRingSeesHalfBandwidth) {
  const uint64_t size = 1'000'000;
  const Outcome full =
      runOk(onNetwork(4, NetSpec::Kind::kFatTree, 2, 1, 0), Coll::kAllGather, size, "ring", size);
  const Outcome half =
      runOk(onNetwork(4, NetSpec::Kind::kFatTree, 2, 4, 0), Coll::kAllGather, size, "ring", size);
  EXPECT_NEAR(full.timeUs, 750, kTol);
  EXPECT_NEAR(half.timeUs, 1500, kTol);
  EXPECT_FALSE(half.folded);
  EXPECT_NE(half.foldNote.find("groups of leaf switches"), std::string::npos) << half.foldNote;
}

// Rails on the DGX-like file: NIC i of every host on rail i. Between hosts, GPU 0 to GPU 0 stays
// on rail 0; GPU 0 to GPU 1 goes through the spine, two switches more, and with
// oversubscription 8 through rail leaf 0's uplink of 2 hosts x 50 GB/s / 8 = 12.5 GB/s.
TEST(SimNetwork, RailsSendOtherRailsThroughTheSpine) {
  StatusOr<topo::System> sys = topo::loadTopologyFile(topoFile("dgx-h100-like.xml"));
  ASSERT_TRUE(sys.ok());
  const Constants& k = defaultConstants();
  StatusOr<Machine> m = Machine::fromSystem(*sys, 2, 8, k);
  ASSERT_TRUE(m.ok()) << m.status().message();
  NetSpec net;
  net.kind = NetSpec::Kind::kRails;
  net.oversub = 8;
  ASSERT_TRUE(m->setNetwork(net, k.switchLatencyUs).ok());
  EXPECT_NE(m->notFoldable().find("rail uplinks"), std::string::npos) << m->notFoldable();
  const Route same = m->route(0, 8), other = m->route(0, 9);
  EXPECT_NEAR(other.latencyUs - same.latencyUs, 2 * k.switchLatencyUs, kTol);
  double slowest = kUnlimited;
  for (int id : other.resources) slowest = std::min(slowest, m->capacity(id));
  EXPECT_NEAR(slowest, 12'500, 1e-6);
  int spine = 0;
  for (int id : other.resources) spine += m->resourceName(id).rfind("net:", 0) == 0 ? 1 : 0;
  EXPECT_EQ(spine, 2);  // rail leaf 0's uplink, rail leaf 1's downlink
  for (int id : same.resources) EXPECT_LT(id, m->hostResources());
  // One rail in one group at oversubscription 1: latency only, and the hosts still fold.
  net.oversub = 1;
  ASSERT_TRUE(m->setNetwork(net, k.switchLatencyUs).ok());
  EXPECT_EQ(m->notFoldable(), "");
  EXPECT_EQ(m->numResources(), m->hostResources());
}

// Quantized collectives. By hand first: rank 0 quantizes E bytes of float32 into P packed bytes,
// sends them, rank 1 decodes them. Memory 1 GB/s, quantization traffic 2 x the bytes touched:
// encode 2 (E + P) / 1000 us, the message P / 1000 + 5 us, decode 2 (P + E) / 1000 us.
TEST(SimQuant, QuantizeSendDequantizeByHand) {
  const Machine m = flat(1, 2, /*alpha=*/5, /*nicGBps=*/1, /*interAlpha=*/7, /*memGBps=*/1);
  const uint64_t count = 250'000, E = 4 * count;
  const uint64_t P = kernels::quantizedSize(count, kernels::QuantConfig{});
  Plans p(2);
  p[0].quantize(in(E), {sched::kScratch, 0, P}, count, 0);
  p[0].send(1, {sched::kScratch, 0, P});
  p[1].recv(0, {sched::kScratch, 0, P});
  p[1].dequantize({sched::kScratch, 0, P}, 1, out(E), count);
  for (double traffic : {2.0, 1.0}) {
    EngineOptions eo;
    eo.quantTraffic = traffic;
    StatusOr<Result> r = simulate(m, p.prepare(), eo);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const double t = 2 * traffic * static_cast<double>(E + P) / 1000 +
                     static_cast<double>(P) / 1000 + 5;
    EXPECT_NEAR(r->timeUs, t, kTol) << "traffic " << traffic;
  }
}

// qgZ (quant_two_hop reduce-scatter) and qwZ (quant_hier all-gather) on 2 hosts x 2 ranks: the
// NIC carries the plan's packed bytes, L (H-1) blocks per host (each block is quantizedSize of
// a rank's count), not the float32 ones; and they take longer when quantization costs more.
TEST(SimQuant, TwoHopWireBytesArePacked) {
  const Machine m = flat(2, 2, 5, 1, 7, /*memGBps=*/4);
  const uint64_t count = 65'536;  // elements per rank's slice (reduce-scatter) or block
  const uint64_t packed = kernels::quantizedSize(count, kernels::QuantConfig{});
  for (auto [coll, algo] : {std::pair{Coll::kReduceScatter, "quant_two_hop"},
                            std::pair{Coll::kAllGather, "quant_hier"}}) {
    Case c;
    c.coll = coll;
    c.sizeBytes = 4 * 4 * count;  // the larger buffer: n x count float32
    c.algo = algo;
    StatusOr<Outcome> o = runCase(m, c);
    ASSERT_TRUE(o.ok()) << o.status().message();
    EXPECT_EQ(o->algo, std::string(sched::collName(coll)) + ":" + algo);
    double nicTx = -1;
    for (int id = 0; id < m.numResources(); ++id)
      if (m.resourceName(id) == "h0:nic.tx")
        nicTx = o->result.resourceBytes[static_cast<size_t>(id)];
    EXPECT_NEAR(nicTx, 2.0 * static_cast<double>(packed), 0.5) << algo;
    EXPECT_LT(packed, 4 * count / 3);  // int8: about a quarter of float32
    EngineOptions dear;
    dear.quantTraffic = 4;
    StatusOr<Outcome> slower = runCase(m, c, dear);
    ASSERT_TRUE(slower.ok());
    EXPECT_GT(slower->timeUs, o->timeUs) << algo;
  }
  // A bad config is refused naming it.
  Case bad;
  bad.coll = Coll::kReduceScatter;
  bad.sizeBytes = 4 * 4 * count;
  bad.algo = "quant_two_hop";
  bad.quant = kernels::QuantConfig{.bits = 5};
  StatusOr<Outcome> o = runCase(m, bad);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("bits"), std::string::npos) << o.status().message();
}

// What-if overrides change a copy of the table, by name, and refuse what is not a constant.
TEST(SimConstants, SetConstantByName) {
  Constants k = defaultConstants();
  ASSERT_TRUE(setConstant(k, "gpu.message", 0).ok());
  EXPECT_EQ(k.gpuMessageUs, 0);
  EXPECT_EQ(defaultConstants().gpuMessageUs, 3.4);
  const Status unknown = setConstant(k, "gpu.msg", 1);
  EXPECT_NE(unknown.message().find("unknown constant 'gpu.msg' (known: cpu.membw"),
            std::string::npos)
      << unknown.message();
  EXPECT_FALSE(setConstant(k, "nic.latency", -1).ok());
}

TEST(SimNetwork, BadNetworksAreRefused) {
  Machine m = flat(4, 1);
  NetSpec net;
  net.kind = NetSpec::Kind::kFatTree;
  net.oversub = 0.5;
  Status s = m.setNetwork(net, 0.5);
  EXPECT_NE(s.message().find("oversubscription ratio"), std::string::npos) << s.message();
  net.oversub = 2;
  net.hostsPerLeaf = -1;
  s = m.setNetwork(net, 0.5);
  EXPECT_NE(s.message().find("hosts per leaf"), std::string::npos) << s.message();
}

// The store frames of one all-gather by hand (store.h's layout): 2 ranks, a 90-byte record, call
// 1. Request: frame header 8, op 1, own key (u32 length + "chorus/gather/1/0", 17) 21, value
// (u64 length + 90) 98, u32 count 4, both keys 2 x 21 = 42: 174. Reply: header 8, status 1,
// u32 count 4, 2 x (u64 length + 90): 209. (The same two sizes strace showed for chorus-run
// -n 2 with CHORUS_TRANSPORT=tcp on the development machine.)
TEST(SimInit, GatherFramesByHand) {
  const GatherBytes g = gatherBytes(0, 2, 1, 90);
  EXPECT_EQ(g.request, 174u);
  EXPECT_EQ(g.reply, 209u);
  // Rank 10's key has one more digit, and so its request one more byte.
  EXPECT_EQ(gatherBytes(10, 12, 1, 90).request, gatherBytes(0, 12, 1, 90).request + 1);
}

// 16 ranks, 8 per host, 134-byte records. Store out: 16 hello replies of 9 bytes (144), 16 add
// and 16 get replies of 17 (544), 16 PeerInfo replies of 13 + 16 x (8 + 134) = 2285 (36,560),
// 16 vote replies of 13 + 16 x (8 + 12) = 333 (5,328): 42,576. Its memory at gather #1's answer:
// the 16 replies, 36,560, plus the values it holds, 16 x 134 + 16 x 12 = 2,336: 38,896.
// Eager: 8 sockets (the other host's ranks), 15 dials of 40 us; heartbeats every 0.5 s from 15
// peers to each of 8 ranks: 240 per second. Lazy with the ring only: 2 peers, one of them on
// the other host for each sampled rank (0: prev 15; 7: next 8; 8: prev 7; 15: next 0).
TEST(SimInit, SixteenRanksByHand) {
  InitSpec spec;
  spec.lazyAlgos = {"allreduce:ring"};
  auto rows = modelInit(spec, 16);
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 2u);
  const InitRow& r = rows->back();
  EXPECT_EQ(r.ranks, 16);
  EXPECT_EQ(r.gatherReply, 2285u);
  EXPECT_DOUBLE_EQ(r.storeOutBytes, 42576);
  EXPECT_DOUBLE_EQ(r.storePeakBytes, 38896);
  EXPECT_EQ(r.eagerSockets, 8);
  EXPECT_DOUBLE_EQ(r.eagerDialUs, 600);
  EXPECT_DOUBLE_EQ(r.heartbeatsPerHostS, 240);
  EXPECT_EQ(r.lazyPeers, 2);
  EXPECT_EQ(r.lazySockets, 1);
  EXPECT_EQ(rows->front().eagerSockets, 0);  // 8 ranks: one host, shared memory only
}

TEST(SimInit, BadInputIsNamed) {
  InitSpec spec;
  spec.lazyAlgos = {"allreduce:nonesuch"};
  auto rows = modelInit(spec, 16);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("allreduce:nonesuch"), std::string::npos);
  spec = InitSpec{};
  spec.ranksPerHost = 32;
  rows = modelInit(spec, 16);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("ranks of one host"), std::string::npos);
}

}  // namespace
}  // namespace chorus::sim
