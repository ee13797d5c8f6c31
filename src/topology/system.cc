#include "src/topology/system.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <unordered_set>

namespace chorus::topo {
namespace {

// ---- The constants table ---------------------------------------------------------------------
// Every number the model assumes for a link no file or detector measured. Sustained figures for
// one direction, in the spirit of NCCL's tables, not the marketing peak.

// Between two CPU packages or NUMA nodes of one host, by CPUID vendor string. Intel: 2-4 UPI
// links; AMD: xGMI / Infinity Fabric between sockets. What one stream of copies sustains across
// the link is far below the sum of the link peaks, hence these round figures.
struct VendorBandwidth {
  std::string_view vendor;
  double gbps;
};
constexpr VendorBandwidth kCpuInterconnect[] = {
    {"GenuineIntel", 40.0},
    {"AuthenticAMD", 50.0},
    {"HygonGenuine", 40.0},
};
constexpr double kCpuInterconnectUnknownGBps = 20.0;

// One NVLink, one direction, by the GPU generation that carries it: NVLink 1 (P100) 20 GB/s,
// NVLink 2-4 (V100, A100, H100) 25 GB/s, NVLink 5 (B100/B200) 50 GB/s.
constexpr double kNvlinkGBpsSm60 = 20.0;
constexpr double kNvlinkGBpsSm70 = 25.0;
constexpr double kNvlinkGBpsSm100 = 50.0;

// One hop's latency. They matter only relative to each other and to the transports' software
// overheads (microseconds), so they are order-of-magnitude figures.
constexpr double kPcieLatencyUs = 0.25;
constexpr double kNvlinkLatencyUs = 0.15;
constexpr double kCpuInterconnectLatencyUs = 0.1;

// A PCIe link of unknown generation or width is taken as gen3 x16, the common case for the
// devices that matter here (GPUs, NICs) when sysfs or a file says nothing.
constexpr int kUnknownPcieGen = 3;
constexpr int kUnknownPcieWidth = 16;

// Transfer rate (GT/s) and encoding efficiency of each PCIe generation. Gen 6 uses PAM4 with
// FLIT encoding; 128/130 is close enough for a model.
struct PcieGeneration {
  double gts;
  double efficiency;
};
constexpr PcieGeneration kPcie[] = {
    {2.5, 8.0 / 10.0},   {5.0, 8.0 / 10.0},   {8.0, 128.0 / 130.0},
    {16.0, 128.0 / 130.0}, {32.0, 128.0 / 130.0}, {64.0, 128.0 / 130.0},
};
constexpr int kMaxPcieWidth = 32;

// ---- Names -----------------------------------------------------------------------------------

constexpr std::string_view kNodeTypeNames[] = {"cpu", "pci", "gpu", "nic", "nvswitch", "pcidev"};
constexpr std::string_view kLinkTypeNames[] = {"pcie", "nvlink", "sys", "net"};
constexpr std::string_view kPathTypeNames[] = {"LOC", "NVL", "NVB", "PIX", "PXB",
                                               "PHB", "SYS", "NET", "DIS"};
constexpr std::string_view kNicKindNames[] = {"ethernet", "infiniband", "roce", "unknown"};

template <typename E, size_t N>
std::string_view nameOf(const std::string_view (&names)[N], E value) {
  auto i = static_cast<size_t>(value);
  return i < N ? names[i] : std::string_view("?");
}

template <typename E, size_t N>
StatusOr<E> parseName(const std::string_view (&names)[N], std::string_view s, const char* what) {
  for (size_t i = 0; i < N; ++i)
    if (names[i] == s) return static_cast<E>(i);
  std::string expected;
  for (size_t i = 0; i < N; ++i) {
    if (i) expected += ", ";
    expected += names[i];
  }
  return invalidArgument("unknown " + std::string(what) + " '" + std::string(s) +
                         "' (expected one of " + expected + ")");
}

// Strict UTF-8 (no overlong forms, no surrogates, at most U+10FFFF): what a JSON writer accepts.
bool validUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int extra;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
      extra = 1;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      extra = 2;
      cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + static_cast<size_t>(extra) >= s.size()) return false;
    for (int k = 1; k <= extra; ++k) {
      auto cc = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if ((extra == 2 && cp < 0x800) || (extra == 3 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += static_cast<size_t>(extra) + 1;
  }
  return true;
}

bool finiteNonNegative(double v) { return std::isfinite(v) && v >= 0; }

std::string quoted(const Node& n) { return "node '" + n.name + "'"; }

}  // namespace

std::string_view nodeTypeName(NodeType t) { return nameOf(kNodeTypeNames, t); }
std::string_view linkTypeName(LinkType t) { return nameOf(kLinkTypeNames, t); }
std::string_view pathTypeName(PathType t) { return nameOf(kPathTypeNames, t); }
std::string_view nicKindName(NicKind k) { return nameOf(kNicKindNames, k); }

StatusOr<NodeType> parseNodeType(std::string_view s) {
  return parseName<NodeType>(kNodeTypeNames, s, "node type");
}
StatusOr<PathType> parsePathType(std::string_view s) {
  return parseName<PathType>(kPathTypeNames, s, "path type");
}
StatusOr<NicKind> parseNicKind(std::string_view s) {
  return parseName<NicKind>(kNicKindNames, s, "NIC kind");
}
StatusOr<LinkType> parseLinkType(std::string_view s) {
  return parseName<LinkType>(kLinkTypeNames, s, "link type");
}

double pcieGBps(int gen, int width) {
  constexpr int kGenerations = static_cast<int>(std::size(kPcie));
  if (gen < 1 || gen > kGenerations || width < 1 || width > kMaxPcieWidth) return 0;
  const PcieGeneration& g = kPcie[gen - 1];
  return g.gts * g.efficiency / 8.0 * width;
}

int pcieGenOfGTs(double gts) {
  if (!std::isfinite(gts)) return 0;
  for (size_t i = 0; i < std::size(kPcie); ++i)
    if (std::fabs(gts - kPcie[i].gts) <= 0.05 * kPcie[i].gts) return static_cast<int>(i) + 1;
  return 0;
}

namespace defaults {
double cpuInterconnectGBps(std::string_view cpuVendor) {
  for (const auto& v : kCpuInterconnect)
    if (v.vendor == cpuVendor) return v.gbps;
  return kCpuInterconnectUnknownGBps;
}
double nvlinkGBps(int computeCapability) {
  if (computeCapability >= 100) return kNvlinkGBpsSm100;
  if (computeCapability >= 60 && computeCapability < 70) return kNvlinkGBpsSm60;
  return kNvlinkGBpsSm70;  // also the guess when the GPU generation is unknown
}
double pcieLatencyUs() { return kPcieLatencyUs; }
double nvlinkLatencyUs() { return kNvlinkLatencyUs; }
double cpuInterconnectLatencyUs() { return kCpuInterconnectLatencyUs; }
double unknownPcieGBps() { return pcieGBps(kUnknownPcieGen, kUnknownPcieWidth); }
}  // namespace defaults

// ---- Building ----------------------------------------------------------------------------------

StatusOr<int> System::addNode(Node n) {
  if (n.name.empty()) return invalidArgument("a topology node needs a name");
  if (byName_.count(n.name))
    return invalidArgument("two topology nodes are named '" + n.name + "'");
  if (!n.busId.empty() && byBusId_.count(n.busId))
    return invalidArgument("node '" + n.name + "' has bus id " + n.busId + ", already used by node '" +
                           nodes_[static_cast<size_t>(byBusId_[n.busId])].name + "'");
  int index = static_cast<int>(nodes_.size());
  byName_.emplace(n.name, index);
  if (!n.busId.empty()) byBusId_.emplace(n.busId, index);
  nodes_.push_back(std::move(n));
  adjacency_.emplace_back();
  return index;
}

Status System::addLink(Link l) {
  int n = static_cast<int>(nodes_.size());
  if (l.a < 0 || l.a >= n || l.b < 0 || l.b >= n)
    return invalidArgument("link " + std::to_string(l.a) + "-" + std::to_string(l.b) +
                           " names a node that does not exist (" + std::to_string(n) + " nodes)");
  if (l.a == l.b) return invalidArgument("link from " + quoted(node(l.a)) + " to itself");
  if (!finiteNonNegative(l.bandwidthGBps) || !finiteNonNegative(l.latencyUs))
    return invalidArgument("link " + node(l.a).name + " - " + node(l.b).name +
                           ": bandwidth and latency must be finite and non-negative");
  if (l.count < 1)
    return invalidArgument("link " + node(l.a).name + " - " + node(l.b).name +
                           ": count must be at least 1");
  int index = static_cast<int>(links_.size());
  adjacency_[static_cast<size_t>(l.a)].push_back(index);
  adjacency_[static_cast<size_t>(l.b)].push_back(index);
  links_.push_back(l);
  return Status();
}

Status System::attach(int child, int parent, double fallbackGBps) {
  int n = static_cast<int>(nodes_.size());
  if (child < 0 || child >= n || parent < 0 || parent >= n)
    return invalidArgument("attach(" + std::to_string(child) + ", " + std::to_string(parent) +
                           "): no such node (" + std::to_string(n) + " nodes)");
  Node& c = node(child);
  if (child == parent) return invalidArgument("cannot attach " + quoted(c) + " to itself");
  if (c.type == NodeType::kCpu)
    return invalidArgument("cannot attach CPU " + quoted(c) + " below " + quoted(node(parent)));
  if (c.parent >= 0)
    return invalidArgument(quoted(c) + " is already attached below " +
                           (c.parent < n ? quoted(node(c.parent)) : std::to_string(c.parent)));
  // The child has no parent yet, so a cycle appears only if it is above `parent`.
  int steps = 0;
  for (int up = parent; up >= 0 && up < n && steps <= n; up = node(up).parent, ++steps)
    if (up == child)
      return invalidArgument("cannot attach " + quoted(c) + " below its own descendant " +
                             quoted(node(parent)));
  double bw = pcieGBps(c.pcieGen, c.pcieWidth);
  if (bw <= 0) bw = fallbackGBps;
  Link l;
  l.a = parent;
  l.b = child;
  l.type = LinkType::kPcie;
  l.bandwidthGBps = bw;
  l.latencyUs = defaults::pcieLatencyUs();
  CHORUS_RETURN_IF_ERROR(addLink(l));
  c.parent = parent;
  return Status();
}

int System::connectCpus() {
  std::vector<int> cpus = ofType(NodeType::kCpu);
  // Components of the CPU interconnect graph, by union-find over CPU node indices.
  std::unordered_map<int, int> root;
  for (int c : cpus) root[c] = c;
  auto findRoot = [&root](int x) {
    while (root[x] != x) {
      root[x] = root[root[x]];
      x = root[x];
    }
    return x;
  };
  for (const Link& l : links_) {
    if (l.type != LinkType::kCpuInterconnect || !root.count(l.a) || !root.count(l.b)) continue;
    root[findRoot(l.a)] = findRoot(l.b);
  }
  std::vector<int> component(cpus.size());
  for (size_t i = 0; i < cpus.size(); ++i) component[i] = findRoot(cpus[i]);
  int added = 0;
  for (size_t i = 0; i < cpus.size(); ++i) {
    for (size_t j = i + 1; j < cpus.size(); ++j) {
      if (component[i] == component[j]) continue;
      const Node& a = node(cpus[i]);
      const Node& b = node(cpus[j]);
      Link l;
      l.a = cpus[i];
      l.b = cpus[j];
      l.type = LinkType::kCpuInterconnect;
      l.bandwidthGBps = std::min(defaults::cpuInterconnectGBps(a.cpuVendor),
                                 defaults::cpuInterconnectGBps(b.cpuVendor));
      l.latencyUs = defaults::cpuInterconnectLatencyUs();
      if (addLink(l).ok()) ++added;
    }
  }
  return added;
}

// ---- Queries -----------------------------------------------------------------------------------

int System::find(std::string_view name) const {
  auto it = byName_.find(std::string(name));
  return it == byName_.end() ? -1 : it->second;
}

int System::findBusId(std::string_view busId) const {
  if (busId.empty()) return -1;
  auto it = byBusId_.find(std::string(busId));
  return it == byBusId_.end() ? -1 : it->second;
}

std::vector<int> System::ofType(NodeType t) const {
  std::vector<int> out;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].type == t) out.push_back(static_cast<int>(i));
  return out;
}

