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

#include "algorithms/common/schedule.h"

namespace chorus::algo {

// Ranks grouped by host, from CollDesc::hostOf.
struct HostGroups {
  std::vector<std::vector<int>> ranks;  // per host, in rank order; hosts by lowest rank
  std::vector<int> host;                // per rank: its host index
  std::vector<int> local;               // per rank: its position within its host

  int numHosts() const { return static_cast<int>(ranks.size()); }
  // Every host holds the same number of ranks.
  bool uniform() const;
  // Several hosts of several ranks each, all of one size: where the hierarchical builders apply.
  bool hierarchical() const { return uniform() && numHosts() > 1 && ranks[0].size() > 1; }
  int hostOf(int rank) const { return host[static_cast<size_t>(rank)]; }
  int localOf(int rank) const { return local[static_cast<size_t>(rank)]; }
  // Ranks per host (of the first host; all alike where hierarchical()).
  int perHost() const { return static_cast<int>(ranks[0].size()); }
  // The rank at position `loc` of host `h`, hosts counted modulo numHosts() (so h - 1 and
  // h + 1 are the neighbours on a rail's ring).
  int at(int h, int loc) const;
  // `rank`'s neighbours on its rail's ring across hosts (same local rank, hosts h + 1 and
  // h - 1), added to s.peers.
  struct RailRing {
    int next, prev;
  };
  RailRing addRailRing(sched::Schedule& s, int rank) const;
  // Adds every other rank of `rank`'s host to s.peers.
  void addHostPeers(sched::Schedule& s, int rank) const;
};

// A flat schedule built where a hierarchical builder does not apply, under the name "hier"
// (the name the caller asked for, which the statistics and the consistency header carry).
sched::Schedule asHier(sched::Schedule flat);

// The host groups of `nranks` ranks; one host of all ranks when d.hostOf is empty or does not
// have nranks entries.
HostGroups hostGroups(const sched::CollDesc& d, int nranks);

sched::Schedule buildHierAllReduce(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildHierAllGather(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildHierReduceScatter(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildHierBroadcast(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildHierAllToAll(const sched::CollDesc& d, int rank, int nranks);

}  // namespace chorus::algo
