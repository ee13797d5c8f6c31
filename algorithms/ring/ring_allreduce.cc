// Ring allreduce: a reduce-scatter around the ring followed by an all-gather around the ring.
//
// Schedule. The N elements are cut into n slices (sizes differ by at most one element). In
// reduce-scatter step s (s = 0..n-2) rank r sends slice r-s to r+1 and receives slice r-s-1
// from r-1, folding it into its own contribution: recvReduce(a = input slice, dst = output
// slice). Step 0 sends straight from the input and every later step forwards the partial it just
// reduced, so the input is never copied. After n-1 steps rank r holds the full result of slice
// r+1; the all-gather then passes finished slices around the ring for n-1 more steps, each rank
// receiving directly into its output. Each slice is cut into chunks of chunkBytes and the loop
// runs chunk-major (all 2(n-1) steps of chunk 0, then chunk 1, ...) so that an executor walking
// the schedule in order keeps every link busy while earlier chunks are still travelling.
//
// In place (sendbuff == recvbuff) the same steps are valid: a received slice overwrites input
// that this rank has already folded in (recvReduce reads a == dst) or already sent (slice r,
// overwritten in all-gather step 0 after reduce-scatter step 0 sent it; finalize() orders them).
//
// Cost (alpha-beta, message of N bytes, chunks of c bytes per slice, R = ceil(N / (n c))):
//   2 (n-1) R alpha + 2 (n-1)/n N beta.
// The bandwidth term is optimal for any allreduce; the latency term grows linearly with n.
//
// Tuner: the default for medium and large messages on flat or ring-friendly topologies. For
// small messages, or hundreds of ranks, a tree or recursive-doubling schedule wins on latency.
#include "algorithms/common/chunking.h"
#include "algorithms/ring/ring.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;

sched::Schedule buildRingAllReduce(const sched::CollDesc& d, int rank, int nranks) {
  sched::Schedule s = sameSizeSchedule("ring", d, nranks);
  if (nranks == 1) return s;
  const uint64_t es = d.elemSize;
  const int next = modRank(rank + 1, nranks), prev = modRank(rank - 1, nranks);
  s.addPeer(next);
  s.addPeer(prev);

  const uint64_t chunk = ringChunkElems(d, evenBlock(d.count, nranks, 0).count);
  // Slice 0 is the largest; smaller slices yield empty (dropped) chunks in the last round.
  const uint64_t rounds = numChunks(evenBlock(d.count, nranks, 0).count, chunk);
  auto slice = [&](int64_t k, uint64_t c) {
    return chunkOf(evenBlock(d.count, nranks, modRank(k, nranks)), chunk, c);
  };
  for (uint64_t c = 0; c < rounds; ++c) {
    for (int st = 0; st < nranks - 1; ++st) {
      const Block out = slice(rank - st, c), in = slice(rank - st - 1, c);
      s.send(next, elemRange(st == 0 ? kInput : kOutput, out, es));
      s.recvReduce(prev, elemRange(kInput, in, es), elemRange(kOutput, in, es));
    }
    for (int st = 0; st < nranks - 1; ++st) {
      const Block out = slice(rank + 1 - st, c), in = slice(rank - st, c);
      s.send(next, elemRange(kOutput, out, es));
      s.recv(prev, elemRange(kOutput, in, es));
    }
  }
  return s;
}

cost::Traffic ringAllReduceTraffic(sched::Coll, double N, const cost::CostInput& in) {
  using namespace traffic;
  cost::Traffic t;
  const double n = in.nranks;
  const double slice = std::ceil(N / n), R = ceilDiv(slice, ringChunk(slice, in.chunkBytes));
  t.hops = R > 0 ? 2 * (n - 1) + R - 1 : 0;
  t.messages = 4 * (n - 1) * R;
  t.waits = 2 * (n - 1) * R;
  t.headerPeers = std::min(2.0, n - 1);
  ringBytes(t, 2 * (n - 1) / n * N, in);
  t.reduceBytes = (n - 1) / n * N;
  t.workingSet = 2 * N;
  return t;
}

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kAllReduce,
    .name = "ring",
    .description = "ring reduce-scatter then ring all-gather, chunk-pipelined",
    .build = &buildRingAllReduce,
    .traffic = &ringAllReduceTraffic,
    .order = RankOrder::kRingPositions,
    .tiePriority = 0,
});

}  // namespace chorus::algo
