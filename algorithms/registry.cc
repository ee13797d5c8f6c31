#include "algorithms/registry.h"

#include "algorithms/alltoall/alltoall.h"
#include "algorithms/barrier/barrier.h"
#include "algorithms/direct/direct.h"
#include "algorithms/hier/hier.h"
#include "algorithms/ring/ring.h"
#include "algorithms/tree/tree.h"

namespace chorus::algo {

using sched::Coll;

namespace {

constexpr AlgoInfo kAlgorithms[] = {
    {Coll::kAllReduce, "ring", "ring reduce-scatter then ring all-gather, chunk-pipelined",
     &buildRingAllReduce},
    {Coll::kAllReduce, "oneshot", "every rank sends its input to all, then reduces locally in rank order",
     &buildOneShotAllReduce},
    {Coll::kReduceScatter, "ring", "ring of n-1 reduce steps, partials in bounded scratch",
     &buildRingReduceScatter},
    {Coll::kAllGather, "ring", "ring of n-1 forwarding steps, received straight into the output",
     &buildRingAllGather},
    {Coll::kBroadcast, "chain", "pipelined chain root -> root+1 -> ... chunk by chunk",
     &buildChainBroadcast},
    {Coll::kReduce, "chain", "pipelined chain root+1 -> ... -> root, reducing chunk by chunk",
     &buildChainReduce},
    {Coll::kAllToAll, "pairwise", "n-1 steps, step s sends to r+s and receives from r-s",
     &buildPairwiseAllToAll},
    {Coll::kAllToAllv, "pairwise", "pairwise exchange with per-peer counts and displacements",
     &buildPairwiseAllToAllv},
    {Coll::kGather, "linear", "every rank sends its block straight to the root",
     &buildLinearGather},
    {Coll::kScatter, "linear", "the root sends each rank its block directly",
     &buildLinearScatter},
    {Coll::kBarrier, "dissemination", "ceil(log2 n) rounds of 1-byte tokens to r+2^k",
     &buildDisseminationBarrier},
    // One-sided (Schedule::needsOneSided()): only for transports that can read peer memory.
    {Coll::kAllReduce, "twoshot",
     "one-sided: each rank reduces its slice from all inputs, then reads every reduced slice",
     &buildTwoShotAllReduce},
    {Coll::kReduceScatter, "direct", "one-sided: each rank reduces its block from all inputs",
     &buildDirectReduceScatter},
    {Coll::kAllGather, "direct", "one-sided: each rank reads every input into its output",
     &buildDirectAllGather},
    {Coll::kBroadcast, "direct", "one-sided: every rank reads the root's input",
     &buildDirectBroadcast},
    {Coll::kReduce, "direct",
     "one-sided: each rank reduces its slice from all inputs, the root reads the slices",
     &buildDirectReduce},
    {Coll::kAllToAll, "direct", "one-sided: each rank reads its block of every input",
     &buildDirectAllToAll},
    {Coll::kGather, "direct", "one-sided: the root reads every rank's input",
     &buildDirectGather},
    {Coll::kScatter, "direct", "one-sided: every rank reads its block of the root's input",
     &buildDirectScatter},
    // Trees and host-aware schedules (CollDesc::hostOf); appended so that the first entry of
    // each collective, the fallback default, stays the same.
    {Coll::kAllReduce, "tree",
     "double binary tree over host leaders (chains inside hosts), half the data per tree",
     &buildDoubleTreeAllReduce},
    {Coll::kAllReduce, "rabenseifner",
     "recursive halving reduce-scatter + recursive doubling all-gather, extra ranks folded",
     &buildRabenseifnerAllReduce},
    {Coll::kAllReduce, "recursive_doubling",
     "log2 n exchanges of the whole vector with partners 1, 2, 4, ... apart, extra ranks folded",
     &buildRecursiveDoublingAllReduce},
    {Coll::kAllReduce, "hier",
     "intra-host reduce-scatter, ring all-reduce across hosts per rail, intra-host all-gather",
     &buildHierAllReduce},
    {Coll::kBroadcast, "binomial", "binomial tree from the root, chunk-pipelined",
     &buildBinomialBroadcast},
    {Coll::kBroadcast, "hier",
     "scatter in the root's host, chain across hosts per rail, all-gather in each host",
     &buildHierBroadcast},
    {Coll::kReduce, "binomial", "binomial tree to the root, chunk-pipelined, partials in scratch",
     &buildBinomialReduce},
    {Coll::kAllGather, "hier", "ring all-gather across hosts per rail, then exchange inside hosts",
     &buildHierAllGather},
    {Coll::kReduceScatter, "hier",
     "reduce onto the rails inside each host, then ring reduce-scatter across hosts per rail",
     &buildHierReduceScatter},
    {Coll::kAllToAll, "hier",
     "2-hop: regroup by destination host inside each host, then one exchange per rail",
     &buildHierAllToAll},
};

}  // namespace

std::span<const AlgoInfo> allAlgorithms() { return kAlgorithms; }

const AlgoInfo* findAlgorithm(Coll coll, std::string_view name) {
  const std::string_view prefix = sched::collName(coll);
  if (name.size() > prefix.size() && name.substr(0, prefix.size()) == prefix &&
      name[prefix.size()] == ':')
    name.remove_prefix(prefix.size() + 1);
  for (const AlgoInfo& a : kAlgorithms)
    if (a.coll == coll && name == a.name) return &a;
  return nullptr;
}

// The selection rule until the topology-aware tuner exists.
//
// Without shared memory: each collective's first registered algorithm, except all-reduce of
// small messages on few ranks, which is latency-bound and takes one step with one-shot instead of
// 2(n-1) with the ring (measured over TCP on 2 cores: 8 B, 2 ranks, 26 us ring vs 13 us one-shot).
//
// All ranks on one host with cross-memory attach (docs/performance.md has the measurements):
// all-reduces that fit the staging slots run one-shot through them; larger ones two-shot, which
// reads each input byte once and writes each output byte once (through the staging segment's
// round areas when it has them — at every size faster than over cross-memory attach, whose
// page pinning costs more than the extra copy —, else over cross-memory attach); the other collectives read
// directly from their peers once a message is large enough that one process_vm_readv per peer
// beats copying through the rings (kDirectMinBytes).
const AlgoInfo* defaultAlgorithm(Coll coll, const sched::CollDesc& d, const Platform& p) {
  const uint64_t bytes = d.count * d.elemSize;
  const int n = p.nranks;
  if (coll == Coll::kAllReduce && n > 1) {
    if (p.stagingBytes > 0 && bytes <= p.stagingBytes) return findAlgorithm(coll, "oneshot");
    if (p.oneSided || p.stagedTwoShot) return findAlgorithm(coll, "twoshot");
    if (n <= 16 && bytes <= kOneShotMaxBytes) return findAlgorithm(coll, "oneshot");
  }
  if (p.oneSided && n > 1 && coll != Coll::kBarrier && coll != Coll::kAllToAllv &&
      bytes >= kDirectMinBytes) {
    if (const AlgoInfo* a = findAlgorithm(coll, "direct")) return a;
  }
  for (const AlgoInfo& a : kAlgorithms)
    if (a.coll == coll) return &a;
  return nullptr;
}

const AlgoInfo* defaultAlgorithm(Coll coll, const sched::CollDesc& d, int nranks) {
  Platform p;
  p.nranks = nranks;
  return defaultAlgorithm(coll, d, p);
}

sched::Schedule makeSchedule(const AlgoInfo& algo, const sched::CollDesc& d, int rank,
                             int nranks) {
  sched::Schedule s = algo.build(d, rank, nranks);
  s.finalize();
  return s;
}

}  // namespace chorus::algo
