#include "src/topology/layout.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <utility>

namespace chorus::topo {

std::string_view groupKindName(GroupKind k) {
  switch (k) {
    case GroupKind::kHost: return "host";
    case GroupKind::kHostLeaders: return "host-leaders";
    case GroupKind::kRail: return "rail";
    case GroupKind::kNuma: return "numa";
    case GroupKind::kNvlinkDomain: return "nvlink";
  }
  return "?";
}

int Tree::depth() const {
  int deepest = 0;
  for (size_t r = 0; r < parent.size(); ++r) {
    int d = 0;
    // Bounded by the rank count, so a malformed tree (a cycle) cannot hang the caller.
    for (int p = parent[r]; p >= 0 && d <= static_cast<int>(parent.size());
         p = parent[static_cast<size_t>(p)])
      ++d;
    deepest = std::max(deepest, d);
  }
  return deepest;
}

std::string Tree::toString() const {
  std::ostringstream o;
  bool first = true;
  for (size_t r = 0; r < children.size(); ++r) {
    if (children[r].empty()) continue;
    o << (first ? "" : " ") << r << "->[";
    for (size_t i = 0; i < children[r].size(); ++i) o << (i ? " " : "") << children[r][i];
    o << "]";
    first = false;
  }
  return o.str();
}

StatusOr<Layout> Layout::make(std::vector<RankPlace> places) {
  if (places.empty()) return invalidArgument("layout: no ranks");
  const int n = static_cast<int>(places.size());
  Layout l;
  std::map<uint64_t, int> hostIndex;  // host id -> host index
  l.hostOf_.resize(places.size());
  for (int r = 0; r < n; ++r) {
    const RankPlace& p = places[idx(r)];
    if (p.numa < -1 || p.gpu < -1 || p.nic < -1)
      return invalidArgument("layout: rank " + std::to_string(r) + " has numa " +
                             std::to_string(p.numa) + ", gpu " + std::to_string(p.gpu) +
                             ", nic " + std::to_string(p.nic) + " (ids are >= 0, or -1: none)");
    auto [it, fresh] = hostIndex.emplace(p.hostId, static_cast<int>(l.hosts_.size()));
    if (fresh) {
      l.hosts_.emplace_back();
    } else {
      const int leader = l.hosts_[idx(it->second)].front();
      const std::string& other = places[idx(leader)].hostName;
      if (!p.hostName.empty() && !other.empty() && p.hostName != other)
        return invalidArgument("layout: ranks " + std::to_string(leader) + " and " +
                               std::to_string(r) + " share host id " + std::to_string(p.hostId) +
                               " but run on '" + other + "' and '" + p.hostName +
                               "' (is CHORUS_HOST_ID set to the same value on two machines?)");
    }
    l.hostOf_[idx(r)] = it->second;
    l.hosts_[idx(it->second)].push_back(r);
  }
  // Hosts were numbered by first appearance while walking ranks upwards, i.e. by lowest rank.
  l.localRank_.resize(places.size());
  l.minLocal_ = n;
  l.maxLocal_ = 0;
  for (const auto& h : l.hosts_) {
    for (size_t i = 0; i < h.size(); ++i) l.localRank_[idx(h[i])] = static_cast<int>(i);
    l.minLocal_ = std::min(l.minLocal_, static_cast<int>(h.size()));
    l.maxLocal_ = std::max(l.maxLocal_, static_cast<int>(h.size()));
  }

  // NUMA groups, host by host, each host's groups ordered by their lowest rank; the ring walks
  // them in exactly this order.
  l.numaGroupOf_.resize(places.size());
  for (const auto& h : l.hosts_) {
    std::map<int, int> groupOfNode;  // NUMA node -> group index
    for (int r : h) {
      auto [it, fresh] =
          groupOfNode.emplace(places[idx(r)].numa, static_cast<int>(l.numaGroups_.size()));
      if (fresh) l.numaGroups_.emplace_back();
      l.numaGroups_[idx(it->second)].push_back(r);
      l.numaGroupOf_[idx(r)] = it->second;
    }
  }
  for (const auto& g : l.numaGroups_) l.ring_.insert(l.ring_.end(), g.begin(), g.end());
  l.ringPos_.resize(places.size());
  for (size_t i = 0; i < l.ring_.size(); ++i) l.ringPos_[idx(l.ring_[i])] = static_cast<int>(i);

  l.places_ = std::move(places);
  return l;
}

StatusOr<Layout> Layout::uniform(int nranks, int ranksPerHost) {
  if (nranks < 1 || ranksPerHost < 1)
    return invalidArgument("layout: " + std::to_string(nranks) + " ranks, " +
                           std::to_string(ranksPerHost) + " per host (both must be >= 1)");
  std::vector<RankPlace> places(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) places[idx(r)].hostId = static_cast<uint64_t>(r / ranksPerHost);
  return make(std::move(places));
}

std::vector<int> Layout::group(GroupKind kind, int rank) const {
  std::vector<int> g;
  switch (kind) {
    case GroupKind::kHost:
    case GroupKind::kNvlinkDomain: g = hosts_[idx(hostOf(rank))]; break;
    case GroupKind::kHostLeaders:
      if (localRank(rank) != 0) return g;
      for (const auto& h : hosts_) g.push_back(h.front());
      break;
    case GroupKind::kRail:
      for (const auto& h : hosts_)
        if (static_cast<int>(h.size()) > localRank(rank)) g.push_back(h[idx(localRank(rank))]);
      break;
    case GroupKind::kNuma: g = numaGroups_[idx(numaGroupOf(rank))]; break;
  }
  std::sort(g.begin(), g.end());
  return g;
}

SplitSpec Layout::split(GroupKind kind, int rank) const {
  SplitSpec s;
  switch (kind) {
    case GroupKind::kHost:
    case GroupKind::kNvlinkDomain: s.color = hostOf(rank); break;
    case GroupKind::kHostLeaders: s.color = localRank(rank) == 0 ? 0 : -1; break;
    case GroupKind::kRail: s.color = localRank(rank); break;
    case GroupKind::kNuma: s.color = numaGroupOf(rank); break;
  }
  if (s.color < 0) return s;
  // The key is the position in the sorted group, so the new communicator numbers the group in
  // rank order whatever the split implementation does with ties.
  const std::vector<int> g = group(kind, rank);
  s.key = static_cast<int>(std::lower_bound(g.begin(), g.end(), rank) - g.begin());
  return s;
}

int Layout::ringNext(int rank) const {
  const size_t p = idx(ringPos_[idx(rank)]);
  return ring_[(p + 1) % ring_.size()];
}

int Layout::ringPrev(int rank) const {
  const size_t p = idx(ringPos_[idx(rank)]);
  return ring_[(p + ring_.size() - 1) % ring_.size()];
}

std::vector<int> Layout::hostRingFrom(int host, int first) const {
  // The host's ranks are contiguous in the ring (hosts are walked one after another).
  std::vector<int> order;
  const auto& h = hosts_[idx(host)];
  int lo = ringPos_[idx(h.front())];
  for (int r : h) lo = std::min(lo, ringPos_[idx(r)]);
  const int size = static_cast<int>(h.size());
  const int start = ringPos_[idx(first)] - lo;
  for (int i = 0; i < size; ++i) order.push_back(ring_[idx(lo + (start + i) % size)]);
  return order;
}

void Layout::hangBelow(Tree& t, const std::vector<int>& order, TreeShape shape) {
  for (size_t i = 1; i < order.size(); ++i) {
    const int up = shape == TreeShape::kChain ? order[i - 1] : order[(i - 1) / 2];
    t.parent[idx(order[i])] = up;
    t.children[idx(up)].push_back(order[i]);
  }
}

Tree Layout::tree(int root, TreeShape intra) const {
  Tree t;
  t.root = root;
  t.parent.assign(places_.size(), -1);
  t.children.assign(places_.size(), {});
  const int H = numHosts(), rootHost = hostOf(root);
  // Leaders in host order starting from the root's host, linked as a heap: the leader at
  // position i hangs below the one at (i-1)/2. Inter-host edges go in first so they lead every
  // leader's child list.
  std::vector<int> leaders;
  for (int i = 0; i < H; ++i) {
    const int h = (rootHost + i) % H;
    leaders.push_back(h == rootHost ? root : hostLeader(h));
  }
  hangBelow(t, leaders, TreeShape::kBinary);
  for (int i = 0; i < H; ++i) {
    const int h = (rootHost + i) % H;
    hangBelow(t, hostRingFrom(h, leaders[idx(i)]), intra);
  }
  return t;
}

namespace {

// In-order binary tree over positions 1..m: a node's height is the number of trailing zeros of
// its position, the root is the largest power of two <= m, and a position whose natural parent
// lies beyond m climbs until it finds one inside. Returns the parent position, or 0 at the root.
int bitTreeParent(int v, int m) {
  int top = 1;
  while (top * 2 <= m) top *= 2;
  while (v != top) {
    const int low = v & -v;
    v = (v & (low << 1)) ? v - low : v + low;
    if (v <= m) return v;
  }
  return 0;
}

}  // namespace

std::array<Tree, 2> Layout::doubleBinaryTree(TreeShape intra) const {
  const int H = numHosts();
  std::array<Tree, 2> trees;
  for (int k = 0; k < 2; ++k) {
    Tree& t = trees[idx(k)];
    t.parent.assign(places_.size(), -1);
    t.children.assign(places_.size(), {});
    // Position q of the shape holds host hostAt(q): the identity for the first tree; for the
    // second a mirror (even H) or a shift by one (odd H), which turns the first tree's leaves
    // (even positions) into interior nodes.
    auto hostAt = [&](int q) {
      if (k == 0) return q;
      return H % 2 == 0 ? H - 1 - q : (q + 1) % H;
    };
    for (int q = 0; q < H; ++q) {
      const int up = bitTreeParent(q + 1, H);
      const int me = hostLeader(hostAt(q));
      if (up == 0) {
        t.root = me;
        continue;
      }
      const int above = hostLeader(hostAt(up - 1));
      t.parent[idx(me)] = above;
      t.children[idx(above)].push_back(me);
    }
    for (int h = 0; h < H; ++h) hangBelow(t, hostRingFrom(h, hostLeader(h)), intra);
  }
  return trees;
}

int Layout::crossHostEdges(const Tree& t) const {
  int edges = 0;
  for (size_t r = 0; r < t.parent.size(); ++r)
    if (t.parent[r] >= 0 && !sameHost(static_cast<int>(r), t.parent[r])) ++edges;
  return edges;
}

std::string Layout::describe() const {
  std::ostringstream o;
  o << nranks() << (nranks() == 1 ? " rank" : " ranks") << " on " << numHosts()
    << (numHosts() == 1 ? " host" : " hosts") << ", ";
  if (uniformHosts())
    o << maxLocalSize() << " per host\n";
  else
    o << minLocalSize() << "-" << maxLocalSize() << " per host (uneven)\n";
  bool numaKnown = false;
  for (const RankPlace& p : places_) numaKnown = numaKnown || p.numa >= 0;
  for (int h = 0; h < numHosts(); ++h) {
    const int leader = hostLeader(h);
    const std::string& name = place(leader).hostName;
    o << "  host " << h << " (" << (name.empty() ? "host" + std::to_string(h) : name) << ", id 0x"
      << std::hex << place(leader).hostId << std::dec << "): ranks";
    for (int r : hosts_[idx(h)]) {
      o << " " << r;
      const RankPlace& p = place(r);
      if (p.gpu >= 0 || p.nic >= 0) {
        o << "(";
        if (p.gpu >= 0) o << "gpu" << p.gpu;
        if (p.gpu >= 0 && p.nic >= 0) o << ",";
        if (p.nic >= 0) o << "nic" << p.nic;
        o << ")";
      }
    }
    if (numaKnown) {
      o << "; numa";
      for (const auto& g : numaGroups_) {
        if (hostOf(g.front()) != h) continue;
        const int node = place(g.front()).numa;
        o << " " << (node >= 0 ? std::to_string(node) : std::string("?")) << ":[";
        for (size_t i = 0; i < g.size(); ++i) o << (i ? " " : "") << g[i];
        o << "]";
      }
    }
    o << "\n";
  }
  o << "  ring:";
  for (size_t i = 0; i < ring_.size(); ++i) {
    if (i > 0 && !sameHost(ring_[i - 1], ring_[i])) o << " |";
    o << " " << ring_[i];
  }
  o << "\n";
  const Tree t = tree(0);
  o << "  tree(root 0): " << (t.toString().empty() ? "(single rank)" : t.toString())
    << "  [depth " << t.depth() << ", " << crossHostEdges(t) << " inter-host edges]\n";
  return o.str();
}

}  // namespace chorus::topo
