// The builder: one System from the Inventory the detectors filled, whoever filled it.
//
// The PCI tree is collapsed the way NCCL's files describe it: the root port under a host bridge
// belongs to the CPU, and a PCIe switch, which sysfs shows as an upstream port with one
// downstream port per slot, becomes one node named after its upstream port. So "GPU and NIC
// under the same switch" reads PIX, as in `nvidia-smi topo -m`, instead of three bridge hops.
// Interfaces and RDMA ports on the same port of a function merge into one NIC; NVLinks are
// bundled per GPU pair. What the builder had to guess goes to `notes` (INFO lines).
#include <algorithm>
#include <map>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

#include "src/topology/detect_internal.h"

namespace chorus::topo::detail {
namespace {

enum class Role : uint8_t { kBridge, kGpu, kNic, kNvSwitch, kOther };

constexpr uint16_t kVendorNvidia = 0x10de, kVendorAmd = 0x1002;

Role roleOf(const PciRecord& r) {
  uint32_t base = r.pciClass >> 16, sub = (r.pciClass >> 8) & 0xff;
  if (base == 0x06 && sub == 0x04) return Role::kBridge;
  if (base == 0x06 && sub == 0x80 && r.vendor == kVendorNvidia) return Role::kNvSwitch;
  // 3D controllers of any vendor; VGA/other display controllers only from the GPU vendors (a
  // server's BMC shows up as a VGA controller too).
  if (base == 0x03 && (sub == 0x02 || r.vendor == kVendorNvidia || r.vendor == kVendorAmd))
    return Role::kGpu;
  if (base == 0x02) return Role::kNic;
  return Role::kOther;
}

class Builder {
 public:
  Builder(const Inventory& inv, const DetectOptions& o, std::vector<std::string>* notes)
      : inv_(inv), options_(o), notes_(*notes) {
    for (const PciRecord& r : inv_.pci) pci_.emplace(r.busId, &r);
  }

  StatusOr<System> build() {
    sys_.hostName = inv_.hostName;
    sys_.hostId = inv_.hostId;
    CHORUS_RETURN_IF_ERROR(addCpus());
    CHORUS_RETURN_IF_ERROR(addGpus());
    CHORUS_RETURN_IF_ERROR(addPciOfRole(Role::kNvSwitch, NodeType::kNvSwitch));
    CHORUS_RETURN_IF_ERROR(addNics());
    if (options_.allPciDevices) CHORUS_RETURN_IF_ERROR(addPciOfRole(Role::kOther, NodeType::kOtherPci));
    CHORUS_RETURN_IF_ERROR(addNvLinks());
    if (Status s = sys_.validate(); !s.ok())
      return internalError("the detected system is inconsistent: " + s.message());
    return std::move(sys_);
  }

 private:
  Status addCpus() {
    std::vector<CpuRecord> cpus = inv_.cpus;
    if (cpus.empty()) {
      // Nothing could read the CPU layout: one node with as many CPUs as the C++ runtime sees.
      CpuRecord rec;
      unsigned n = std::max(1u, std::thread::hardware_concurrency());
      for (unsigned i = 0; i < n; ++i) rec.cpus.push_back(static_cast<int>(i));
      rec.cores = static_cast<int>(n);
      notes_.push_back("no CPU layout detected; assuming one NUMA node with " +
                       countOf(n, "CPU"));
      cpus.push_back(std::move(rec));
    }
    for (const CpuRecord& c : cpus) {
      Node n;
      n.type = NodeType::kCpu;
      n.name = "cpu" + std::to_string(c.numa);
      n.numa = c.numa;
      n.cpus = c.cpus;
      n.cores = c.cores;
      n.l2Bytes = c.l2Bytes;
      n.l3Bytes = c.l3Bytes;
      n.cpuVendor = c.vendor;
      n.cpuModel = c.model;
      CHORUS_ASSIGN_OR_RETURN(int idx, sys_.addNode(std::move(n)));
      cpuByNuma_[c.numa] = idx;
    }
    // Every pair of NUMA nodes talks over the CPU interconnect (UPI, Infinity Fabric, ...).
    sys_.connectCpus();
    return Status();
  }

  // The NUMA node of a device: its own, else the node holding all its local CPUs.
  int numaOf(const PciRecord* r, int fallback) const {
    if (r && r->numa >= 0 && cpuByNuma_.count(r->numa)) return r->numa;
    if (r && !r->localCpus.empty()) {
      for (const CpuRecord& c : inv_.cpus)
        if (std::includes(c.cpus.begin(), c.cpus.end(), r->localCpus.begin(), r->localCpus.end()))
          return c.numa;
    }
    if (fallback >= 0 && cpuByNuma_.count(fallback)) return fallback;
    if (cpuByNuma_.size() == 1) return cpuByNuma_.begin()->first;
    return -1;
  }

