// Ring reduce-scatter: rank r ends with block r of the reduction of everyone's input.
//
// Schedule. The input holds n blocks of `count` elements. In step s (s = 0..n-2) rank r sends
// the partial of block r-s-1 to r+1 and receives the partial of block r-s-2 from r-1, folding in
// its own input block: recvReduce(a = input block, dst = scratch). Step 0 sends straight from the
// input. The last step receives block r itself and folds it into the output. Partials live in a
// small ring of chunk-sized scratch slots (they are forwarded one step after they arrive), so
// scratch is bounded by kScratchSlots chunks, not by the message. Chunk-major loop order, as in
// the ring allreduce, lets an in-order executor pipeline chunks.
//
// In place (recvbuff == sendbuff + r*count) input block r is read only by the final recvReduce,
// which writes the same elements (a == dst), and no other input block is written.
//
// Cost (alpha-beta, output of N bytes per rank, chunks of c bytes, R = ceil(N / c)):
//   (n-1) R alpha + (n-1) N beta — optimal bandwidth, latency linear in n.
//
// Tuner: the default for reduce-scatter of medium and large blocks (ZeRO / FSDP gradients);
// latency-bound small blocks at large n are better served by recursive halving.
#include "algorithms/common/chunking.h"
#include "algorithms/ring/ring.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;

sched::Schedule buildRingReduceScatter(const sched::CollDesc& d, int rank, int nranks) {
  sched::Schedule s;
  s.algo = "ring";
  const uint64_t es = d.elemSize, count = d.count;
  if (d.inPlace) s.outputInInput = static_cast<int64_t>(static_cast<uint64_t>(rank) * count * es);
  if (nranks == 1) {
    if (!d.inPlace) s.copy(elemRange(kInput, {0, count}, es), elemRange(kOutput, {0, count}, es));
    return s;
  }
  const int next = modRank(rank + 1, nranks), prev = modRank(rank - 1, nranks);
  s.addPeer(next);
  s.addPeer(prev);

  const uint64_t chunk = ringChunkElems(d, d.count);
  ScratchRing partials(std::min(chunk, count) * es);
  for (uint64_t c = 0; c < numChunks(count, chunk); ++c) {
    const Block part = chunkOf({0, count}, chunk, c);
    auto ofBlock = [&](int64_t k) {
      return Block{static_cast<uint64_t>(modRank(k, nranks)) * count + part.begin, part.count};
    };
    sched::Range partial;  // what the previous step left for this one to forward
    for (int st = 0; st < nranks - 1; ++st) {
      s.send(next, st == 0 ? elemRange(kInput, ofBlock(rank - st - 1), es) : partial);
      const sched::Range mine = elemRange(kInput, ofBlock(rank - st - 2), es);
      if (st == nranks - 2) {
        s.recvReduce(prev, mine, elemRange(kOutput, part, es));
      } else {
        partial = partials.next(part.count * es);
        s.recvReduce(prev, mine, partial);
      }
    }
  }
  s.scratchBytes = partials.end();
  return s;
}

// The ring all-gather shares these terms (ring_all_gather.cc): n-1 steps of one block each way.
cost::Traffic ringBlockTraffic(sched::Coll coll, double N, const cost::CostInput& in) {
  using namespace traffic;
  cost::Traffic t;
  const double n = in.nranks;
  const double R = ceilDiv(N, ringChunk(N, in.chunkBytes));
  t.hops = R > 0 ? (n - 1) + R - 1 : 0;
  t.messages = 2 * (n - 1) * R;
  t.waits = (n - 1) * R;
  t.headerPeers = std::min(2.0, n - 1);
  ringBytes(t, (n - 1) * N, in);
  if (coll == sched::Coll::kReduceScatter)
    t.reduceBytes = (n - 1) * N;
  else
    t.copyBytes = N;  // the rank's own block
  t.workingSet = (n + 1) * N;
  return t;
}

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kReduceScatter,
    .name = "ring",
    .description = "ring of n-1 reduce steps, partials in bounded scratch",
    .build = &buildRingReduceScatter,
    .traffic = &ringBlockTraffic,
    .order = RankOrder::kRingBlocks,
    .tiePriority = 0,
});

}  // namespace chorus::algo
