// The layout of a communicator's ranks: which ranks share a host and a NUMA node, the subgroups
// hierarchical algorithms are built from, and the ring order and tree shapes that follow the
// machine instead of the rank numbering.
//
// Input is one RankPlace per rank (what each rank detected about itself, all-gathered at
// communicator creation). Everything here is a pure function of that vector: no I/O, no
// detection, so unit tests build layouts of any shape and chorus-topo shows what a job of
// `--ranks N --ranks-per-host K` would get.
//
// Conventions, fixed so that every rank computes the same answer:
//   - hosts are identified by RankPlace::hostId and ordered by their lowest rank; host index 0
//     holds rank 0; ranks within a host are in rank order; a host's leader is its lowest rank;
//   - local rank = position within the host; NUMA groups are (host, NUMA node) pairs, ordered
//     by their lowest rank; an unknown NUMA node (-1) is a group of its own;
//   - the NVLink domain is the host for now: no detector reports multi-host NVLink fabrics
//     (NVL72-style) yet. When one does, RankPlace grows a domain id and kNvlinkDomain uses it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/status.h"

namespace chorus::topo {

/// Where one rank runs.
struct RankPlace {
  uint64_t hostId = 0;   ///< equal on one host (from boot id + hostname, or CHORUS_HOST_ID)
  int numa = -1;         ///< NUMA node the rank is bound to, -1 unknown
  int gpu = -1;          ///< CUDA device index, -1 none
  int nic = -1;          ///< index of the nearest NIC in the host's System, -1 none
  std::string hostName;  ///< for logs; may be empty
};

/// The subgroups hierarchical algorithms are made of.
enum class GroupKind : uint8_t {
  kHost,          ///< the ranks on the rank's host
  kHostLeaders,   ///< the lowest rank of every host (only leaders are members)
  kRail,          ///< the ranks with the same local rank on every host
  kNuma,          ///< the ranks on the same host and NUMA node
  kNvlinkDomain,  ///< the ranks sharing an NVLink fabric: the host, for now (see the top)
};
std::string_view groupKindName(GroupKind k);  // "host", "host-leaders", "rail", "numa", "nvlink"

/// Colour and key for Communicator::split / chorusCommSplit that build a rank's group: the new
/// communicator's ranks are the group in rank order. color < 0 (CHORUS_SPLIT_NOCOLOR) means the
/// rank belongs to no group of that kind (a non-leader asked for kHostLeaders).
struct SplitSpec {
  int color = -1;
  int key = 0;
};

/// How the ranks of one host hang below their leader in a tree.
enum class TreeShape : uint8_t {
  kChain,   ///< leader -> next -> next ...: pipelines large messages, depth = ranks per host - 1
  kBinary,  ///< heap-ordered binary tree: depth log2(ranks per host)
};

/// A spanning tree over the communicator's ranks.
struct Tree {
  int root = 0;
  std::vector<int> parent;                 ///< per rank; -1 at the root
  std::vector<std::vector<int>> children;  ///< per rank, in the order a broadcast sends to them

  /// Longest root-to-leaf path, in edges.
  int depth() const;
  /// "0->[2 1] 2->[3]": every rank with children, in rank order.
  std::string toString() const;
};

class Layout {
 public:
  /// Builds the layout of ranks 0..places.size()-1. Fails (kInvalidArgument) on an empty
  /// vector, on negative ids other than -1, and when two ranks share a host id but name
  /// different hosts (two machines configured with the same CHORUS_HOST_ID).
  static StatusOr<Layout> make(std::vector<RankPlace> places);

  /// A layout of `nranks` ranks on hosts of `ranksPerHost` consecutive ranks (the last host may
  /// be smaller), NUMA unknown: what `chorus-topo --ranks N --ranks-per-host K` shows.
  static StatusOr<Layout> uniform(int nranks, int ranksPerHost);

  int nranks() const { return static_cast<int>(places_.size()); }
  const RankPlace& place(int rank) const { return places_[idx(rank)]; }

