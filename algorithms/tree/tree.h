// Tree-shaped algorithms (a chain is the degenerate tree of fan-out one).
//
// Builders return unfinalized schedules (call Schedule::finalize()); see each .cc file for the
// schedule, its alpha-beta cost and when the tuner should pick it.
#pragma once

#include <array>
#include <vector>

#include "algorithms/common/schedule.h"

namespace chorus::algo {

sched::Schedule buildChainBroadcast(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildChainReduce(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildBinomialBroadcast(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildBinomialReduce(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildRabenseifnerAllReduce(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildRecursiveDoublingAllReduce(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildDoubleTreeAllReduce(const sched::CollDesc& d, int rank, int nranks);

// One node of the binomial tree over n ranks numbered relative to the root (v = 0): its parent
// (-1 at the root) and its children, largest subtree first.
struct BinomialNode {
  int parent = -1;
  std::vector<int> children;
};
BinomialNode binomialNode(int v, int nranks);

// A tree over m nodes 0..m-1: parent per node (-1 at the root), children per node.
struct NodeTree {
  int root = 0;
  std::vector<int> parent;
  std::vector<std::vector<int>> children;
};

// The two complementary binary trees of the double binary tree over m nodes (see
// double_tree.cc): the first is the in-order binary tree given by the lowest set bit of i+1,
// the second its mirror (m even) or its shift by one node (m odd), so that most nodes interior
// in one are leaves in the other. Every node has at most two children in each.
std::array<NodeTree, 2> doubleBinaryTree(int m);

}  // namespace chorus::algo
