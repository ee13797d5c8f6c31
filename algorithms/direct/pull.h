// Building blocks of the one-sided direct algorithms (internal to algorithms/direct/).
//
// Orders. A rank notifies its peers in the order r+1, r+2, ..., r+n-1 and waits for them in the
// order r-1, r-2, ..., r-(n-1). finalize() chains notifies (each is a fence over everything
// before it) and waits (each fences everything after it), so the order matters when a notify
// completes only together with its wait, as on a transport without buffering: with these two
// orders the k-th notify of rank r meets the k-th wait of rank r+k, so round k completes on all
// ranks together. Waiting in the same direction as notifying would make a cycle through the
// ranks (tests/unit/schedules/checker_test.cc shows the checker finding it).
//
// Reading peers in the order r+1, r+2, ... also spreads the load: at any moment each rank's
// memory is read by about one peer, not by all of them at once.
#pragma once

#include "algorithms/common/chunking.h"

namespace chorus::algo::direct {

inline int peerAt(int rank, int nranks, int k) { return modRank(rank + k, nranks); }

inline void addAllPeers(sched::Schedule& s, int rank, int nranks) {
  for (int k = 1; k < nranks; ++k) s.addPeer(peerAt(rank, nranks, k));
}

inline void notifyAll(sched::Schedule& s, int rank, int nranks) {
  for (int k = 1; k < nranks; ++k) s.notify(peerAt(rank, nranks, k));
}

inline void waitAll(sched::Schedule& s, int rank, int nranks) {
  for (int k = 1; k < nranks; ++k) s.wait(peerAt(rank, nranks, -k));
}

// dst = own input[src] ⊕ input[src] of r+1 ⊕ input[src] of r+2 ⊕ ... ⊕ of r+n-1, chunk by
// chunk: `src` is the same block of every rank's input, the result goes to dstBuf at dstBegin
// (elements). Each chunk is a chain of n-1 getReduces into its destination, the first folding
// in the rank's own input, so no copy is needed and the order of terms is fixed for every
// element. Chunks are independent chains that an executor runs side by side. In place dst may
// be the input block itself (b == dst).
inline void pullReduce(sched::Schedule& s, const sched::CollDesc& d, int rank, int nranks,
                       Block src, sched::BufId dstBuf, uint64_t dstBegin) {
  const uint64_t es = d.elemSize, chunk = chunkElems(d);
  for (uint64_t c = 0; c < numChunks(src.count, chunk); ++c) {
    const Block part = chunkOf(src, chunk, c);
    const sched::Range mine = elemRange(sched::kInput, part, es);
    const sched::Range out =
        elemRange(dstBuf, Block{dstBegin + (part.begin - src.begin), part.count}, es);
    for (int k = 1; k < nranks; ++k)
      s.getReduce(peerAt(rank, nranks, k), mine, k == 1 ? mine : out, out);
  }
}

// output[q's block] = input of q, for every peer q: `count` elements per rank, block q at
// q * count of the output, chunk by chunk, peers in the order r+1, r+2, ... within a chunk.
inline void pullBlocks(sched::Schedule& s, const sched::CollDesc& d, int rank, int nranks,
                       uint64_t count) {
  const uint64_t es = d.elemSize, chunk = chunkElems(d);
  for (uint64_t c = 0; c < numChunks(count, chunk); ++c) {
    const Block part = chunkOf({0, count}, chunk, c);
    for (int k = 1; k < nranks; ++k) {
      const int q = peerAt(rank, nranks, k);
      const Block into{static_cast<uint64_t>(q) * count + part.begin, part.count};
      s.get(q, elemRange(sched::kInput, part, es), elemRange(sched::kOutput, into, es));
    }
  }
}

}  // namespace chorus::algo::direct
