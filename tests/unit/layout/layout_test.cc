// Rank layout: hosts, subgroups and their split colours, ring orders and tree shapes, on named
// layouts (1x4, 2x2 blocked and interleaved, 3x2, uneven hosts, multi-NUMA hosts) and on a
// sweep of random layouts of 1..40 ranks checked for the invariants every layout must keep.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "src/topology/layout.h"

namespace chorus::topo {
namespace {

using V = std::vector<int>;

// Places from host ids (and NUMA nodes, when given), one per rank.
std::vector<RankPlace> places(const std::vector<uint64_t>& hostIds, const V& numa = {}) {
  std::vector<RankPlace> p(hostIds.size());
  for (size_t r = 0; r < p.size(); ++r) {
    p[r].hostId = hostIds[r];
    p[r].numa = numa.empty() ? -1 : numa[r];
  }
  return p;
}

Layout make(const std::vector<uint64_t>& hostIds, const V& numa = {}) {
  auto l = Layout::make(places(hostIds, numa));
  EXPECT_TRUE(l.ok()) << l.status().toString();
  return std::move(l).value();
}

// Times the ring steps from one host (NUMA group) to another, wrap-around included.
int hostCrossings(const Layout& l) {
  const V& ring = l.ringOrder();
  int n = 0;
  for (size_t i = 0; i < ring.size(); ++i)
    if (!l.sameHost(ring[i], ring[(i + 1) % ring.size()])) ++n;
  return n;
}
int numaCrossings(const Layout& l) {
  const V& ring = l.ringOrder();
  int n = 0;
  for (size_t i = 0; i < ring.size(); ++i)
    if (l.numaGroupOf(ring[i]) != l.numaGroupOf(ring[(i + 1) % ring.size()])) ++n;
  return n;
}

// Walks `t` from its root through the children lists; every rank must be reached exactly once
// and every child must name its parent.
void expectSpanning(const Layout& l, const Tree& t) {
  const int n = l.nranks();
  ASSERT_EQ(t.parent.size(), static_cast<size_t>(n));
  ASSERT_EQ(t.children.size(), static_cast<size_t>(n));
  EXPECT_EQ(t.parent[static_cast<size_t>(t.root)], -1);
  std::vector<int> seen(static_cast<size_t>(n), 0);
  std::vector<int> stack = {t.root};
  while (!stack.empty()) {
    const int r = stack.back();
    stack.pop_back();
    ++seen[static_cast<size_t>(r)];
    for (int c : t.children[static_cast<size_t>(r)]) {
      EXPECT_EQ(t.parent[static_cast<size_t>(c)], r) << "child " << c << " of " << r;
      stack.push_back(c);
    }
  }
  for (int r = 0; r < n; ++r) EXPECT_EQ(seen[static_cast<size_t>(r)], 1) << "rank " << r;
  EXPECT_EQ(l.crossHostEdges(t), l.numHosts() - 1);
}

// The invariants of any layout.
void expectInvariants(const Layout& l) {
  const int n = l.nranks(), H = l.numHosts();
  // Hosts partition the ranks, ordered by lowest rank, ranks in order within.
  V all;
  for (int h = 0; h < H; ++h) {
    const V& ranks = l.hosts()[static_cast<size_t>(h)];
    ASSERT_FALSE(ranks.empty());
    EXPECT_TRUE(std::is_sorted(ranks.begin(), ranks.end()));
    if (h > 0) {
      EXPECT_LT(l.hosts()[static_cast<size_t>(h - 1)].front(), ranks.front());
    }
    for (size_t i = 0; i < ranks.size(); ++i) {
      EXPECT_EQ(l.hostOf(ranks[i]), h);
      EXPECT_EQ(l.localRank(ranks[i]), static_cast<int>(i));
      EXPECT_EQ(l.localSize(ranks[i]), static_cast<int>(ranks.size()));
      EXPECT_EQ(l.place(ranks[i]).hostId, l.place(ranks.front()).hostId);
    }
    all.insert(all.end(), ranks.begin(), ranks.end());
  }
  std::sort(all.begin(), all.end());
  V iota(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) iota[static_cast<size_t>(r)] = r;
  EXPECT_EQ(all, iota);

  // Ring: a permutation starting at 0; hosts and NUMA groups contiguous.
  V ring = l.ringOrder();
  EXPECT_EQ(ring.front(), 0);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(l.ringPrev(l.ringNext(r)), r);
  }
  EXPECT_EQ(hostCrossings(l), H > 1 ? H : 0);
  EXPECT_EQ(numaCrossings(l), l.numNumaGroups() > 1 ? l.numNumaGroups() : 0);
  std::sort(ring.begin(), ring.end());
  EXPECT_EQ(ring, iota);

