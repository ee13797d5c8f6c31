// Binomial-tree broadcast, chunk-pipelined.
//
// Schedule. Ranks are numbered relative to the root, v = (rank - root) mod n. The parent of
// v > 0 is v with its lowest set bit cleared; the children of v are v + 2^k for every 2^k below
// v's lowest set bit (every 2^k < n for the root) with v + 2^k < n, so after round k every
// v < 2^(k+1) has the data: ceil(log2 n) rounds. The message is cut into chunks of chunkBytes;
// for each chunk a rank receives it from its parent straight into its output and sends it on to
// its children, largest subtree first. Receiving chunk c+1 does not wait for the sends of chunk
// c, so the tree pipelines. An out-of-place root copies its input to its output, off the
// critical path; in place it sends from the buffer it holds.
//
// Cost (alpha-beta, N bytes, C chunks of c bytes, d = ceil(log2 n)):
//   unpipelined (C = 1): d (alpha + N beta);  pipelined: (d + (C-1) d_r) (alpha + c beta) where
//   d_r = log2 n is the root's fan-out, since the root sends each chunk to all its children.
// Latency is logarithmic in n; the bandwidth term is log2 n times the chain's at the root.
//
// Tuner: small and medium broadcasts at large n (latency-bound); large ones want the chain or
// the hierarchical broadcast.
#include <cmath>

#include "algorithms/common/chunking.h"
#include "algorithms/tree/tree.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;

BinomialNode binomialNode(int v, int nranks) {
  BinomialNode node;
  const int low = v == 0 ? 0 : (v & -v);
  if (v != 0) node.parent = v - low;
  // Largest subtree first: the highest 2^k below low (or below n at the root) first.
  int top = 1;
  while (top < nranks) top <<= 1;
  for (int k = top >> 1; k >= 1; k >>= 1) {
    if (v != 0 && k >= low) continue;
    if (v + k < nranks) node.children.push_back(v + k);
  }
  return node;
}

BinomialNode binomialPeers(sched::Schedule& s, int rank, int root, int nranks) {
  BinomialNode node = binomialNode(modRank(rank - root, nranks), nranks);
  auto real = [&](int x) { return modRank(x + root, nranks); };
  if (node.parent >= 0) s.addPeer(node.parent = real(node.parent));
  for (int& ch : node.children) s.addPeer(ch = real(ch));
  return node;
}

sched::Schedule buildBinomialBroadcast(const sched::CollDesc& d, int rank, int nranks) {
  sched::Schedule s = sameSizeSchedule("binomial", d, nranks);
  const uint64_t es = d.elemSize;
  const BinomialNode node = binomialPeers(s, rank, d.root, nranks);
  const bool isRoot = rank == d.root;
  if (isRoot && !d.inPlace && nranks > 1)
    s.copy(elemRange(kInput, {0, d.count}, es), elemRange(kOutput, {0, d.count}, es));

  const uint64_t chunk = chunkElems(d);
  for (uint64_t c = 0; c < numChunks(d.count, chunk); ++c) {
    const Block part = chunkOf({0, d.count}, chunk, c);
    const sched::Range here = elemRange(isRoot ? kInput : kOutput, part, es);
    if (!isRoot) s.recv(node.parent, here);
    for (int ch : node.children) s.send(ch, here);
  }
  return s;
}

namespace {

// The root sends (receives) each chunk to (from) its ceil(log2 n) children; the rank 2^(d-1)
// below it receives one chunk and forwards d-1, as many messages in all.
cost::Traffic binomialBroadcastTraffic(sched::Coll coll, double N, const cost::CostInput& in) {
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
    .coll = sched::Coll::kBroadcast,
    .name = "binomial",
    .description = "binomial tree from the root, chunk-pipelined",
    .build = &buildBinomialBroadcast,
    .traffic = &binomialBroadcastTraffic,
    .order = RankOrder::kRingPositions,
});

}  // namespace chorus::algo
