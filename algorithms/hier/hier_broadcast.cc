// Hierarchical broadcast: scatter inside the root's host, a chain across hosts on every rail,
// an all-gather inside every host.
//
// Schedule. H hosts of L ranks; rank (h, l) is local rank l of host h; the root is (h0, l0).
// The N elements are cut into L slices, slice j travelling on rail j (the ranks (., j)).
//   1. The root sends slice j to local rank j of its host (j != l0).
//   2. Each rail carries its slice down a chain of hosts h0 -> h0+1 -> ... -> h0-1: every rank
//      receives it from the previous host into its output and forwards it from there.
//   3. Inside every host each rank sends its slice to the other local ranks and receives theirs
//      straight into its output; the root, which has everything, only sends.
// Out of place the root also copies its input to its output, off the critical path. Chunk-major,
// so the phases of different chunks overlap and the chains pipeline.
//
// In place (sendbuff == recvbuff) the root sends from the buffer it holds and copies nothing.
//
// Fallback: without several hosts of several ranks each, all of one size, the chain broadcast
// (algorithms/tree) — and is named by it, so the statistics
// and the consistency header say what ran.
//
// Cost (alpha-beta, N bytes, C chunks per slice):
//   (H - 2 + C) (A + N/(L C) B) + 2 (alpha + (L-1)/L N beta): every host link carries N once
//   in total, split over L rails, and the chain's fill grows with H, not n.
// Inter-host bytes per rank: N/L sent by ranks of every host but the chain's last, N/L received
// by ranks of every host but the root's.
//
// Tuner: multi-host broadcast of medium and large messages with several ranks per host; for
// small messages the binomial tree (log n steps).
#include "algorithms/common/chunking.h"
#include "algorithms/hier/hier.h"
#include "algorithms/tree/tree.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;

sched::Schedule buildHierBroadcast(const sched::CollDesc& d, int rank, int nranks) {
  const HostGroups g = hostGroups(d, nranks);
  if (!g.hierarchical()) return buildChainBroadcast(d, rank, nranks);
  sched::Schedule s = sameSizeSchedule("hier", d, nranks);
  const uint64_t es = d.elemSize;
  const int H = g.numHosts();
  const int L = g.perHost();
  const int h = g.hostOf(rank), l = g.localOf(rank);
  const int h0 = g.hostOf(d.root);
  const bool isRoot = rank == d.root;
  const int pos = modRank(h - h0, H);  // place of this host in the chains
  g.addHostPeers(s, rank);
  if (pos > 0) s.addPeer(g.at(h - 1, l));
  if (pos < H - 1) s.addPeer(g.at(h + 1, l));
  if (isRoot && !d.inPlace)
    s.copy(elemRange(kInput, {0, d.count}, es), elemRange(kOutput, {0, d.count}, es));

  auto slice = [&](int j) { return evenBlock(d.count, L, j); };
  const uint64_t chunk = chunkElems(d);
  for (uint64_t c = 0; c < numChunks(slice(0).count, chunk); ++c) {
    auto part = [&](int j) { return chunkOf(slice(j), chunk, c); };
    // Where this rank's slice is: the root's in its input, everyone else's in the output.
    const sched::Range own = elemRange(isRoot ? kInput : kOutput, part(l), es);
    // 1. Scatter inside the root's host.
    if (isRoot) {
      for (int j = 1; j < L; ++j) {
        const int to = (l + j) % L;
        s.send(g.at(h, to), elemRange(kInput, part(to), es));
      }
    } else if (pos == 0) {
      s.recv(d.root, own);
    }
    // 2. Chain across hosts on rail l.
    if (pos > 0) s.recv(g.at(h - 1, l), own);
    if (pos < H - 1) s.send(g.at(h + 1, l), own);
    // 3. All-gather inside the host; the root receives nothing.
    for (int j = 1; j < L; ++j) {
      const int to = g.at(h, (l + j) % L);
      if (to != d.root) s.send(to, own);
    }
    if (!isRoot) {
      for (int j = 1; j < L; ++j) {
        const int from = (l - j + L) % L;
        s.recv(g.at(h, from), elemRange(kOutput, part(from), es));
      }
    }
  }
  return s;
}

namespace {

// Slices of N/L: the root scatters them in its host, each rail chains its slice over the hosts,
// every host all-gathers. The root sends 2 (L-1) slices per chunk, a chain rank 1 + (L-1) and
// receives as many. Where it does not apply it is the chain.
cost::Traffic hierBroadcastTraffic(sched::Coll coll, double N, const cost::CostInput& in) {
  using namespace traffic;
  if (!hierarchical(in)) {
    const AlgoInfo* chain = findAlgorithm(coll, "chain");
    return chain ? chain->traffic(coll, N, in) : cost::Traffic{};
  }
  cost::Traffic t;
  const double c = static_cast<double>(in.chunkBytes), H = in.hosts, L = in.ranksPerHost;
  const double slice = std::ceil(N / L), C = ceilDiv(slice, c);
  t.hops = C > 0 ? (H - 1) + 2 + C - 1 : 0;
  t.messages = 2 * L * C;
  t.waits = L * C;
  t.headerPeers = (L - 1) + std::min(2.0, H - 1);
  t.bytesIntra = 2 * (L - 1) * slice;
  t.bytesNic = N;  // L rails of N/L
  t.interShare = 1 / L;
  t.fillBytes = (H - 2) * std::min(c, slice);
  t.copyBytes = N;
  t.workingSet = 2 * N;
  return t;
}

}  // namespace

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kBroadcast,
    .name = "hier",
    .description = "scatter in the root's host, chain across hosts per rail, all-gather in each host",
    .build = &buildHierBroadcast,
    .traffic = &hierBroadcastTraffic,
    .order = RankOrder::kRingPositions,
    .applies = &hierApplies,
});

}  // namespace chorus::algo
