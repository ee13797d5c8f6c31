// Recursive doubling all-reduce: log2 p exchanges of the whole vector.
//
// Schedule. Let p be the largest power of two <= n and x = n - p. The fold is Rabenseifner's
// (PowerOfTwoFold in tree.h): among ranks 0..2x-1 each even rank sends its input to the odd
// rank above it, which reduces it into its output, and the p remaining ranks take new numbers
// (odd r < 2x: r/2; r >= 2x: r - x). Then, for mask = 1, 2, ..., p/2, each remaining rank sends
// its whole current vector to the rank whose new number differs in that bit and reduces what it
// receives into its output. After log2 p steps every remaining rank holds the reduction over all
// n ranks; each odd rank of the fold sends it to its even partner. Exchanges are cut into
// chunks of chunkBytes.
//
// A step receives into scratch (one vector) and then reduces, so the send of the current
// vector and the receive of the partner's never wait for each other (sends may be rendezvous).
//
// Every rank ends with the same bits: at each step both partners combine the same two partial
// vectors, only in the opposite operand order, and the reduction operators are commutative
// element by element (IEEE sum, product, min and max included).
//
// Cost (alpha-beta, N bytes, gamma per reduced byte): log2 p (alpha + N beta + N gamma), plus
// 2 (alpha + N beta) + N gamma on the folded pairs. Against the ring's 2 (n-1) alpha: fewer
// hops, but log2 p times the data instead of 2 (n-1)/n, so it is the small-message algorithm.
//
// Tuner: all-reduces of a few bytes to a few KiB where no staging slot applies (across hosts,
// or without shared memory), and the hop count dominates.
#include "algorithms/common/chunking.h"
#include "algorithms/tree/tree.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;
using sched::kScratch;

sched::Schedule buildRecursiveDoublingAllReduce(const sched::CollDesc& d, int rank, int nranks) {
  sched::Schedule s = sameSizeSchedule("recursive_doubling", d, nranks);
  if (nranks == 1) return s;
  const uint64_t es = d.elemSize;
  const Block all{0, d.count};
  const PowerOfTwoFold fold(nranks);
  const uint64_t chunk = chunkElems(d);
  const uint64_t chunks = numChunks(d.count, chunk);
  auto sendAll = [&](int peer, sched::BufId buf) {
    s.addPeer(peer);
    for (uint64_t c = 0; c < chunks; ++c) s.send(peer, elemRange(buf, chunkOf(all, chunk, c), es));
  };
  auto recvReduceAll = [&](int peer, sched::BufId from) {
    s.addPeer(peer);
    for (uint64_t c = 0; c < chunks; ++c) {
      const Block part = chunkOf(all, chunk, c);
      s.recvReduce(peer, elemRange(from, part, es), elemRange(kOutput, part, es));
    }
  };

  // The fold.
  if (fold.sitsOut(rank)) {
    sendAll(rank + 1, kInput);
    s.addPeer(rank + 1);
    for (uint64_t c = 0; c < chunks; ++c)
      s.recv(rank + 1, elemRange(kOutput, chunkOf(all, chunk, c), es));
    return s;
  }
  sched::BufId have = kInput;
  if (fold.absorbs(rank)) {
    recvReduceAll(rank - 1, kInput);
    have = kOutput;
  }
  const int q = fold.newRank(rank);

  // The doubling. finalize() orders each reduce after the send that reads the same elements
  // and each receive into scratch after the reduce that read the previous step's.
  s.scratchBytes = d.count * es;
  for (int mask = 1; mask < fold.p; mask *= 2) {
    const int peer = fold.realRank(q ^ mask);
    sendAll(peer, have);
    for (uint64_t c = 0; c < chunks; ++c) {
      const Block part = chunkOf(all, chunk, c);
      s.recv(peer, elemRange(kScratch, part, es));
      s.reduce(elemRange(have, part, es), elemRange(kScratch, part, es),
               elemRange(kOutput, part, es));
    }
    have = kOutput;
  }
  // The unfold.
  if (fold.absorbs(rank)) sendAll(rank - 1, kOutput);
  return s;
}

namespace {

cost::Traffic recursiveDoublingTraffic(sched::Coll, double N, const cost::CostInput& in) {
  return halvingDoublingTraffic(N, in, false);
}

}  // namespace

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kAllReduce,
    .name = "recursive_doubling",
    .description = "log2 n exchanges of the whole vector with partners 1, 2, 4, ... apart, extra ranks folded",
    .build = &buildRecursiveDoublingAllReduce,
    .traffic = &recursiveDoublingTraffic,
    .order = RankOrder::kRingPositions,
});

}  // namespace chorus::algo
