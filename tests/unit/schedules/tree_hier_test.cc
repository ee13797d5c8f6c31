// Tree and hierarchical algorithms through the symbolic checker on multi-host layouts, and their
// inter-host traffic against the formulas in their prose blocks.
//
// Layouts (CollDesc::hostOf): 1 host of 5, 5 hosts of 1, 2x2, 2x3, 3x2, 4x4, hosts of 3+1+2
// and 16x8, hosts contiguous and, for 2x3, 3x2, 4x4 and 3+1+2, interleaved. Counts
// {0, 1, 7, 1023, 4099} (per block for the per-block collectives, which skip 4099 above 8
// ranks), elements of 4 bytes, in and out of place, chunks of 5 elements (many chunks; the chunk
// size is deliberately not a multiple of the element size) and of 1 MiB, roots 0, n-1 and n/2
// for rooted collectives. The 128-rank layout runs counts {0, 1, 7} only. One test per
// (algorithm, layout).
// algorithms_test.cc runs the same builders without host information for 1..33 ranks.
#include <gtest/gtest.h>

#include <set>
#include <tuple>
#include <string>
#include <vector>

#include "tests/support/checker.h"
#include "algorithms/hier/hier.h"
#include "algorithms/registry.h"
#include "algorithms/tree/tree.h"

