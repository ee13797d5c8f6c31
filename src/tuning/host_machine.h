// A host's System as the self-sizing sees it (cost::MachineDesc, src/cost/machine.h).
#pragma once

#include "src/cost/machine.h"
#include "src/topology/system.h"

namespace chorus::tune {

/// The smallest known L2 and L3 over `system`'s CPU nodes (0: no CPU node knows one; sizes are
/// the kernel's figures, docs/topology.md), with `ranksOnHost`.
cost::MachineDesc machineOf(const topo::System& system, int ranksOnHost);

}  // namespace chorus::tune
