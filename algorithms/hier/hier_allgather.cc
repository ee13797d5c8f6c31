// Hierarchical all-gather: a ring all-gather across hosts on each rail, then an exchange inside
// each host.
//
// Schedule. H hosts of L ranks; rank (h, l) is local rank l of host h; output block q (count
// elements) is rank q's input. Rail l is the ranks (., l).
//   1. Inter-host ring all-gather on each rail in parallel: in step s, (h, l) sends the block of
//      (h-s, l) to (h+1, l) and receives the block of (h-s-1, l) from (h-1, l), straight into
//      its output (step 0 sends from the input).
//   2. Intra-host, direct: every rank sends the H blocks of its rail to every other local rank
//      and receives the H blocks of rail j from local rank j into its output.
// Out of place the own block is copied into the output first (off the critical path).
// Chunk-major over the count, so both phases of different chunks overlap.
//
// In place (sendbuff == recvbuff + rank*count) the input is output block rank: nothing copies
// it and no step writes it.
//
// Fallback: without several hosts of several ranks each, all of one size, the flat ring
// all-gather (algorithms/ring) — and is named by it, so the statistics
// and the consistency header say what ran.
//
// Cost (alpha-beta, output of S = n * count * e bytes per rank, C chunks per block):
//   phase 1: (H-1) C A + (H-1)/(H L) S B;  phase 2: C alpha + (L-1)/L S beta.
// Inter-host bytes per rank: (H-1)/H * S/L = (H-1) count e — each host's NIC carries (H-1)/H S,
// the minimum for any all-gather.
//
// Tuner: multi-host all-gather (FSDP parameter gathers) with several ranks per host.
#include "algorithms/common/chunking.h"
#include "algorithms/hier/hier.h"
#include "algorithms/ring/ring.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;

sched::Schedule buildHierAllGather(const sched::CollDesc& d, int rank, int nranks) {
  const HostGroups g = hostGroups(d, nranks);
  if (!g.hierarchical()) return buildRingAllGather(d, rank, nranks);
  sched::Schedule s;
  s.algo = "hier";
  const uint64_t es = d.elemSize, count = d.count;
  const uint64_t mine = static_cast<uint64_t>(rank) * count;
  if (d.inPlace) s.inputInOutput = static_cast<int64_t>(mine * es);
  if (!d.inPlace) s.copy(elemRange(kInput, {0, count}, es), elemRange(kOutput, {mine, count}, es));
  const int H = g.numHosts();
  const int L = g.perHost();
  const int h = g.hostOf(rank), l = g.localOf(rank);
  const HostGroups::RailRing rail = g.addRailRing(s, rank);
  const int next = rail.next, prev = rail.prev;
  g.addHostPeers(s, rank);

  const uint64_t chunk = chunkElems(d);
  for (uint64_t c = 0; c < numChunks(count, chunk); ++c) {
    const Block part = chunkOf({0, count}, chunk, c);
    auto outBlock = [&](int owner) {
      return elemRange(kOutput, {static_cast<uint64_t>(owner) * count + part.begin, part.count},
                       es);
    };
    for (int st = 0; st < H - 1; ++st) {
      s.send(next, st == 0 ? elemRange(kInput, part, es) : outBlock(g.at(h - st, l)));
      s.recv(prev, outBlock(g.at(h - st - 1, l)));
    }
    for (int j = 1; j < L; ++j) {
      const int to = g.at(h, (l + j) % L);
      for (int k = 0; k < H; ++k)
        s.send(to, k == h ? elemRange(kInput, part, es) : outBlock(g.at(k, l)));
    }
    for (int j = 1; j < L; ++j) {
      const int from = (l - j + L) % L;
      for (int k = 0; k < H; ++k) s.recv(g.at(h, from), outBlock(g.at(k, from)));
    }
  }
  return s;
}

namespace {

// N is one block; rail partials (reduce-scatter) or rail blocks (all-gather) move inside the
// host as H blocks per peer, and a ring of H-1 steps runs per rail. Where it does not apply it
// is the ring.
cost::Traffic hierAllGatherTraffic(sched::Coll coll, double N, const cost::CostInput& in) {
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
    .coll = sched::Coll::kAllGather,
    .name = "hier",
    .description = "ring all-gather across hosts per rail, then exchange inside hosts",
    .build = &buildHierAllGather,
    .traffic = &hierAllGatherTraffic,
    .applies = &hierApplies,
});

}  // namespace chorus::algo
