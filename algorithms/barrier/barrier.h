// Barriers: schedules that move no user data, only enough tokens that no rank can finish before
// every rank has started.
//
// Builders return unfinalized schedules (call Schedule::finalize()); see each .cc file for the
// schedule, its alpha-beta cost and when the tuner should pick it.
#pragma once

#include "algorithms/common/schedule.h"

namespace chorus::algo {

sched::Schedule buildDisseminationBarrier(const sched::CollDesc& d, int rank, int nranks);

}  // namespace chorus::algo
