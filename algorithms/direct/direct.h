// Direct algorithms: every rank obtains every other rank's data in one step, with no forwarding.
//
// One-shot all-reduce moves data with messages. The direct ones read peers' buffers with
// one-sided gets (Needs::kOneSided: only connections that can read peer memory — shared memory
// with cross-memory attach, later CUDA IPC and RDMA — run them) and synchronize with notify /
// wait pairs: a notify says "I am done with everything before this", a wait takes it. Every one
// of them ends with the waits that keep a rank in the call until nobody reads its buffers any
// more. The staged ones (Needs::kHostWindow) run through the host window instead: every rank
// copies into its own region, peers read it as plain memory, and signals and awaits replace the
// notifies and waits (see algorithms/common/schedule.h).
//
// Builders return unfinalized schedules (call Schedule::finalize()); see each .cc file for the
// schedule, its alpha-beta cost and when the tuner should pick it.
#pragma once

#include "algorithms/common/schedule.h"
#include "src/cost/cost_model.h"

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
// Through the host window (CollDesc::window): no messages, no system calls.
sched::Schedule buildOneShotStagedAllReduce(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildTwoShotStagedAllReduce(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildStagedAllGather(const sched::CollDesc& d, int rank, int nranks);

// Cost terms shared by the direct reduce-scatter and all-gather (n-1 blocks read).
cost::Traffic directBlockTraffic(sched::Coll coll, double bytes, const cost::CostInput& in);

}  // namespace chorus::algo
