// Direct all-to-all over one-sided reads: rank r reads block r of every peer's input.
//
// Schedule. Out of place: copy own block (input block r to output block r), get block r of
// rank q's input into output block q for every peer, chunk by chunk (chunk-major, peers in the
// order r+1, r+2, ...), notify every peer ("I have finished reading your input") and wait for
// every peer's notify, so that no rank returns while its input is still being read.
//
// In place (sendbuff == recvbuff) output block q is input block q, which rank q is reading, so
// it may be overwritten only after q's notify: the gets land in scratch, the rank notifies and
// waits as above, and only then copies scratch into the output blocks. No second notify / wait
// round is needed: every peer's reads of this rank's buffers come before its notify, which this
// rank has waited for before it writes anything they read, and before it returns. Block r stays
// where it is.
//
// Cost (alpha-beta, B bytes per block): each rank reads (n-1) B bytes in independent gets —
// about one get latency plus one notify / wait round (plus, in place, (n-1) B of local copies
// and (n-1) B of scratch), against pairwise exchange's n-1 message steps.
//
// Tuner: all-to-all on one host over a one-sided transport; never over a transport without
// gets.
#include "algorithms/direct/direct.h"
#include "algorithms/direct/pull.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;
using sched::kScratch;

sched::Schedule buildDirectAllToAll(const sched::CollDesc& d, int rank, int nranks) {
  sched::Schedule s;
  s.algo = "direct";
  if (d.inPlace) s.outputInInput = 0;
  const uint64_t es = d.elemSize, count = d.count;
  auto block = [&](int q) { return Block{static_cast<uint64_t>(q) * count, count}; };
  if (!d.inPlace) s.copy(elemRange(kInput, block(rank), es), elemRange(kOutput, block(rank), es));
  if (nranks == 1) return s;
  direct::addAllPeers(s, rank, nranks);
  if (count == 0) return s;

  // Where peer r+k's block lands: its output block, or in place scratch slot k-1.
  const sched::BufId landBuf = d.inPlace ? kScratch : kOutput;
  auto landing = [&](int k) {
    return d.inPlace ? Block{static_cast<uint64_t>(k - 1) * count, count}
                     : block(direct::peerAt(rank, nranks, k));
  };
  const uint64_t chunk = chunkElems(d);
  for (uint64_t c = 0; c < numChunks(count, chunk); ++c) {
    const Block part = chunkOf({0, count}, chunk, c);
    for (int k = 1; k < nranks; ++k) {
      const Block theirs{static_cast<uint64_t>(rank) * count + part.begin, part.count};
      const Block into{landing(k).begin + part.begin, part.count};
      s.get(direct::peerAt(rank, nranks, k), elemRange(kInput, theirs, es),
            elemRange(landBuf, into, es));
    }
  }
  direct::notifyAll(s, rank, nranks);
  direct::waitAll(s, rank, nranks);
  if (d.inPlace) {
    s.scratchBytes = static_cast<uint64_t>(nranks - 1) * count * es;
    for (int k = 1; k < nranks; ++k)
      s.copy(elemRange(kScratch, landing(k), es),
             elemRange(kOutput, block(direct::peerAt(rank, nranks, k)), es));
  }
  return s;
}

namespace {

cost::Traffic directAllToAllTraffic(sched::Coll, double N, const cost::CostInput& in) {
  using namespace traffic;
  cost::Traffic t;
  const double n = in.nranks, C = ceilDiv(N, static_cast<double>(in.chunkBytes));
  t.headerPeers = n - 1;
  t.getBytes = (n - 1) * N;
  t.gets = (n - 1) * C;
  syncRound(t, n);
  t.copyBytes = N;
  t.workingSet = 2 * n * N;
  return t;
}

}  // namespace

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kAllToAll,
    .name = "direct",
    .description = "one-sided: each rank reads its block of every input",
    .build = &buildDirectAllToAll,
    .traffic = &directAllToAllTraffic,
    .needs = Needs::kOneSided,
    .hearsEveryPeer = true,
});

}  // namespace chorus::algo