  int cpuNode(int numa, const std::string& who) {
    auto it = cpuByNuma_.find(numa);
    if (it != cpuByNuma_.end()) return it->second;
    notes_.push_back(who + ": NUMA node unknown; attached to " + sys_.node(cpuByNuma_.begin()->second).name);
    return cpuByNuma_.begin()->second;
  }

  // The node a PCI function hangs from: the upstream port of the nearest PCIe switch above it,
  // or its CPU. Creates the switch nodes on the way.
  StatusOr<int> parentOf(const std::string& busId, int numaHint, int* numaOut) {
    const PciRecord* rec = find(busId);
    std::vector<const PciRecord*> chain;  // bridges, from the device up
    for (std::string b = rec ? rec->parentBusId : ""; !b.empty() && chain.size() < 64;) {
      const PciRecord* p = find(b);
      if (!p) break;
      chain.push_back(p);
      b = p->parentBusId;
    }
    std::reverse(chain.begin(), chain.end());  // root port first
    int numa = numaOf(rec, numaHint);
    if (numa < 0 && !chain.empty()) numa = numaOf(chain.front(), -1);
    *numaOut = numa;
    int parent = cpuNode(numa, busId);
    // chain[0] is the root port (part of the CPU); then upstream/downstream port pairs.
    for (size_t i = 1; i < chain.size(); i += 2) {
      const PciRecord& sw = *chain[i];
      int existing = sys_.findBusId(sw.busId);
      if (existing >= 0) {
        parent = existing;
        continue;
      }
      Node n;
      n.type = NodeType::kPciSwitch;
      n.name = sw.busId;
      n.busId = sw.busId;
      n.pciClass = sw.pciClass;
      n.vendor = sw.vendor;
      n.device = sw.device;
      std::tie(n.pcieGen, n.pcieWidth) = linkOf(sw);
      n.numa = numa;
      CHORUS_ASSIGN_OR_RETURN(int idx, sys_.addNode(std::move(n)));
      CHORUS_RETURN_IF_ERROR(sys_.attach(idx, parent, fallbackGBps(&sw)));
      parent = idx;
    }
    return parent;
  }

  // Generation and width of the link above a function: what both ends can do (idle GPUs train
  // their link down to gen 1 to save power, so the current speed understates it), else what
  // it runs at now.
  std::pair<int, int> linkOf(const PciRecord& r) const {
    int gen = r.maxGen, width = r.maxWidth;
    if (const PciRecord* up = find(r.parentBusId)) {
      if (gen > 0 && up->maxGen > 0) gen = std::min(gen, up->maxGen);
      if (width > 0 && up->maxWidth > 0) width = std::min(width, up->maxWidth);
    }
    return {gen > 0 ? gen : r.curGen, width > 0 ? width : r.curWidth};
  }

  static double fallbackGBps(const PciRecord* r) {
    // Virtual machines report neither speed nor width: the model's assumed link then.
    return r && r->linkGBps > 0 ? r->linkGBps : defaults::unknownPcieGBps();
  }

  // Adds a device node and links it into the PCI tree (or leaves it parentless off PCI).
  Status addDevice(Node n, int numaHint) {
    const PciRecord* rec = n.busId.empty() ? nullptr : find(n.busId);
    int parent = -1;
    if (int first = n.busId.empty() ? -1 : sys_.findBusId(n.busId); first >= 0) {
      // Another port or interface of a PCI function that already has a node (bus ids are
      // unique in a System): the same place in the tree, the bus id stays with the first.
      const Node& f = sys_.node(first);
      parent = f.parent;
      n.numa = f.numa;
      n.pciClass = f.pciClass;
      n.vendor = f.vendor;
      n.device = f.device;
      n.pcieGen = f.pcieGen;
      n.pcieWidth = f.pcieWidth;
      n.busId.clear();
    } else if (!n.busId.empty()) {
      int numa = -1;
      CHORUS_ASSIGN_OR_RETURN(parent, parentOf(n.busId, numaHint, &numa));
      n.numa = numa;
      if (rec) {
        n.pciClass = n.pciClass ? n.pciClass : rec->pciClass;
        n.vendor = rec->vendor;
        n.device = rec->device;
        std::tie(n.pcieGen, n.pcieWidth) = linkOf(*rec);
      }
    }
    CHORUS_ASSIGN_OR_RETURN(int idx, sys_.addNode(std::move(n)));
    if (parent >= 0) CHORUS_RETURN_IF_ERROR(sys_.attach(idx, parent, fallbackGBps(rec)));
    return Status();
  }