namespace chorus::algo {
namespace {

using sched::CollDesc;
using sched::Coll;

struct HostLayout {
  std::string name;
  std::vector<int> hostOf;
  int nranks() const { return static_cast<int>(hostOf.size()); }
};

// H hosts of L ranks: contiguous (ranks h*L..h*L+L-1 on host h) or interleaved (r on r mod H).
HostLayout grid(int H, int L, bool interleaved = false) {
  HostLayout l;
  l.name = std::to_string(H) + "x" + std::to_string(L) + (interleaved ? "i" : "");
  for (int r = 0; r < H * L; ++r) l.hostOf.push_back(interleaved ? r % H : r / L);
  return l;
}

std::vector<HostLayout> layouts() {
  std::vector<HostLayout> v = {grid(1, 5), grid(5, 1),       grid(2, 2),       grid(2, 3),
                               grid(3, 2), grid(4, 4),       grid(2, 3, true), grid(3, 2, true),
                               grid(4, 4, true)};
  v.push_back({"3+1+2", {0, 0, 0, 1, 2, 2}});
  v.push_back({"3+1+2i", {0, 1, 0, 2, 0, 2}});
  v.push_back(grid(16, 8));
  return v;
}

struct Target {
  Coll coll;
  const char* name;
};
constexpr Target kNew[] = {
    {Coll::kAllReduce, "tree"},     {Coll::kAllReduce, "rabenseifner"},
    {Coll::kAllReduce, "recursive_doubling"},
    {Coll::kAllReduce, "hier"},     {Coll::kBroadcast, "binomial"},
    {Coll::kBroadcast, "hier"},     {Coll::kReduce, "binomial"},
    {Coll::kAllGather, "hier"},     {Coll::kReduceScatter, "hier"},
    {Coll::kAllToAll, "hier"},
};

bool rooted(Coll c) { return c == Coll::kBroadcast || c == Coll::kReduce; }

// One test per (algorithm, layout), so ctest -j spreads the sweep over cores.
class TreeHier : public testing::TestWithParam<std::tuple<Target, int>> {};

TEST_P(TreeHier, SymbolicChecker) {
  const Target target = std::get<0>(GetParam());
  const HostLayout lay = layouts()[static_cast<size_t>(std::get<1>(GetParam()))];
  const AlgoInfo* a = findAlgorithm(target.coll, target.name);
  ASSERT_NE(a, nullptr);
  uint64_t seed = 1;
  const int n = lay.nranks();
  std::vector<uint64_t> counts = {0, 1, 7, 1023, 4099};
  if (n > 64) counts = {0, 1, 7};
  std::set<int> roots = {0};
  if (rooted(a->coll)) roots = {0, n - 1, n / 2};
  for (uint64_t count : counts)
    for (bool inPlace : {false, true})
      for (uint64_t chunkBytes : {uint64_t{4 * 5 + 2}, uint64_t{1} << 20})
        for (int root : roots) {
          // Per-block collectives hold n*count elements per rank: keep the sweep small.
          const bool perBlock = a->coll == Coll::kAllGather ||
                                a->coll == Coll::kReduceScatter || a->coll == Coll::kAllToAll;
          if (perBlock && count > 1023 && n > 8) continue;
          CollDesc d{a->coll};
          d.count = count;
          d.elemSize = 4;
          d.inPlace = inPlace;
          d.chunkBytes = chunkBytes;
          d.root = root;
          d.hostOf = lay.hostOf;
          sched::CheckOptions opts;
          opts.seed = seed++;
          const Status st = sched::checkAlgorithm(a->coll, n, d, a->build, opts);
          ASSERT_TRUE(st.ok()) << collName(a->coll) << ":" << a->name << " layout " << lay.name
                               << " count=" << count << " inPlace=" << inPlace
                               << " chunkBytes=" << chunkBytes << " root=" << root << "\n"
                               << st.toString();
          if (n > 1 && count == 1 && !inPlace && root == 0) {
            for (int r = 0; r < n; ++r) {
              const sched::Schedule s = a->build(d, r, n);
              // Where a hierarchical builder does not apply it builds the flat algorithm and
              // names it (the statistics and the header say what ran).
              const bool flat = std::string(a->name) == "hier" && !hostGroups(d, n).hierarchical();
              const char* flatName = a->coll == Coll::kBroadcast  ? "chain"
                                     : a->coll == Coll::kAllToAll ? "pairwise"
                                                                  : "ring";
              EXPECT_EQ(s.algo, flat ? flatName : a->name);
              EXPECT_FALSE(s.needsOneSided()) << "messages only, so they run over TCP";
            }
          }
        }
}

INSTANTIATE_TEST_SUITE_P(
    New, TreeHier,
    testing::Combine(testing::ValuesIn(kNew),
                     testing::Range(0, static_cast<int>(layouts().size()))),
    [](const testing::TestParamInfo<std::tuple<Target, int>>& i) {
      std::string layout = layouts()[static_cast<size_t>(std::get<1>(i.param))].name;
      for (char& ch : layout)
        if (ch == '+') ch = '_';
      return std::string(collName(std::get<0>(i.param).coll)) + "_" +
             std::get<0>(i.param).name + "_" + layout;
    });

// ---- Inter-host bytes ------------------------------------------------------------------------

// Bytes rank r's schedule sends to ranks on other hosts.
uint64_t interHostBytes(const AlgoInfo& a, const CollDesc& d, int r, int n) {
  const sched::Schedule s = makeSchedule(a, d, r, n);
  uint64_t bytes = 0;
  for (int p = 0; p < n; ++p)
    if (d.hostOf[static_cast<size_t>(p)] != d.hostOf[static_cast<size_t>(r)]) bytes += s.bytesTo(p);
  return bytes;
}

struct Grid {
  int H, L;
  bool interleaved;
};
constexpr Grid kGrids[] = {{2, 2, false}, {2, 3, false}, {3, 2, true}, {4, 4, false},
                           {4, 4, true},  {3, 5, true}};

// Hierarchical all-reduce of S bytes: 2 (H-1)/H * S/L per rank (count a multiple of L*H and one
// chunk, so slices and pieces are exact).
TEST(InterHostBytes, HierAllReduce) {
  const AlgoInfo& a = *findAlgorithm(Coll::kAllReduce, "hier");
  for (const Grid g : kGrids) {
    CollDesc d{Coll::kAllReduce};
    d.count = 60ull * g.H * g.L;
    d.hostOf = grid(g.H, g.L, g.interleaved).hostOf;
    const uint64_t S = d.count * d.elemSize;
    for (int r = 0; r < g.H * g.L; ++r)
      EXPECT_EQ(interHostBytes(a, d, r, g.H * g.L), 2 * (g.H - 1) * S / g.H / g.L)
          << g.H << "x" << g.L << " rank " << r;
  }
}

// Hierarchical reduce-scatter and all-gather: (H-1) * count * elemSize per rank, which is
// (H-1)/H * S/L of the n*count-element side.
TEST(InterHostBytes, HierReduceScatterAndAllGather) {
  for (Coll coll : {Coll::kReduceScatter, Coll::kAllGather}) {
    const AlgoInfo& a = *findAlgorithm(coll, "hier");
    for (const Grid g : kGrids) {
      CollDesc d{coll};
      d.count = 37;
      d.hostOf = grid(g.H, g.L, g.interleaved).hostOf;
      for (int r = 0; r < g.H * g.L; ++r)
        EXPECT_EQ(interHostBytes(a, d, r, g.H * g.L), (g.H - 1) * d.count * d.elemSize)
            << collName(coll) << " " << g.H << "x" << g.L << " rank " << r;
    }
  }
}

// Hierarchical broadcast of S bytes: S/L from every rank whose host is not the last of the
// chain, nothing from the last host's ranks.
TEST(InterHostBytes, HierBroadcast) {
  const AlgoInfo& a = *findAlgorithm(Coll::kBroadcast, "hier");
  for (const Grid g : kGrids) {
    const HostLayout lay = grid(g.H, g.L, g.interleaved);
    for (int root : {0, g.H * g.L - 1}) {
      CollDesc d{Coll::kBroadcast};
      d.count = 12ull * g.L;
      d.root = root;
      d.hostOf = lay.hostOf;
      const uint64_t S = d.count * d.elemSize;
      const int lastHost = (lay.hostOf[static_cast<size_t>(root)] + g.H - 1) % g.H;
      uint64_t total = 0;
      for (int r = 0; r < g.H * g.L; ++r) {
        const uint64_t b = interHostBytes(a, d, r, g.H * g.L);
        total += b;
        EXPECT_EQ(b, lay.hostOf[static_cast<size_t>(r)] == lastHost ? 0 : S / g.L)
            << g.H << "x" << g.L << " root " << root << " rank " << r;
      }
      EXPECT_EQ(total, (g.H - 1) * S);  // every host link carries S once
    }
  }
}

// Hierarchical all-to-all with S = n*count*elemSize input bytes: (H-1)/H * S per rank.
TEST(InterHostBytes, HierAllToAll) {
  const AlgoInfo& a = *findAlgorithm(Coll::kAllToAll, "hier");
  for (const Grid g : kGrids) {
    CollDesc d{Coll::kAllToAll};
    d.count = 5;
    d.hostOf = grid(g.H, g.L, g.interleaved).hostOf;
    const int n = g.H * g.L;
    const uint64_t S = static_cast<uint64_t>(n) * d.count * d.elemSize;
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(interHostBytes(a, d, r, n), (g.H - 1) * S / g.H) << g.H << "x" << g.L;
  }
}

// Double binary tree over host leaders: only leaders cross hosts, and each tree's H-1 edges
// carry its half up and down once: 2 (H-1) N bytes over all ranks (about 2 (H-1)/H N per
// leader).
TEST(InterHostBytes, DoubleTree) {
  const AlgoInfo& a = *findAlgorithm(Coll::kAllReduce, "tree");
  for (const Grid g : kGrids) {
    const HostLayout lay = grid(g.H, g.L, g.interleaved);
    CollDesc d{Coll::kAllReduce};
    d.count = 1000;
    d.chunkBytes = 256;
    d.hostOf = lay.hostOf;
    const uint64_t N = d.count * d.elemSize;
    const HostGroups hg = hostGroups(d, g.H * g.L);
    uint64_t total = 0;
    for (int r = 0; r < g.H * g.L; ++r) {
      const uint64_t b = interHostBytes(a, d, r, g.H * g.L);
      total += b;
      if (hg.local[static_cast<size_t>(r)] != 0) {
        EXPECT_EQ(b, 0u) << "rank " << r;
      }
    }
    EXPECT_EQ(total, 2 * static_cast<uint64_t>(g.H - 1) * N) << g.H << "x" << g.L;
  }
}

// ---- Shapes ----------------------------------------------------------------------------------

TEST(DoubleBinaryTree, TwoSpanningBinaryTrees) {
  for (int m = 1; m <= 70; ++m) {
    const auto trees = doubleBinaryTree(m);
    std::vector<int> interior(static_cast<size_t>(m), 0);
    for (const NodeTree& t : trees) {
      ASSERT_EQ(t.parent[static_cast<size_t>(t.root)], -1);
      for (int i = 0; i < m; ++i) {
        EXPECT_LE(t.children[static_cast<size_t>(i)].size(), 2u) << "m=" << m;
        if (!t.children[static_cast<size_t>(i)].empty()) ++interior[static_cast<size_t>(i)];
        // Every node reaches the root.
        int u = i, steps = 0;
        while (u != t.root && steps++ <= m) u = t.parent[static_cast<size_t>(u)];
        EXPECT_EQ(u, t.root) << "m=" << m << " node " << i;
      }
    }
    // Complementary: at most one node (odd m: the one the shift cannot fix) interior in both.
    int both = 0;
    for (int c : interior) both += c == 2;
    EXPECT_LE(both, m % 2 == 0 ? 0 : 1) << "m=" << m;
  }
}

TEST(Binomial, LogRounds) {
  for (int n = 1; n <= 40; ++n) {
    int depth = 0;
    for (int v = 0; v < n; ++v) {
      int d = 0;
      for (int u = v; u != 0; u = binomialNode(u, n).parent) ++d;
      depth = std::max(depth, d);
    }
    int log2 = 0;
    while ((1 << log2) < n) ++log2;
    // ceil(log2 n) rounds: the root sends to log2 children, no path is longer.
    EXPECT_LE(depth, log2) << "n=" << n;
    EXPECT_EQ(static_cast<int>(binomialNode(0, n).children.size()), log2) << "n=" << n;
  }
}

TEST(HostGroups, FromHostOf) {
  CollDesc d;
  d.hostOf = {5, 2, 5, 9, 2, 9};  // ids are labels; groups are ordered by lowest rank
  const HostGroups g = hostGroups(d, 6);
  ASSERT_EQ(g.numHosts(), 3);
  EXPECT_EQ(g.ranks[0], (std::vector<int>{0, 2}));
  EXPECT_EQ(g.ranks[1], (std::vector<int>{1, 4}));
  EXPECT_EQ(g.ranks[2], (std::vector<int>{3, 5}));
  EXPECT_TRUE(g.hierarchical());
  EXPECT_EQ(g.local[4], 1);
  d.hostOf = {0, 0, 1};
  EXPECT_FALSE(hostGroups(d, 3).hierarchical());
  d.hostOf = {};
  EXPECT_EQ(hostGroups(d, 4).numHosts(), 1);
  d.hostOf = {0, 1};  // wrong size: unknown
  EXPECT_EQ(hostGroups(d, 4).numHosts(), 1);
}

}  // namespace
}  // namespace chorus::algo
