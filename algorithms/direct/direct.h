// Direct algorithms: every rank obtains every other rank's data in one step, with no forwarding.
//
// Builders return unfinalized schedules (call Schedule::finalize()); see each .cc file for the
// schedule, its alpha-beta cost and when the tuner should pick it.
#pragma once

#include "algorithms/common/schedule.h"

namespace chorus::algo {

sched::Schedule buildOneShotAllReduce(const sched::CollDesc& d, int rank, int nranks);

// Message size (bytes per rank) up to which the selection rule prefers one-shot over ring.
inline constexpr uint64_t kOneShotMaxBytes = 16 << 10;

}  // namespace chorus::algo
