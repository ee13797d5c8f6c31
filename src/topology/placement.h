// Where this process runs: the host's System (detected once per process, or loaded from
// CHORUS_TOPO_FILE), the NUMA node of the process's CPU affinity and the NIC nearest to it.
// The communicator puts these in its PeerInfo; all-gathered they become the Layout (layout.h).
#pragma once

#include <string>

#include "src/base/status.h"
#include "src/topology/system.h"

namespace chorus::topo {

// The System of this host, built on first use and kept for the life of the process:
// CHORUS_TOPO_FILE (JSON or NCCL XML, told apart by content) when set, else detectSystem() with
// CHORUS_TOPO_DETECT's options, without the CUDA runtime unless CHORUS_TOPO_DETECT names it. CHORUS_TOPO_DUMP_FILE, when set, receives it as JSON ("%h" in the
// name becomes the host name, "%p" the pid). A bad file or variable is an error (every later call
// returns it too); a detector that cannot run is not.
StatusOr<const System*> processSystem();

// Loads a topology file: NCCL XML when its first non-blank character is '<', else JSON.
StatusOr<System> loadTopologyFile(const std::string& path);

// The NUMA node all CPUs of this process's affinity belong to, or -1 when they span several
// nodes or the node is unknown. Uses the CPU lists of `system`'s CPU nodes.
int currentNumaNode(const System& system);

// Index (among system.ofType(NodeType::kNic)) of the NIC with the best path from NUMA node
// `numa` (PathType first, then bandwidth, then order); -1 when there is no NIC whose link is up.
int nearestNic(const System& system, int numa);

}  // namespace chorus::topo
