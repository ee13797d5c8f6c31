#include "src/tuning/host_machine.h"

#include <algorithm>

namespace chorus::tune {

cost::MachineDesc machineOf(const topo::System& system, int ranksOnHost) {
  cost::MachineDesc m;
  m.ranksOnHost = ranksOnHost;
  auto smallest = [](uint64_t have, uint64_t v) {
    return v == 0 ? have : have == 0 ? v : std::min(have, v);
  };
  for (int i : system.ofType(topo::NodeType::kCpu)) {
    m.l2Bytes = smallest(m.l2Bytes, system.node(i).l2Bytes);
    m.l3Bytes = smallest(m.l3Bytes, system.node(i).l3Bytes);
  }
  return m;
}

}  // namespace chorus::tune
