// Direct all-gather through the host window, in rounds (allgather:direct_staged).
//
// Schedule. A rank's block is cut into rounds of the window's round size R; rounds alternate
// between the two round areas of its region. In round t the rank copies the round's part of its
// block into area t mod 2, from there into its own block of the output (the area is in the
// cache; in place there is nothing to copy), and signals ("filled t"; the first signal also
// publishes the consistency header); as each peer's "filled t" comes in, it copies that peer's
// part out of the peer's area into the peer's block of its output. A rank refills area t mod 2
// in round t+2 only after seeing every peer's "filled t+1", which each peer signals after it
// has finished round t.
//
// Why: the same as two-shot through the window (twoshot_staged.cc): no system call and no page
// pinning per call, and rounds that stay in the caches. Measured 1.6-1.7x the cross-memory-attach
// direct all-gather's bandwidth on 2 ranks at 2-16 MiB, and about 1 us instead of 35 us for
// small blocks (docs/performance.md).
//
// Cost (B bytes per rank, n ranks, R rounds): one signal and n-1 awaits per round; (n+1) B
// copied. The tuner picks it for all-gathers on one host. Without round areas it builds the
// ring all-gather (and names it).
#include "algorithms/common/chunking.h"
#include "algorithms/common/traffic.h"
#include "algorithms/direct/direct.h"
#include "algorithms/registry.h"
#include "algorithms/ring/ring.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;
using sched::kWindow;
using sched::Range;

sched::Schedule buildStagedAllGather(const sched::CollDesc& d, int rank, int nranks) {
  const uint64_t es = d.elemSize, count = d.count;
  const uint64_t perRound = d.window.roundBytes / es;
  if (perRound == 0 && nranks > 1) return buildRingAllGather(d, rank, nranks);
  sched::Schedule s;
  s.algo = "direct_staged";
  const uint64_t mineAt = static_cast<uint64_t>(rank) * count;
  if (d.inPlace) s.inputInOutput = static_cast<int64_t>(mineAt * es);
  if (nranks == 1) {
    if (!d.inPlace) s.copy(elemRange(kInput, {0, count}, es), elemRange(kOutput, {0, count}, es));
    return s;
  }
  auto area = [&](uint64_t t, uint64_t n) {
    return Range{kWindow, d.window.slotBytes + (t & 1) * d.window.roundBytes, n * es};
  };
  if (count == 0) {
    s.signal();
    for (int q = 0; q < nranks; ++q)
      if (q != rank) s.await(q, 1);
    return s;
  }
  uint32_t signals = 0;
  for (uint64_t t = 0, begin = 0; begin < count; ++t, begin += perRound) {
    const uint64_t n = std::min(perRound, count - begin);
    s.copy(elemRange(kInput, {begin, n}, es), area(t, n));
    if (!d.inPlace) s.copy(area(t, n), elemRange(kOutput, {mineAt + begin, n}, es));
    s.signal();
    ++signals;
    for (int k = 1; k < nranks; ++k) {
      const int q = (rank + k) % nranks;
      s.await(q, signals);
      s.get(q, area(t, n), elemRange(kOutput, {static_cast<uint64_t>(q) * count + begin, n}, es));
    }
  }
  return s;
}

namespace {

cost::Traffic stagedAllGatherTraffic(sched::Coll coll, double N, const cost::CostInput& in) {
  using namespace traffic;
  if (in.roundBytes == 0) return ringBlockTraffic(coll, N, in);  // what it builds then
  cost::Traffic t;
  const double n = in.nranks;
  const double R = ceilDiv(N, static_cast<double>(in.roundBytes));
  t.copyBytes = (n + 1) * N;
  t.waits = 2 * R + 1;
  t.workingSet = N / 8;
  t.lineTransfers = t.waits;  // each wait sees a peer's flag
  t.windowBytes = (n - 1) * N;  // every peer's part, from its area
  return t;
}

const char* roundsApply(const sched::CollDesc&, const Platform& p) {
  return p.window.roundBytes > 0 ? nullptr
                                 : "the window has no round areas (CHORUS_SHM_STAGING_ROUND=0)";
}

}  // namespace

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kAllGather,
    .name = "direct_staged",
    .description = "host window, in rounds: each rank publishes its part, every rank copies every part out",
    .build = &buildStagedAllGather,
    .traffic = &stagedAllGatherTraffic,
    .needs = Needs::kHostWindow,
    .applies = &roundsApply,
});

}  // namespace chorus::algo
