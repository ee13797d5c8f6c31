// Quantized collectives (ZeRO++'s qgZ and qwZ): reduce-scatter, all-gather and all-reduce whose
// messages carry group-quantized blocks (algorithms/kernels/quantize.h is the format) instead
// of the call's elements. Registered with AlgoInfo::quantized: the tuner offers them only to
// quantized calls (CollDesc::quant set) and never offers the others to those calls.
//
// What every algorithm here shares:
//   - Chunks are whole groups (quantChunkElems), so the packed chunks of a slice laid end to
//     end are the packed slice, and the bytes of a result never depend on the chunk size.
//   - Stream indices (the element index stochastic rounding is keyed by) never repeat within a
//     call: stage k (0: the first quantization, then each re-quantization) of element i on rank
//     r uses (k*n + r)*N + i, N being the elements of one rank's input (QuantBuild::stream).
//     Ranks and stages therefore round independently (two hosts re-quantizing the same element
//     with one random number would correlate their errors, which then grow with the hosts).
//   - Sums are taken in a fixed order (sources in rank, local-rank or host order), so a result is
//     a deterministic function of the inputs (and the seed).
//   - Every result passes through quantization, one rank included (n = 1 gives D(Q(x))), so a
//     caller sees one semantics whatever the rank count.
//
// The builders are in quant_reduce_scatter.cc, quant_all_gather.cc and quant_all_reduce.cc,
// each with its schedule, cost and tuner notes; this header holds the index math they share.
#pragma once

#include <vector>

#include "algorithms/common/chunking.h"
#include "algorithms/common/host_groups.h"
#include "algorithms/common/schedule.h"
#include "algorithms/registry.h"

namespace chorus::algo::quant {

// Elements per chunk of a quantized schedule: CollDesc::chunkBytes in elements, rounded down to
// whole groups, at least one group.
uint64_t quantChunkElems(const sched::CollDesc& d);

// A slice of a rank's flat buffer (elements), cut into chunks of whole groups, with the byte
// layout of its packed form: chunk j's records start at j times the packed size of a full chunk.
class PackedSlice {
 public:
  PackedSlice(const kernels::QuantConfig& c, Block slice, uint64_t chunkElems);
  Block slice() const { return slice_; }
  uint64_t chunks() const { return numChunks(slice_.count, chunk_); }
  // Chunk j, in the slice's (absolute) element indices.
  Block chunk(uint64_t j) const { return chunkOf(slice_, chunk_, j); }
  // Bytes of chunk j packed, and where they start in the packed slice.
  uint64_t chunkBytes(uint64_t j) const;
  uint64_t chunkOffset(uint64_t j) const { return j * fullChunkBytes_; }
  // Bytes of the whole slice packed.
  uint64_t bytes() const;

 private:
  kernels::QuantConfig config_;
  Block slice_;
  uint64_t chunk_;
  uint64_t fullChunkBytes_;
};

// Where the reduce-scatter part puts the sum of this rank's slice, chunk by chunk: dequantized
// into a buffer of the call's type (at `buf` + `offset` bytes, the slice's first element there),
// or re-quantized into the packed slice at `buf` + `offset` (the all-reduce, whose all-gather
// sends that block on) with stream stage `stage`.
struct Sink {
  bool requantize = false;
  sched::BufId buf = sched::kOutput;
  uint64_t offset = 0;
  uint64_t stage = 0;
};

// One builder's state: the call, this rank, the slices of every rank, and a scratch allocator.
struct QuantBuild {
  QuantBuild(const sched::CollDesc& d, int rank, int nranks, std::vector<Block> slices,
             uint64_t elementsPerRank);
  const sched::CollDesc& d;
  int rank, n;
  const kernels::QuantConfig& config;
  uint64_t chunkElems;
  std::vector<PackedSlice> slices;  // per rank: the slice it owns of every rank's input
  uint64_t N;                       // elements of one rank's input (stream index spacing)
  sched::Schedule s;

  // A new scratch region of `bytes`; returns its offset.
  uint64_t alloc(uint64_t bytes);
  // The stream index of element i in stage `stage` on rank `who` (0: the first quantization).
  uint64_t stream(uint64_t stage, int who, uint64_t i) const;
  uint64_t maxChunks() const;
  // The call-type range of elements `b` of buffer `buf` (the input: this rank's flat input).
  sched::Range elems(sched::BufId buf, Block b) const { return elemRange(buf, b, d.elemSize); }
  // Emits the sink's step for chunk j of this rank's slice from `k` packed sources at
  // `sources` (back to back).
  void finish(const Sink& sink, uint64_t j, sched::Range sources, uint32_t k);
};

// The reduce-scatter halves, over b.slices, into `sink` (the all-reduce reuses them).
//   oneHop   every rank quantizes each owner's slice and sends it; the owner sums n blocks.
//   twoHop   ZeRO++'s qgZ over host groups g (hierarchical): host-mates first, re-quantize,
//            then one block per host across on each rail; the owner sums H blocks.
void oneHopReduceScatter(QuantBuild& b, const Sink& sink);
void twoHopReduceScatter(QuantBuild& b, const HostGroups& g, const Sink& sink);

// The all-gather halves: every rank's packed slice, in scratch at gathered.base +
// gathered.offsets[rank], reaches every rank and is dequantized into the output at the slice's
// elements, the owner's own included (every rank decodes the same bytes, so all end
// bit-identical). With quantizeOwn, this rank first quantizes its input (the all-gather);
// without, its block is already written (the all-reduce's reduce-scatter re-quantized into it).
struct Gathered {
  uint64_t base = 0;
  std::vector<uint64_t> offsets;
  // Chunk j of rank p's packed slice.
  sched::Range chunk(const QuantBuild& b, int p, uint64_t j) const;
};
Gathered gatheredBlocks(QuantBuild& b);
//   flat   every rank sends its block to every other rank.
//   rail   across hosts on each rail first (H-1 blocks per rank cross), then every block a
//          rank holds to its host-mates (hierarchical host groups g).
void flatAllGather(QuantBuild& b, const Gathered& blocks, bool quantizeOwn);
void railAllGather(QuantBuild& b, const HostGroups& g, const Gathered& blocks, bool quantizeOwn);

// Cost terms, added to `t` for a slice of `bytes` (of the call's type) per rank: the wire bytes
// are those bytes times CostInput::packedRatio; bytes of the call's type encoded or decoded go
// to Traffic::quantBytes.
void oneHopTraffic(cost::Traffic& t, double bytes, const cost::CostInput& in);
void twoHopTraffic(cost::Traffic& t, double bytes, const cost::CostInput& in);
void flatGatherTraffic(cost::Traffic& t, double bytes, const cost::CostInput& in, bool quantizeOwn);
void railGatherTraffic(cost::Traffic& t, double bytes, const cost::CostInput& in, bool quantizeOwn);

// Where the host-aware quantized algorithms apply: several hosts of several ranks, all of one
// size.
const char* quantHierApplies(const sched::CollDesc& d, const Platform& p);

}  // namespace chorus::algo::quant
