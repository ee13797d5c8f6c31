// Helpers for the cost terms that sit next to every builder (AlgoInfo::traffic): how bytes of
// the common shapes — along a ring, to every peer, to a root — load the intra-host links and the
// host's NIC. See src/cost/cost_model.h for what a Traffic is and how it becomes time.
#pragma once

#include <algorithm>
#include <cmath>

#include "algorithms/common/chunking.h"
#include "src/cost/cost_model.h"

namespace chorus::algo::traffic {

inline double ceilDiv(double a, double b) { return b > 0 ? std::ceil(a / b) : 0; }

// The ring chunk (ringChunkElems) in bytes for slices of `slice`.
inline double ringChunk(double slice, double chunk) {
  const double half = std::ceil(slice / 2);
  return std::min(chunk, std::max(half, static_cast<double>(kMinPipelineChunkBytes)));
}

// Data sent along a ring (or a chain in ring order) on several hosts: each host boundary is
// crossed by one link, so the NIC carries what one link carries.
inline void ringBytes(cost::Traffic& t, double perLink, const cost::CostInput& in) {
  t.bytesIntra = perLink;
  t.bytesNic = in.hosts > 1 ? perLink : 0;
  // A boundary rank sends across and receives from inside its host (or both across when hosts
  // hold one rank each).
  t.interShare = in.hosts > 1 ? (in.ranksPerHost == 1 ? 1.0 : 0.5) : 0;
}

// Data a rank exchanges with every peer directly: its host's ranks share one NIC.
inline void directBytes(cost::Traffic& t, double perPeer, const cost::CostInput& in) {
  const double n = in.nranks, r = in.ranksPerHost;
  t.bytesIntra = (r - 1) * perPeer;
  t.bytesNic = r * (n - r) * perPeer;
  t.interShare = n > 1 ? (n - r) / (n - 1) : 0;
}

// Data one rank (a root) exchanges with every other rank.
inline void rootBytes(cost::Traffic& t, double perPeer, const cost::CostInput& in) {
  const double n = in.nranks, r = in.ranksPerHost;
  t.bytesIntra = (r - 1) * perPeer;
  t.bytesNic = (n - r) * perPeer;
  t.interShare = n > 1 ? (n - r) / (n - 1) : 0;
}

// One notify / wait round with every peer: a hop, n-1 notifies and n-1 waits.
inline void syncRound(cost::Traffic& t, double n) {
  t.hops += 1;
  t.messages += 2 * (n - 1);
  t.waits += n - 1;
}

// Where a hierarchical schedule applies: several hosts of several ranks, all of one size.
inline bool hierarchical(const cost::CostInput& in) {
  return in.hosts > 1 && in.ranksPerHost > 1 && in.equalHosts &&
         in.hosts * in.ranksPerHost == in.nranks;
}

}  // namespace chorus::algo::traffic
