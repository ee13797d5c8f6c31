// The system model: what one host is made of, as a typed graph.
//
// Nodes are the host's CPU packages / NUMA nodes, PCI switches and bridges, GPUs, NICs and
// NVSwitches. The PCI hierarchy is a tree (each device's `parent` is the switch or CPU it hangs
// from); NVLinks, the CPU interconnect and NIC ports are extra links. Every link carries a
// bandwidth (GB/s, one direction) and a latency (µs).
//
// Paths between two devices are classified with NCCL's vocabulary, so users who know
// `nvidia-smi topo -m` and NCCL_P2P_LEVEL read them at once:
//
//   LOC  the same device
//   NVL  an NVLink, direct or through NVSwitches
//   NVB  NVLink through one intermediate GPU
//   PIX  at most one PCIe switch between them
//   PXB  several PCIe switches, without crossing a CPU's host bridge
//   PHB  through the host bridge of one CPU (same NUMA node)
//   SYS  across the CPU interconnect (another socket / NUMA node)
//   NET  across the network (another host)
//   DIS  no path (disconnected graph, or one end unknown)
//
// Detectors (detect.h) fill a System; files (json.h, nccl_xml.h) load and save one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "src/base/status.h"

namespace chorus::topo {

enum class NodeType : uint8_t { kCpu, kPciSwitch, kGpu, kNic, kNvSwitch, kOtherPci };
enum class LinkType : uint8_t { kPcie, kNvLink, kCpuInterconnect, kNetwork };
enum class PathType : uint8_t { kLoc, kNvl, kNvb, kPix, kPxb, kPhb, kSys, kNet, kDis };
enum class NicKind : uint8_t { kEthernet, kInfiniBand, kRoce, kUnknown };

std::string_view nodeTypeName(NodeType t);  // "cpu", "pci", "gpu", "nic", "nvswitch", "pcidev"
std::string_view linkTypeName(LinkType t);  // "pcie", "nvlink", "sys", "net"
std::string_view pathTypeName(PathType t);  // "LOC", "NVL", ... as above
std::string_view nicKindName(NicKind k);    // "ethernet", "infiniband", "roce", "unknown"
StatusOr<NodeType> parseNodeType(std::string_view s);
StatusOr<PathType> parsePathType(std::string_view s);
StatusOr<NicKind> parseNicKind(std::string_view s);
StatusOr<LinkType> parseLinkType(std::string_view s);

// Bandwidth of a PCIe link in GB/s per direction, after encoding (gen 1–2: 8b/10b, gen 3+:
// 128b/130b); 0 for an unknown generation or width.
double pcieGBps(int gen, int width);
// The PCIe generation of a transfer rate in GT/s (2.5 -> 1, 5 -> 2, 8 -> 3, 16 -> 4, 32 -> 5,
// 64 -> 6); 0 when it matches none.
int pcieGenOfGTs(double gts);

struct Node {
  NodeType type = NodeType::kOtherPci;
  std::string name;   // stable and unique within the system: "cpu0", "0000:3b:00.0", "mlx5_0"
  int parent = -1;    // PCI tree: the switch or CPU above; -1 for a CPU
  // PCI identity, when the node is a PCI function or bridge.
  std::string busId;  // "dddd:bb:dd.f", lower case; "" when not on PCI (CPUs)
  uint32_t pciClass = 0;  // 24-bit class code, e.g. 0x030200 (3D controller), 0x020700 (IB)
  uint16_t vendor = 0, device = 0;
  int pcieGen = 0, pcieWidth = 0;  // of the link to the parent; 0 when unknown
  // NUMA: for a CPU node its NUMA id; for a device the NUMA node it is attached to (-1 unknown).
  int numa = -1;
  // CPU node: its logical CPUs, physical core count, cache sizes (bytes, 0 when unknown).
  std::vector<int> cpus;
  int cores = 0;
  uint64_t l2Bytes = 0, l3Bytes = 0;
  std::string cpuVendor, cpuModel;
  // GPU: CUDA device index (-1 unknown), compute capability as 90 for 9.0.
  int cudaDevice = -1;
  int computeCapability = 0;
  // NIC: interface or HCA name, port, kind, speed (Gb/s, 0 unknown), whether the link is up.
  std::string netDevice;
  int port = 0;
  NicKind nicKind = NicKind::kUnknown;
  double speedGbps = 0;
  bool linkUp = true;

  bool operator==(const Node&) const = default;
};

struct Link {
  int a = -1, b = -1;  // node indices; links are symmetric
  LinkType type = LinkType::kPcie;
  double bandwidthGBps = 0;  // one direction, all lanes/links together
  double latencyUs = 0;
  int count = 1;  // NVLink: number of links bundled here

