// One-shot all-reduce: each rank sends its whole input to every other rank, receives every
// other rank's input into scratch, and reduces all n inputs locally.
//
// The local reduction runs in rank order on every rank — ((x0 ⊕ x1) ⊕ x2) ⊕ ... — so all ranks
// compute the same expression and get bitwise-identical results, as the ring does. In place, the
// rank's own input is first copied to scratch, because the reduction overwrites the output
// (which is the input) before it reaches the rank's own term.
//
// Cost (alpha-beta, S bytes per rank, n ranks): alpha + (n-1) S beta on each rank's link, plus
// (n-1) S of local reduction — one latency step against the ring's 2(n-1), at n-1 times the
// ring's bandwidth per rank. The tuner should pick it for small messages (latency-bound: a few
// KiB per rank, and few ranks, since each rank posts n-1 messages), and the ring above.
//
// Over message transports this is the classic "all-gather, then reduce locally"; with a
// transport that exposes peer memory (shared memory, CUDA IPC), the receives become one-sided
// reads of the peers' inputs.
#include "algorithms/direct/direct.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::Range;

sched::Schedule buildOneShotAllReduce(const sched::CollDesc& d, int rank, int nranks) {
  sched::Schedule s;
  s.algo = "oneshot";
  const uint64_t bytes = d.count * d.elemSize;
  if (d.inPlace) s.outputInInput = 0;
  const Range input{sched::kInput, 0, bytes};
  const Range output{sched::kOutput, 0, bytes};
  if (nranks == 1) {
    if (!d.inPlace) s.copy(input, output);
    return s;
  }
  // Scratch slot q holds rank q's input (slot `rank` only in place).
  auto slot = [&](int q) { return Range{sched::kScratch, static_cast<uint64_t>(q) * bytes, bytes}; };
  s.scratchBytes = static_cast<uint64_t>(nranks) * bytes;

  if (d.inPlace) s.copy(input, slot(rank));
  for (int k = 1; k < nranks; ++k) s.send((rank + k) % nranks, input);
  for (int k = 1; k < nranks; ++k) {
    const int from = (rank - k + nranks) % nranks;
    s.recv(from, slot(from));
  }
  auto term = [&](int q) { return (q == rank && !d.inPlace) ? input : slot(q); };
  s.reduce(term(0), term(1), output);
  for (int q = 2; q < nranks; ++q) s.reduce(output, term(q), output);
  return s;
}

namespace {

cost::Traffic oneShotTraffic(sched::Coll, double N, const cost::CostInput& in) {
  using namespace traffic;
  cost::Traffic t;
  const double n = in.nranks;
  t.hops = 1;
  t.messages = 2 * (n - 1);
  t.waits = n - 1;
  t.headerPeers = n - 1;
  directBytes(t, N, in);
  t.reduceBytes = (n - 1) * N;
  t.workingSet = (n + 1) * N;
  return t;
}

}  // namespace

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kAllReduce,
    .name = "oneshot",
    .description = "every rank sends its input to all, then reduces locally in rank order",
    .build = &buildOneShotAllReduce,
    .traffic = &oneShotTraffic,
    .order = RankOrder::kRingPositions,
});

}  // namespace chorus::algo
