// Two-shot all-reduce through the host window, in rounds (allreduce:twoshot_staged).
//
// Schedule. The message is cut into rounds of the window's round size R (CHORUS_SHM_STAGING_ROUND);
// rounds alternate between the two round areas of each rank's region. In round t a rank copies
// the round's part of its input into area t mod 2 and signals ("filled t"; the first signal of
// the call also publishes the consistency header); once every peer has filled round t it
// reduces its own slice of the round from all n areas, in rank order, into its output and back
// into its own area, and signals again ("reduced t"); then, as each peer's "reduced t" comes
// in, it copies that peer's reduced slice out of the peer's area into its output.
//
// Why no system call and one copy more than two-shot over cross-memory attach pays: reading a
// peer through process_vm_readv pins its pages on every call, which is most of the time of a
// 1-8 MiB all-reduce on the machines measured (docs/performance.md); here peers read each other
// as plain memory. A round small enough for the caches keeps the copy in, the reduction and the
// copies out off DRAM, so from memory each input byte is read once and each output byte
// written once.
//
// Area reuse: a rank refills area t mod 2 in round t+2 only after it has seen every peer's
// "filled t+1", which each peer signals after finishing round t — the checker proves it
// (tests/unit/schedules), and across calls the executor's entry protocol keeps halves apart.
//
// Cost (N bytes, n ranks, R rounds): 2 signals and 2(n-1) awaits per round; N copied in,
// (n-1)/n N reduced, (n-1)/n N copied out, mostly within the caches. The tuner picks it for
// every all-reduce on one host above the one-shot's range. Without round areas
// (CHORUS_SHM_STAGING_ROUND=0) it builds the ring (and names it).
#include <cmath>

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

sched::Schedule buildTwoShotStagedAllReduce(const sched::CollDesc& d, int rank, int nranks) {
  const uint64_t es = d.elemSize;
  const uint64_t perRound = d.window.roundBytes / es;
  if (perRound == 0 && nranks > 1) return buildRingAllReduce(d, rank, nranks);
  sched::Schedule s = sameSizeSchedule("twoshot_staged", d, nranks);
  if (nranks == 1) return s;
  auto area = [&](uint64_t t, uint64_t firstElem, uint64_t count) {
    return Range{kWindow, d.window.slotBytes + (t & 1) * d.window.roundBytes + firstElem * es,
                 count * es};
  };
  if (d.count == 0) {
    // Nothing to move, but the headers still meet, so ranks that disagree find out.
    s.signal();
    for (int q = 0; q < nranks; ++q)
      if (q != rank) s.await(q, 1);
    return s;
  }
  uint32_t signals = 0;
  for (uint64_t t = 0, begin = 0; begin < d.count; ++t, begin += perRound) {
    const uint64_t n = std::min(perRound, d.count - begin);
    s.copy(elemRange(kInput, {begin, n}, es), area(t, 0, n));
    s.signal();
    const uint32_t filled = ++signals;
    for (int q = 0; q < nranks; ++q)
      if (q != rank) s.await(q, filled);
    // My slice of the round, reduced from every area in rank order (the same expression on
    // every element, whoever computes it), into my output and back into my area.
    const Block mine = evenBlock(n, nranks, rank);
    if (mine.count > 0) {
      const Range out = elemRange(kOutput, {begin + mine.begin, mine.count}, es);
      const Range own = area(t, mine.begin, mine.count);
      if (rank <= 1) {
        s.getReduce(1 - rank, own, own, out);
      } else {
        s.get(0, own, out);
        s.getReduce(1, own, out, out);
      }
      for (int q = 2; q < nranks; ++q) {
        if (q == rank)
          s.reduce(out, own, out);
        else
          s.getReduce(q, own, out, out);
      }
      s.copy(out, own);
    }
    s.signal();
    const uint32_t reduced = ++signals;
    for (int k = 1; k < nranks; ++k) {
      const int q = (rank + k) % nranks;
      s.await(q, reduced);
      const Block theirs = evenBlock(n, nranks, q);
      if (theirs.count > 0)
        s.get(q, area(t, theirs.begin, theirs.count),
              elemRange(kOutput, {begin + theirs.begin, theirs.count}, es));
    }
  }
  return s;
}

namespace {

// Rounds are small, so from DRAM each input byte is read once and each output byte written
// once; the rest stays in the caches: a working set of about an eighth of the message fits the
// model's cache rate up to 8 MiB, as measured. Traffic::staged: like the one-shot it posts no
// message and no header, only flags and reads in the window, so the executor's cost is the
// window's, once per synchronisation (2 x rounds + 1), not a schedule of messages' (2 ranks,
// 8 B: 1.24 us measured in all, where the message call alone was priced at 2 us, which kept
// the one-shot at 32 KiB; docs/performance.md, "Tuner check on a fresh VM").
cost::Traffic twoShotStagedTraffic(sched::Coll coll, double N, const cost::CostInput& in) {
  using namespace traffic;
  if (in.roundBytes == 0) return ringAllReduceTraffic(coll, N, in);  // what it builds then
  cost::Traffic t;
  t.staged = true;
  const double n = in.nranks;
  const double round = static_cast<double>(in.roundBytes);
  const double R = ceilDiv(N, round);
  // Each round's slices are cut afresh: the busiest rank reduces ceil(round / n) of each.
  const double full = std::floor(N / round), last = N - full * round;
  t.copyBytes = N;
  t.reduceBytes = (n - 1) * (full * std::ceil(round / n) + std::ceil(last / n));
  t.waits = 2 * R + 1;
  t.workingSet = N / 8;
  t.lineTransfers = t.waits;  // each wait sees a peer's flag
  // The slices it reduces from the peers' areas, and the peers' reduced slices it copies out.
  t.windowBytes = 2 * t.reduceBytes;
  return t;
}

const char* roundsApply(const sched::CollDesc&, const Platform& p) {
  return p.window.roundBytes > 0 ? nullptr
                                 : "the window has no round areas (CHORUS_SHM_STAGING_ROUND=0)";
}

}  // namespace

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kAllReduce,
    .name = "twoshot_staged",
    .description = "host window, in rounds: each rank reduces its slice from all ranks' areas, then copies the others' slices out",
    .build = &buildTwoShotStagedAllReduce,
    .traffic = &twoShotStagedTraffic,
    .needs = Needs::kHostWindow,
    .order = RankOrder::kRingPositions,
    .applies = &roundsApply,
});

}  // namespace chorus::algo