std::vector<int> System::linksOf(int n) const {
  if (n < 0 || static_cast<size_t>(n) >= adjacency_.size()) return {};
  return adjacency_[static_cast<size_t>(n)];
}

int System::cpuOf(int n) const {
  int count = static_cast<int>(nodes_.size());
  for (int steps = 0; n >= 0 && n < count && steps <= count; ++steps) {
    if (node(n).type == NodeType::kCpu) return n;
    n = node(n).parent;
  }
  return -1;
}

bool System::operator==(const System& o) const {
  return hostName == o.hostName && hostId == o.hostId && nodes_ == o.nodes_ && links_ == o.links_;
}

// ---- Paths ---------------------------------------------------------------------------------------
//
// The classification walks the cheapest kinds first: NVLink (direct or through an NVSwitch
// fabric), NVLink through one GPU, then the PCI tree and the CPU interconnect. Each step looks
// only at the two ends' neighbourhoods and their ancestor chains, so one path costs
// O(degree² + depth), whatever the size of the system.

namespace {

struct Hop {
  double bandwidth = 0;
  double latency = 0;
  bool found = false;
};

// The widest link of `type` between x and y (or the sum over all, for bundled NVLinks).
Hop linkBetween(const System& s, int x, int y, LinkType type, bool sum) {
  Hop h;
  for (int li : s.linksOf(x)) {
    const Link& l = s.links()[static_cast<size_t>(li)];
    if (l.type != type || (l.a == x ? l.b : l.a) != y) continue;
    if (!h.found) {
      h = {l.bandwidthGBps, l.latencyUs, true};
    } else if (sum) {
      h.bandwidth += l.bandwidthGBps;
      h.latency = std::min(h.latency, l.latencyUs);
    } else if (l.bandwidthGBps > h.bandwidth) {
      h = {l.bandwidthGBps, l.latencyUs, true};
    }
  }
  return h;
}

// Fills bandwidth and latency of `p` from its node list, hop by hop, with links of `type`
// (tree hops between a CPU and another CPU use the interconnect).
void accumulate(const System& s, Path* p, LinkType treeType) {
  p->bandwidthGBps = std::numeric_limits<double>::infinity();
  p->latencyUs = 0;
  for (size_t i = 1; i < p->nodes.size(); ++i) {
    int x = p->nodes[i - 1], y = p->nodes[i];
    LinkType t = treeType;
    if (s.node(x).type == NodeType::kCpu && s.node(y).type == NodeType::kCpu)
      t = LinkType::kCpuInterconnect;
    // Search from the child's side of a tree hop: a CPU or switch may have many links.
    if (s.node(y).parent == x) std::swap(x, y);
    Hop h = linkBetween(s, x, y, t, t == LinkType::kNvLink);
    p->bandwidthGBps = std::min(p->bandwidthGBps, h.found ? h.bandwidth : 0.0);
    p->latencyUs += h.latency;
  }
}

// The NVLink part: direct links plus NVSwitch fabrics shared by a and b.
bool nvlinkPath(const System& s, int a, int b, Path* out) {
  Hop direct = linkBetween(s, a, b, LinkType::kNvLink, true);
  // Label the NVSwitch fabrics a reaches, summing a's bandwidth into each.
  std::unordered_map<int, int> fabricOf;  // NVSwitch node -> fabric label
  std::vector<double> intoFabric;         // label -> a's NVLink bandwidth into it
  for (int li : s.linksOf(a)) {
    const Link& l = s.links()[static_cast<size_t>(li)];
    int sw = l.a == a ? l.b : l.a;
    if (l.type != LinkType::kNvLink || s.node(sw).type != NodeType::kNvSwitch || sw == b) continue;
    if (!fabricOf.count(sw)) {
      int label = static_cast<int>(intoFabric.size());
      intoFabric.push_back(0);
      std::deque<int> queue{sw};
      fabricOf[sw] = label;
      while (!queue.empty()) {
        int x = queue.front();
        queue.pop_front();
        for (int lj : s.linksOf(x)) {
          const Link& m = s.links()[static_cast<size_t>(lj)];
          int y = m.a == x ? m.b : m.a;
          if (m.type != LinkType::kNvLink || s.node(y).type != NodeType::kNvSwitch ||
              fabricOf.count(y))
            continue;
          fabricOf[y] = label;
          queue.push_back(y);
        }
      }
    }
    intoFabric[static_cast<size_t>(fabricOf[sw])] += l.bandwidthGBps;
  }
  std::vector<double> fromFabric(intoFabric.size(), 0);
  std::vector<bool> reaches(intoFabric.size(), false);
  for (int li : s.linksOf(b)) {
    const Link& l = s.links()[static_cast<size_t>(li)];
    int sw = l.a == b ? l.b : l.a;
    if (l.type != LinkType::kNvLink || sw == a) continue;
    auto it = fabricOf.find(sw);
    if (it == fabricOf.end()) continue;
    fromFabric[static_cast<size_t>(it->second)] += l.bandwidthGBps;
    reaches[static_cast<size_t>(it->second)] = true;
  }
  double viaFabric = 0;
  int best = -1;
  for (size_t f = 0; f < intoFabric.size(); ++f) {
    if (!reaches[f]) continue;
    double bw = std::min(intoFabric[f], fromFabric[f]);
    viaFabric += bw;
    if (best < 0 || bw > std::min(intoFabric[static_cast<size_t>(best)],
                                  fromFabric[static_cast<size_t>(best)]))
      best = static_cast<int>(f);
  }
  if (!direct.found && best < 0) return false;

  out->type = PathType::kNvl;
  if (direct.found) {
    out->nodes = {a, b};
    out->latencyUs = direct.latency;
  } else {
    // One route through fabric `best`: breadth-first from a's switches to one of b's.
    std::unordered_map<int, int> from;  // switch -> previous switch (-1 for a start)
    std::deque<int> queue;
    for (int li : s.linksOf(a)) {
      const Link& l = s.links()[static_cast<size_t>(li)];
      int sw = l.a == a ? l.b : l.a;
      auto it = fabricOf.find(sw);
      if (l.type == LinkType::kNvLink && it != fabricOf.end() && it->second == best &&
          !from.count(sw)) {
        from[sw] = -1;
        queue.push_back(sw);
      }
    }
    int end = -1;
    while (!queue.empty() && end < 0) {
      int x = queue.front();
      queue.pop_front();
      if (linkBetween(s, x, b, LinkType::kNvLink, false).found) {
        end = x;
        break;
      }
      for (int lj : s.linksOf(x)) {
        const Link& m = s.links()[static_cast<size_t>(lj)];
        int y = m.a == x ? m.b : m.a;
        if (m.type != LinkType::kNvLink || s.node(y).type != NodeType::kNvSwitch || from.count(y))
          continue;
        from[y] = x;
        queue.push_back(y);
      }
    }
    std::vector<int> route;
    for (int x = end; x >= 0; x = from[x]) route.push_back(x);
    out->nodes = {a};
    out->nodes.insert(out->nodes.end(), route.rbegin(), route.rend());
    out->nodes.push_back(b);
    out->latencyUs = 0;
    for (size_t i = 1; i < out->nodes.size(); ++i)
      out->latencyUs += linkBetween(s, out->nodes[i - 1], out->nodes[i], LinkType::kNvLink, true)
                            .latency;
  }
  out->bandwidthGBps = (direct.found ? direct.bandwidth : 0) + viaFabric;
  return true;
}

// NVLink from GPU a to GPU b through one other GPU: the widest such route.
bool nvlinkBridgePath(const System& s, int a, int b, Path* out) {
  double bestBw = -1;
  int bestVia = -1;
  for (int li : s.linksOf(a)) {
    const Link& l = s.links()[static_cast<size_t>(li)];
    int g = l.a == a ? l.b : l.a;
    if (l.type != LinkType::kNvLink || g == b || s.node(g).type != NodeType::kGpu) continue;
    Hop first = linkBetween(s, a, g, LinkType::kNvLink, true);
    Hop second = linkBetween(s, g, b, LinkType::kNvLink, true);
    if (!second.found) continue;
    double bw = std::min(first.bandwidth, second.bandwidth);
    if (bw > bestBw) {
      bestBw = bw;
      bestVia = g;
    }
  }
  if (bestVia < 0) return false;
  out->type = PathType::kNvb;
  out->nodes = {a, bestVia, b};
  accumulate(s, out, LinkType::kNvLink);
  return true;
}

// The chain from x up to its root (x first). False when the chain is broken (a parent index out
// of range or a cycle), which validate() would report.
bool ancestors(const System& s, int x, std::vector<int>* chain) {
  int n = static_cast<int>(s.nodes().size());
  chain->clear();
  while (x >= 0) {
    if (x >= n || static_cast<int>(chain->size()) > n) return false;
    chain->push_back(x);
    x = s.node(x).parent;
  }
  return true;
}

// Fewest-hop route between two CPUs over interconnect links (both ends included), or empty.
std::vector<int> cpuRoute(const System& s, int from, int to) {
  std::unordered_map<int, int> prev{{from, -1}};
  std::deque<int> queue{from};
  while (!queue.empty()) {
    int x = queue.front();
    queue.pop_front();
    if (x == to) break;
    for (int li : s.linksOf(x)) {
      const Link& l = s.links()[static_cast<size_t>(li)];
      int y = l.a == x ? l.b : l.a;
      if (l.type != LinkType::kCpuInterconnect || prev.count(y)) continue;
      prev[y] = x;
      queue.push_back(y);
    }
  }
  if (!prev.count(to)) return {};
  std::vector<int> route;
  for (int x = to; x >= 0; x = prev[x]) route.push_back(x);
  std::reverse(route.begin(), route.end());
  return route;
}

bool treePath(const System& s, int a, int b, Path* out) {
  std::vector<int> up, down;
  if (!ancestors(s, a, &up) || !ancestors(s, b, &down)) return false;
  int rootA = up.back(), rootB = down.back();
  if (rootA == rootB) {
    // Lowest common ancestor: strip the common tail of both chains.
    size_t i = up.size(), j = down.size();
    while (i > 0 && j > 0 && up[i - 1] == down[j - 1]) --i, --j;
    int lca = up[i];
    out->nodes.assign(up.begin(), up.begin() + static_cast<long>(i) + 1);
    out->nodes.insert(out->nodes.end(), down.rend() - static_cast<long>(j), down.rend());
    if (s.node(lca).type == NodeType::kCpu) {
      out->type = PathType::kPhb;
    } else {
      int switches = 0;
      for (size_t k = 1; k + 1 < out->nodes.size(); ++k)
        if (s.node(out->nodes[k]).type == NodeType::kPciSwitch) ++switches;
      out->type = switches <= 1 ? PathType::kPix : PathType::kPxb;
    }
  } else {
    if (s.node(rootA).type != NodeType::kCpu || s.node(rootB).type != NodeType::kCpu) return false;
    std::vector<int> route = cpuRoute(s, rootA, rootB);
    if (route.empty()) return false;
    out->type = PathType::kSys;
    out->nodes = up;
    out->nodes.insert(out->nodes.end(), route.begin() + 1, route.end() - 1);
    out->nodes.insert(out->nodes.end(), down.rbegin(), down.rend());
  }
  accumulate(s, out, LinkType::kPcie);
  return true;
}

}  // namespace

