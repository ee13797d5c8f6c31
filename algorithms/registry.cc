#include "algorithms/registry.h"

#include "algorithms/alltoall/alltoall.h"
#include "algorithms/barrier/barrier.h"
#include "algorithms/direct/direct.h"
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

// The selection rule until the topology-aware tuner exists: each collective's first registered
// algorithm, except all-reduce of small messages on few ranks, which is latency-bound and takes
// one step with one-shot instead of 2(n-1) with the ring (measured over TCP on 2 cores: 8 B,
// 2 ranks, 26 us ring vs 13 us one-shot; see docs/performance.md).
const AlgoInfo* defaultAlgorithm(Coll coll, const sched::CollDesc& d, int nranks) {
  if (coll == Coll::kAllReduce && nranks > 1 && nranks <= 16 &&
      d.count * d.elemSize <= kOneShotMaxBytes)
    return findAlgorithm(coll, "oneshot");
  for (const AlgoInfo& a : kAlgorithms)
    if (a.coll == coll) return &a;
  return nullptr;
}

sched::Schedule makeSchedule(const AlgoInfo& algo, const sched::CollDesc& d, int rank,
                             int nranks) {
  sched::Schedule s = algo.build(d, rank, nranks);
  s.finalize();
  return s;
}

}  // namespace chorus::algo
