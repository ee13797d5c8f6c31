// Direct reduce-scatter over one-sided reads: rank r reads block r of every input.
//
// Schedule. out[c] = in[r*count + c] ⊕ get(r+1, same range) ⊕ get(r+2, same range) ⊕ ..., chunk
// by chunk, one getReduce per peer, the first folding in the rank's own block (the order of
// terms is fixed per element). Then notify every peer ("I have finished reading your input") and
// wait for every peer's notify, so that no rank returns while its input is still being read.
//
// In place (recvbuff == sendbuff + r*count) the output is input block r, reduced over itself;
// peers read only the other blocks, which rank r never writes.
//
// Cost (alpha-beta, output of N bytes per rank, chunks of c bytes): each rank reads (n-1) N
// bytes and reduces them (the ring's volume) with about n-1 get latencies per chunk chain
// (chunks are independent) and one notify / wait round — against the ring's (n-1) ceil(N/c)
// message latencies.
//
// Tuner: reduce-scatter on one host over a one-sided transport, small and medium blocks, where
// the ring's n-1 dependent steps dominate; never over a transport without gets.
#include "algorithms/direct/direct.h"
#include "algorithms/direct/pull.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;

sched::Schedule buildDirectReduceScatter(const sched::CollDesc& d, int rank, int nranks) {
  sched::Schedule s;
  s.algo = "direct";
  const uint64_t es = d.elemSize, count = d.count;
  const Block mine{static_cast<uint64_t>(rank) * count, count};
  if (d.inPlace) s.outputInInput = static_cast<int64_t>(mine.begin * es);
  if (nranks == 1) {
    if (!d.inPlace) s.copy(elemRange(kInput, mine, es), elemRange(kOutput, {0, count}, es));
    return s;
  }
  direct::addAllPeers(s, rank, nranks);
  if (count == 0) return s;
  direct::pullReduce(s, d, rank, nranks, mine, kOutput, 0);
  direct::notifyAll(s, rank, nranks);
  direct::waitAll(s, rank, nranks);
  return s;
}

// The direct all-gather shares these terms (direct_all_gather.cc): n-1 blocks read.
cost::Traffic directBlockTraffic(sched::Coll coll, double N, const cost::CostInput& in) {
  using namespace traffic;
  cost::Traffic t;
  const double n = in.nranks;
  t.headerPeers = n - 1;
  t.getBytes = (n - 1) * N;
  t.gets = (n - 1) * ceilDiv(N, static_cast<double>(in.chunkBytes));
  syncRound(t, n);
  if (coll == sched::Coll::kReduceScatter)
    t.reduceBytes = (n - 1) * N;
  else
    t.copyBytes = N;  // the rank's own block
  t.workingSet = (n + 1) * N;
  return t;
}

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kReduceScatter,
    .name = "direct",
    .description = "one-sided: each rank reduces its block from all inputs",
    .build = &buildDirectReduceScatter,
    .traffic = &directBlockTraffic,
    .needs = Needs::kOneSided,
    .hearsEveryPeer = true,
});

}  // namespace chorus::algo