Path System::path(int a, int b) const {
  Path p;
  int n = static_cast<int>(nodes_.size());
  if (a < 0 || a >= n || b < 0 || b >= n) return p;
  if (a == b) {
    p.type = PathType::kLoc;
    p.bandwidthGBps = std::numeric_limits<double>::infinity();
    p.nodes = {a};
    return p;
  }
  if (nvlinkPath(*this, a, b, &p)) return p;
  if (node(a).type == NodeType::kGpu && node(b).type == NodeType::kGpu &&
      nvlinkBridgePath(*this, a, b, &p))
    return p;
  if (treePath(*this, a, b, &p)) return p;
  return Path();
}

// ---- Invariants ------------------------------------------------------------------------------------

Status System::validate() const {
  int n = static_cast<int>(nodes_.size());
  std::unordered_set<std::string_view> names, busIds;
  for (int i = 0; i < n; ++i) {
    const Node& x = node(i);
    std::string where = "node " + std::to_string(i) + " ('" + x.name + "')";
    if (x.name.empty()) return invalidArgument("node " + std::to_string(i) + " has no name");
    if (!names.insert(x.name).second) return invalidArgument(where + ": the name is used twice");
    if (!x.busId.empty() && !busIds.insert(x.busId).second)
      return invalidArgument(where + ": bus id " + x.busId + " is used twice");
    for (const std::string* str : {&x.name, &x.busId, &x.cpuVendor, &x.cpuModel, &x.netDevice})
      if (!validUtf8(*str)) return invalidArgument(where + ": a string is not valid UTF-8");
    if (x.parent < -1 || x.parent >= n)
      return invalidArgument(where + ": parent " + std::to_string(x.parent) + " does not exist");
    if (x.parent == i) return invalidArgument(where + ": is its own parent");
    if (x.type == NodeType::kCpu && x.parent != -1)
      return invalidArgument(where + ": a CPU cannot have a parent");
    if (x.pciClass > 0xffffff) return invalidArgument(where + ": pciClass exceeds 24 bits");
    if (x.pcieGen < 0 || x.pcieGen > 16)
      return invalidArgument(where + ": pcieGen " + std::to_string(x.pcieGen) + " is out of range");
    if (x.pcieWidth < 0 || x.pcieWidth > kMaxPcieWidth)
      return invalidArgument(where + ": pcieWidth " + std::to_string(x.pcieWidth) +
                             " is out of range");
    if (x.numa < -1) return invalidArgument(where + ": numa must be -1 (unknown) or >= 0");
    for (int c : x.cpus)
      if (c < 0) return invalidArgument(where + ": negative CPU id " + std::to_string(c));
    if (x.cores < 0) return invalidArgument(where + ": negative core count");
    if (!finiteNonNegative(x.speedGbps))
      return invalidArgument(where + ": speed must be finite and non-negative");
    if (x.port < 0) return invalidArgument(where + ": negative port");
  }
  // The PCI tree: colour each chain once, so the whole check is linear.
  std::vector<uint8_t> state(static_cast<size_t>(n), 0);  // 0 new, 1 on the current chain, 2 done
  for (int i = 0; i < n; ++i) {
    std::vector<int> chain;
    int x = i;
    while (x >= 0 && state[static_cast<size_t>(x)] == 0) {
      state[static_cast<size_t>(x)] = 1;
      chain.push_back(x);
      x = node(x).parent;
    }
    if (x >= 0 && state[static_cast<size_t>(x)] == 1)
      return invalidArgument("node " + std::to_string(x) + " ('" + node(x).name +
                             "'): the parent chain loops back to it");
    for (int c : chain) state[static_cast<size_t>(c)] = 2;
  }
  for (int i = 0; i < n; ++i) {
    int p = node(i).parent;
    if (p >= 0 && !linkBetween(*this, i, p, LinkType::kPcie, false).found)
      return invalidArgument("node " + std::to_string(i) + " ('" + node(i).name +
                             "'): no pcie link to its parent '" + node(p).name + "'");
  }
  for (size_t li = 0; li < links_.size(); ++li) {
    const Link& l = links_[li];
    std::string where = "link " + std::to_string(li);
    if (l.a < 0 || l.a >= n || l.b < 0 || l.b >= n)
      return invalidArgument(where + ": names a node that does not exist");
    where += " (" + node(l.a).name + " - " + node(l.b).name + ")";
    if (l.a == l.b) return invalidArgument(where + ": joins a node to itself");
    if (!finiteNonNegative(l.bandwidthGBps))
      return invalidArgument(where + ": bandwidth must be finite and non-negative");
    if (!finiteNonNegative(l.latencyUs))
      return invalidArgument(where + ": latency must be finite and non-negative");
    if (l.count < 1) return invalidArgument(where + ": count must be at least 1");
    if (l.type == LinkType::kPcie && node(l.a).parent != l.b && node(l.b).parent != l.a)
      return invalidArgument(where + ": a pcie link must join a node to its parent");
    if (l.type == LinkType::kCpuInterconnect &&
        (node(l.a).type != NodeType::kCpu || node(l.b).type != NodeType::kCpu))
      return invalidArgument(where + ": a sys link must join two CPUs");
  }
  return Status();
}

// ---- Files ---------------------------------------------------------------------------------------

StatusOr<std::string> readTopologyFile(const std::string& path, size_t maxBytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return errnoStatus("fopen", path);
  std::string text;
  char buf[65536];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) {
    if (text.size() + got > maxBytes) {
      std::fclose(f);
      return invalidArgument(path + ": larger than " + std::to_string(maxBytes) +
                             " bytes, not a topology file");
    }
    text.append(buf, got);
  }
  bool failed = std::ferror(f) != 0;
  int err = errno;
  std::fclose(f);
  if (failed) return errnoStatus("fread", path, err);
  return text;
}

}  // namespace chorus::topo
