// Linear scatter: the root sends block p straight to rank p.
//
// Schedule. The root sends block p of its input to rank p chunk by chunk, chunk-major
// over peers so every receiver makes progress from the start, and copies its own block locally
// (skipped in place). Non-roots receive their block into their output.
//
// Cost (alpha-beta, B bytes per block, C chunks per block): the root's link carries (n-1) B:
//   C alpha + (n-1) B beta when sends overlap (they are independent), (n-1) C alpha if not.
//
// Tuner: the only scatter for now; good for medium and large blocks. Small blocks at large n
// would use a binomial tree to cut the root's message count.
#include "algorithms/alltoall/alltoall.h"
#include "algorithms/common/chunking.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;

sched::Schedule buildLinearScatter(const sched::CollDesc& d, int rank, int nranks) {
  sched::Schedule s;
  s.algo = "linear";
  const uint64_t es = d.elemSize, count = d.count, chunk = chunkElems(d);
  if (rank != d.root) {
    s.addPeer(d.root);
    for (uint64_t c = 0; c < numChunks(count, chunk); ++c)
      s.recv(d.root, elemRange(kOutput, chunkOf({0, count}, chunk, c), es));
    return s;
  }
  const uint64_t mine = static_cast<uint64_t>(rank) * count;
  if (d.inPlace) s.outputInInput = static_cast<int64_t>(mine * es);
  for (int k = 1; k < nranks; ++k) s.addPeer(modRank(rank + k, nranks));
  for (uint64_t c = 0; c < numChunks(count, chunk); ++c) {
    for (int k = 1; k < nranks; ++k) {
      const int p = modRank(rank + k, nranks);
      const Block blk = chunkOf({static_cast<uint64_t>(p) * count, count}, chunk, c);
      s.send(p, elemRange(kInput, blk, es));
    }
  }
  if (!d.inPlace) s.copy(elemRange(kInput, {mine, count}, es), elemRange(kOutput, {0, count}, es));
  return s;
}

namespace {

// The root: n-1 blocks in (or out), received (sent) side by side.
cost::Traffic linearScatterTraffic(sched::Coll coll, double N, const cost::CostInput& in) {
  using namespace traffic;
  cost::Traffic t;
  const double n = in.nranks, C = ceilDiv(N, static_cast<double>(in.chunkBytes));
  t.hops = C > 0 ? 1 : 0;
  t.messages = (n - 1) * C;
  t.waits = coll == sched::Coll::kGather ? (n - 1) * C : 0;
  t.headerPeers = n - 1;
  rootBytes(t, N, in);
  t.copyBytes = N;
  t.workingSet = (n + 1) * N;
  return t;
}

}  // namespace

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kScatter,
    .name = "linear",
    .description = "the root sends each rank its block directly",
    .build = &buildLinearScatter,
    .traffic = &linearScatterTraffic,
    .tiePriority = 0,
});

}  // namespace chorus::algo
