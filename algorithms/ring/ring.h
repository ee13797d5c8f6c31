// Ring algorithms: every rank talks only to its two neighbours, (r+1) and (r-1) mod n.
//
// Builders return unfinalized schedules (call Schedule::finalize()); see each .cc file for the
// schedule, its alpha-beta cost and when the tuner should pick it.
#pragma once

#include "algorithms/common/schedule.h"

namespace chorus::algo {

sched::Schedule buildRingAllReduce(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildRingReduceScatter(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildRingAllGather(const sched::CollDesc& d, int rank, int nranks);

}  // namespace chorus::algo
