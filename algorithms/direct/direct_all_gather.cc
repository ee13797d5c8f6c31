// Direct all-gather over one-sided reads: rank r reads every peer's input into its output.
//
// Schedule. The rank copies its own input into output block r (nothing in place), then gets
// rank q's input into output block q for every peer, chunk by chunk (chunk-major, peers in the
// order r+1, r+2, ...), notifies every peer ("I have finished reading your input") and waits for
// every peer's notify, so that no rank returns while its input is still being read.
//
// In place (sendbuff == recvbuff + r*count) a get names the peer's input; the peer's own layout
// places it inside its output, at the block nobody writes.
//
// Cost (alpha-beta, input of N bytes per rank): each rank reads (n-1) N bytes (the ring's
// volume) in independent gets — about one get latency plus one notify / wait round, against the
// ring's (n-1) ceil(N/c) message latencies.
//
// Tuner: all-gather on one host over a one-sided transport, any block size where the memory
// system takes n-1 concurrent readers well; never over a transport without gets.
#include "algorithms/direct/direct.h"
#include "algorithms/direct/pull.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;

sched::Schedule buildDirectAllGather(const sched::CollDesc& d, int rank, int nranks) {
  sched::Schedule s;
  s.algo = "direct";
  const uint64_t es = d.elemSize, count = d.count;
  const uint64_t mine = static_cast<uint64_t>(rank) * count;
  if (d.inPlace) s.inputInOutput = static_cast<int64_t>(mine * es);
  if (!d.inPlace) s.copy(elemRange(kInput, {0, count}, es), elemRange(kOutput, {mine, count}, es));
  if (nranks == 1) return s;
  direct::addAllPeers(s, rank, nranks);
  if (count == 0) return s;

  direct::pullBlocks(s, d, rank, nranks, count);
  direct::notifyAll(s, rank, nranks);
  direct::waitAll(s, rank, nranks);
  return s;
}

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kAllGather,
    .name = "direct",
    .description = "one-sided: each rank reads every input into its output",
    .build = &buildDirectAllGather,
    .traffic = &directBlockTraffic,
    .needs = Needs::kOneSided,
    .hearsEveryPeer = true,
});

}  // namespace chorus::algo
