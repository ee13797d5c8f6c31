// Pipelined-chain reduce: root+1 -> root+2 -> ... -> root, chunk by chunk, ending at the root.
//
// Schedule. The message is cut into chunks of chunkBytes. The head of the chain (root+1) sends
// its input chunk; every middle rank receives the partial from its predecessor, folds in its own
// input chunk and forwards the result; the root folds the last partial into its output. Middle
// ranks keep partials in a small ring of chunk-sized scratch slots — their output pointer is not
// part of the call (NCCL passes recvbuff only at the root) — so scratch is bounded by
// kScratchSlots chunks whatever the message size.
//
// In place (sendbuff == recvbuff) the root's final recvReduce reads and writes the same
// elements; nothing else changes.
//
// Cost (alpha-beta, N bytes, chunks of c bytes, C = ceil(N / c), gamma per reduced byte):
//   (n - 2 + C) (alpha + c (beta + gamma))  ~  (n-1) alpha + N (beta + gamma) for C >> n.
//
// Tuner: large reduces to one rank on small to medium n; small messages at large n want a
// binomial tree.
#include "algorithms/common/chunking.h"
#include "algorithms/tree/tree.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;

sched::Schedule buildChainReduce(const sched::CollDesc& d, int rank, int nranks) {
  sched::Schedule s;
  s.algo = "chain";
  if (d.inPlace) s.outputInInput = 0;
  const uint64_t es = d.elemSize;
  const int pos = modRank(rank - d.root - 1, nranks);  // 0 = head, nranks-1 = root
  const bool isHead = pos == 0, isRoot = pos == nranks - 1;
  const int next = modRank(rank + 1, nranks), prev = modRank(rank - 1, nranks);
  if (nranks == 1) {
    if (!d.inPlace)
      s.copy(elemRange(kInput, {0, d.count}, es), elemRange(kOutput, {0, d.count}, es));
    return s;
  }
  if (!isHead) s.addPeer(prev);
  if (!isRoot) s.addPeer(next);

  const uint64_t chunk = chunkElems(d);
  ScratchRing partials(std::min(chunk, d.count) * es);
  for (uint64_t c = 0; c < numChunks(d.count, chunk); ++c) {
    const Block part = chunkOf({0, d.count}, chunk, c);
    const sched::Range mine = elemRange(kInput, part, es);
    if (isHead) {
      s.send(next, mine);
    } else if (isRoot) {
      s.recvReduce(prev, mine, elemRange(kOutput, part, es));
    } else {
      const sched::Range partial = partials.next(part.count * es);
      s.recvReduce(prev, mine, partial);
      s.send(next, partial);
    }
  }
  s.scratchBytes = partials.end();
  return s;
}

namespace {

// The busiest rank is one in the middle: it receives and forwards every chunk.
cost::Traffic chainReduceTraffic(sched::Coll coll, double N, const cost::CostInput& in) {
  using namespace traffic;
  cost::Traffic t;
  const double n = in.nranks, c = static_cast<double>(in.chunkBytes);
  const double C = ceilDiv(N, c);
  t.hops = C > 0 ? n - 2 + C : 0;
  t.messages = (n > 2 ? 2 : 1) * C;
  t.waits = C;
  t.headerPeers = std::min(2.0, n - 1);
  ringBytes(t, N, in);
  t.fillBytes = (n - 2) * std::min(c, N);
  if (coll == sched::Coll::kReduce) t.reduceBytes = N;
  t.workingSet = 2 * N;
  return t;
}

}  // namespace

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kReduce,
    .name = "chain",
    .description = "pipelined chain root+1 -> ... -> root, reducing chunk by chunk",
    .build = &buildChainReduce,
    .traffic = &chainReduceTraffic,
    .order = RankOrder::kRingPositions,
    .tiePriority = 0,
});

}  // namespace chorus::algo
