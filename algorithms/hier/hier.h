// Hierarchical (host-aware) algorithms: data crosses hosts only between ranks of the same local
// rank — the rails — and everything else stays inside a host, where links are fast.
//
// Builders read the host of every rank from CollDesc::hostOf. They need the same number of ranks
// on every host and at least two hosts of at least two ranks; anywhere else they build the flat
// algorithm named in their file's prose (never a wrong schedule). All steps are messages, so they
// run over any transport, TCP between hosts included.
//
// Builders return unfinalized schedules (call Schedule::finalize()); see each .cc file for the
// schedule, its alpha-beta cost and when the tuner should pick it.
#pragma once

#include <vector>

#include "algorithms/common/host_groups.h"
#include "algorithms/common/schedule.h"
#include "algorithms/registry.h"

namespace chorus::algo {

sched::Schedule buildHierAllReduce(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildHierAllGather(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildHierReduceScatter(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildHierBroadcast(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildHierAllToAll(const sched::CollDesc& d, int rank, int nranks);

// Where the hierarchical builders apply (AlgoInfo::applies): several hosts of several ranks,
// all of one size.
const char* hierApplies(const sched::CollDesc& d, const Platform& p);

}  // namespace chorus::algo
