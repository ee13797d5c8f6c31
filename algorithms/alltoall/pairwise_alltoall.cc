// Pairwise-exchange all-to-all and all-to-allv.
//
// Schedule. Rank r copies its own block locally, then in step s (s = 1..n-1) sends its block for
// (r+s) mod n to that rank and receives the block of (r-s) mod n from that rank, straight from
// the input into the output, chunk by chunk. In every step each rank sends exactly one block and
// receives exactly one, so no rank is a hot spot and the steps' messages are spread evenly over
// all pairs — the classic choice when every pair exchanges the same amount. all-to-allv walks
// the same steps with per-peer counts and displacements (empty blocks record the peer only).
//
// In place (see alltoall.h) a received block overwrites the block this rank still has to send
// to the same peer in step n-s. When that step is still to come (s < n-s) the block is first
// saved to scratch and later sent from there. So is the block of the middle step s = n/2 (even
// n), where the peer is the same both ways: receiving straight over the block being sent would
// make the receive wait for the send, and two ranks doing that to each other deadlock on a
// transport whose sends complete only when matched. Blocks already sent (s > n-s) are simply
// overwritten. Scratch holds at most floor(n/2) blocks.
//
// Cost (alpha-beta, B bytes per block, C chunks per block):
//   (n-1) C alpha + (n-1) B beta when the steps run one after another; an executor may overlap
//   steps (they only share FIFO order per peer), approaching max(link, NIC) bandwidth.
//
// Tuner: the default for all-to-all and all-to-allv (MoE token dispatch) on any n; for tiny
// blocks at large n a Bruck-style log(n) algorithm would save latency.
#include <vector>

#include "algorithms/alltoall/alltoall.h"
#include "algorithms/common/chunking.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;
using sched::kScratch;

namespace {

uint64_t entry(const std::vector<uint64_t>& v, int p) {
  // A malformed view (too few entries) means "nothing for this peer" rather than a wild read;
  // the API layer rejects such calls before a schedule is ever built.
  return static_cast<size_t>(p) < v.size() ? v[static_cast<size_t>(p)] : 0;
}

template <class SendOf, class RecvOf>
sched::Schedule pairwise(const sched::CollDesc& d, int rank, int nranks, SendOf sendOf,
                         RecvOf recvOf) {
  sched::Schedule s;
  s.algo = "pairwise";
  if (d.inPlace) s.outputInInput = 0;
  const uint64_t es = d.elemSize;
  for (int st = 1; st < nranks; ++st) {
    s.addPeer(modRank(rank + st, nranks));
    s.addPeer(modRank(rank - st, nranks));
  }
  if (!d.inPlace) s.copy(elemRange(kInput, sendOf(rank), es), elemRange(kOutput, recvOf(rank), es));

  const uint64_t chunk = chunkElems(d);
  std::vector<int64_t> savedAt(static_cast<size_t>(nranks), -1);  // scratch element offset
  uint64_t scratchElems = 0;
  for (int st = 1; st < nranks; ++st) {
    const int to = modRank(rank + st, nranks), from = modRank(rank - st, nranks);
    const Block sb = sendOf(to), rb = recvOf(from);
    const bool save = d.inPlace && nranks - st >= st;
    if (save) {
      savedAt[static_cast<size_t>(from)] = static_cast<int64_t>(scratchElems);
      scratchElems += rb.count;
    }
    const int64_t sendSaved = savedAt[static_cast<size_t>(to)];
    const uint64_t rounds = std::max(numChunks(sb.count, chunk), numChunks(rb.count, chunk));
    for (uint64_t c = 0; c < rounds; ++c) {
      const Block sc = chunkOf(sb, chunk, c), rc = chunkOf(rb, chunk, c);
      if (save) {  // first: in the middle step the send below reads this copy
        const Block keep{static_cast<uint64_t>(savedAt[static_cast<size_t>(from)]) +
                             (rc.begin - rb.begin), rc.count};
        s.copy(elemRange(kInput, rc, es), elemRange(kScratch, keep, es));
      }
      if (sendSaved >= 0) {
        const Block saved{static_cast<uint64_t>(sendSaved) + (sc.begin - sb.begin), sc.count};
        s.send(to, elemRange(kScratch, saved, es));
      } else {
        s.send(to, elemRange(kInput, sc, es));
      }
      s.recv(from, elemRange(kOutput, rc, es));
    }
  }
  s.scratchBytes = scratchElems * es;
  return s;
}

}  // namespace

sched::Schedule buildPairwiseAllToAll(const sched::CollDesc& d, int rank, int nranks) {
  auto block = [&](int p) { return Block{static_cast<uint64_t>(p) * d.count, d.count}; };
  return pairwise(d, rank, nranks, block, block);
}

sched::Schedule buildPairwiseAllToAllv(const sched::CollDesc& d, int rank, int nranks) {
  auto sendOf = [&](int p) { return Block{entry(d.sendDispls, p), entry(d.sendCounts, p)}; };
  auto recvOf = [&](int p) { return Block{entry(d.recvDispls, p), entry(d.recvCounts, p)}; };
  if (d.inPlace) return pairwise(d, rank, nranks, recvOf, recvOf);
  return pairwise(d, rank, nranks, sendOf, recvOf);
}

// Every step is independent but for FIFO order per peer: the executor overlaps them.
cost::Traffic pairwiseTraffic(sched::Coll, double N, const cost::CostInput& in) {
  using namespace traffic;
  cost::Traffic t;
  const double n = in.nranks, C = ceilDiv(N, static_cast<double>(in.chunkBytes));
  t.hops = C > 0 ? 1 : 0;
  t.messages = 2 * (n - 1) * C;
  t.waits = (n - 1) * C;
  t.headerPeers = n - 1;
  directBytes(t, N, in);
  t.copyBytes = N;
  t.workingSet = 2 * n * N;
  return t;
}

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kAllToAll,
    .name = "pairwise",
    .description = "n-1 steps, step s sends to r+s and receives from r-s",
    .build = &buildPairwiseAllToAll,
    .traffic = &pairwiseTraffic,
    .tiePriority = 0,
});

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kAllToAllv,
    .name = "pairwise",
    .description = "pairwise exchange with per-peer counts and displacements",
    .build = &buildPairwiseAllToAllv,
    .traffic = &pairwiseTraffic,
    .tiePriority = 0,
});

}  // namespace chorus::algo
