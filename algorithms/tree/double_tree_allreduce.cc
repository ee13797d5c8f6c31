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
// stream through both phases, so reduce of chunk c+1 overlaps broadcast of chunk c.
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
#include "algorithms/common/chunking.h"
#include "algorithms/hier/hier.h"
#include "algorithms/tree/tree.h"

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

}  // namespace

sched::Schedule buildDoubleTreeAllReduce(const sched::CollDesc& d, int rank, int nranks) {
  sched::Schedule s = sameSizeSchedule("tree", d, nranks);
  if (nranks == 1) return s;
  const uint64_t es = d.elemSize;
  const HostGroups g = hostGroups(d, nranks);
  const bool overHosts = g.numHosts() > 1;
  const std::array<NodeTree, 2> trees = doubleBinaryTree(overHosts ? g.numHosts() : nranks);
  const RankTree mine[2] = {rankTree(g, trees, 0, rank, overHosts),
                            rankTree(g, trees, 1, rank, overHosts)};
  for (const RankTree& t : mine) {
    if (t.parent >= 0) s.addPeer(t.parent);
    for (int ch : t.children) s.addPeer(ch);
  }

  const uint64_t chunk = chunkElems(d);
  const uint64_t rounds = numChunks(evenBlock(d.count, 2, 0).count, chunk);
  for (uint64_t c = 0; c < rounds; ++c) {
    for (int t = 0; t < 2; ++t) {
      const RankTree& tr = mine[t];
      const Block part = chunkOf(evenBlock(d.count, 2, t), chunk, c);
      const sched::Range out = elemRange(kOutput, part, es);
      sched::Range acc = elemRange(kInput, part, es);
      for (auto it = tr.children.rbegin(); it != tr.children.rend(); ++it) {
        s.recvReduce(*it, acc, out);
        acc = out;
      }
      if (tr.parent >= 0) {
        s.send(tr.parent, acc);
        s.recv(tr.parent, out);
      }
      for (int ch : tr.children) s.send(ch, out);
    }
  }
  return s;
}

}  // namespace chorus::algo
