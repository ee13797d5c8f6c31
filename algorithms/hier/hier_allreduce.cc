// Hierarchical all-reduce: reduce-scatter inside each host, all-reduce across hosts on the rails,
// all-gather inside each host.
//
// Schedule. H hosts of L ranks; rank (h, l) is local rank l of host h. The N elements are cut
// into L slices (sizes differ by at most one element), slice l belonging to local rank l.
//   1. Intra-host reduce-scatter, direct: every rank sends slice j of its input to local rank j
//      and folds the L-1 slices l it receives into output slice l (recvReduce, input slice l as
//      the first operand), so (h, l) holds host h's sum of slice l.
//   2. Inter-host all-reduce of slice l among the H ranks (., l) — one ring per rail, all rails
//      in parallel: a ring reduce-scatter and a ring all-gather over slice l cut into H pieces,
//      working in output slice l.
//   3. Intra-host all-gather, direct: every rank sends output slice l to each local rank and
//      receives slice j from local rank j straight into its output.
// Every phase is cut into chunks of chunkBytes and the loop is chunk-major, so the phases of
// different chunks overlap.
//
// In place (sendbuff == recvbuff) the same steps hold: phase 3 overwrites slices this rank sent
// in phase 1 (finalize() orders the receive after the send), and phase 1's receives depend on
// no send, so two ranks never wait on each other's sends.
//
// Fallback: without several hosts of several ranks each, all of one size (CollDesc::hostOf
// empty, one host, one rank per host, or uneven hosts), the flat ring all-reduce
// (algorithms/ring) — and is named by it, so the statistics
// and the consistency header say what ran.
//
// Cost (alpha-beta, N bytes, alpha/beta inside a host, A/B across hosts, C chunks per slice):
//   phase 1 and 3: 2 C alpha + 2 (L-1)/L N beta (direct: L-1 messages per chunk at once);
//   phase 2:       2 (H-1) C A + 2 (H-1)/H N/L B.
// Inter-host bytes per rank: 2 (H-1)/H * N/L sent (and as many received); per host
// 2 (H-1)/H N leave through the NIC, split over L rails — a host-aware flat ring sends
// 2 (n-1)/n N through each host's NIC from a single rank.
//
// Tuner: multi-host all-reduce of medium and large messages when each host has several ranks;
// small messages want the double binary tree or Rabenseifner (fewer steps).
#include "algorithms/common/chunking.h"
#include "algorithms/hier/hier.h"
#include "algorithms/ring/ring.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;

sched::Schedule buildHierAllReduce(const sched::CollDesc& d, int rank, int nranks) {
  const HostGroups g = hostGroups(d, nranks);
  if (!g.hierarchical()) return buildRingAllReduce(d, rank, nranks);
  sched::Schedule s = sameSizeSchedule("hier", d, nranks);
  const uint64_t es = d.elemSize;
  const int H = g.numHosts();
  const int L = g.perHost();
  const int h = g.hostOf(rank), l = g.localOf(rank);
  g.addHostPeers(s, rank);
  const HostGroups::RailRing rail = g.addRailRing(s, rank);
  const int next = rail.next, prev = rail.prev;

  auto slice = [&](int j) { return evenBlock(d.count, L, j); };
  const Block mine = slice(l);
  const uint64_t chunk = chunkElems(d);
  // Slice 0 is the largest: it bounds the chunk rounds.
  const uint64_t rounds = numChunks(slice(0).count, chunk);
  for (uint64_t c = 0; c < rounds; ++c) {
    // 1. Intra-host reduce-scatter.
    for (int j = 1; j < L; ++j) {
      const int to = (l + j) % L;
      s.send(g.at(h, to), elemRange(kInput, chunkOf(slice(to), chunk, c), es));
    }
    const Block part = chunkOf(mine, chunk, c);
    for (int j = 1; j < L; ++j) {
      const int from = (l - j + L) % L;
      s.recvReduce(g.at(h, from), elemRange(j == 1 ? kInput : kOutput, part, es),
                   elemRange(kOutput, part, es));
    }
    // 2. Ring all-reduce of this chunk of slice l over the rail. Chunk c of the slice is cut in
    //    H pieces, so every rank of the rail cuts it the same way.
    auto subPiece = [&](int k) {
      const Block p = evenBlock(part.count, H, modRank(k, H));
      return Block{part.begin + p.begin, p.count};
    };
    for (int st = 0; st < H - 1; ++st) {
      s.send(next, elemRange(kOutput, subPiece(h - st), es));
      const sched::Range in = elemRange(kOutput, subPiece(h - st - 1), es);
      s.recvReduce(prev, in, in);
    }
    for (int st = 0; st < H - 1; ++st) {
      s.send(next, elemRange(kOutput, subPiece(h + 1 - st), es));
      s.recv(prev, elemRange(kOutput, subPiece(h - st), es));
    }
    // 3. Intra-host all-gather.
    for (int j = 1; j < L; ++j) s.send(g.at(h, (l + j) % L), elemRange(kOutput, part, es));
    for (int j = 1; j < L; ++j) {
      const int from = (l - j + L) % L;
      s.recv(g.at(h, from), elemRange(kOutput, chunkOf(slice(from), chunk, c), es));
    }
  }
  return s;
}

namespace {

// Reduce-scatter in the host (direct), a ring per rail over H hosts, all-gather in the host;
// per chunk of the own slice: 2 (L-1) + 2 (H-1) sends and as many receives. Where it does not
// apply it is the ring.
cost::Traffic hierAllReduceTraffic(sched::Coll coll, double N, const cost::CostInput& in) {
  using namespace traffic;
  if (!hierarchical(in)) return ringAllReduceTraffic(coll, N, in);
  cost::Traffic t;
  const double c = static_cast<double>(in.chunkBytes), H = in.hosts, L = in.ranksPerHost;
  const double C = ceilDiv(std::ceil(N / L), c);
  t.hops = C > 0 ? 2 * (H - 1) + 2 + C - 1 : 0;
  t.messages = 4 * ((L - 1) + (H - 1)) * C;
  t.waits = 2 * ((L - 1) + (H - 1)) * C;
  t.headerPeers = (L - 1) + std::min(2.0, H - 1);
  t.bytesIntra = 2 * (L - 1) / L * N;
  t.bytesNic = 2 * (H - 1) / H * N;  // L rails of 2 (H-1)/H N/L each
  t.interShare = (H - 1) / ((L - 1) + (H - 1));
  t.reduceBytes = (L - 1) / L * N + (H - 1) / H * N / L;
  t.workingSet = 2 * N;
  return t;
}

}  // namespace

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kAllReduce,
    .name = "hier",
    .description = "intra-host reduce-scatter, ring all-reduce across hosts per rail, intra-host all-gather",
    .build = &buildHierAllReduce,
    .traffic = &hierAllReduceTraffic,
    .order = RankOrder::kRingPositions,
    .applies = &hierApplies,
});

}  // namespace chorus::algo
