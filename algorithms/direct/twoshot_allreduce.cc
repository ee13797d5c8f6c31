// Two-shot all-reduce over one-sided reads: a direct reduce-scatter, then a direct all-gather.
//
// Schedule. The N elements are cut into n slices as the ring cuts them (sizes differ by at most
// one element; slices may be empty). Phase 1: rank r reduces slice r from every input, chunk by
// chunk: out[c] = in[c] ⊕ get(r+1, in[c]) ⊕ get(r+2, in[c]) ⊕ ..., one getReduce per peer, the
// first folding in its own input — every element is reduced once, by its owner, in a fixed
// order, and every rank copies that same result, so all ranks end bitwise identical. Then it
// notifies every peer ("my slice is reduced, and I have finished reading your input") and waits
// for every peer's notify. Phase 2: it gets slice q of rank q's output into its own output for
// every q, chunk by chunk, notifies every peer ("I have finished reading your output") and waits
// for all of them: a rank may return only once nobody reads its buffers.
//
// In place (sendbuff == recvbuff) slice r is reduced over itself, which only rank r reads. The
// other slices of r's input are read by their owners in phase 1 and overwritten by r's phase-2
// gets, which come after r's waits, and so after those reads.
//
// Cost (alpha-beta, N bytes, chunks of c bytes, R = ceil(N / (n c))): each rank reads
// 2 (n-1)/n N bytes (the ring's volume) and reduces (n-1)/n N; the latency is about
// (n-1) get latencies for a chunk's chain plus two rounds of notify / wait, independent of R
// (chunks are independent) — against the ring's 2 (n-1) R message latencies.
//
// Tuner: all-reduce on one host over a one-sided transport (shared memory, CUDA IPC) from where
// one-shot's n-fold traffic starts to hurt (tens of KiB) up to where the ring's pipelined
// messages catch up, to be measured per machine; never over a transport without gets.
#include "algorithms/direct/direct.h"
#include "algorithms/direct/pull.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;

sched::Schedule buildTwoShotAllReduce(const sched::CollDesc& d, int rank, int nranks) {
  sched::Schedule s = sameSizeSchedule("twoshot", d, nranks);
  if (nranks == 1) return s;
  const uint64_t es = d.elemSize;
  direct::addAllPeers(s, rank, nranks);
  if (d.count == 0) return s;

  const Block mine = evenBlock(d.count, nranks, rank);
  direct::pullReduce(s, d, rank, nranks, mine, kOutput, mine.begin);
  direct::notifyAll(s, rank, nranks);
  direct::waitAll(s, rank, nranks);

  const uint64_t chunk = chunkElems(d);
  // Slice 0 is the largest; smaller slices run out of chunks first (empty gets are dropped).
  const uint64_t rounds = numChunks(evenBlock(d.count, nranks, 0).count, chunk);
  for (uint64_t c = 0; c < rounds; ++c)
    for (int k = 1; k < nranks; ++k) {
      const int q = direct::peerAt(rank, nranks, k);
      const Block part = chunkOf(evenBlock(d.count, nranks, q), chunk, c);
      s.get(q, elemRange(kOutput, part, es), elemRange(kOutput, part, es));
    }
  direct::notifyAll(s, rank, nranks);
  direct::waitAll(s, rank, nranks);
  return s;
}

namespace {

cost::Traffic twoShotTraffic(sched::Coll, double N, const cost::CostInput& in) {
  using namespace traffic;
  cost::Traffic t;
  const double n = in.nranks, slice = std::ceil(N / n);
  const double R = ceilDiv(slice, static_cast<double>(in.chunkBytes));
  t.headerPeers = n - 1;
  t.getBytes = 2 * (n - 1) / n * N;
  t.gets = 2 * (n - 1) * R;
  t.reduceBytes = (n - 1) / n * N;
  syncRound(t, n);
  syncRound(t, n);
  t.workingSet = 2 * N;
  return t;
}

}  // namespace

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kAllReduce,
    .name = "twoshot",
    .description = "one-sided: each rank reduces its slice from all inputs, then reads every reduced slice",
    .build = &buildTwoShotAllReduce,
    .traffic = &twoShotTraffic,
    .needs = Needs::kOneSided,
    .order = RankOrder::kRingPositions,
    .hearsEveryPeer = true,
});

}  // namespace chorus::algo
