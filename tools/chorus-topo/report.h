// The human-readable report of chorus-topo: host, detectors, NUMA nodes, devices, and the
// device-to-device path matrix in the manner of `nvidia-smi topo -m`.
#pragma once

#include <string>
#include <vector>

#include "src/topology/detect.h"
#include "src/topology/system.h"

namespace chorus::topo_tool {

// `source` says where the System came from ("detected on this host", "file X", ...);
// `detectors` is empty when it was not detected.
std::string formatReport(const topo::System& system, const std::string& source,
                         const std::vector<topo::DetectorReport>& detectors);

// "48 KiB", "1 MiB", "32 MiB", "-" for 0.
std::string formatBytes(uint64_t bytes);

// The matrix cell for a path from a to b: "X" on the diagonal, "NV<n>" for n direct NVLinks,
// else the path type (NVL, NVB, PIX, PXB, PHB, SYS, NET, DIS).
std::string pathCell(const topo::System& system, int a, int b);

}  // namespace chorus::topo_tool
