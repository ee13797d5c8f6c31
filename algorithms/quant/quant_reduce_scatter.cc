// Quantized reduce-scatter (ZeRO++'s qgZ): three schedules over the quantization steps.
//
// Rank p owns slice p of every rank's input (recvcount elements at p * recvcount) and ends with
// their sum in its output; messages carry packed blocks (algorithms/kernels/quantize.h).
//
//   quant_direct   one hop. Every rank quantizes each owner's slice and sends it there; the
//                  owner decodes the n blocks (its own quantized too) in rank order, summing in
//                  float32. Two quantization errors at most on no path: one. For one host, or
//                  one rank per host, it is also the 2-hop algorithm.
//   quant_two_hop  qgZ. Host groups of L ranks, H hosts. Hop 1 inside the host: each
//                  destination's block goes to the host-mate with the destination's local rank,
//                  which decodes the L blocks, sums and re-quantizes them (one block per
//                  destination it serves, i.e. per host). Hop 2 across hosts, on each rail:
//                  that block goes to its owner, which decodes H blocks into its output. Every
//                  value is quantized twice whatever W is, and only H-1 blocks per rank cross
//                  hosts. The "swizzle" is the choice of server: the host-mate with the
//                  destination's local rank, so after both hops each rank holds exactly its
//                  own slice. Not hierarchical (one host, one rank per host, unequal hosts):
//                  builds quant_direct and is named by it.
//   quant_ring     for comparison: a ring that decodes, adds its own quantized slice and
//                  re-quantizes at every hop, so its error grows with W (n-1 re-quantizations).
//
// Chunks are whole groups (quant.h), so each chunk of each step is its own message and the
// steps of different chunks overlap (quantize, send, decode).
//
// Cost (per rank, S = recvcount bytes of the call's type, q = packed / element bytes):
//   direct    wire (n-1) q S; encode n S, decode n S.
//   two_hop   intra (L-1) H q S; NIC L (H-1) q S per host; encode n S, decode (L+1) H S + H S.
//   ring      (n-1) q S along the ring with n-1 dependent hops per chunk; ~3 n S encode/decode.
// Tuner: by the cost model between direct and two_hop (two_hop applies only where hosts are
// equal and hold several ranks each; its NIC bytes are 1/L of direct's); the ring never, unless
// CHORUS_ALGO names it.
#include "algorithms/common/traffic.h"
#include "algorithms/quant/quant.h"

