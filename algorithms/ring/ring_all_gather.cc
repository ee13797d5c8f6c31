// Ring all-gather: every rank ends with all n input blocks, block q from rank q.
//
// Schedule. Rank r places its own block (a local copy, skipped in place), then in step s
// (s = 0..n-2) sends block r-s to r+1 and receives block r-s-1 from r-1 straight into its output.
// Step 0 sends from the input, so the local copy is off the critical path; later steps forward
// what the previous step received. Chunk-major loop order, as in the ring allreduce.
//
// In place (sendbuff == recvbuff + r*count) the input is output block r: nothing is copied and
// no step writes block r.
//
// Cost (alpha-beta, input of N bytes per rank, chunks of c bytes, R = ceil(N / c)):
//   (n-1) R alpha + (n-1) N beta — optimal bandwidth, latency linear in n.
//
// Tuner: the default for all-gather of medium and large blocks (FSDP parameter gathers);
// latency-bound small blocks at large n are better served by recursive doubling or Bruck.
#include "algorithms/common/chunking.h"
#include "algorithms/ring/ring.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;

sched::Schedule buildRingAllGather(const sched::CollDesc& d, int rank, int nranks) {
  sched::Schedule s;
  s.algo = "ring";
  const uint64_t es = d.elemSize, count = d.count;
  const uint64_t mine = static_cast<uint64_t>(rank) * count;
  if (d.inPlace) s.inputInOutput = static_cast<int64_t>(mine * es);
  if (!d.inPlace) s.copy(elemRange(kInput, {0, count}, es), elemRange(kOutput, {mine, count}, es));
  if (nranks == 1) return s;
  const int next = modRank(rank + 1, nranks), prev = modRank(rank - 1, nranks);
  s.addPeer(next);
  s.addPeer(prev);

  const uint64_t chunk = ringChunkElems(d, d.count);
  for (uint64_t c = 0; c < numChunks(count, chunk); ++c) {
    const Block part = chunkOf({0, count}, chunk, c);
    auto ofBlock = [&](int64_t k) {
      return Block{static_cast<uint64_t>(modRank(k, nranks)) * count + part.begin, part.count};
    };
    for (int st = 0; st < nranks - 1; ++st) {
      s.send(next, st == 0 ? elemRange(kInput, part, es)
                           : elemRange(kOutput, ofBlock(rank - st), es));
      s.recv(prev, elemRange(kOutput, ofBlock(rank - st - 1), es));
    }
  }
  return s;
}

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kAllGather,
    .name = "ring",
    .description = "ring of n-1 forwarding steps, received straight into the output",
    .build = &buildRingAllGather,
    .traffic = &ringBlockTraffic,
    .order = RankOrder::kRingBlocks,
    .tiePriority = 0,
});

}  // namespace chorus::algo
