// Index math shared by the schedule builders: how a buffer is cut into per-rank blocks and
// pipelining chunks, and where partial results live in scratch.
//
// Kept apart from the builders so every algorithm cuts data the same way: two ranks that compute
// "chunk c of block k" independently must get the same bytes, or their messages do not match.
#pragma once

#include <algorithm>
#include <cstdint>

#include "algorithms/common/schedule.h"

namespace chorus::algo {

// A contiguous run of elements.
struct Block {
  uint64_t begin = 0;
  uint64_t count = 0;
};

// Block `index` of `count` elements cut into `parts` blocks whose sizes differ by at most one;
// the first count % parts blocks carry the extra element. Used where the collective itself does
// not fix block sizes (allreduce slices).
inline Block evenBlock(uint64_t count, int parts, int index) {
  const uint64_t p = static_cast<uint64_t>(parts);
  const uint64_t i = static_cast<uint64_t>(index);
  const uint64_t base = count / p, extra = count % p;
  return Block{i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

// Elements per pipelining chunk: chunkBytes rounded down to whole elements, at least one.
inline uint64_t chunkElems(const sched::CollDesc& d) {
  const uint64_t es = d.elemSize ? d.elemSize : 1;
  return std::max<uint64_t>(1, d.chunkBytes / es);
}

// Chunk for a ring over slices of `sliceElems`: a ring step can only overlap receive, reduce and
// forward when its slice has at least two chunks, so large chunks are halved down to half a
// slice — but never below kMinPipelineChunkBytes, where per-message costs would dominate.
// (Measured on 2 cores over TCP, 4 ranks at 1 MiB: 128 KiB chunks 2.40 GB/s busbw, one
// 256 KiB chunk per slice 2.01 GB/s; 2 ranks keep 256 KiB.) Equal on every rank: it depends
// only on the count and nranks.
inline constexpr uint64_t kMinPipelineChunkBytes = 64 << 10;
inline uint64_t ringChunkElems(const sched::CollDesc& d, uint64_t sliceElems) {
  const uint64_t es = d.elemSize ? d.elemSize : 1;
  const uint64_t half = (sliceElems + 1) / 2;
  const uint64_t floor = std::max<uint64_t>(1, kMinPipelineChunkBytes / es);
  return std::min(chunkElems(d), std::max(half, floor));
}

// Number of chunks of `chunk` elements covering `count` elements.
inline uint64_t numChunks(uint64_t count, uint64_t chunk) { return (count + chunk - 1) / chunk; }

// Chunk `c` of block `b`; empty once c runs past the block's end (blocks of uneven size walk
// the same chunk loop, the shorter ones simply run out first).
inline Block chunkOf(Block b, uint64_t chunk, uint64_t c) {
  const uint64_t lo = std::min(b.count, c * chunk);
  const uint64_t hi = std::min(b.count, lo + chunk);
  return Block{b.begin + lo, hi - lo};
}

// The byte range of `blk` (in elements) in buffer `buf`.
inline sched::Range elemRange(sched::BufId buf, Block blk, uint64_t elemSize) {
  return sched::Range{buf, blk.begin * elemSize, blk.count * elemSize};
}

// The start of a schedule whose output has the input's size (all-reduce, broadcast, reduce): named `algo`,
// with NCCL's in-place aliasing (output over input) when d.inPlace. On a single rank it is
// already complete: the input copied to the output, or nothing in place.
inline sched::Schedule sameSizeSchedule(const char* algo, const sched::CollDesc& d, int nranks) {
  sched::Schedule s;
  s.algo = algo;
  if (d.inPlace) s.outputInInput = 0;
  if (nranks == 1 && !d.inPlace)
    s.copy(elemRange(sched::kInput, {0, d.count}, d.elemSize),
           elemRange(sched::kOutput, {0, d.count}, d.elemSize));
  return s;
}

inline int modRank(int64_t r, int nranks) {
  const int64_t n = nranks;
  return static_cast<int>(((r % n) + n) % n);
}

// Scratch for partial results that live for one hop: received into a slot, sent on, then the
// slot is free. A small ring of chunk-sized slots bounds scratch by the chunk size instead of
// the message size; finalize() turns slot reuse into write-after-read dependencies, so up to
// kScratchSlots chunks can be in flight before a receive waits for an older send to drain.
inline constexpr uint32_t kScratchSlots = 4;

class ScratchRing {
 public:
  ScratchRing(uint64_t slotBytes, uint64_t base = 0) : slotBytes_(slotBytes), base_(base) {}

  // The next slot, `bytes` <= slotBytes long.
  sched::Range next(uint64_t bytes) {
    const uint64_t slot = used_++ % kScratchSlots;
    return sched::Range{sched::kScratch, base_ + slot * slotBytes_, bytes};
  }

  // End offset of the scratch this ring used (base included).
  uint64_t end() const { return base_ + std::min<uint64_t>(used_, kScratchSlots) * slotBytes_; }

 private:
  uint64_t slotBytes_;
  uint64_t base_;
  uint64_t used_ = 0;
};

}  // namespace chorus::algo
