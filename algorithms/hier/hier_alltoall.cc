// Hierarchical (2-hop) all-to-all: regroup by destination host inside each host, one exchange
// per rail across hosts, received straight into place.
//
// Schedule. H hosts of L ranks; rank (h, l) is local rank l of host h; input block q (count
// elements) goes to rank q, output block q comes from rank q.
//   1. Intra-host: rank (h, l) sends to local rank j its blocks for every rank (k, j). Blocks for
//      ranks of its own host (k = h) are final and land in the receiver's output; the others
//      land in scratch slot (j, k) of the receiver: it now holds everything host h sends to rail
//      member (k, l).
//   2. Inter-host, one exchange per rail: for t = 1..H-1, (h, l) sends to (h+t, l) the L blocks
//      host h has for it (its own from the input, the others from scratch) and receives from
//      (h-t, l) the L blocks of host h-t for it, straight into their output blocks.
// The own block is a local copy. Chunk-major over count.
//
// In place (sendbuff == recvbuff) receives overwrite blocks still to be sent, so the input is
// first copied to scratch and every send reads that copy (one extra pass over n*count).
//
// Scratch: L*H*count elements of slots (those of its own local rank and own host stay unused, for
// simple index math), plus
// n*count in place.
//
// Fallback: without several hosts of several ranks each, all of one size, the pairwise
// exchange (algorithms/alltoall) — and is named by it, so the statistics
// and the consistency header say what ran.
//
// Cost (alpha-beta, S = n * count * e bytes per rank, C chunks per block):
//   phase 1: (L-1) H C alpha + (L-1)/L S beta;  phase 2: (H-1) L C A + (H-1)/H S B.
// Inter-host bytes per rank: (H-1)/H * S, as for any all-to-all, but from (H-1) peers in L-block
// messages instead of (H-1) L peers: on a fabric where per-peer connections or small messages
// cost (many ranks, small blocks), that is the gain — the transport half of ZeRO++'s qgZ.
//
// Tuner: multi-host all-to-all with many ranks per host and small to medium blocks.
#include "algorithms/alltoall/alltoall.h"
#include "algorithms/common/chunking.h"
#include "algorithms/hier/hier.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;
using sched::kScratch;

sched::Schedule buildHierAllToAll(const sched::CollDesc& d, int rank, int nranks) {
  const HostGroups g = hostGroups(d, nranks);
  if (!g.hierarchical()) return buildPairwiseAllToAll(d, rank, nranks);
  sched::Schedule s;
  s.algo = "hier";
  if (d.inPlace) s.outputInInput = 0;
  const uint64_t es = d.elemSize, count = d.count;
  const uint64_t n = static_cast<uint64_t>(nranks);
  const int H = g.numHosts();
  const int L = g.perHost();
  const int h = g.hostOf(rank), l = g.localOf(rank);
  g.addHostPeers(s, rank);
  for (int t = 1; t < H; ++t) {
    s.addPeer(g.at(h + t, l));
    s.addPeer(g.at(h - t, l));
  }

  const uint64_t slots = static_cast<uint64_t>(L) * static_cast<uint64_t>(H) * count;
  // Where sends read block q: the input, or its copy in scratch when in place.
  const sched::BufId srcBuf = d.inPlace ? kScratch : kInput;
  const uint64_t srcBase = d.inPlace ? slots : 0;
  if (d.inPlace) {
    s.copy(elemRange(kInput, {0, n * count}, es), elemRange(kScratch, {slots, n * count}, es));
  }
  const uint64_t chunk = chunkElems(d);
  for (uint64_t c = 0; c < numChunks(count, chunk); ++c) {
    const Block part = chunkOf({0, count}, chunk, c);
    auto block = [&](sched::BufId buf, uint64_t base, int q) {
      return elemRange(buf, {base + static_cast<uint64_t>(q) * count + part.begin, part.count},
                       es);
    };
    auto slot = [&](int j, int k) {
      const uint64_t idx = static_cast<uint64_t>(j) * static_cast<uint64_t>(H) +
                           static_cast<uint64_t>(modRank(k, H));
      return elemRange(kScratch, {idx * count + part.begin, part.count}, es);
    };
    if (!d.inPlace) s.copy(block(kInput, 0, rank), block(kOutput, 0, rank));
    // 1. Regroup by destination rail inside the host.
    for (int j = 1; j < L; ++j) {
      const int to = (l + j) % L;
      for (int k = 0; k < H; ++k) s.send(g.at(h, to), block(srcBuf, srcBase, g.at(h + k, to)));
    }
    for (int j = 1; j < L; ++j) {
      const int from = (l - j + L) % L;
      for (int k = 0; k < H; ++k) {
        const int dest = h + k;  // the host of the rank this block is for
        s.recv(g.at(h, from), k == 0 ? block(kOutput, 0, g.at(h, from)) : slot(from, dest));
      }
    }
    // 2. One exchange per rail and host pair.
    for (int t = 1; t < H; ++t) {
      const int to = g.at(h + t, l), from = g.at(h - t, l);
      for (int j = 0; j < L; ++j)
        s.send(to, j == l ? block(srcBuf, srcBase, to) : slot(j, h + t));
      for (int j = 0; j < L; ++j) s.recv(from, block(kOutput, 0, g.at(h - t, j)));
    }
  }
  s.scratchBytes = (slots + (d.inPlace ? n * count : 0)) * es;
  return s;
}

namespace {

// N per peer: H (L-1) blocks to and from the host's ranks, L (H-1) to and from the rails.
// Where it does not apply it is the pairwise exchange.
cost::Traffic hierAllToAllTraffic(sched::Coll coll, double N, const cost::CostInput& in) {
  using namespace traffic;
  if (!hierarchical(in)) return pairwiseTraffic(coll, N, in);
  cost::Traffic t;
  const double n = in.nranks, H = in.hosts, L = in.ranksPerHost;
  const double C = ceilDiv(N, static_cast<double>(in.chunkBytes));
  const double intra = H * (L - 1), inter = L * (H - 1);
  t.hops = C > 0 ? 2 : 0;
  t.messages = 2 * (intra + inter) * C;
  t.waits = (intra + inter) * C;
  t.headerPeers = (L - 1) + 2 * (H - 1);
  t.bytesIntra = intra * N;
  t.bytesNic = L * inter * N;
  t.interShare = inter / (intra + inter);
  t.copyBytes = N;
  t.workingSet = (2 * n + H * L) * N;
  return t;
}

}  // namespace

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kAllToAll,
    .name = "hier",
    .description = "2-hop: regroup by destination host inside each host, then one exchange per rail",
    .build = &buildHierAllToAll,
    .traffic = &hierAllToAllTraffic,
    .applies = &hierApplies,
});

}  // namespace chorus::algo
