// Pipelined-chain broadcast: root -> root+1 -> ... -> root-1, chunk by chunk.
//
// Schedule. The message is cut into chunks of chunkBytes. The root sends chunk c to its
// successor; every other rank receives chunk c from its predecessor straight into its output
// and, unless it is the end of the chain, forwards it from there. Receiving chunk c+1 does not
// wait for forwarding chunk c, so all links carry different chunks at the same time. An
// out-of-place root also copies its input to its output, off the critical path.
//
// In place (sendbuff == recvbuff) the root sends from the buffer it already holds and copies
// nothing; other ranks never had a meaningful input.
//
// Cost (alpha-beta, N bytes, chunks of c bytes, C = ceil(N / c)):
//   (n - 2 + C) (alpha + c beta)  ~  (n-1) alpha + N beta for C >> n.
// Bandwidth is optimal (every link carries N once); the latency term is linear in n, and the
// chunk size trades pipeline fill ((n-2) c beta) against per-chunk alpha.
//
// Tuner: large broadcasts (parameter broadcast at start-up) on small to medium n; small
// messages at large n want a binomial or double-binary tree.
#include "algorithms/common/chunking.h"
#include "algorithms/tree/tree.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;

sched::Schedule buildChainBroadcast(const sched::CollDesc& d, int rank, int nranks) {
  sched::Schedule s;
  s.algo = "chain";
  if (d.inPlace) s.outputInInput = 0;
  const uint64_t es = d.elemSize;
  const int pos = modRank(rank - d.root, nranks);
  const bool isRoot = pos == 0, isLast = pos == nranks - 1;
  const int next = modRank(rank + 1, nranks), prev = modRank(rank - 1, nranks);
  if (!isRoot) s.addPeer(prev);
  if (!isLast) s.addPeer(next);
  if (isRoot && !d.inPlace)
    s.copy(elemRange(kInput, {0, d.count}, es), elemRange(kOutput, {0, d.count}, es));

  const uint64_t chunk = chunkElems(d);
  for (uint64_t c = 0; c < numChunks(d.count, chunk); ++c) {
    const Block part = chunkOf({0, d.count}, chunk, c);
    if (isRoot) {
      if (!isLast) s.send(next, elemRange(kInput, part, es));
      continue;
    }
    s.recv(prev, elemRange(kOutput, part, es));
    if (!isLast) s.send(next, elemRange(kOutput, part, es));
  }
  return s;
}

namespace {

// The busiest rank is one in the middle: it receives and forwards every chunk.
cost::Traffic chainBroadcastTraffic(sched::Coll coll, double N, const cost::CostInput& in) {
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
    .coll = sched::Coll::kBroadcast,
    .name = "chain",
    .description = "pipelined chain root -> root+1 -> ... chunk by chunk",
    .build = &buildChainBroadcast,
    .traffic = &chainBroadcastTraffic,
    .order = RankOrder::kRingPositions,
    .tiePriority = 0,
});

}  // namespace chorus::algo
