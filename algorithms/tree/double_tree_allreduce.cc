// Double-binary-tree all-reduce (NCCL's "Tree"): two complementary binary trees, each reducing
// then broadcasting half of the data, chunk-pipelined.
//
// Schedule. The N elements are cut in two halves; half t travels on tree t of
// doubleBinaryTree() (double_tree.cc). With several hosts in CollDesc::hostOf the trees span
// the host leaders (lowest rank of each host) and below every leader hangs the rest of its host
// as a chain in rank order, so only tree edges between leaders cross hosts; otherwise (hostOf
// empty or one host) the trees span all ranks. For each chunk of chunkBytes and each tree: a
// rank folds its children's partials into its output chunk (starting from its input) and sends
// the result to its parent; the root then holds the sum and sends it back down, every rank
// receiving into its output and forwarding to its children, inter-host children first. Chunks
// stream through both phases, so the reduce of later chunks overlaps the broadcast of earlier
// ones.
//
// Program order: every chunk's reduce phase, then every chunk's broadcast phase. Messages of one
// ordered pair match in posting order, and the two trees can put one pair in opposite places (u
// a child of p in one tree, p's parent in the other): u -> p then carries one tree's reduce and
// the other tree's broadcast. Written chunk by chunk, u's broadcast of chunk c to p would sit
// ahead of its reduce of chunk c+1 on that connection, and chunk c's broadcast comes only after
// its round trip to the root: every chunk would wait for the previous one's round trip, the
// pipeline would carry one chunk per round trip (chorus-sim, 8 DGX-like GPUs at 256 MiB:
// 25.4 ms against 1.30 ms; 4 x 1 netns ranks at 1 Gbit/s and 16 MiB, measured: 352 against
// 292 ms). With the phases apart, a pair's broadcast messages queue behind reduce messages that
// are ready sooner, and the dataflow executor still starts each step as soon as its own data
// and its connection allow.
//
// In place (sendbuff == recvbuff) the same steps hold: a rank's first fold reads and writes the
// same elements, and a leaf's final receive overwrites what it sent (finalize() orders them).
//
// Cost (alpha-beta, N bytes, C chunks of c bytes per half, m tree nodes, d = log2 m depth):
//   about 2 (d + L + C) (alpha + c beta) on hosts of L ranks: latency logarithmic in the host
//   count; each rank sends and receives about N in total (each interior node moves its half
//   twice up and down, each leaf once, and each node is interior in about one tree), so the
//   bandwidth term is N beta per phase against the ring's 2 (n-1)/n N — within a factor of
//   about one of optimal, with far fewer steps.
// Inter-host bytes per leader: up to N/2 per tree edge it has across hosts and per direction —
// about N sent and N received per leader in total (each leader is interior in about one tree);
// non-leaders send nothing across hosts.
//
// Tuner: small and medium all-reduces across many hosts, where the ring's 2(n-1) steps
// dominate; large ones on few hosts want the ring or the hierarchical all-reduce.
#include <array>
#include <cmath>
#include <vector>

#include "algorithms/common/chunking.h"
#include "algorithms/common/host_groups.h"
#include "algorithms/tree/tree.h"
#include "algorithms/common/traffic.h"
#include "algorithms/registry.h"

