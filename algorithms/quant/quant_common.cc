// Index math, sinks and cost helpers shared by the quantized collectives (quant.h).
#include <algorithm>

#include "algorithms/common/traffic.h"
#include "algorithms/quant/quant.h"

namespace chorus::algo::quant {

using sched::kScratch;
using sched::Range;

uint64_t quantChunkElems(const sched::CollDesc& d) {
  const uint64_t g = d.quant->groupSize;
  return std::max<uint64_t>(1, chunkElems(d) / g) * g;
}

PackedSlice::PackedSlice(const kernels::QuantConfig& c, Block slice, uint64_t chunkElems)
    : config_(c),
      slice_(slice),
      chunk_(chunkElems),
      fullChunkBytes_(kernels::quant::packedBytes(c, chunkElems)) {}

uint64_t PackedSlice::chunkBytes(uint64_t j) const {
  return kernels::quant::packedBytes(config_, chunk(j).count);
}

uint64_t PackedSlice::bytes() const { return kernels::quant::packedBytes(config_, slice_.count); }

QuantBuild::QuantBuild(const sched::CollDesc& desc, int r, int nranks, std::vector<Block> owned,
                       uint64_t elementsPerRank)
    : d(desc), rank(r), n(nranks), config(*desc.quant), chunkElems(quantChunkElems(desc)),
      N(elementsPerRank) {
  for (Block b : owned) slices.emplace_back(config, b, chunkElems);
}

uint64_t QuantBuild::alloc(uint64_t bytes) {
  const uint64_t at = s.scratchBytes;
  s.scratchBytes += bytes;
  return at;
}

uint64_t QuantBuild::stream(uint64_t stage, int who, uint64_t i) const {
  return (stage * static_cast<uint64_t>(n) + static_cast<uint64_t>(who)) * N + i;
}

uint64_t QuantBuild::maxChunks() const {
  uint64_t m = 0;
  for (const PackedSlice& p : slices) m = std::max(m, p.chunks());
  return m;
}

void QuantBuild::finish(const Sink& sink, uint64_t j, Range sources, uint32_t k) {
  const PackedSlice& mine = slices[static_cast<size_t>(rank)];
  const Block c = mine.chunk(j);
  if (!sink.requantize) {
    const uint64_t at = sink.offset + (c.begin - mine.slice().begin) * d.elemSize;
    s.dequantize(sources, k, Range{sink.buf, at, c.count * d.elemSize}, c.count);
    return;
  }
  s.requantize(sources, k,
               Range{sink.buf, sink.offset + mine.chunkOffset(j), mine.chunkBytes(j)}, c.count,
               stream(sink.stage, rank, c.begin));
}

Range Gathered::chunk(const QuantBuild& b, int p, uint64_t j) const {
  const PackedSlice& ps = b.slices[static_cast<size_t>(p)];
  return Range{kScratch, base + offsets[static_cast<size_t>(p)] + ps.chunkOffset(j),
               ps.chunkBytes(j)};
}

Gathered gatheredBlocks(QuantBuild& b) {
  Gathered g;
  uint64_t total = 0;
  for (const PackedSlice& p : b.slices) {
    g.offsets.push_back(total);
    total += p.bytes();
  }
  g.base = b.alloc(total);
  return g;
}

const char* quantHierApplies(const sched::CollDesc&, const Platform& p) {
  return traffic::hierarchical(p.cost) ? nullptr
                                       : "needs several hosts of several ranks, all of one size";
}

// ---- cost terms ------------------------------------------------------------------------------

namespace {

double packed(double bytes, const cost::CostInput& in) {
  return bytes * (in.packedRatio > 0 ? in.packedRatio : 1.0);
}

double chunksOf(double bytes, const cost::CostInput& in) {
  return std::max(1.0, traffic::ceilDiv(bytes, static_cast<double>(in.chunkBytes)));
}

void add(cost::Traffic& t, const cost::Traffic& u) {
  t.hops += u.hops;
  t.headerPeers = std::max(t.headerPeers, u.headerPeers);
  const double m = t.messages + u.messages;
  t.interShare = m > 0 ? (t.interShare * t.messages + u.interShare * u.messages) / m : 0;
  t.messages = m;
  t.bytesIntra += u.bytesIntra;
  t.bytesNic += u.bytesNic;
  t.waits += u.waits;
  t.quantBytes += u.quantBytes;
  t.workingSet = std::max(t.workingSet, u.workingSet);
}

// Blocks of `bytes` packed to every other rank, chunk by chunk.
cost::Traffic toEveryRank(double bytes, const cost::CostInput& in) {
  const double n = in.nranks, C = chunksOf(bytes, in);
  cost::Traffic u;
  traffic::directBytes(u, packed(bytes, in), in);
  u.hops = 1 + C;
  u.headerPeers = n - 1;
  u.messages = 2 * (n - 1) * C;
  u.waits = (n - 1) * C;
  return u;
}

// Host-aware: H-1 blocks across on the rail, H blocks to each of L-1 host-mates.
cost::Traffic railAndHost(double bytes, const cost::CostInput& in) {
  const double H = in.hosts, L = in.ranksPerHost, C = chunksOf(bytes, in);
  cost::Traffic u;
  u.bytesIntra = (L - 1) * H * packed(bytes, in);
  u.bytesNic = L * (H - 1) * packed(bytes, in);
  u.interShare = (H - 1) / std::max(1.0, (L - 1) * H + (H - 1));
  u.hops = 2 + C;
  u.headerPeers = (L - 1) + (H - 1);
  u.messages = 2 * ((L - 1) * H + (H - 1)) * C;
  u.waits = ((L - 1) * H + (H - 1)) * C;
  return u;
}

}  // namespace

// Every rank quantizes the n slices of its input (n * bytes) and sends n-1 blocks; the owner
// decodes n blocks into one slice (n * bytes decoded).
void oneHopTraffic(cost::Traffic& t, double bytes, const cost::CostInput& in) {
  const double n = in.nranks;
  cost::Traffic u = toEveryRank(bytes, in);
  u.quantBytes = 2 * n * bytes;
  u.workingSet = n * bytes + 2 * packed(n * bytes, in);
  add(t, u);
}

// Host-mates first; re-quantize H blocks of L each; H-1 blocks across; decode H blocks.
void twoHopTraffic(cost::Traffic& t, double bytes, const cost::CostInput& in) {
  const double H = in.hosts, L = in.ranksPerHost, n = in.nranks;
  cost::Traffic u = railAndHost(bytes, in);
  u.quantBytes = n * bytes + (L + 1) * H * bytes + H * bytes;
  u.workingSet = n * bytes + packed((n + 2 * L * H) * bytes, in);
  add(t, u);
}

// Quantize the own slice (unless already packed), send it to n-1 ranks, decode n slices.
void flatGatherTraffic(cost::Traffic& t, double bytes, const cost::CostInput& in,
                       bool quantizeOwn) {
  const double n = in.nranks;
  cost::Traffic u = toEveryRank(bytes, in);
  u.quantBytes = (quantizeOwn ? bytes : 0) + n * bytes;
  u.workingSet = n * bytes + packed(n * bytes, in);
  add(t, u);
}

// Across the rail, then to host-mates; decode n slices.
void railGatherTraffic(cost::Traffic& t, double bytes, const cost::CostInput& in,
                       bool quantizeOwn) {
  const double n = in.nranks;
  cost::Traffic u = railAndHost(bytes, in);
  u.quantBytes = (quantizeOwn ? bytes : 0) + n * bytes;
  u.workingSet = n * bytes + packed(n * bytes, in);
  add(t, u);
}

}  // namespace chorus::algo::quant
