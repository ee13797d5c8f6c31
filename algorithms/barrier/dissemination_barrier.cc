// Dissemination barrier (Hensgen, Finkel and Manber).
//
// Schedule. ceil(log2 n) rounds; in round k rank r sends a one-byte token to (r + 2^k) mod n and
// receives one from (r - 2^k) mod n. After round k a rank has heard, directly or through
// forwarded tokens, from the 2^(k+1) ranks before it, so after the last round from everyone.
// That argument needs round k's send to come after every earlier round's receive. The schedule
// format has no control edges, so the order is made a data dependency: round k receives into a
// byte of its own (scratch[1 + k]) and copies it into one knowledge byte (scratch[0]), which the
// next round sends. finalize() then chains copy k-1 -> send k -> copy k and recv k -> copy k.
// Receives depend on nothing, so they are posted at once: the barrier cannot deadlock even on a
// transport whose sends complete only when matched. (Receiving straight into the knowledge
// byte would be shorter but makes each receive wait for its own round's send — a cycle around
// the ranks on such a transport.) The user's buffers are untouched.
//
// Cost (alpha-beta): ceil(log2 n) alpha — every round is one message per rank, all in parallel,
// for any n (not only powers of two), with no root to serialize on.
//
// Tuner: the only barrier; it is latency-optimal among point-to-point barriers.
#include <cmath>

#include "algorithms/barrier/barrier.h"
#include "algorithms/common/chunking.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

sched::Schedule buildDisseminationBarrier(const sched::CollDesc& /*d*/, int rank, int nranks) {
  sched::Schedule s;
  s.algo = "dissemination";
  const sched::Range knowledge{sched::kScratch, 0, 1};
  uint64_t round = 0;
  for (int64_t dist = 1; dist < nranks; dist *= 2, ++round) {
    const sched::Range token{sched::kScratch, 1 + round, 1};
    s.send(modRank(rank + dist, nranks), knowledge);
    s.recv(modRank(rank - dist, nranks), token);
    if (2 * dist < nranks) s.copy(token, knowledge);  // the last round has nothing to forward
  }
  s.scratchBytes = round == 0 ? 0 : 1 + round;
  return s;
}

namespace {

cost::Traffic disseminationTraffic(sched::Coll, double, const cost::CostInput& in) {
  using namespace traffic;
  cost::Traffic t;
  const double n = in.nranks;
  t.hops = std::ceil(std::log2(n));
  t.messages = 2 * t.hops;
  t.waits = t.hops;
  t.headerPeers = std::min(2 * t.hops, n - 1);
  directBytes(t, 0, in);
  t.bytesIntra = t.bytesNic = t.hops;  // one-byte tokens
  return t;
}

}  // namespace

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kBarrier,
    .name = "dissemination",
    .description = "ceil(log2 n) rounds of 1-byte tokens to r+2^k",
    .build = &buildDisseminationBarrier,
    .traffic = &disseminationTraffic,
    .tiePriority = 0,
});

}  // namespace chorus::algo