namespace chorus::algo {

using sched::kInput;
using sched::kOutput;

namespace {

struct RankTree {
  int parent = -1;
  std::vector<int> children;  // broadcast order: inter-host children first
};

// Rank `rank`'s place in tree t, with host leaders as the tree's nodes and chains below them.
RankTree rankTree(const HostGroups& g, const std::array<NodeTree, 2>& trees, int t, int rank,
                  bool overHosts) {
  RankTree out;
  const NodeTree& tree = trees[static_cast<size_t>(t)];
  if (!overHosts) {
    out.parent = tree.parent[static_cast<size_t>(rank)];
    out.children = tree.children[static_cast<size_t>(rank)];
    return out;
  }
  const int h = g.host[static_cast<size_t>(rank)], l = g.local[static_cast<size_t>(rank)];
  const std::vector<int>& host = g.ranks[static_cast<size_t>(h)];
  if (l == 0) {
    const int p = tree.parent[static_cast<size_t>(h)];
    if (p >= 0) out.parent = g.ranks[static_cast<size_t>(p)][0];
    for (int ch : tree.children[static_cast<size_t>(h)])
      out.children.push_back(g.ranks[static_cast<size_t>(ch)][0]);
  } else {
    out.parent = host[static_cast<size_t>(l - 1)];
  }
  if (static_cast<size_t>(l) + 1 < host.size()) out.children.push_back(host[static_cast<size_t>(l) + 1]);
  return out;
}

// The host groups and the two trees depend only on the layout (hostOf, nranks), and every
// rank's plan of a job builds them (chorus-sim builds thousands in a row): kept per thread for
// the last layout seen, they are built once instead of once per plan.
struct TreeShape {
  int nranks = -1;
  std::vector<int> hostOf;
  HostGroups g;
  std::array<NodeTree, 2> trees;
};

const TreeShape& treeShape(const sched::CollDesc& d, int nranks) {
  thread_local TreeShape shape;
  if (shape.nranks != nranks || shape.hostOf != d.hostOf) {
    shape.g = hostGroups(d, nranks);
    shape.trees = doubleBinaryTree(shape.g.numHosts() > 1 ? shape.g.numHosts() : nranks);
    shape.hostOf = d.hostOf;
    shape.nranks = nranks;
  }
  return shape;
}

}  // namespace

sched::Schedule buildDoubleTreeAllReduce(const sched::CollDesc& d, int rank, int nranks) {
  sched::Schedule s = sameSizeSchedule("tree", d, nranks);
  if (nranks == 1) return s;
  const uint64_t es = d.elemSize;
  const TreeShape& shape = treeShape(d, nranks);
  const HostGroups& g = shape.g;
  const bool overHosts = g.numHosts() > 1;
  const std::array<NodeTree, 2>& trees = shape.trees;
  const RankTree mine[2] = {rankTree(g, trees, 0, rank, overHosts),
                            rankTree(g, trees, 1, rank, overHosts)};
  for (const RankTree& t : mine) {
    if (t.parent >= 0) s.addPeer(t.parent);
    for (int ch : t.children) s.addPeer(ch);
  }

  const uint64_t chunk = chunkElems(d);
  const uint64_t rounds = numChunks(evenBlock(d.count, 2, 0).count, chunk);
  auto part = [&](int t, uint64_t c) { return chunkOf(evenBlock(d.count, 2, t), chunk, c); };
  // The reduce phase of every chunk, then the broadcast phase of every chunk (see above).
  for (uint64_t c = 0; c < rounds; ++c) {
    for (int t = 0; t < 2; ++t) {
      const RankTree& tr = mine[t];
      const sched::Range out = elemRange(kOutput, part(t, c), es);
      sched::Range acc = elemRange(kInput, part(t, c), es);
      for (auto it = tr.children.rbegin(); it != tr.children.rend(); ++it) {
        s.recvReduce(*it, acc, out);
        acc = out;
      }
      if (tr.parent >= 0) s.send(tr.parent, acc);
    }
  }
  for (uint64_t c = 0; c < rounds; ++c) {
    for (int t = 0; t < 2; ++t) {
      const RankTree& tr = mine[t];
      const sched::Range out = elemRange(kOutput, part(t, c), es);
      if (tr.parent >= 0) s.recv(tr.parent, out);
      for (int ch : tr.children) s.send(ch, out);
    }
  }
  return s;
}

namespace {

// Two trees over the host leaders (chains below them) or over all ranks; per tree a rank with
// k children and a parent moves its half 2k + 2 times per chunk.
cost::Traffic doubleTreeTraffic(sched::Coll, double N, const cost::CostInput& in) {
  using namespace traffic;
  cost::Traffic t;
  const double n = in.nranks, c = static_cast<double>(in.chunkBytes), L = in.ranksPerHost;
  const bool multiHost = in.hosts > 1;
  const int m = multiHost ? in.hosts : in.nranks;
  const auto trees = doubleBinaryTree(m);
  const double half = std::ceil(N / 2), C = ceilDiv(half, c);
  const double chain = multiHost && L > 1 ? 1 : 0;  // a leader's intra-host child
  double mostMoves = 0, mostChildren = 0, mostCross = 0, depth = 0;
  for (int v = 0; v < m; ++v) {
    double moves = 0, children = 0, cross = 0;
    for (const NodeTree& tr : trees) {
      const double k = static_cast<double>(tr.children[static_cast<size_t>(v)].size());
      const double up = tr.parent[static_cast<size_t>(v)] >= 0 ? 1 : 0;
      moves += k + chain + up;
      children += k + chain;
      cross += k + up;
      double dv = 0;
      for (int u = v; tr.parent[static_cast<size_t>(u)] >= 0; u = tr.parent[static_cast<size_t>(u)])
        ++dv;
      depth = std::max(depth, dv);
    }
    mostMoves = std::max(mostMoves, moves);
    mostChildren = std::max(mostChildren, children);
    mostCross = std::max(mostCross, cross);
  }
  if (multiHost) mostMoves = std::max(mostMoves, 2 * (1 + chain));  // a chain rank
  depth += multiHost ? L - 1 : 0;
  t.hops = C > 0 ? 2 * depth + C - 1 : 0;
  t.messages = 2 * mostMoves * C;
  t.waits = mostMoves * C;
  t.headerPeers = std::min(n - 1, mostMoves);
  t.bytesIntra = mostMoves * half;
  t.bytesNic = multiHost ? mostCross * half : 0;
  t.interShare = multiHost && mostMoves > 0 ? mostCross / mostMoves : 0;
  t.reduceBytes = mostChildren * half;
  t.workingSet = 2 * N;
  return t;
}

}  // namespace

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kAllReduce,
    .name = "tree",
    .description = "double binary tree over host leaders (chains inside hosts), half the data per tree",
    .build = &buildDoubleTreeAllReduce,
    .traffic = &doubleTreeTraffic,
    .order = RankOrder::kRingPositions,
});

}  // namespace chorus::algo