  Status addGpus() {
    std::map<std::string, const GpuRecord*> gpus;  // by bus id: PCI order
    for (const GpuRecord& g : inv_.gpus) gpus.emplace(g.busId, &g);
    std::set<std::string> busIds;
    for (const auto& [busId, rec] : pci_)
      if (roleOf(*rec) == Role::kGpu) busIds.insert(busId);
    for (const auto& [busId, g] : gpus) busIds.insert(busId);
    for (const std::string& busId : busIds) {
      Node n;
      n.type = NodeType::kGpu;
      n.name = busId;
      n.busId = busId;
      if (auto it = gpus.find(busId); it != gpus.end()) {
        n.cudaDevice = it->second->cudaDevice;
        n.computeCapability = it->second->computeCapability;
      }
      CHORUS_RETURN_IF_ERROR(addDevice(std::move(n), numaOfBusId(options_, busId)));
    }
    return Status();
  }

  Status addPciOfRole(Role role, NodeType type) {
    for (const auto& [busId, rec] : pci_) {
      if (roleOf(*rec) != role || sys_.findBusId(busId) >= 0) continue;
      Node n;
      n.type = type;
      n.name = busId;
      n.busId = busId;
      CHORUS_RETURN_IF_ERROR(addDevice(std::move(n), -1));
    }
    return Status();
  }

  // Interfaces and RDMA ports, merged: an RDMA port and the interface on the same port of the
  // same PCI function (RoCE netdev, IPoIB) are one NIC, named after the interface.
  std::vector<NetRecord> mergedNics() const {
    std::vector<NetRecord> nics = inv_.nets;
    for (const RdmaPort& p : inv_.rdma) {
      auto it = nics.end();
      if (!p.netdev.empty())
        it = std::find_if(nics.begin(), nics.end(), [&](const NetRecord& n) { return n.name == p.netdev; });
      if (it == nics.end() && !p.busId.empty())
        it = std::find_if(nics.begin(), nics.end(), [&](const NetRecord& n) {
          return n.hca.empty() && n.busId == p.busId && n.devPort == p.port - 1;
        });
      if (it == nics.end()) {
        NetRecord n;
        n.name = p.port == 1 ? p.hca : p.hca + ":" + std::to_string(p.port);
        n.busId = p.busId;
        n.numa = numaOfBusId(options_, p.busId);
        nics.push_back(std::move(n));
        it = nics.end() - 1;
      }
      it->hca = p.hca;
      it->port = p.port;
      if (p.kind != NicKind::kUnknown) it->kind = p.kind;
      if (p.speedGbps > 0) it->speedGbps = p.speedGbps;
      it->up = p.up;
    }
    // NIC-class functions nobody claimed (no driver bound) are there but unusable.
    for (const auto& [id, rec] : pci_) {
      const std::string& busId = id;  // a plain name: clang 14 cannot capture bindings
      if (roleOf(*rec) != Role::kNic) continue;
      if (std::none_of(nics.begin(), nics.end(), [&](const NetRecord& n) { return n.busId == busId; })) {
        NetRecord n;
        n.name = busId;
        n.busId = busId;
        n.numa = rec->numa;
        n.kind = (rec->pciClass >> 8) == 0x0207 ? NicKind::kInfiniBand : NicKind::kUnknown;
        nics.push_back(std::move(n));
      }
    }
    // PCI order first, then what is not on PCI, by name.
    std::stable_sort(nics.begin(), nics.end(), [](const NetRecord& a, const NetRecord& b) {
      if (a.busId.empty() != b.busId.empty()) return b.busId.empty();
      return a.busId != b.busId ? a.busId < b.busId : a.name < b.name;
    });
    return nics;
  }

  Status addNics() {
    for (const NetRecord& r : mergedNics()) {
      Node n;
      n.type = NodeType::kNic;
      n.name = r.name;
      n.busId = r.busId;
      // The device that transports open: the RDMA device for verbs, else the interface.
      n.netDevice = r.hca.empty() ? r.name : r.hca;
      n.port = r.hca.empty() ? 0 : r.port;
      n.nicKind = r.kind;
      n.speedGbps = r.speedGbps;
      n.linkUp = r.up;
      CHORUS_RETURN_IF_ERROR(addDevice(std::move(n), r.numa));
    }
    return Status();
  }

