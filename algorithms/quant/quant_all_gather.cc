// Quantized all-gather (ZeRO++'s qwZ): each rank's block travels packed and every rank, its
// owner included, decodes the same bytes — so all ranks end bit-identical, each slot equal to
// D(Q(x)) of its owner's input.
//
//   quant_direct  every rank quantizes its input and sends the block to every other rank.
//   quant_hier    across hosts on each rail first (each rank's block crosses to the H-1 ranks
//                 of its local rank), then every block a rank holds (H of them) to its L-1
//                 host-mates. Only H-1 blocks per rank cross hosts. Not hierarchical (one host,
//                 one rank per host, unequal hosts): builds quant_direct and is named by it.
//
// Chunks are whole groups (quant.h); each chunk is forwarded as soon as it arrives.
//
// Cost (per rank, S = sendcount bytes of the call's type, q = packed / element bytes):
//   direct  wire (n-1) q S to every peer (NIC: L (n-L) q S per host); encode S, decode n S.
//   hier    intra (L-1) H q S; NIC L (H-1) q S per host; encode S, decode n S.
// Tuner: hier wherever hosts are equal and hold several ranks each; direct elsewhere.
#include "algorithms/quant/quant.h"

namespace chorus::algo::quant {
namespace {

using sched::kInput;
using sched::kOutput;

QuantBuild allGatherBuild(const sched::CollDesc& d, int rank, int nranks) {
  std::vector<Block> slices;
  for (int p = 0; p < nranks; ++p) slices.push_back({static_cast<uint64_t>(p) * d.count, d.count});
  QuantBuild b(d, rank, nranks, std::move(slices), d.count);
  b.s.algo = "quant_direct";
  if (d.inPlace)
    b.s.inputInOutput = static_cast<int64_t>(static_cast<uint64_t>(rank) * d.count * d.elemSize);
  return b;
}

sched::Schedule buildDirect(const sched::CollDesc& d, int rank, int nranks) {
  QuantBuild b = allGatherBuild(d, rank, nranks);
  flatAllGather(b, gatheredBlocks(b), true);
  return std::move(b.s);
}

sched::Schedule buildHier(const sched::CollDesc& d, int rank, int nranks) {
  QuantBuild b = allGatherBuild(d, rank, nranks);
  const HostGroups g = hostGroups(d, nranks);
  if (!g.hierarchical()) {
    flatAllGather(b, gatheredBlocks(b), true);
  } else {
    b.s.algo = "quant_hier";
    railAllGather(b, g, gatheredBlocks(b), true);
  }
  return std::move(b.s);
}

// The rank's own chunk j, quantized from its input (the all-gather's input is its slice alone,
// so element k of the slice is input element k; the stream index is the output element's).
void quantizeOwn(QuantBuild& b, const Gathered& blocks, uint64_t j) {
  const PackedSlice& mine = b.slices[static_cast<size_t>(b.rank)];
  if (j >= mine.chunks()) return;
  const Block c = mine.chunk(j);
  b.s.quantize(b.elems(kInput, {c.begin - mine.slice().begin, c.count}),
               blocks.chunk(b, b.rank, j), c.count, b.stream(0, b.rank, c.begin - mine.slice().begin));
}

// Every rank's chunk j decoded into its place in the output, from this rank's own on (r, r + 1,
// ...): every rank then runs rank 0's steps with the ranks moved, the symmetry chorus-sim folds
// by. Each block lands in its own slot, so the order does not change a bit.
void decodeAll(QuantBuild& b, const Gathered& blocks, uint64_t j) {
  for (int u = 0; u < b.n; ++u) {
    const int p = (b.rank + u) % b.n;
    const PackedSlice& ps = b.slices[static_cast<size_t>(p)];
    if (j >= ps.chunks()) continue;
    const Block c = ps.chunk(j);
    b.s.dequantize(blocks.chunk(b, p, j), 1, b.elems(kOutput, c), c.count);
  }
}

cost::Traffic directTraffic(sched::Coll, double bytes, const cost::CostInput& in) {
  cost::Traffic t;
  flatGatherTraffic(t, bytes, in, true);
  return t;
}

cost::Traffic hierTraffic(sched::Coll, double bytes, const cost::CostInput& in) {
  cost::Traffic t;
  railGatherTraffic(t, bytes, in, true);
  return t;
}

}  // namespace

void flatAllGather(QuantBuild& b, const Gathered& blocks, bool own) {
  const int r = b.rank, n = b.n;
  for (int p = 0; p < n; ++p)
    if (p != r) b.s.addPeer(p);
  const PackedSlice& mine = b.slices[static_cast<size_t>(r)];
  for (uint64_t j = 0; j < b.maxChunks(); ++j) {
    if (own) quantizeOwn(b, blocks, j);
    if (j < mine.chunks())
      for (int k = 1; k < n; ++k) b.s.send((r + k) % n, blocks.chunk(b, r, j));
    for (int k = 1; k < n; ++k) {
      const int p = (r + n - k) % n;
      if (j < b.slices[static_cast<size_t>(p)].chunks()) b.s.recv(p, blocks.chunk(b, p, j));
    }
    decodeAll(b, blocks, j);
  }
}

void railAllGather(QuantBuild& b, const HostGroups& g, const Gathered& blocks, bool own) {
  const int r = b.rank, H = g.numHosts(), L = g.perHost();
  const int h = g.hostOf(r), l = g.localOf(r);
  g.addHostPeers(b.s, r);
  // Hosts are visited from the own host on (h, h + 1, ...; g.at wraps), here and in the loops
  // below, as qgZ does (twoHopReduceScatter): every host runs host 0's plan with its peers
  // moved by whole hosts.
  for (int u = 1; u < H; ++u) b.s.addPeer(g.at(h + u, l));
  auto chunks = [&](int p) { return b.slices[static_cast<size_t>(p)].chunks(); };
  for (uint64_t j = 0; j < b.maxChunks(); ++j) {
    if (own) quantizeOwn(b, blocks, j);
    // Across: this rank's block to its rail, the rail's blocks from it.
    if (j < chunks(r))
      for (int t = 1; t < H; ++t) b.s.send(g.at(h + t, l), blocks.chunk(b, r, j));
    for (int t = 1; t < H; ++t) {
      const int o = g.at(h - t, l);
      if (j < chunks(o)) b.s.recv(o, blocks.chunk(b, o, j));
    }
    // Inside the host: the rail's H blocks to every host-mate, theirs from them.
    for (int t = 1; t < L; ++t)
      for (int u = 0; u < H; ++u) {
        const int o = g.at(h + u, l);
        if (j < chunks(o)) b.s.send(g.at(h, (l + t) % L), blocks.chunk(b, o, j));
      }
    for (int t = 1; t < L; ++t) {
      const int k = (l + L - t) % L;
      for (int u = 0; u < H; ++u) {
        const int o = g.at(h + u, k);
        if (j < chunks(o)) b.s.recv(g.at(h, k), blocks.chunk(b, o, j));
      }
    }
    decodeAll(b, blocks, j);
  }
}

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kAllGather,
    .name = "quant_direct",
    .description = "quantized qwZ: each rank's block to every rank, decoded by all",
    .build = &buildDirect,
    .traffic = &directTraffic,
    .quantized = true,
});

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kAllGather,
    .name = "quant_hier",
    .description = "quantized qwZ: across each rail, then to host-mates",
    .build = &buildHier,
    .traffic = &hierTraffic,
    .applies = &quantHierApplies,
    .quantized = true,
});

}  // namespace chorus::algo::quant
