// Direct broadcast over one-sided reads: every rank reads the root's input.
//
// Schedule. A non-root gets the root's input into its output chunk by chunk, then notifies the
// root ("I have finished reading your input"); it waits for nothing, since nobody reads its
// buffers. The root copies its input to its output (nothing in place) and waits for every
// non-root's notify, so that it returns only once nobody reads its input.
//
// Cost (alpha-beta, N bytes): about one get latency plus one notify; every non-root reads N
// bytes, all from the root's memory at once, so the root's memory bandwidth carries (n-1) N —
// against the chain's (n-1 + ceil(N/c) - 1) pipelined message latencies and N per link.
//
// Tuner: broadcast on one host over a one-sided transport for small and medium messages, and
// for large ones while n-1 concurrent readers of one buffer still get full bandwidth (few ranks);
// never over a transport without gets.
#include "algorithms/direct/direct.h"
#include "algorithms/direct/pull.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;

sched::Schedule buildDirectBroadcast(const sched::CollDesc& d, int rank, int nranks) {
  sched::Schedule s;
  s.algo = "direct";
  if (d.inPlace) s.outputInInput = 0;
  const uint64_t es = d.elemSize, count = d.count;
  const Block all{0, count};
  if (rank == d.root) {
    if (!d.inPlace) s.copy(elemRange(kInput, all, es), elemRange(kOutput, all, es));
    direct::addAllPeers(s, rank, nranks);
    if (count == 0) return s;
    direct::waitAll(s, rank, nranks);
    return s;
  }
  s.addPeer(d.root);
  if (count == 0) return s;
  const uint64_t chunk = chunkElems(d);
  for (uint64_t c = 0; c < numChunks(count, chunk); ++c) {
    const Block part = chunkOf(all, chunk, c);
    s.get(d.root, elemRange(kInput, part, es), elemRange(kOutput, part, es));
  }
  s.notify(d.root);
  return s;
}

namespace {

// Non-roots read the whole message from the root; the root waits for their notifies.
cost::Traffic directBroadcastTraffic(sched::Coll, double N, const cost::CostInput& in) {
  using namespace traffic;
  cost::Traffic t;
  const double n = in.nranks;
  t.headerPeers = n - 1;
  t.getBytes = N;
  t.gets = ceilDiv(N, static_cast<double>(in.chunkBytes));
  t.hops = 1;
  t.messages = n - 1;
  t.waits = n - 1;
  t.workingSet = N;
  return t;
}

}  // namespace

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kBroadcast,
    .name = "direct",
    .description = "one-sided: every rank reads the root's input",
    .build = &buildDirectBroadcast,
    .traffic = &directBroadcastTraffic,
    .needs = Needs::kOneSided,
    .order = RankOrder::kRingPositions,
});

}  // namespace chorus::algo