  RemoteKind remoteKindOf(const NvLinkRecord& l) const {
    if (l.remote != RemoteKind::kUnknown) return l.remote;
    int idx = sys_.findBusId(l.remoteBusId);
    if (idx >= 0 && sys_.node(idx).type == NodeType::kGpu) return RemoteKind::kGpu;
    if (const PciRecord* r = find(l.remoteBusId); r && roleOf(*r) == Role::kNvSwitch)
      return RemoteKind::kSwitch;
    return RemoteKind::kCpu;  // POWER9's NVLink to the CPU (the NPU)
  }

  Status addNvLinks() {
    // Links seen from each GPU, counted per (gpu, remote); a GPU-GPU bundle is seen from both
    // ends and added once.
    std::map<std::pair<int, int>, int> seen;
    for (const GpuRecord& g : inv_.gpus) {
      int gi = sys_.findBusId(g.busId);
      if (gi < 0) continue;
      for (const NvLinkRecord& l : g.nvlinks) {
        int ri = -1;
        switch (remoteKindOf(l)) {
          case RemoteKind::kGpu:
            ri = sys_.findBusId(l.remoteBusId);
            break;
          case RemoteKind::kSwitch: {
            ri = l.remoteBusId.empty() ? sys_.find("nvswitch") : sys_.findBusId(l.remoteBusId);
            // A PCI function of unknown role that NVML calls a switch is one.
            if (ri >= 0 && sys_.node(ri).type == NodeType::kOtherPci)
              sys_.node(ri).type = NodeType::kNvSwitch;
            if (ri >= 0 && sys_.node(ri).type != NodeType::kNvSwitch) ri = -1;
            if (ri < 0) {
              // Not on the host's PCI bus (NVSwitch systems from Hopper on): a node off PCI.
              Node n;
              n.type = NodeType::kNvSwitch;
              n.name = l.remoteBusId.empty() ? "nvswitch" : l.remoteBusId;
              if (sys_.findBusId(l.remoteBusId) < 0) n.busId = l.remoteBusId;
              else n.name = "nvswitch-" + l.remoteBusId;
              ri = sys_.find(n.name);
              if (ri < 0) {
                CHORUS_ASSIGN_OR_RETURN(ri, sys_.addNode(std::move(n)));
              }
            }
            break;
          }
          case RemoteKind::kCpu:
          case RemoteKind::kUnknown:
            ri = sys_.cpuOf(gi);
            break;
        }
        if (ri < 0 || ri == gi) {
          notes_.push_back(g.busId + ": NVLink " + std::to_string(l.link) + " to " +
                           (l.remoteBusId.empty() ? "?" : l.remoteBusId) + " ignored (unknown or itself)");
          continue;
        }
        ++seen[{gi, ri}];
      }
    }
    std::set<std::pair<int, int>> done;
    for (const auto& [key, count] : seen) {
      auto [a, b] = key;
      std::pair<int, int> pair{std::min(a, b), std::max(a, b)};
      if (!done.insert(pair).second) continue;
      int both = count;
      if (auto back = seen.find({b, a}); back != seen.end()) both = std::max(both, back->second);
      int cc = sys_.node(a).computeCapability;
      if (sys_.node(b).type == NodeType::kGpu && sys_.node(b).computeCapability > 0)
        cc = cc > 0 ? std::min(cc, sys_.node(b).computeCapability) : sys_.node(b).computeCapability;
      Link l;
      l.a = pair.first;
      l.b = pair.second;
      l.type = LinkType::kNvLink;
      l.count = both;
      l.bandwidthGBps = both * defaults::nvlinkGBps(cc);
      l.latencyUs = defaults::nvlinkLatencyUs();
      CHORUS_RETURN_IF_ERROR(sys_.addLink(l));
    }
    return Status();
  }

  const PciRecord* find(const std::string& busId) const {
    auto it = pci_.find(busId);
    return it == pci_.end() ? nullptr : it->second;
  }

  const Inventory& inv_;
  const DetectOptions& options_;
  std::vector<std::string>& notes_;
  std::map<std::string, const PciRecord*> pci_;
  std::map<int, int> cpuByNuma_;
  System sys_;
};

}  // namespace

StatusOr<System> buildSystem(const Inventory& inv, const DetectOptions& o,
                             std::vector<std::string>* notes) {
  return Builder(inv, o, notes).build();
}

}  // namespace chorus::topo::detail
