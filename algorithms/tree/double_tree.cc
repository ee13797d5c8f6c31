// The shape of the double binary tree: index math only, kept apart from the data movement of
// double_tree_allreduce.cc (and small enough to test on its own).
//
// Tree A over nodes i = 0..m-1 numbers them v = i+1 and uses the in-order binary tree in which
// v's level is its lowest set bit: odd v are leaves, the root is the largest power of two
// R <= m. In the complete tree over 1..2R-1 the parent of v (lowest bit b) is v-b when bit 2b is
// set and v+b otherwise; numbers above m do not exist, so a node's parent is its nearest
// existing ancestor, which leaves every node at most two children.
//
// Tree B makes leaves of A interior: for even m it mirrors A (i -> m-1-i maps the even i,
// interior in A, to odd positions); for odd m mirroring would map the middle onto itself, so B
// is A shifted by one node (i -> i+1 mod m) instead. Every node is then interior in at most one
// of the trees except, for odd m, about one node — so each node sends and receives each half of
// the data about once per phase, which is what makes the two trees together bandwidth-optimal.
// (The rule follows the published description of NCCL's trees, written here from scratch.)
#include "algorithms/tree/tree.h"

namespace chorus::algo {

namespace {

NodeTree inOrderTree(int m) {
  NodeTree t;
  t.parent.assign(static_cast<size_t>(m), -1);
  t.children.assign(static_cast<size_t>(m), {});
  int top = 1;
  while (top * 2 <= m) top *= 2;
  t.root = top - 1;
  for (int v = 1; v <= m; ++v) {
    if (v == top) continue;
    int u = v;
    while (true) {
      const int b = u & -u;
      u = (u & (2 * b)) ? u - b : u + b;
      if (u <= m) break;
    }
    t.parent[static_cast<size_t>(v - 1)] = u - 1;
  }
  return t;
}

// Tree `a` with node i renamed map(i).
template <typename Map>
NodeTree renamed(const NodeTree& a, int m, Map map) {
  NodeTree t;
  t.parent.assign(static_cast<size_t>(m), -1);
  t.children.assign(static_cast<size_t>(m), {});
  t.root = map(a.root);
  for (int i = 0; i < m; ++i) {
    const int p = a.parent[static_cast<size_t>(i)];
    t.parent[static_cast<size_t>(map(i))] = p < 0 ? -1 : map(p);
  }
  return t;
}

void fillChildren(NodeTree& t) {
  for (size_t i = 0; i < t.parent.size(); ++i)
    if (t.parent[i] >= 0) t.children[static_cast<size_t>(t.parent[i])].push_back(static_cast<int>(i));
}

}  // namespace

std::array<NodeTree, 2> doubleBinaryTree(int m) {
  NodeTree a = inOrderTree(m);
  NodeTree b = m % 2 == 0 ? renamed(a, m, [m](int i) { return m - 1 - i; })
                          : renamed(a, m, [m](int i) { return (i + 1) % m; });
  fillChildren(a);
  fillChildren(b);
  return {std::move(a), std::move(b)};
}

}  // namespace chorus::algo
