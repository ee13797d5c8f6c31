// Direct scatter over one-sided reads: every rank reads its block of the root's input.
//
// Schedule. A non-root gets block r of the root's input into its output chunk by chunk, then
// notifies the root ("I have finished reading your input"); it waits for nothing, since nobody
// reads its buffers. The root copies its own block to its output (nothing in place) and waits
// for every non-root's notify, so that it returns only once nobody reads its input.
//
// Cost (alpha-beta, B bytes per block): about one get latency plus one notify; the root's
// memory serves (n-1) B to concurrent readers — against linear scatter's n-1 sends at the root.
//
// Tuner: scatter on one host over a one-sided transport; never over a transport without gets.
#include "algorithms/direct/direct.h"
#include "algorithms/direct/pull.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;

sched::Schedule buildDirectScatter(const sched::CollDesc& d, int rank, int nranks) {
  sched::Schedule s;
  s.algo = "direct";
  const uint64_t es = d.elemSize, count = d.count;
  const Block mine{static_cast<uint64_t>(rank) * count, count};
  if (rank == d.root) {
    if (d.inPlace) s.outputInInput = static_cast<int64_t>(mine.begin * es);
    if (!d.inPlace) s.copy(elemRange(kInput, mine, es), elemRange(kOutput, {0, count}, es));
    direct::addAllPeers(s, rank, nranks);
    if (nranks > 1 && count != 0) direct::waitAll(s, rank, nranks);
    return s;
  }
  s.addPeer(d.root);
  if (count == 0) return s;
  const uint64_t chunk = chunkElems(d);
  for (uint64_t c = 0; c < numChunks(count, chunk); ++c) {
    const Block part = chunkOf(mine, chunk, c);
    s.get(d.root, elemRange(kInput, part, es),
          elemRange(kOutput, {part.begin - mine.begin, part.count}, es));
  }
  s.notify(d.root);
  return s;
}

namespace {

// A non-root reads its block from the root; the root waits for n-1 notifies.
cost::Traffic directScatterTraffic(sched::Coll, double N, const cost::CostInput& in) {
  using namespace traffic;
  cost::Traffic t;
  const double n = in.nranks, C = ceilDiv(N, static_cast<double>(in.chunkBytes));
  t.headerPeers = n - 1;
  t.getBytes = N;
  t.gets = C;
  t.hops = 1;
  t.messages = n - 1;
  t.waits = n - 1;
  t.copyBytes = N;
  t.workingSet = (n + 1) * N;
  return t;
}

}  // namespace

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kScatter,
    .name = "direct",
    .description = "one-sided: every rank reads its block of the root's input",
    .build = &buildDirectScatter,
    .traffic = &directScatterTraffic,
    .needs = Needs::kOneSided,
});

}  // namespace chorus::algo
