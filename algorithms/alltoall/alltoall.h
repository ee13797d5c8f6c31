// Personalized exchanges: every rank has a distinct block for (or from) every other rank —
// all-to-all, all-to-allv, gather and scatter.
//
// Builders return unfinalized schedules (call Schedule::finalize()); see each .cc file for the
// schedule, its alpha-beta cost and when the tuner should pick it.
//
// In-place conventions (CollDesc::inPlace), where NCCL has none we follow MPI_IN_PLACE:
//   alltoall   sendbuff == recvbuff; block p is read from and replaced at p*count.
//   alltoallv  sendbuff == recvbuff; block p is read from and replaced at recvDispls[p] with
//              recvCounts[p] elements (sendCounts / sendDispls are ignored, as in MPI), so the
//              counts must be symmetric: rank r's recvCounts[p] == rank p's recvCounts[r].
//   gather     at the root, sendbuff == recvbuff + root*count; no effect elsewhere.
//   scatter    at the root, recvbuff == sendbuff + root*count; no effect elsewhere.
#pragma once

#include "algorithms/common/schedule.h"
#include "src/cost/cost_model.h"

namespace chorus::algo {

sched::Schedule buildPairwiseAllToAll(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildPairwiseAllToAllv(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildLinearGather(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildLinearScatter(const sched::CollDesc& d, int rank, int nranks);

// Cost terms of the pairwise exchange (all-to-all and all-to-allv; the hierarchical fallback).
cost::Traffic pairwiseTraffic(sched::Coll coll, double bytes, const cost::CostInput& in);

}  // namespace chorus::algo