  bool operator==(const Link&) const = default;
};

struct Path {
  PathType type = PathType::kDis;
  double bandwidthGBps = 0;  // the bottleneck: the slowest link on the path
  double latencyUs = 0;      // the sum over the path
  std::vector<int> nodes;    // from one end to the other, both included
};
// Path details:
// - LOC has no link: bandwidth +infinity, latency 0, nodes {a}. DIS: bandwidth 0, no nodes.
// - NVL through NVSwitches: each connected set of NVSwitches is one fabric (NCCL merges them
//   all) carrying min(a's NVLinks into it, b's NVLinks into it); the path's bandwidth is the sum
//   over the fabrics both reach plus any direct NVLinks between a and b (separate switches, as in
//   a DGX, add up). `nodes` lists one route, through the widest fabric.
// - NVB is a GPU-to-GPU route over direct NVLinks through one other GPU (the widest such).
// - PIX/PXB count the PCI switches strictly between the two ends on the tree route; a NIC port
//   hanging from its PCI function does not count.
// - SYS follows the kCpuInterconnect links between the two CPUs (fewest hops); without such a
//   route the path is DIS, so importers call connectCpus().
// - kNetwork links are never followed: NET is for paths between hosts, not within a System.

class System {
 public:
  // Adds a node; returns its index. Names must be unique (kInvalidArgument otherwise), and so
  // must non-empty bus ids. Both are indexed here: do not change them later through node(i).
  StatusOr<int> addNode(Node n);
  // Adds a link between two existing nodes. A link from a node to itself is refused.
  Status addLink(Link l);
  // Links a device to its PCI parent with the PCIe bandwidth of (gen, width) (or `fallbackGBps`
  // when either is unknown) and sets `parent`. Refused when the child already has a parent, is a
  // CPU, or is an ancestor of `parent`.
  Status attach(int child, int parent, double fallbackGBps = 0);
  // Adds a kCpuInterconnect link (defaults:: bandwidth and latency) between every two CPU nodes
  // that no chain of such links joins yet; returns how many it added. Importers call it before
  // validate() when their file does not describe the interconnect.
  int connectCpus();

  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Link>& links() const { return links_; }
  const Node& node(int i) const { return nodes_[static_cast<size_t>(i)]; }
  Node& node(int i) { return nodes_[static_cast<size_t>(i)]; }
  int find(std::string_view name) const;          // -1 when absent
  int findBusId(std::string_view busId) const;    // -1 when absent
  std::vector<int> ofType(NodeType t) const;      // in insertion order
  std::vector<int> linksOf(int node) const;       // indices into links()
  // The CPU node a device hangs from (following `parent`), or -1.
  int cpuOf(int node) const;

  // Classifies the path between two nodes of this host and finds its bottleneck.
  Path path(int a, int b) const;

  // Checks the invariants: parents exist and form a tree, links name existing nodes, bandwidths
  // are finite and non-negative. Importers call it last.
  // Also: names non-empty and unique, bus ids unique, a CPU has no parent, every parent is joined
  // to its child by a kPcie link and every kPcie link joins a child to its parent, CPU
  // interconnect links join CPUs, NVLink counts >= 1, PCIe gen 0-16 and width 0-32, CPU ids
  // >= 0, pciClass within 24 bits, strings valid UTF-8 (so toJson() is exact).
  Status validate() const;

  // Same host, nodes and links (indexes are derived and not compared).
  bool operator==(const System& o) const;

  std::string hostName;
  uint64_t hostId = 0;

 private:
  std::vector<Node> nodes_;
  std::vector<Link> links_;
  std::vector<std::vector<int>> adjacency_;  // per node: indices into links_
  std::unordered_map<std::string, int> byName_, byBusId_;
};

// Reads a whole topology file (JSON or XML) into memory; refuses files over `maxBytes`. Errors
// name the file.
StatusOr<std::string> readTopologyFile(const std::string& path, size_t maxBytes = 64u << 20);

// Constants for links the files do not describe (one table: src/topology/system.cc).
namespace defaults {
double cpuInterconnectGBps(std::string_view cpuVendor);  // between two CPU nodes
double nvlinkGBps(int computeCapability);                // one NVLink, one direction
double pcieLatencyUs();
double nvlinkLatencyUs();
double cpuInterconnectLatencyUs();
double unknownPcieGBps();  // a PCIe link whose generation or width is unknown
}  // namespace defaults

}  // namespace chorus::topo
