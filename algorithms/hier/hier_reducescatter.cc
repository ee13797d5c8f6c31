// Hierarchical reduce-scatter: reduce inside each host onto the rails, then a ring
// reduce-scatter across hosts on each rail.
//
// Schedule. H hosts of L ranks; rank (h, l) is local rank l of host h; block q of the input
// (count elements) belongs to rank q. Rail l is the ranks (., l); its H blocks are the blocks
// of those ranks.
//   1. Intra-host, direct: every rank sends to local rank j the input blocks of rail j (H
//      blocks); rank (h, l) folds the L-1 it receives for each block of rail l, starting from
//      its own input block, into scratch slot h' (the partial of host h for rank (h', l)).
//   2. Inter-host ring reduce-scatter over the H slots, on each rail in parallel: in step s,
//      (h, l) sends slot h-s-1 to (h+1, l) and folds slot h-s-2 from (h-1, l) into it; the last
//      step's fold is for its own block and lands in the output.
// Chunk-major over the count, so both phases of different chunks overlap.
//
// In place (recvbuff == sendbuff + rank*count) the output is this rank's own input block: it is
// read once (phase 1, as the first operand of its slot) before the last fold writes it.
//
// Scratch: H * count elements (the rail's partials), i.e. 1/L of the input.
//
// Fallback: without several hosts of several ranks each, all of one size, the flat ring
// reduce-scatter (algorithms/ring) — and is named by it, so the statistics
// and the consistency header say what ran.
//
// Cost (alpha-beta, input of S = n * count * e bytes per rank, C chunks per block):
//   phase 1: C alpha + (L-1)/L S beta;  phase 2: (H-1) C A + (H-1)/(H L) S B.
// Inter-host bytes per rank: (H-1)/H * S/L = (H-1) count e.
//
// Tuner: multi-host reduce-scatter (ZeRO / FSDP gradients) of medium and large blocks with
// several ranks per host.
#include "algorithms/common/chunking.h"
#include "algorithms/hier/hier.h"
#include "algorithms/ring/ring.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;
using sched::kScratch;

sched::Schedule buildHierReduceScatter(const sched::CollDesc& d, int rank, int nranks) {
  const HostGroups g = hostGroups(d, nranks);
  if (!g.hierarchical()) return buildRingReduceScatter(d, rank, nranks);
  sched::Schedule s;
  s.algo = "hier";
  const uint64_t es = d.elemSize, count = d.count;
  if (d.inPlace) s.outputInInput = static_cast<int64_t>(static_cast<uint64_t>(rank) * count * es);
  const int H = g.numHosts();
  const int L = g.perHost();
  const int h = g.hostOf(rank), l = g.localOf(rank);
  g.addHostPeers(s, rank);
  const HostGroups::RailRing rail = g.addRailRing(s, rank);
  const int next = rail.next, prev = rail.prev;

  const uint64_t chunk = chunkElems(d);
  auto inputBlock = [&](int owner, Block part) {
    return elemRange(kInput, {static_cast<uint64_t>(owner) * count + part.begin, part.count}, es);
  };
  auto slot = [&](int host, Block part) {
    return elemRange(kScratch,
                     {static_cast<uint64_t>(modRank(host, H)) * count + part.begin, part.count},
                     es);
  };
  for (uint64_t c = 0; c < numChunks(count, chunk); ++c) {
    const Block part = chunkOf({0, count}, chunk, c);
    // 1. Partials of rail l inside the host.
    for (int j = 1; j < L; ++j) {
      const int to = (l + j) % L;
      for (int k = 0; k < H; ++k) s.send(g.at(h, to), inputBlock(g.at(k, to), part));
    }
    for (int j = 1; j < L; ++j) {
      const int from = (l - j + L) % L;
      for (int k = 0; k < H; ++k)
        s.recvReduce(g.at(h, from), j == 1 ? inputBlock(g.at(k, l), part) : slot(k, part),
                     slot(k, part));
    }
    // 2. Ring reduce-scatter over the rail; the last fold is this rank's block.
    for (int st = 0; st < H - 1; ++st) {
      s.send(next, slot(h - st - 1, part));
      const bool last = st == H - 2;
      s.recvReduce(prev, slot(h - st - 2, part),
                   last ? elemRange(kOutput, part, es) : slot(h - st - 2, part));
    }
  }
  s.scratchBytes = static_cast<uint64_t>(H) * count * es;
  return s;
}

namespace {

// N is one block; rail partials (reduce-scatter) or rail blocks (all-gather) move inside the
// host as H blocks per peer, and a ring of H-1 steps runs per rail. Where it does not apply it
// is the ring.
cost::Traffic hierReduceScatterTraffic(sched::Coll coll, double N, const cost::CostInput& in) {
  using namespace traffic;
  if (!hierarchical(in)) return ringBlockTraffic(coll, N, in);
  cost::Traffic t;
  const double n = in.nranks, H = in.hosts, L = in.ranksPerHost;
  const bool rs = coll == sched::Coll::kReduceScatter;
  const double C = ceilDiv(N, static_cast<double>(in.chunkBytes));
  t.hops = C > 0 ? (H - 1) + 1 + C - 1 : 0;
  t.messages = 2 * (H * (L - 1) + (H - 1)) * C;
  t.waits = (H * (L - 1) + (H - 1)) * C;
  t.headerPeers = (L - 1) + std::min(2.0, H - 1);
  t.bytesIntra = H * (L - 1) * N;
  t.bytesNic = L * (H - 1) * N;
  t.interShare = (H - 1) / (H * (L - 1) + (H - 1));
  if (rs)
    t.reduceBytes = (H * (L - 1) + (H - 1)) * N;
  else
    t.copyBytes = N;
  t.workingSet = (n + 1 + (rs ? H : 0)) * N;
  return t;
}

}  // namespace

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kReduceScatter,
    .name = "hier",
    .description = "reduce onto the rails inside each host, then ring reduce-scatter across hosts per rail",
    .build = &buildHierReduceScatter,
    .traffic = &hierReduceScatterTraffic,
    .applies = &hierApplies,
});

}  // namespace chorus::algo
