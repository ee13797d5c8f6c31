// Ranks grouped by host (CollDesc::hostOf), the index math host-aware builders share: the
// hierarchical schedules (algorithms/hier) and the double binary tree (algorithms/tree).
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

// The host groups of `nranks` ranks; one host of all ranks when d.hostOf is empty or does not
// have nranks entries.
HostGroups hostGroups(const sched::CollDesc& d, int nranks);

}  // namespace chorus::algo