  // Groups: sorted, contain the rank, agree with their definition, and the split colour / key
  // rebuild them (new rank = position in the sorted group).
  for (GroupKind kind : {GroupKind::kHost, GroupKind::kHostLeaders, GroupKind::kRail,
                         GroupKind::kNuma, GroupKind::kNvlinkDomain}) {
    std::map<int, std::vector<std::pair<int, int>>> byColor;  // color -> (key, rank)
    for (int r = 0; r < n; ++r) {
      const SplitSpec s = l.split(kind, r);
      if (s.color >= 0) byColor[s.color].push_back({s.key, r});
    }
    for (int r = 0; r < n; ++r) {
      const V g = l.group(kind, r);
      EXPECT_TRUE(std::is_sorted(g.begin(), g.end()));
      const SplitSpec s = l.split(kind, r);
      if (kind == GroupKind::kHostLeaders && l.localRank(r) != 0) {
        EXPECT_TRUE(g.empty());
        EXPECT_LT(s.color, 0);
        continue;
      }
      ASSERT_TRUE(std::binary_search(g.begin(), g.end(), r)) << groupKindName(kind) << " " << r;
      for (int q : g) {
        switch (kind) {
          case GroupKind::kHost:
          case GroupKind::kNvlinkDomain: EXPECT_TRUE(l.sameHost(q, r)); break;
          case GroupKind::kHostLeaders: EXPECT_EQ(l.localRank(q), 0); break;
          case GroupKind::kRail: EXPECT_EQ(l.localRank(q), l.localRank(r)); break;
          case GroupKind::kNuma:
            EXPECT_TRUE(l.sameHost(q, r));
            EXPECT_EQ(l.place(q).numa, l.place(r).numa);
            break;
        }
      }
      auto members = byColor[s.color];
      std::sort(members.begin(), members.end());
      V rebuilt;
      for (auto [key, q] : members) rebuilt.push_back(q);
      EXPECT_EQ(rebuilt, g) << groupKindName(kind) << " rank " << r;
      EXPECT_EQ(g[static_cast<size_t>(s.key)], r);
    }
  }
  EXPECT_EQ(l.group(GroupKind::kHostLeaders, 0).size(), static_cast<size_t>(H));

