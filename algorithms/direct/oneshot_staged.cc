// One-shot all-reduce through the host window (allreduce:oneshot_staged).
//
// Schedule. Each rank copies its input into its window region and signals; that first signal
// publishes its consistency header with it, and a message of up to 32 bytes travels in the same
// cache line as the signal word (the window's layout, transports/shm/shm_window.h). The rank
// then awaits every peer's first signal and reduces all n inputs, in rank order, straight out
// of the peers' regions into its output: ((x0 ⊕ x1) ⊕ x2) ⊕ ... on every rank, so all ranks
// compute the same expression and get bitwise-identical results. Nobody sends anything and
// nothing waits at the end: a region is rewritten only two calls later (the window alternates
// halves by call parity), by when every peer has finished reading it (the executor's entry
// protocol, src/exec/executor.h).
//
// Cost (N bytes, n ranks): one signal and n-1 awaits — about one cache-line transfer per peer
// each way — plus N copied and (n-1) N reduced from the other ranks' caches. Against the
// message one-shot it saves the 2(n-1) messages and headers; against two-shot it reads n-1
// times more. The tuner picks it for small all-reduces on one host (up to a few tens of KiB);
// it needs the message to fit the window's slot (CHORUS_SHM_STAGING), and builds the message
// one-shot (and names it) for anything larger.
#include <algorithm>

#include "algorithms/common/chunking.h"
#include "algorithms/common/traffic.h"
#include "algorithms/direct/direct.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;
using sched::kWindow;
using sched::Range;

sched::Schedule buildOneShotStagedAllReduce(const sched::CollDesc& d, int rank, int nranks) {
  const uint64_t bytes = d.count * d.elemSize;
  if (bytes > d.window.slotBytes && nranks > 1) return buildOneShotAllReduce(d, rank, nranks);
  sched::Schedule s = sameSizeSchedule("oneshot_staged", d, nranks);
  if (nranks == 1) return s;
  const Range input{kInput, 0, bytes}, output{kOutput, 0, bytes}, mine{kWindow, 0, bytes};
  s.copy(input, mine);
  s.signal();
  for (int q = 0; q < nranks; ++q)
    if (q != rank) s.await(q, 1);
  if (bytes == 0) return s;
  // In rank order: term 0 ⊕ term 1 first (a reduction of two operands is commutative, so each
  // rank may put its own term on either side), then every further term onto the output.
  // A peer's term is the same range of its own region.
  const Range theirs = mine;
  if (rank <= 1) {
    s.getReduce(1 - rank, theirs, mine, output);
  } else {
    s.get(0, theirs, output);
    s.getReduce(1, theirs, output, output);
  }
  for (int q = 2; q < nranks; ++q) {
    if (q == rank)
      s.reduce(output, mine, output);
    else
      s.getReduce(q, theirs, output, output);
  }
  return s;
}

namespace {

cost::Traffic oneShotStagedTraffic(sched::Coll, double N, const cost::CostInput& in) {
  cost::Traffic t;
  const double n = in.nranks;
  t.staged = true;
  t.copyBytes = N;
  t.reduceBytes = (n - 1) * N;
  t.waits = 1;
  t.workingSet = (n + 1) * N;
  // The flag's line to the peers and the peers' back before the slot is written again, and,
  // beyond what rides in the flag's line, the payload's first line after the flag (fitted on
  // the development VM: 8 B ~2.1 and 128 B ~3.2 line transfers beyond the executor's steps).
  t.lineTransfers = 2 + std::min(1.0, N / 64);
  t.windowBytes = (n - 1) * N;  // every peer's input, from the core that wrote it
  return t;
}

const char* oneShotStagedApplies(const sched::CollDesc& d, const Platform& p) {
  return d.count * d.elemSize <= p.window.slotBytes ? nullptr
                                                    : "the message is larger than the window slot";
}

}  // namespace

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kAllReduce,
    .name = "oneshot_staged",
    .description = "host window: every rank publishes its input, then reduces all of them in rank order",
    .build = &buildOneShotStagedAllReduce,
    .traffic = &oneShotStagedTraffic,
    .needs = Needs::kHostWindow,
    .order = RankOrder::kRingPositions,
    .applies = &oneShotStagedApplies,
});

}  // namespace chorus::algo
