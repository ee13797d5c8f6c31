// Import of NCCL's topology XML (the NCCL_TOPO_FILE format) into a System.
//
// What is read:
//   <system version="1">
//     <cpu numaid affinity arch vendor familyid modelid>        one per NUMA node
//       <pci busid class vendor device link_speed link_width>  nested: bridges, then devices
//         <gpu dev sm rank gdr>                                 makes the <pci> a GPU
//           <nvlink target count tclass/>                       to a GPU, NVSwitch or the CPU
//         </gpu>
//         <nic><net name dev speed port .../></nic>             makes the <pci> a NIC; speed Mb/s
//       </pci>
//       <nic><net .../></nic>                                   a NIC known only by name
//     </cpu>
//   </system>
//
// Real files (tests/data/topologies/README.md) often carry GPUs and NICs as bare <pci> elements
// with a class (0x0300xx/0x0302xx GPU, 0x0207xx InfiniBand, 0x0200xx Ethernet, 0x0604xx bridge,
// 0x0680xx NVSwitch), placeholder bridge ids ("ffff:ff:01.0"), and link speeds written as
// "16 GT/s", "32.0 GT/s PCIe" or "". All of that is accepted. An NVLink target that names an
// NVSwitch (tclass 0x068000) not described elsewhere becomes an NVSwitch node; one that names a
// CPU (tclass 0x060000) links the GPU to its own CPU, as NCCL does. Each GPU pair gets one link,
// even when both GPUs list it. CPUs are joined by defaults:: interconnect links.
//
// The XML is parsed by pugixml; the line numbers in messages are computed from its offsets.
//
// Refused, with "line N: <element ...>: what" messages: malformed XML (unclosed or mismatched
// tags, bad attributes, unknown entities, text where none belongs, NUL bytes, DOCTYPE, CDATA),
// nesting deeper than 64, missing or malformed bus ids, duplicate bus ids (a duplicate
// placeholder bridge id is only a warning), negative or absurd numbers (net speed over 10 Tb/s,
// link width over 32, NVLink count over 64), NVLinks to an unknown target or listed twice.
// Unknown PCI classes, unknown elements and other oddities are warnings; so is an NVLink whose
// target is the GPU itself (Azure's NC A100 v4 file has one per GPU, count 12: the links exist,
// their far end is not named), which is left out. Work and memory are linear in the input;
// inputs over 64 MiB or 10^6 elements are refused.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "src/base/status.h"
#include "src/topology/system.h"

namespace chorus::topo {

// Warnings are appended to `warnings` (at most 100, then one line saying how many more), or
// logged at WARN (TOPO) when it is null. The result has passed System::validate().
StatusOr<System> importNcclXml(std::string_view text, std::vector<std::string>* warnings = nullptr);

// The same for a file; errors name the path.
StatusOr<System> importNcclXmlFile(const std::string& path,
                                   std::vector<std::string>* warnings = nullptr);

}  // namespace chorus::topo