  // Trees from every root, both shapes.
  for (int root = 0; root < n; ++root)
    for (TreeShape shape : {TreeShape::kChain, TreeShape::kBinary}) {
      const Tree t = l.tree(root, shape);
      EXPECT_EQ(t.root, root);
      expectSpanning(l, t);
      // A leader's inter-host children come before its intra-host ones.
      for (int r = 0; r < n; ++r) {
        bool intraSeen = false;
        for (int c : t.children[static_cast<size_t>(r)]) {
          if (l.sameHost(c, r)) {
            intraSeen = true;
          } else {
            EXPECT_FALSE(intraSeen) << "rank " << r;
          }
        }
      }
    }
  // Double binary tree: both span, and no leader is interior (has inter-host children) in
  // both; with an even host count every leader is interior in one, with an odd count exactly
  // one leader is a leaf in both.
  const auto two = l.doubleBinaryTree();
  int leafInBoth = 0;
  for (const Tree& t : two) expectSpanning(l, t);
  for (int h = 0; h < H; ++h) {
    const int leader = l.hostLeader(h);
    auto interChildren = [&](const Tree& t) {
      int k = 0;
      for (int c : t.children[static_cast<size_t>(leader)]) k += !l.sameHost(c, leader);
      return k;
    };
    const int a = interChildren(two[0]), b = interChildren(two[1]);
    EXPECT_FALSE(a > 0 && b > 0) << "leader " << leader << " interior in both trees";
    if (a == 0 && b == 0) ++leafInBoth;
  }
  if (H > 1) {
    EXPECT_EQ(leafInBoth, H % 2 == 0 ? 0 : 1) << H << " hosts";
  }
}

TEST(Layout, OneHostFourRanks) {
  const Layout l = make({7, 7, 7, 7});
  expectInvariants(l);
  EXPECT_EQ(l.numHosts(), 1);
  EXPECT_EQ(l.hosts(), (std::vector<V>{{0, 1, 2, 3}}));
  EXPECT_TRUE(l.uniformHosts());
  EXPECT_EQ(l.ringOrder(), (V{0, 1, 2, 3}));
  EXPECT_EQ(l.group(GroupKind::kHost, 2), (V{0, 1, 2, 3}));
  EXPECT_EQ(l.group(GroupKind::kHostLeaders, 0), (V{0}));
  EXPECT_EQ(l.group(GroupKind::kHostLeaders, 1), V{});
  EXPECT_EQ(l.group(GroupKind::kRail, 2), (V{2}));
  EXPECT_EQ(l.group(GroupKind::kNuma, 3), (V{0, 1, 2, 3}));
  const Tree chain = l.tree(0);
  EXPECT_EQ(chain.parent, (V{-1, 0, 1, 2}));
  EXPECT_EQ(chain.depth(), 3);
  // Rooted elsewhere the chain walks the ring from the root and wraps.
  const Tree from2 = l.tree(2);
  EXPECT_EQ(from2.parent, (V{3, 0, -1, 2}));
  const Tree bin = l.tree(0, TreeShape::kBinary);
  EXPECT_EQ(bin.parent, (V{-1, 0, 0, 1}));
  EXPECT_EQ(bin.depth(), 2);
  EXPECT_EQ(l.crossHostEdges(chain), 0);
}

TEST(Layout, TwoByTwoBlocked) {
  const Layout l = make({10, 10, 20, 20});
  expectInvariants(l);
  EXPECT_EQ(l.hosts(), (std::vector<V>{{0, 1}, {2, 3}}));
  EXPECT_EQ(l.ringOrder(), (V{0, 1, 2, 3}));
  EXPECT_EQ(l.group(GroupKind::kHostLeaders, 2), (V{0, 2}));
  EXPECT_EQ(l.group(GroupKind::kRail, 3), (V{1, 3}));
  EXPECT_EQ(l.group(GroupKind::kHost, 3), (V{2, 3}));
  const Tree t = l.tree(0);
  EXPECT_EQ(t.children[0], (V{2, 1}));  // the inter-host child first
  EXPECT_EQ(t.children[2], (V{3}));
  EXPECT_EQ(l.crossHostEdges(t), 1);
  // Rooted on the second host: that host's leader is the root, the first host's is rank 0.
  const Tree t3 = l.tree(3);
  EXPECT_EQ(t3.parent, (V{3, 0, 3, -1}));
  EXPECT_EQ(l.split(GroupKind::kRail, 3).color, 1);
  EXPECT_EQ(l.split(GroupKind::kRail, 3).key, 1);
  EXPECT_EQ(l.split(GroupKind::kHostLeaders, 1).color, -1);
}

TEST(Layout, TwoByTwoInterleaved) {
  // Ranks 0, 2 on host A; 1, 3 on host B (a round-robin launcher).
  const Layout l = make({0xA, 0xB, 0xA, 0xB});
  expectInvariants(l);
  EXPECT_EQ(l.hosts(), (std::vector<V>{{0, 2}, {1, 3}}));
  EXPECT_EQ(l.hostOf(1), 1);
  EXPECT_EQ(l.localRank(2), 1);
  EXPECT_EQ(l.ringOrder(), (V{0, 2, 1, 3}));
  EXPECT_EQ(l.ringNext(2), 1);
  EXPECT_EQ(l.ringPrev(0), 3);
  EXPECT_EQ(l.group(GroupKind::kHostLeaders, 1), (V{0, 1}));
  EXPECT_EQ(l.group(GroupKind::kRail, 2), (V{2, 3}));
  EXPECT_EQ(l.group(GroupKind::kHost, 3), (V{1, 3}));
  EXPECT_EQ(l.split(GroupKind::kHost, 3).color, 1);
  EXPECT_EQ(l.split(GroupKind::kHost, 3).key, 1);
  const Tree t = l.tree(0);
  EXPECT_EQ(t.parent, (V{-1, 0, 0, 1}));
  EXPECT_EQ(t.children[0], (V{1, 2}));
  const Tree t3 = l.tree(3);
  EXPECT_EQ(t3.parent, (V{3, 3, 0, -1}));
}

TEST(Layout, ThreeByTwoWithNuma) {
  const Layout l = make({1, 1, 2, 2, 3, 3}, {0, 1, 0, 1, 0, 0});
  expectInvariants(l);
  EXPECT_EQ(l.numHosts(), 3);
  EXPECT_EQ(l.numNumaGroups(), 5);
  EXPECT_EQ(l.ringOrder(), (V{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(hostCrossings(l), 3);
  EXPECT_EQ(l.group(GroupKind::kNuma, 1), (V{1}));
  EXPECT_EQ(l.group(GroupKind::kNuma, 5), (V{4, 5}));
  EXPECT_EQ(l.group(GroupKind::kRail, 4), (V{0, 2, 4}));
  EXPECT_EQ(l.group(GroupKind::kHostLeaders, 2), (V{0, 2, 4}));
  const Tree t = l.tree(0);
  // Leaders 0, 2, 4 as a heap: 0 -> 2, 4.
  EXPECT_EQ(t.children[0], (V{2, 4, 1}));
  EXPECT_EQ(t.parent[3], 2);
  EXPECT_EQ(t.parent[5], 4);
  EXPECT_EQ(l.crossHostEdges(t), 2);
  // From rank 3 the root's host comes first, then hosts 2 and 0.
  const Tree t3 = l.tree(3);
  EXPECT_EQ(t3.children[3], (V{4, 0, 2}));
  const std::string d = l.describe();
  EXPECT_NE(d.find("6 ranks on 3 hosts, 2 per host"), std::string::npos) << d;
  EXPECT_NE(d.find("ring: 0 1 | 2 3 | 4 5"), std::string::npos) << d;
  EXPECT_NE(d.find("numa 0:[0] 1:[1]"), std::string::npos) << d;
  EXPECT_NE(d.find("2 inter-host edges"), std::string::npos) << d;
}

TEST(Layout, UnevenHosts) {
  // Host A {0, 1, 5}, host B {2}, host C {3, 4}.
  const Layout l = make({5, 5, 6, 7, 7, 5});
  expectInvariants(l);
  EXPECT_EQ(l.hosts(), (std::vector<V>{{0, 1, 5}, {2}, {3, 4}}));
  EXPECT_FALSE(l.uniformHosts());
  EXPECT_EQ(l.minLocalSize(), 1);
  EXPECT_EQ(l.maxLocalSize(), 3);
  EXPECT_EQ(l.ringOrder(), (V{0, 1, 5, 2, 3, 4}));
  EXPECT_EQ(l.group(GroupKind::kRail, 1), (V{1, 4}));
  EXPECT_EQ(l.group(GroupKind::kRail, 5), (V{5}));
  EXPECT_EQ(l.group(GroupKind::kRail, 2), (V{0, 2, 3}));
  EXPECT_NE(l.describe().find("1-3 per host (uneven)"), std::string::npos);
}

TEST(Layout, MultiNumaHost) {
  // One host, two NUMA nodes, ranks alternating between them.
  const Layout l = make({1, 1, 1, 1, 1, 1, 1, 1}, {0, 1, 0, 1, 0, 1, 0, 1});
  expectInvariants(l);
  EXPECT_EQ(l.ringOrder(), (V{0, 2, 4, 6, 1, 3, 5, 7}));
  EXPECT_EQ(numaCrossings(l), 2);
  EXPECT_EQ(l.group(GroupKind::kNuma, 3), (V{1, 3, 5, 7}));
  EXPECT_EQ(l.split(GroupKind::kNuma, 3).color, 1);
  EXPECT_EQ(l.split(GroupKind::kNuma, 3).key, 1);
  // The chain from 3 follows the ring: 3 5 7 0 2 4 6 1.
  const Tree t = l.tree(3);
  EXPECT_EQ(t.parent, (V{7, 6, 0, -1, 2, 3, 4, 5}));

  // Two such hosts: NUMA groups stay contiguous inside each.
  const Layout two = make({1, 1, 1, 1, 2, 2, 2, 2}, {1, 0, 1, 0, 0, 0, 1, 1});
  expectInvariants(two);
  EXPECT_EQ(two.ringOrder(), (V{0, 2, 1, 3, 4, 5, 6, 7}));
  EXPECT_EQ(two.numNumaGroups(), 4);
}

TEST(Layout, DoubleBinaryTreeShapes) {
  // Four hosts of one rank: an in-order tree rooted at position 4 (host 3) ... mirrored.
  const Layout four = make({1, 2, 3, 4});
  const auto t = four.doubleBinaryTree();
  // Positions 1..4: 2 is below 4, 1 and 3 below 2. Tree 0 maps position p to host p-1.
  EXPECT_EQ(t[0].root, 3);
  EXPECT_EQ(t[0].parent, (V{1, 3, 1, -1}));
  // Tree 1 mirrors it: host h sits at position 4 - h.
  EXPECT_EQ(t[1].root, 0);
  EXPECT_EQ(t[1].parent, (V{-1, 2, 0, 2}));
  // Odd host count: tree 1 shifts by one host.
  const Layout three = make({1, 2, 3});
  const auto u = three.doubleBinaryTree();
  EXPECT_EQ(u[0].parent, (V{1, -1, 1}));
  EXPECT_EQ(u[1].parent, (V{2, 2, -1}));
}

TEST(Layout, SingleRank) {
  const Layout l = make({42});
  expectInvariants(l);
  EXPECT_EQ(l.ringOrder(), (V{0}));
  EXPECT_EQ(l.ringNext(0), 0);
  EXPECT_EQ(l.tree(0).depth(), 0);
  EXPECT_NE(l.describe().find("(single rank)"), std::string::npos);
}

TEST(Layout, Uniform) {
  auto l = Layout::uniform(7, 3);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->hosts(), (std::vector<V>{{0, 1, 2}, {3, 4, 5}, {6}}));
  expectInvariants(*l);
  EXPECT_FALSE(Layout::uniform(0, 2).ok());
  EXPECT_FALSE(Layout::uniform(4, 0).ok());
}

TEST(Layout, RejectsBadInput) {
  EXPECT_EQ(Layout::make({}).status().code(), Code::kInvalidArgument);
  auto p = places({1, 1});
  p[1].numa = -2;
  EXPECT_EQ(Layout::make(p).status().code(), Code::kInvalidArgument);
  p = places({1, 1});
  p[0].hostName = "alpha";
  p[1].hostName = "beta";
  const Status s = Layout::make(p).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("'alpha' and 'beta'"), std::string::npos) << s.message();
  // The same name under different ids is fine: CHORUS_HOST_ID splits one machine in two.
  p[1].hostName = "alpha";
  p[1].hostId = 2;
  EXPECT_TRUE(Layout::make(p).ok());
}

TEST(Layout, RandomLayoutsKeepInvariants) {
  std::mt19937_64 rng(20261122);
  for (int iter = 0; iter < 200; ++iter) {
    const int n = 1 + static_cast<int>(rng() % 40);
    const int hosts = 1 + static_cast<int>(rng() % 6);
    std::vector<RankPlace> p(static_cast<size_t>(n));
    for (auto& place : p) {
      place.hostId = 1000 + rng() % static_cast<uint64_t>(hosts);
      place.numa = static_cast<int>(rng() % 3) - 1;
      place.gpu = static_cast<int>(rng() % 3) - 1;
    }
    auto l = Layout::make(p);
    ASSERT_TRUE(l.ok()) << l.status().toString();
    SCOPED_TRACE(l->describe());
    expectInvariants(*l);
  }
}

}  // namespace
}  // namespace chorus::topo
