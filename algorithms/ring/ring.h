// Ring algorithms: every rank talks only to its two neighbours, (r+1) and (r-1) mod n.
//
// Builders return unfinalized schedules (call Schedule::finalize()); see each .cc file for the
// schedule, its alpha-beta cost and when the tuner should pick it.
#pragma once

#include "algorithms/common/schedule.h"
#include "src/cost/cost_model.h"

namespace chorus::algo {

sched::Schedule buildRingAllReduce(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildRingReduceScatter(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildRingAllGather(const sched::CollDesc& d, int rank, int nranks);

// Cost terms (src/cost/cost_model.h) the hierarchical fallbacks reuse: the ring all-reduce's,
// and the ring all-gather's and reduce-scatter's (one block per step).
cost::Traffic ringAllReduceTraffic(sched::Coll coll, double bytes, const cost::CostInput& in);
cost::Traffic ringBlockTraffic(sched::Coll coll, double bytes, const cost::CostInput& in);

}  // namespace chorus::algo
