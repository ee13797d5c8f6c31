// Direct algorithms: every rank obtains every other rank's data in one step, with no forwarding.
//
// One-shot all-reduce moves data with messages. The others read peers' buffers with one-sided
// gets (Schedule::needsOneSided(): only transports with Connection::get() — shared memory,
// CUDA IPC, RDMA — can run them) and synchronize with notify / wait pairs: a notify says "I am
// done with everything before this", a wait takes it. Every one of them ends with the waits that
// keep a rank in the call until nobody reads its buffers any more.
//
// Builders return unfinalized schedules (call Schedule::finalize()); see each .cc file for the
// schedule, its alpha-beta cost and when the tuner should pick it.
#pragma once

#include "algorithms/common/schedule.h"

namespace chorus::algo {

sched::Schedule buildOneShotAllReduce(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildTwoShotAllReduce(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildDirectReduceScatter(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildDirectAllGather(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildDirectBroadcast(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildDirectReduce(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildDirectAllToAll(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildDirectGather(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildDirectScatter(const sched::CollDesc& d, int rank, int nranks);

// Message size (bytes per rank) up to which the selection rule prefers one-shot over ring.
inline constexpr uint64_t kOneShotMaxBytes = 16 << 10;
// Message size (bytes per rank's block) from which the one-sided direct algorithms are preferred
// to the message-based ones when every peer is readable (measured, docs/performance.md).
inline constexpr uint64_t kDirectMinBytes = 64 << 10;

}  // namespace chorus::algo
