// Rabenseifner all-reduce: recursive-halving reduce-scatter, then recursive-doubling all-gather.
//
// Schedule. Let p be the largest power of two <= n and x = n - p. First the fold: among ranks
// 0..2x-1, each even rank sends its whole input to the odd rank above it, which folds it into
// its output; the even ranks then sit out and the p remaining ranks take new numbers (odd
// r < 2x: r/2; r >= 2x: r - x). The data is cut into p blocks (sizes differ by at most one
// element) and the remaining ranks run, for mask = p/2, p/4, ..., 1, a halving step with the
// rank whose new number differs in that bit: the one with the bit clear keeps the lower half of
// its current window of blocks and sends the upper half, the other the reverse, and each folds
// what it receives into its output (the first step reads its own data from the input, or from
// the output after the fold). After log2 p steps new rank q holds block q reduced over all n
// ranks. The all-gather retraces the steps with mask = 1, 2, ..., p/2, exchanging whole windows
// straight into the output. Finally each odd rank of the fold sends the whole result to its
// even partner. Every exchange is cut into chunks of chunkBytes.
//
// In place (sendbuff == recvbuff) the same steps hold: halves are sent before the all-gather
// overwrites them (finalize() orders it) and folds read and write the same elements.
//
// Cost (alpha-beta, N bytes, gamma per reduced byte, without the fold):
//   2 log2 p alpha + 2 (p-1)/p N beta + (p-1)/p N gamma — the ring's bandwidth with log2 p
//   instead of 2 (n-1) steps. With x > 0 the fold and unfold add 2 (alpha + N beta) + N gamma on
//   the folded pairs (the critical path).
//
// Tuner: mid-size all-reduces (a few KiB to a few MiB), where the ring's 2 (n-1) steps cost and
// the message is too large for one-shot; small ones on very many ranks may prefer the double
// binary tree. Best at power-of-two rank counts.
#include <cmath>

#include "algorithms/common/chunking.h"
#include "algorithms/tree/tree.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;