namespace chorus::algo::quant {
namespace {

using sched::kInput;
using sched::kOutput;
using sched::kScratch;
using sched::Range;

// Slice p of a reduce-scatter: the recvcount elements at p * recvcount.
QuantBuild reduceScatterBuild(const sched::CollDesc& d, int rank, int nranks) {
  std::vector<Block> slices;
  for (int p = 0; p < nranks; ++p) slices.push_back({static_cast<uint64_t>(p) * d.count, d.count});
  QuantBuild b(d, rank, nranks, std::move(slices), static_cast<uint64_t>(nranks) * d.count);
  b.s.algo = "quant_direct";
  if (d.inPlace)
    b.s.outputInInput = static_cast<int64_t>(static_cast<uint64_t>(rank) * d.count * d.elemSize);
  return b;
}

sched::Schedule buildDirect(const sched::CollDesc& d, int rank, int nranks) {
  QuantBuild b = reduceScatterBuild(d, rank, nranks);
  oneHopReduceScatter(b, Sink{});
  return std::move(b.s);
}

sched::Schedule buildTwoHop(const sched::CollDesc& d, int rank, int nranks) {
  QuantBuild b = reduceScatterBuild(d, rank, nranks);
  const HostGroups g = hostGroups(d, nranks);
  if (!g.hierarchical()) {
    oneHopReduceScatter(b, Sink{});
  } else {
    b.s.algo = "quant_two_hop";
    twoHopReduceScatter(b, g, Sink{});
  }
  return std::move(b.s);
}

sched::Schedule buildRing(const sched::CollDesc& d, int rank, int nranks) {
  QuantBuild b = reduceScatterBuild(d, rank, nranks);
  if (nranks == 1) {
    oneHopReduceScatter(b, Sink{});
    return std::move(b.s);
  }
  b.s.algo = "quant_ring";
  const int n = nranks, next = (rank + 1) % n, prev = (rank + n - 1) % n;
  b.s.addPeer(next);
  b.s.addPeer(prev);
  const PackedSlice& any = b.slices[0];  // all slices have one size
  const uint64_t bytes = any.bytes();
  // Step s (1..n-1) receives the partial of slice (rank - s - 1) mod n and sets its own
  // quantized slice beside it, so the two are one run of sources; steps 1..n-2 re-quantize the
  // pair and send it on, step n-1's pair is this rank's slice.
  const uint64_t first = b.alloc(bytes);
  std::vector<uint64_t> pairAt(static_cast<size_t>(n)), outAt(static_cast<size_t>(n));
  for (int s = 1; s < n; ++s) pairAt[static_cast<size_t>(s)] = b.alloc(2 * bytes);
  for (int s = 1; s + 1 < n; ++s) outAt[static_cast<size_t>(s)] = b.alloc(bytes);
  auto sliceOf = [&](int s) { return b.slices[static_cast<size_t>((rank - s - 1 + 2 * n) % n)]; };
  for (uint64_t j = 0; j < any.chunks(); ++j) {
    const uint64_t cb = any.chunkBytes(j), co = any.chunkOffset(j);
    const Block c0 = sliceOf(0).chunk(j);
    const Range out0{kScratch, first + co, cb};
    b.s.quantize(b.elems(kInput, c0), out0, c0.count, b.stream(0, rank, c0.begin));
    b.s.send(next, out0);
    for (int s = 1; s < n; ++s) {
      const Block c = sliceOf(s).chunk(j);
      const Range pair{kScratch, pairAt[static_cast<size_t>(s)] + 2 * co, 2 * cb};
      b.s.recv(prev, Range{kScratch, pair.offset, cb});
      b.s.quantize(b.elems(kInput, c), Range{kScratch, pair.offset + cb, cb}, c.count,
                   b.stream(0, rank, c.begin));
      if (s + 1 < n) {
        const Range out{kScratch, outAt[static_cast<size_t>(s)] + co, cb};
        b.s.requantize(pair, 2, out, c.count, b.stream(static_cast<uint64_t>(s), rank, c.begin));
        b.s.send(next, out);
      } else {
        b.finish(Sink{}, j, pair, 2);
      }
    }
  }
  return std::move(b.s);
}

// The ring is for comparison (its error grows with W): it runs only when CHORUS_ALGO names it.
const char* ringApplies(const sched::CollDesc&, const Platform&) {
  return "runs only when CHORUS_ALGO names it (for comparison: its error grows with the ranks)";
}

cost::Traffic directTraffic(sched::Coll, double bytes, const cost::CostInput& in) {
  cost::Traffic t;
  oneHopTraffic(t, bytes, in);
  return t;
}

cost::Traffic twoHopTrafficOf(sched::Coll, double bytes, const cost::CostInput& in) {
  cost::Traffic t;
  twoHopTraffic(t, bytes, in);
  return t;
}

cost::Traffic ringTraffic(sched::Coll, double bytes, const cost::CostInput& in) {
  const double n = in.nranks;
  const double C = std::max(1.0, traffic::ceilDiv(bytes, static_cast<double>(in.chunkBytes)));
  const double q = in.packedRatio > 0 ? in.packedRatio : 1.0;
  cost::Traffic t;
  traffic::ringBytes(t, (n - 1) * q * bytes, in);
  t.hops = (n - 1) + C;
  t.headerPeers = 2;
  t.messages = 2 * (n - 1) * C;
  t.waits = (n - 1) * C;
  t.quantBytes = n * bytes + 3 * (n - 1) * bytes;
  t.workingSet = n * bytes + 3 * n * q * bytes;
  return t;
}

}  // namespace

void oneHopReduceScatter(QuantBuild& b, const Sink& sink) {
  const int r = b.rank, n = b.n;
  sched::Schedule& s = b.s;
  for (int p = 0; p < n; ++p)
    if (p != r) s.addPeer(p);
  const PackedSlice& mine = b.slices[static_cast<size_t>(r)];
  std::vector<uint64_t> sendAt(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p)
    if (p != r) sendAt[static_cast<size_t>(p)] = b.alloc(b.slices[static_cast<size_t>(p)].bytes());
  // The n blocks of each chunk of this rank's slice, back to back in rank order.
  const uint64_t recvAt = b.alloc(static_cast<uint64_t>(n) * mine.bytes());
  auto slot = [&](uint64_t j, int p) {
    return Range{kScratch,
                 recvAt + static_cast<uint64_t>(n) * mine.chunkOffset(j) +
                     static_cast<uint64_t>(p) * mine.chunkBytes(j),
                 mine.chunkBytes(j)};
  };
  for (uint64_t j = 0; j < b.maxChunks(); ++j) {
    for (int k = 1; k < n; ++k) {
      const int p = (r + k) % n;
      const PackedSlice& ps = b.slices[static_cast<size_t>(p)];
      if (j >= ps.chunks()) continue;
      const Block c = ps.chunk(j);
      const Range q{kScratch, sendAt[static_cast<size_t>(p)] + ps.chunkOffset(j), ps.chunkBytes(j)};
      s.quantize(b.elems(kInput, c), q, c.count, b.stream(0, r, c.begin));
      s.send(p, q);
    }
    if (j >= mine.chunks()) continue;
    const Block c = mine.chunk(j);
    s.quantize(b.elems(kInput, c), slot(j, r), c.count, b.stream(0, r, c.begin));
    for (int k = 1; k < n; ++k) s.recv((r + n - k) % n, slot(j, (r + n - k) % n));
    b.finish(sink, j, Range{kScratch, slot(j, 0).offset, static_cast<uint64_t>(n) * mine.chunkBytes(j)},
             static_cast<uint32_t>(n));
  }
}

void twoHopReduceScatter(QuantBuild& b, const HostGroups& g, const Sink& sink) {
  const int r = b.rank, H = g.numHosts(), L = g.perHost();
  const int h = g.hostOf(r), l = g.localOf(r);
  sched::Schedule& s = b.s;
  g.addHostPeers(s, r);
  // Other hosts are visited from the own host on (h + 1, h + 2, ...), here and in both hops'
  // loops below: every host then runs host 0's schedule with its peers moved by whole hosts
  // (the symmetry chorus-sim folds by), and hop 1 / hop 2 do not all start at host 0. The
  // sums are unaffected: their order is set by the slots (local rank, host), not by this.
  auto hostAt = [&](int t) { return (h + t) % H; };
  for (int t = 1; t < H; ++t) s.addPeer(g.at(hostAt(t), l));
  auto slice = [&](int p) -> const PackedSlice& { return b.slices[static_cast<size_t>(p)]; };
  const PackedSlice& mine = slice(r);
  // Hop 1's outgoing blocks: one per destination another host-mate serves.
  std::vector<uint64_t> sendAt(static_cast<size_t>(b.n));
  for (int p = 0; p < b.n; ++p)
    if (g.localOf(p) != l) sendAt[static_cast<size_t>(p)] = b.alloc(slice(p).bytes());
  // Per destination served here (host hh's rank of local rank l): the L blocks of each chunk,
  // in local-rank order; then that sum re-quantized (other hosts' destinations only: the own
  // host's goes straight beside the blocks hop 2 brings).
  std::vector<uint64_t> gatherAt(static_cast<size_t>(H)), rqAt(static_cast<size_t>(H));
  for (int hh = 0; hh < H; ++hh)
    gatherAt[static_cast<size_t>(hh)] =
        b.alloc(static_cast<uint64_t>(L) * slice(g.at(hh, l)).bytes());
  for (int hh = 0; hh < H; ++hh)
    if (hh != h) rqAt[static_cast<size_t>(hh)] = b.alloc(slice(g.at(hh, l)).bytes());
  const uint64_t mineAt = b.alloc(static_cast<uint64_t>(H) * mine.bytes());
  auto gathered = [&](int hh, uint64_t j, int k) {
    const PackedSlice& ps = slice(g.at(hh, l));
    return Range{kScratch,
                 gatherAt[static_cast<size_t>(hh)] + static_cast<uint64_t>(L) * ps.chunkOffset(j) +
                     static_cast<uint64_t>(k) * ps.chunkBytes(j),
                 ps.chunkBytes(j)};
  };
  auto mineSlot = [&](uint64_t j, int hh) {
    return Range{kScratch,
                 mineAt + static_cast<uint64_t>(H) * mine.chunkOffset(j) +
                     static_cast<uint64_t>(hh) * mine.chunkBytes(j),
                 mine.chunkBytes(j)};
  };
  for (uint64_t j = 0; j < b.maxChunks(); ++j) {
    // Hop 1: every destination's chunk, quantized, to the host-mate of its local rank.
    for (int u = 0; u < H; ++u)
      for (int t = 0, hh = hostAt(u); t < L; ++t) {
        const int k = (l + t) % L, dest = g.at(hh, k);
        const PackedSlice& ps = slice(dest);
        if (j >= ps.chunks()) continue;
        const Block c = ps.chunk(j);
        const Range q = k == l ? gathered(hh, j, l)
                               : Range{kScratch, sendAt[static_cast<size_t>(dest)] + ps.chunkOffset(j),
                                       ps.chunkBytes(j)};
        s.quantize(b.elems(kInput, c), q, c.count, b.stream(0, r, c.begin));
        if (k != l) s.send(g.at(h, k), q);
      }
    for (int u = 0; u < H; ++u) {
      const int hh = hostAt(u);
      if (j >= slice(g.at(hh, l)).chunks()) continue;
      for (int t = 1; t < L; ++t) {
        const int k = (l + L - t) % L;
        s.recv(g.at(h, k), gathered(hh, j, k));
      }
    }
    // The host's sum of each served destination, re-quantized; hop 2 sends it to its owner.
    for (int u = 0; u < H; ++u) {
      const int hh = hostAt(u), dest = g.at(hh, l);
      const PackedSlice& ps = slice(dest);
      if (j >= ps.chunks()) continue;
      const Block c = ps.chunk(j);
      const Range out = hh == h ? mineSlot(j, h)
                                : Range{kScratch, rqAt[static_cast<size_t>(hh)] + ps.chunkOffset(j),
                                        ps.chunkBytes(j)};
      const Range all{kScratch, gathered(hh, j, 0).offset,
                      static_cast<uint64_t>(L) * ps.chunkBytes(j)};
      s.requantize(all, static_cast<uint32_t>(L), out, c.count, b.stream(1, r, c.begin));
      if (hh != h) s.send(dest, out);
    }
    if (j >= mine.chunks()) continue;
    for (int t = 1; t < H; ++t) {
      const int hh = (h + H - t) % H;
      s.recv(g.at(hh, l), mineSlot(j, hh));
    }
    b.finish(sink, j,
             Range{kScratch, mineSlot(j, 0).offset, static_cast<uint64_t>(H) * mine.chunkBytes(j)},
             static_cast<uint32_t>(H));
  }
}

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kReduceScatter,
    .name = "quant_direct",
    .description = "quantized, one hop: each owner decodes and sums n blocks",
    .build = &buildDirect,
    .traffic = &directTraffic,
    .quantized = true,
});

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kReduceScatter,
    .name = "quant_two_hop",
    .description = "quantized qgZ: host-mates, re-quantize, then one block per host per rail",
    .build = &buildTwoHop,
    .traffic = &twoHopTrafficOf,
    .applies = &quantHierApplies,
    .quantized = true,
});

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kReduceScatter,
    .name = "quant_ring",
    .description = "quantized ring, re-quantizing at every hop (error grows with the ranks)",
    .build = &buildRing,
    .traffic = &ringTraffic,
    .applies = &ringApplies,
    .tiePriority = 2,
    .quantized = true,
});

}  // namespace chorus::algo::quant
