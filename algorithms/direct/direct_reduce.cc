// Direct reduce over one-sided reads: a direct reduce-scatter, then the root gathers the slices.
//
// Schedule. The N elements are cut into n slices as the ring cuts them. Every rank r reduces
// slice r from every input, chunk by chunk (one getReduce per peer, the first folding in its own
// input; a fixed order of terms per element): non-roots into scratch, the root straight into its
// output. A non-root then notifies the root ("my slice is ready, and I have finished reading
// your input") and waits for the root. The root waits for every non-root, gets slice q from
// rank q's scratch into its output for every q, and notifies every rank ("I have finished
// reading your scratch") — which is what lets them return, and only then may they: peers read
// each other's inputs in the first phase, and the root's notify comes after every rank is done
// with that.
//
// In place (sendbuff == recvbuff at the root) the root reduces slice root over itself, which
// only it reads, and overwrites slice q only after rank q's notify, i.e. after q read it.
//
// Cost (alpha-beta, N bytes): each rank reads (n-1)/n N bytes and reduces them, the root reads
// (n-1)/n N more; latency about n-1 get latencies per chunk chain plus two notify hops — against
// the chain's (n-1 + ceil(N/c) - 1) pipelined message latencies with N per link.
//
// Tuner: reduce on one host over a one-sided transport, small and medium messages; never over
// a transport without gets.
#include "algorithms/direct/direct.h"
#include "algorithms/direct/pull.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;
using sched::kScratch;

sched::Schedule buildDirectReduce(const sched::CollDesc& d, int rank, int nranks) {
  sched::Schedule s;
  s.algo = "direct";
  if (d.inPlace) s.outputInInput = 0;
  const uint64_t es = d.elemSize, count = d.count;
  const bool root = rank == d.root;
  if (nranks == 1) {
    if (!d.inPlace) s.copy(elemRange(kInput, {0, count}, es), elemRange(kOutput, {0, count}, es));
    return s;
  }
  direct::addAllPeers(s, rank, nranks);
  if (count == 0) return s;

  const Block mine = evenBlock(count, nranks, rank);
  if (!root) {
    s.scratchBytes = mine.count * es;
    direct::pullReduce(s, d, rank, nranks, mine, kScratch, 0);
    s.notify(d.root);
    s.wait(d.root);
    return s;
  }
  direct::pullReduce(s, d, rank, nranks, mine, kOutput, mine.begin);
  direct::waitAll(s, rank, nranks);
  const uint64_t chunk = chunkElems(d);
  const uint64_t rounds = numChunks(evenBlock(count, nranks, 0).count, chunk);
  for (uint64_t c = 0; c < rounds; ++c)
    for (int k = 1; k < nranks; ++k) {
      const int q = direct::peerAt(rank, nranks, k);
      const Block slice = evenBlock(count, nranks, q), part = chunkOf(slice, chunk, c);
      const Block inScratch{part.begin - slice.begin, part.count};
      s.get(q, elemRange(kScratch, inScratch, es), elemRange(kOutput, part, es));
    }
  direct::notifyAll(s, rank, nranks);
  return s;
}

namespace {

// The root: reduces its slice from every input, then reads every other slice. Two hops (every
// slice ready -> the root; the root done reading -> everyone), on the root n-1 waits and n-1
// notifies.
cost::Traffic directReduceTraffic(sched::Coll, double N, const cost::CostInput& in) {
  using namespace traffic;
  cost::Traffic t;
  const double n = in.nranks, slice = std::ceil(N / n);
  t.headerPeers = n - 1;
  t.getBytes = 2 * (n - 1) / n * N;
  t.gets = 2 * (n - 1) * ceilDiv(slice, static_cast<double>(in.chunkBytes));
  t.reduceBytes = (n - 1) / n * N;
  t.hops = 2;
  t.messages = 2 * (n - 1);
  t.waits = n - 1;
  t.workingSet = 2 * N;
  return t;
}

}  // namespace

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kReduce,
    .name = "direct",
    .description = "one-sided: each rank reduces its slice from all inputs, the root reads the slices",
    .build = &buildDirectReduce,
    .traffic = &directReduceTraffic,
    .needs = Needs::kOneSided,
    .order = RankOrder::kRingPositions,
});

}  // namespace chorus::algo