sched::Schedule buildRabenseifnerAllReduce(const sched::CollDesc& d, int rank, int nranks) {
  sched::Schedule s = sameSizeSchedule("rabenseifner", d, nranks);
  if (nranks == 1) return s;
  const uint64_t es = d.elemSize;
  const Block all{0, d.count};
  const PowerOfTwoFold fold(nranks);
  const int p = fold.p;
  const uint64_t chunk = chunkElems(d);
  // Every exchange walks its block in chunks; both sides cut the same block the same way.
  auto sendAll = [&](int peer, sched::BufId buf, Block b) {
    s.addPeer(peer);
    for (uint64_t c = 0; c < numChunks(b.count, chunk); ++c)
      s.send(peer, elemRange(buf, chunkOf(b, chunk, c), es));
  };
  auto recvAll = [&](int peer, Block b) {
    s.addPeer(peer);
    for (uint64_t c = 0; c < numChunks(b.count, chunk); ++c)
      s.recv(peer, elemRange(kOutput, chunkOf(b, chunk, c), es));
  };
  auto recvReduceAll = [&](int peer, sched::BufId from, Block b) {
    s.addPeer(peer);
    for (uint64_t c = 0; c < numChunks(b.count, chunk); ++c) {
      const Block part = chunkOf(b, chunk, c);
      s.recvReduce(peer, elemRange(from, part, es), elemRange(kOutput, part, es));
    }
  };

  // The fold.
  if (fold.sitsOut(rank)) {
    sendAll(rank + 1, kInput, all);
    recvAll(rank + 1, all);
    return s;
  }
  sched::BufId have = kInput;  // where this rank's (partial) data is
  if (fold.absorbs(rank)) {
    recvReduceAll(rank - 1, kInput, all);
    have = kOutput;
  }
  const int q = fold.newRank(rank);
  auto window = [&](int lo, int hi) {  // blocks [lo, hi) as elements
    const Block a = evenBlock(d.count, p, lo);
    const Block b = evenBlock(d.count, p, hi - 1);
    return Block{a.begin, b.begin + b.count - a.begin};
  };

  // Recursive halving.
  int lo = 0, hi = p;
  for (int mask = p / 2; mask >= 1; mask /= 2) {
    const int peer = fold.realRank(q ^ mask);
    const int mid = lo + (hi - lo) / 2;
    const bool lower = (q & mask) == 0;
    const Block give = lower ? window(mid, hi) : window(lo, mid);
    const Block keep = lower ? window(lo, mid) : window(mid, hi);
    sendAll(peer, have, give);
    recvReduceAll(peer, have, keep);
    have = kOutput;
    if (lower) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  // Recursive doubling.
  for (int mask = 1; mask < p; mask *= 2) {
    const int peer = fold.realRank(q ^ mask);
    const int size = hi - lo;
    const bool lower = (q & mask) == 0;
    const int plo = lower ? lo + size : lo - size;
    sendAll(peer, kOutput, window(lo, hi));
    recvAll(peer, window(plo, plo + size));
    lo = std::min(lo, plo);
    hi = lo + 2 * size;
  }
  // The unfold.
  if (fold.absorbs(rank)) sendAll(rank - 1, kOutput, all);
  return s;
}

// Over p = 2^floor(log2 n) ranks (PowerOfTwoFold); with n > p the odd ranks of the fold also
// take in and give back the whole vector (the busiest). Recursive doubling shares the fold and
// the crossing rule (recursive_doubling_allreduce.cc).
cost::Traffic halvingDoublingTraffic(double N, const cost::CostInput& in, bool halving) {
  using namespace traffic;
  cost::Traffic t;
  const double n = in.nranks, c = static_cast<double>(in.chunkBytes), L = in.ranksPerHost;
  double p = 1;
  while (p * 2 <= n) p *= 2;
  const double F = n > p ? 1 : 0, steps = std::log2(p);
  double crossing = 0;  // bytes one rank sends across hosts (contiguous hosts of L ranks:
                        // partners at distance >= L are on other hosts)
  if (halving) {
    // Each halving and doubling step sends and receives its window; the chunks of one step
    // stream behind each other, as the ring's do.
    double messages = 0;
    for (double j = 1, w = N / 2; j <= steps; ++j, w /= 2) messages += 4 * ceilDiv(w, c);
    const double C = ceilDiv(N / 2, c);
    t.hops = C > 0 ? 2 * steps + 2 * F + C - 1 : 0;
    t.messages = messages + 2 * F * ceilDiv(N, c);
    t.bytesIntra = 2 * (p - 1) / p * N + F * N;
    t.reduceBytes = (p - 1) / p * N + F * N;
    crossing = std::max(0.0, 2 * (p - L) / p * N);
  } else {
    // log2 p exchanges of the whole vector.
    const double C = ceilDiv(N, c);
    t.hops = C > 0 ? steps + 2 * F + C - 1 : 0;
    t.messages = (2 * steps + 2 * F) * C;
    t.bytesIntra = (steps + F) * N;
    t.reduceBytes = (steps + F) * N;
    crossing = std::max(0.0, steps - std::log2(std::min(L, p))) * N;
  }
  if (in.hosts <= 1) crossing = 0;
  t.waits = t.messages / 2;
  t.headerPeers = steps + F;
  t.bytesNic = L * crossing;
  t.interShare = t.bytesIntra > 0 ? crossing / t.bytesIntra : 0;
  t.workingSet = 2 * N;
  return t;
}

namespace {

cost::Traffic rabenseifnerTraffic(sched::Coll, double N, const cost::CostInput& in) {
  return halvingDoublingTraffic(N, in, true);
}

}  // namespace

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kAllReduce,
    .name = "rabenseifner",
    .description = "recursive halving reduce-scatter + recursive doubling all-gather, extra ranks folded",
    .build = &buildRabenseifnerAllReduce,
    .traffic = &rabenseifnerTraffic,
    .order = RankOrder::kRingPositions,
});

}  // namespace chorus::algo
