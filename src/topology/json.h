// A System saved as JSON and loaded back exactly: the "chorus-topology" format, version 1.
//
//   {
//     "format": "chorus-topology",
//     "version": 1,
//     "comment": "optional free text, ignored when loading",
//     "host": {"name": "node17", "id": "0x0123456789abcdef"},
//     "nodes": [
//       {"name": "cpu0", "type": "cpu", "numa": 0, "cpus": "0-15,32-47", "cores": 16},
//       {"name": "0000:17:00.0", "type": "nic", "parent": "cpu0", "busId": "0000:17:00.0",
//        "pciClass": "0x020000", "pcieGen": 3, "pcieWidth": 8, "numa": 0,
//        "netDevice": "eth0", "nicKind": "ethernet", "speedGbps": 25.0}
//     ],
//     "links": [
//       {"a": "cpu0", "b": "0000:17:00.0", "type": "pcie", "bandwidthGBps": 7.88,
//        "latencyUs": 0.25}
//     ]
//   }
//
// Nodes, in index order (the order is kept, so indices survive a round trip). Only `name` and
// `type` are required; a missing field takes the default of struct Node (system.h), and the
// writer leaves out every field that has its default:
//   name               unique within the file
//   type               cpu | pci | gpu | nic | nvswitch | pcidev
//   parent             the name of the node above in the PCI tree
//   busId              "dddd:bb:dd.f"
//   pciClass, vendor, device   hex strings ("0x030200", "0x10de") or plain numbers
//   pcieGen, pcieWidth, numa, cores, cudaDevice, computeCapability, port   integers
//   cpus               a CPU list in the kernel's notation, "0-3,8,10-11" (written in the
//                      vector's own order, so any order round-trips)
//   l2Bytes, l3Bytes   integers (bytes)
//   cpuVendor, cpuModel, netDevice   strings
//   nicKind            ethernet | infiniband | roce | unknown
//   speedGbps          number (Gb/s)
//   linkUp             boolean
// Links, in index order; every link is listed (a parent does not imply a link):
//   a, b               node names
//   type               pcie | nvlink | sys | net
//   bandwidthGBps      GB/s, one direction, all lanes together; required
//   latencyUs          µs; required
//   count              bundled NVLinks, default 1
// Host: `name` (string) and `id` (a 64-bit hex string, or a number), both optional.
//
// Loading is strict: an unknown field, another format or version, a wrong type or a name that
// does not resolve is an error naming the element ("nodes[3].busId: expected a string"), and the
// result must pass System::validate(). Doubles are written in their shortest exact form.
#pragma once

#include <string>
#include <string_view>

#include "src/base/status.h"
#include "src/topology/system.h"

namespace chorus::topo {

inline constexpr std::string_view kJsonFormat = "chorus-topology";
inline constexpr int kJsonVersion = 1;

// One node and one link per line. Exact for a System that passes validate().
std::string toJson(const System& system);
StatusOr<System> fromJson(std::string_view text);

// Files: errors name the path.
StatusOr<System> loadJsonFile(const std::string& path);
Status saveJsonFile(const System& system, const std::string& path);

}  // namespace chorus::topo