  int numHosts() const { return static_cast<int>(hosts_.size()); }
  /// Ranks of each host, hosts ordered by their lowest rank, ranks in rank order.
  const std::vector<std::vector<int>>& hosts() const { return hosts_; }
  int hostOf(int rank) const { return hostOf_[idx(rank)]; }
  int hostLeader(int host) const { return hosts_[idx(host)].front(); }
  bool sameHost(int a, int b) const { return hostOf(a) == hostOf(b); }
  int localRank(int rank) const { return localRank_[idx(rank)]; }
  /// Number of ranks on `rank`'s host.
  int localSize(int rank) const { return static_cast<int>(hosts_[idx(hostOf(rank))].size()); }
  int minLocalSize() const { return minLocal_; }
  int maxLocalSize() const { return maxLocal_; }
  /// True when every host has the same number of ranks.
  bool uniformHosts() const { return minLocal_ == maxLocal_; }

  /// Number of (host, NUMA node) groups, and the one `rank` is in.
  int numNumaGroups() const { return static_cast<int>(numaGroups_.size()); }
  int numaGroupOf(int rank) const { return numaGroupOf_[idx(rank)]; }

  /// The ranks of `rank`'s group of `kind`, sorted; empty when `rank` is in none (a non-leader
  /// for kHostLeaders).
  std::vector<int> group(GroupKind kind, int rank) const;
  /// The colour and key that build group(kind, rank) with a communicator split.
  SplitSpec split(GroupKind kind, int rank) const;

  /// Ring in which consecutive ranks share a host and, within a host, a NUMA node: hosts in
  /// order, within a host the NUMA groups in order, within a group rank order. Rank 0 is first.
  /// Each host boundary is crossed exactly once per trip around the ring (so a ring over H > 1
  /// hosts crosses H times), each NUMA boundary once.
  const std::vector<int>& ringOrder() const { return ring_; }
  /// The rank after / before `rank` in ringOrder(), wrapping around.
  int ringNext(int rank) const;
  int ringPrev(int rank) const;

  /// A tree rooted at `root` with the fewest inter-host edges (numHosts() - 1): a binary tree
  /// over the host leaders (the root leads its own host; other hosts are led by their lowest
  /// rank; hosts taken in order starting from the root's), and below each leader the rest of
  /// its host as a chain or binary tree in ring order (so NUMA neighbours stay adjacent). A
  /// leader lists its inter-host children before its intra-host ones, so a broadcast starts the
  /// slow links first.
  Tree tree(int root, TreeShape intra = TreeShape::kChain) const;

  /// Two trees over the same ranks for the double binary tree all-reduce (each carries half
  /// the data). Across hosts both are in-order binary trees over the host leaders (in host
  /// order, leader = lowest rank) such that a leader that is interior in one is a leaf in the
  /// other: with an even number of hosts no leader is interior in both; with an odd number
  /// exactly one (host 0) is a leaf in both. The second tree mirrors the first for an even
  /// host count and shifts it by one host for an odd count. Inside each host, `intra` below the
  /// leader, as in tree(). Each tree is rooted where its shape puts the root (not at rank 0);
  /// each has numHosts() - 1 inter-host edges.
  std::array<Tree, 2> doubleBinaryTree(TreeShape intra = TreeShape::kChain) const;

  /// Number of edges of `t` that join ranks on different hosts.
  int crossHostEdges(const Tree& t) const;

  /// Several lines for logs and chorus-topo: hosts with their ranks (and NUMA groups when
  /// known), the ring order with host boundaries marked, and tree(0).
  std::string describe() const;

 private:
  static size_t idx(int i) { return static_cast<size_t>(i); }
  // The host's ranks in ring order, rotated so that `first` comes first.
  std::vector<int> hostRingFrom(int host, int first) const;
  // Links `order[1..]` below `order[0]` in `t` with the given shape.
  static void hangBelow(Tree& t, const std::vector<int>& order, TreeShape shape);

  std::vector<RankPlace> places_;
  std::vector<std::vector<int>> hosts_;
  std::vector<int> hostOf_, localRank_;
  std::vector<std::vector<int>> numaGroups_;  // ranks of each (host, NUMA) group
  std::vector<int> numaGroupOf_;
  std::vector<int> ring_, ringPos_;
  int minLocal_ = 0, maxLocal_ = 0;
};

}  // namespace chorus::topo
