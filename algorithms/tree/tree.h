// Tree-shaped algorithms (a chain is the degenerate tree of fan-out one).
//
// Builders return unfinalized schedules (call Schedule::finalize()); see each .cc file for the
// schedule, its alpha-beta cost and when the tuner should pick it.
#pragma once

#include "algorithms/common/schedule.h"

namespace chorus::algo {

sched::Schedule buildChainBroadcast(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildChainReduce(const sched::CollDesc& d, int rank, int nranks);

}  // namespace chorus::algo
