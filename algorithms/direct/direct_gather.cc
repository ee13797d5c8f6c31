// Direct gather over one-sided reads: the root reads every rank's input.
//
// Schedule. The root copies its own input into output block root (nothing in place), gets rank
// q's input into output block q for every peer, chunk by chunk (chunk-major, peers in the order
// root+1, root+2, ...), then notifies every rank ("I have finished reading your input"). A
// non-root only waits for that notify, so that it does not return while its input is read.
//
// Cost (alpha-beta, B bytes per block): the root reads (n-1) B bytes in independent gets —
// about one get latency plus one notify, against linear gather's n-1 receives at the root.
//
// Tuner: gather on one host over a one-sided transport; never over a transport without gets.
#include "algorithms/direct/direct.h"
#include "algorithms/direct/pull.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;

sched::Schedule buildDirectGather(const sched::CollDesc& d, int rank, int nranks) {
  sched::Schedule s;
  s.algo = "direct";
  const uint64_t es = d.elemSize, count = d.count;
  if (rank != d.root) {
    s.addPeer(d.root);
    if (count != 0) s.wait(d.root);
    return s;
  }
  const uint64_t mine = static_cast<uint64_t>(rank) * count;
  if (d.inPlace) s.inputInOutput = static_cast<int64_t>(mine * es);
  if (!d.inPlace) s.copy(elemRange(kInput, {0, count}, es), elemRange(kOutput, {mine, count}, es));
  direct::addAllPeers(s, rank, nranks);
  if (nranks == 1 || count == 0) return s;
  direct::pullBlocks(s, d, rank, nranks, count);
  direct::notifyAll(s, rank, nranks);
  return s;
}

namespace {

cost::Traffic directGatherTraffic(sched::Coll, double N, const cost::CostInput& in) {
  using namespace traffic;
  cost::Traffic t;
  const double n = in.nranks, C = ceilDiv(N, static_cast<double>(in.chunkBytes));
  t.headerPeers = n - 1;
  t.getBytes = (n - 1) * N;
  t.gets = (n - 1) * C;
  t.hops = 1;
  t.messages = n - 1;
  t.copyBytes = N;
  t.workingSet = (n + 1) * N;
  return t;
}

}  // namespace

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kGather,
    .name = "direct",
    .description = "one-sided: the root reads every rank's input",
    .build = &buildDirectGather,
    .traffic = &directGatherTraffic,
    .needs = Needs::kOneSided,
});

}  // namespace chorus::algo
