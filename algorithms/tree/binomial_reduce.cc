// Binomial-tree reduce, chunk-pipelined: the mirror image of the binomial broadcast.
//
// Schedule. Ranks are numbered relative to the root, v = (rank - root) mod n, and the tree is
// the broadcast's (binomialNode()). For each chunk of chunkBytes a rank folds in the partials
// of its children, smallest subtree first (they finish first), starting from its own input
// chunk, and sends the result to its parent; the root folds into its output. Interior ranks
// keep partials in a ring of chunk-sized scratch slots (their output is not part of the call),
// so scratch is bounded by kScratchSlots chunks; leaves send straight from the input.
//
// In place (sendbuff == recvbuff) the root's first fold reads and writes the same elements.
//
// Cost (alpha-beta, N bytes, C chunks of c bytes, d = ceil(log2 n), gamma per reduced byte):
//   unpipelined: d (alpha + N (beta + gamma));  pipelined: about (d + (C-1) log2 n)
//   (alpha + c (beta + gamma)), the root receiving log2 n partials per chunk.
//
// Tuner: small and medium reduces at large n; large ones want the chain reduce.
#include <cmath>

#include "algorithms/common/chunking.h"
#include "algorithms/tree/tree.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;

sched::Schedule buildBinomialReduce(const sched::CollDesc& d, int rank, int nranks) {
  sched::Schedule s = sameSizeSchedule("binomial", d, nranks);
  const uint64_t es = d.elemSize;
  const BinomialNode node = binomialPeers(s, rank, d.root, nranks);
  const bool isRoot = rank == d.root;

  const uint64_t chunk = chunkElems(d);
  ScratchRing partials(std::min(chunk, d.count) * es);
  for (uint64_t c = 0; c < numChunks(d.count, chunk); ++c) {
    const Block part = chunkOf({0, d.count}, chunk, c);
    sched::Range acc = elemRange(kInput, part, es);
    const sched::Range dst =
        isRoot ? elemRange(kOutput, part, es)
               : (node.children.empty() ? acc : partials.next(part.count * es));
    for (auto it = node.children.rbegin(); it != node.children.rend(); ++it) {
      s.recvReduce(*it, acc, dst);
      acc = dst;
    }
    if (!isRoot) s.send(node.parent, acc);
  }
  s.scratchBytes = partials.end();
  return s;
}

namespace {

// The root sends (receives) each chunk to (from) its ceil(log2 n) children; the rank 2^(d-1)
// below it receives one chunk and forwards d-1, as many messages in all.
cost::Traffic binomialReduceTraffic(sched::Coll coll, double N, const cost::CostInput& in) {
  using namespace traffic;
  cost::Traffic t;
  const double n = in.nranks, L = in.ranksPerHost;
  const bool multiHost = in.hosts > 1;
  const double d = std::ceil(std::log2(n)), C = ceilDiv(N, static_cast<double>(in.chunkBytes));
  t.hops = C > 0 ? d + C - 1 : 0;
  t.messages = d * C;
  t.waits = coll == sched::Coll::kReduce ? d * C : C;
  t.headerPeers = d;
  t.bytesIntra = d * N;
  t.bytesNic = multiHost ? d * N : 0;  // the root's children on other hosts, at worst all
  t.interShare = multiHost ? (n - L) / (n - 1) : 0;
  if (coll == sched::Coll::kReduce) t.reduceBytes = d * N;
  t.workingSet = 2 * N;
  return t;
}

}  // namespace

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kReduce,
    .name = "binomial",
    .description = "binomial tree to the root, chunk-pipelined, partials in scratch",
    .build = &buildBinomialReduce,
    .traffic = &binomialReduceTraffic,
    .order = RankOrder::kRingPositions,
});

}  // namespace chorus::algo
