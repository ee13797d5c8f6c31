// Tree-shaped algorithms (a chain is the degenerate tree of fan-out one).
//
// Builders return unfinalized schedules (call Schedule::finalize()); see each .cc file for the
// schedule, its alpha-beta cost and when the tuner should pick it.
#pragma once

#include <array>
#include <vector>

#include "algorithms/common/schedule.h"
#include "src/cost/cost_model.h"

namespace chorus::algo {

sched::Schedule buildChainBroadcast(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildChainReduce(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildBinomialBroadcast(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildBinomialReduce(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildRabenseifnerAllReduce(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildRecursiveDoublingAllReduce(const sched::CollDesc& d, int rank, int nranks);
sched::Schedule buildDoubleTreeAllReduce(const sched::CollDesc& d, int rank, int nranks);

// The fold of recursive halving / doubling on a rank count n that need not be a power of two:
// p is the largest power of two <= n and extra = n - p. Among ranks 0..2 extra - 1 each even
// rank hands its whole input to the odd rank above it and sits out until that rank hands back
// the result; the p remaining ranks take new numbers 0..p-1 (odd r < 2 extra: r / 2; others:
// r - extra) and run the power-of-two algorithm.
struct PowerOfTwoFold {
  int p = 1, extra = 0;
  explicit PowerOfTwoFold(int nranks) {
    while (p * 2 <= nranks) p *= 2;
    extra = nranks - p;
  }
  bool sitsOut(int rank) const { return rank < 2 * extra && rank % 2 == 0; }
  bool absorbs(int rank) const { return rank < 2 * extra && rank % 2 == 1; }
  int newRank(int rank) const { return rank < 2 * extra ? rank / 2 : rank - extra; }
  int realRank(int q) const { return q < extra ? 2 * q + 1 : q + extra; }
};

// One node of the binomial tree over n ranks numbered relative to the root (v = 0): its parent
// (-1 at the root) and its children, largest subtree first.
struct BinomialNode {
  int parent = -1;
  std::vector<int> children;
};
BinomialNode binomialNode(int v, int nranks);
// `rank`'s node of the binomial tree rooted at `root`, in real ranks (v = rank - root mod n),
// with its parent and children added to s.peers.
BinomialNode binomialPeers(sched::Schedule& s, int rank, int root, int nranks);

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

// Cost terms of Rabenseifner (halving) and recursive doubling, which share the fold.
cost::Traffic halvingDoublingTraffic(double bytes, const cost::CostInput& in, bool halving);

}  // namespace chorus::algo
