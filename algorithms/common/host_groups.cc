// Host groups from CollDesc::hostOf: the subgroup primitive of the hierarchical builders.
//
// Host ids are only labels here: groups are ordered by their lowest rank whatever numbers the
// caller used, so every rank derives the same groups from the same vector.
#include <algorithm>
#include <map>

#include "algorithms/common/host_groups.h"

namespace chorus::algo {

bool HostGroups::uniform() const {
  return std::all_of(ranks.begin(), ranks.end(),
                     [&](const std::vector<int>& h) { return h.size() == ranks[0].size(); });
}

int HostGroups::at(int h, int loc) const {
  const int H = numHosts();
  return ranks[static_cast<size_t>(((h % H) + H) % H)][static_cast<size_t>(loc)];
}

void HostGroups::addHostPeers(sched::Schedule& s, int rank) const {
  for (int r : ranks[static_cast<size_t>(host[static_cast<size_t>(rank)])])
    if (r != rank) s.addPeer(r);
}

HostGroups::RailRing HostGroups::addRailRing(sched::Schedule& s, int rank) const {
  const int h = hostOf(rank), l = localOf(rank);
  const RailRing ring{at(h + 1, l), at(h - 1, l)};
  s.addPeer(ring.next);
  s.addPeer(ring.prev);
  return ring;
}

HostGroups hostGroups(const sched::CollDesc& d, int nranks) {
  HostGroups g;
  const size_t n = static_cast<size_t>(nranks);
  g.host.assign(n, 0);
  g.local.assign(n, 0);
  const bool known = d.hostOf.size() == n;
  std::map<int, int> index;  // caller's host id -> group, in order of first (lowest) rank
  // Consecutive ranks mostly share a host: the map is asked only when the id changes (every
  // plan of a job builds this, so with n plans a lookup per rank costs n^2 log(hosts)).
  int lastId = 0, h = -1;
  for (int r = 0; r < nranks; ++r) {
    const int id = known ? d.hostOf[static_cast<size_t>(r)] : 0;
    if (h < 0 || id != lastId) {
      auto [it, added] = index.emplace(id, g.numHosts());
      if (added) g.ranks.emplace_back();
      h = it->second;
      lastId = id;
    }
    g.host[static_cast<size_t>(r)] = h;
    g.local[static_cast<size_t>(r)] = static_cast<int>(g.ranks[static_cast<size_t>(h)].size());
    g.ranks[static_cast<size_t>(h)].push_back(r);
  }
  return g;
}

}  // namespace chorus::algo
