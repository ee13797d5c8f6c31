// Detecting this host: detectors fill an Inventory of plain records, then one builder turns the
// records into a System.
//
// Keeping the two apart is what lets every source be optional. hwloc and sysfs both produce
// CpuRecords and PciRecords (the PCI tree as "each function and the bridge above it"); sysfs
// always produces NetRecords (interfaces) and RdmaPorts; NVML and the CUDA runtime produce
// GpuRecords; ibverbs refines RdmaPorts. The builder does not care who said what.
//
// The PCI tree is collapsed the way NCCL's files describe it: the root port under a host bridge
// belongs to the CPU, and a PCIe switch, which sysfs shows as an upstream port with one
// downstream port per slot, becomes one node named after its upstream port. So "GPU and NIC
// under the same switch" reads PIX, as in `nvidia-smi topo -m`, instead of three bridge hops.
#include "src/topology/detect.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

#ifdef CHORUS_HAVE_HWLOC
#include <hwloc.h>
#endif
#ifdef CHORUS_HAVE_IBVERBS
#include <infiniband/verbs.h>
#endif

#include "src/bootstrap/peer_info.h"
#include "src/bootstrap/unique_id.h"
#include "src/base/config.h"
#include "src/base/logging.h"
#include "src/base/strings.h"
#include "src/topology/bus_id.h"

namespace chorus::topo {
namespace {

namespace fs = std::filesystem;

// ---- Records: what the detectors found, before it becomes a System -----------------------

struct CpuRecord {
  int numa = 0;
  std::vector<int> cpus;
  int cores = 0;
  uint64_t l2Bytes = 0, l3Bytes = 0;
  std::string vendor, model;
};

struct PciRecord {
  std::string busId;
  std::string parentBusId;  // the bridge above; "" under a host bridge (root complex)
  uint32_t pciClass = 0;
  uint16_t vendor = 0, device = 0;
  int numa = -1;
  std::vector<int> localCpus;  // used when numa is unknown
  int curGen = 0, curWidth = 0;  // the link to the parent as it runs now
  int maxGen = 0, maxWidth = 0;  // and as far as this end can go
  double linkGBps = 0;         // hwloc's combined figure, when gen/width are unknown
};

struct NetRecord {
  std::string name;   // interface, or RDMA device ("mlx5_0", "mlx5_0:2") without one
  std::string busId;  // "" when not on PCI (virtual, or a paravirtual bus)
  int numa = -1;
  NicKind kind = NicKind::kEthernet;
  double speedGbps = 0;
  bool up = false;
  int devPort = 0;   // /sys/class/net/<if>/dev_port: which port of a multi-port function
  std::string hca;   // RDMA device of this interface, once matched
  int port = 0;
};

struct RdmaPort {
  std::string hca;
  int port = 1;
  std::string busId;
  NicKind kind = NicKind::kUnknown;
  double speedGbps = 0;
  bool up = false;
  std::string netdev;  // the interface of this port when the kernel says (RoCE gid table)
};

enum class RemoteKind : uint8_t { kGpu, kSwitch, kCpu, kUnknown };

struct NvLinkRecord {
  int link = 0;
  std::string remoteBusId;
  RemoteKind remote = RemoteKind::kUnknown;
};

struct GpuRecord {
  std::string busId;
  int cudaDevice = -1;
  int computeCapability = 0;
  std::vector<NvLinkRecord> nvlinks;
};

struct Inventory {
  std::string hostName;
  uint64_t hostId = 0;
  std::vector<CpuRecord> cpus;
  std::vector<PciRecord> pci;
  std::vector<NetRecord> nets;
  std::vector<RdmaPort> rdma;
  std::vector<GpuRecord> gpus;
};

// ---- Small parsers ------------------------------------------------------------------------

// The whole file, or nothing when it cannot be opened or read: sysfs answers EINVAL to a read of
// the speed of a link that is down, and a snapshot leaves such files out.
std::optional<std::string> readFile(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > (16u << 20)) break;  // /proc/cpuinfo of a huge machine is a few MiB
  }
  ::close(fd);
  return out;
}

std::optional<std::string> readLine(const fs::path& path) {
  std::optional<std::string> s = readFile(path);
  if (!s) return std::nullopt;
  return std::string(trim(*s));
}

// Decimal, or hexadecimal with 0x ("0x020000", "0x1003").
std::optional<long long> parseInt(std::string_view text) {
  std::string s(trim(text));
  if (s.empty()) return std::nullopt;
  int base = (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) ? 16 : 10;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, base);
  if (errno != 0 || end == s.c_str() || *end != '\0') return std::nullopt;
  return v;
}

std::optional<long long> readInt(const fs::path& path) {
  std::optional<std::string> s = readLine(path);
  if (!s) return std::nullopt;
  return parseInt(*s);
}

// "8.0 GT/s PCIe", "8 GT/s", "2.5 GT/s" -> the generation; "Unknown" -> 0.
int parseLinkGen(std::string_view text) {
  std::string s(trim(text));
  char* end = nullptr;
  double gts = std::strtod(s.c_str(), &end);
  if (end == s.c_str()) return 0;
  return pcieGenOfGTs(gts);
}

// "1024K", "32M", "512" -> bytes.
uint64_t parseCacheSize(std::string_view text) {
  std::string s(trim(text));
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (end == s.c_str()) return 0;
  switch (*end) {
    case 'K': case 'k': return v << 10;
    case 'M': case 'm': return v << 20;
    case 'G': case 'g': return v << 30;
    default: return v;
  }
}

bool isBusIdName(std::string_view name) {
  return std::count(name.begin(), name.end(), ':') == 2 && !normalizeBusId(name).empty();
}

// The PCI function a sysfs object lives under: the last bus-id component of its real path.
std::string busIdOfPath(const fs::path& real) {
  std::string busId;
  for (const fs::path& part : real)
    if (isBusIdName(part.native())) busId = normalizeBusId(part.native());
  return busId;
}

std::vector<fs::path> listDir(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    out.push_back(it->path());
  std::sort(out.begin(), out.end());
  return out;
}

// A trailing decimal number: "node12" -> 12, "index3" -> 3; -1 when there is none.
int trailingNumber(std::string_view name, std::string_view prefix) {
  if (name.substr(0, prefix.size()) != prefix || name.size() == prefix.size()) return -1;
  std::optional<long long> v = parseInt(name.substr(prefix.size()));
  if (!v || *v < 0 || *v > (1 << 24)) return -1;
  return static_cast<int>(*v);
}

// "1 GPU", "2 GPUs".
std::string countOf(size_t n, const char* what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

// ---- host ---------------------------------------------------------------------------------

DetectorReport detectHost(const DetectOptions& o, Inventory& inv) {
  DetectorReport r{"host", DetectorState::kUsed, ""};
  if (o.procRoot == "/proc" || config::isSet("CHORUS_HOST_ID")) {
    inv.hostName = bootstrap::localHostname();
    inv.hostId = bootstrap::localHostId();
  } else {
    // A snapshot: the recorded hostname names it; its id only has to differ from other hosts.
    std::optional<std::string> name = readLine(fs::path(o.procRoot) / "sys/kernel/hostname");
    inv.hostName = name && !name->empty() ? *name : "snapshot";
    inv.hostId = bootstrap::hash64("snapshot/" + inv.hostName);
  }
  char id[32];
  std::snprintf(id, sizeof(id), "%016llx", static_cast<unsigned long long>(inv.hostId));
  r.detail = inv.hostName + " (id " + id + ")";
  return r;
}

// ---- sysfs: CPUs and NUMA nodes -----------------------------------------------------------

struct CpuIdentity {
  std::string vendor, model;
};

// /proc/cpuinfo: vendor and model name of each logical CPU (x86; other architectures leave
// them empty).
std::map<int, CpuIdentity> readCpuinfo(const fs::path& path) {
  std::map<int, CpuIdentity> out;
  std::optional<std::string> text = readFile(path);
  if (!text) return out;
  int cpu = -1;
  size_t pos = 0;
  while (pos < text->size()) {
    size_t eol = text->find('\n', pos);
    if (eol == std::string::npos) eol = text->size();
    std::string_view line(text->data() + pos, eol - pos);
    pos = eol + 1;
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view key = trim(line.substr(0, colon));
    std::string_view value = trim(line.substr(colon + 1));
    if (key == "processor") {
      std::optional<long long> v = parseInt(value);
      cpu = v ? static_cast<int>(*v) : -1;
    } else if (cpu >= 0 && key == "vendor_id") {
      out[cpu].vendor = value;
    } else if (cpu >= 0 && key == "model name") {
      out[cpu].model = value;
    }
  }
  return out;
}

// Fills the caches of one CPU: the sizes of the first level-2 and level-3 instance it uses.
void readCaches(const fs::path& cpuDir, CpuRecord& rec) {
  for (const fs::path& index : listDir(cpuDir / "cache")) {
    if (trailingNumber(index.filename().native(), "index") < 0) continue;
    std::optional<long long> level = readInt(index / "level");
    std::optional<std::string> type = readLine(index / "type");
    std::optional<std::string> size = readLine(index / "size");
    if (!level || !size || (type && *type == "Instruction")) continue;
    if (*level == 2 && rec.l2Bytes == 0) rec.l2Bytes = parseCacheSize(*size);
    if (*level == 3 && rec.l3Bytes == 0) rec.l3Bytes = parseCacheSize(*size);
  }
}

std::vector<CpuRecord> readSysfsCpus(const DetectOptions& o, std::string* why) {
  const fs::path sys(o.sysfsRoot);
  std::vector<std::pair<int, std::vector<int>>> nodes;
  for (const fs::path& dir : listDir(sys / "devices/system/node")) {
    int id = trailingNumber(dir.filename().native(), "node");
    if (id < 0) continue;
    std::optional<std::string> list = readLine(dir / "cpulist");
    if (!list) continue;
    StatusOr<std::vector<int>> cpus = parseCpuList(*list);
    // Memory-only nodes (CXL, HBM) hold no CPU, so no rank can run there: not a CPU node.
    if (cpus.ok() && !cpus->empty()) nodes.emplace_back(id, std::move(*cpus));
  }
  if (nodes.empty()) {
    // A kernel without NUMA support: one node with every online CPU.
    if (std::optional<std::string> online = readLine(sys / "devices/system/cpu/online")) {
      StatusOr<std::vector<int>> cpus = parseCpuList(*online);
      if (cpus.ok() && !cpus->empty()) nodes.emplace_back(0, std::move(*cpus));
    }
  }
  if (nodes.empty()) {
    *why = "no CPU list under " + (sys / "devices/system").native();
    return {};
  }
  std::sort(nodes.begin(), nodes.end());

  std::map<int, CpuIdentity> identity = readCpuinfo(fs::path(o.procRoot) / "cpuinfo");
  std::vector<CpuRecord> out;
  for (auto& [numa, cpus] : nodes) {
    CpuRecord rec;
    rec.numa = numa;
    rec.cpus = cpus;
    std::set<std::pair<long long, long long>> cores;  // (package, core id)
    for (int cpu : cpus) {
      fs::path topo = sys / "devices/system/cpu" / ("cpu" + std::to_string(cpu)) / "topology";
      std::optional<long long> pkg = readInt(topo / "physical_package_id");
      std::optional<long long> core = readInt(topo / "core_id");
      // Without topology files every CPU counts as a core of its own.
      cores.emplace(pkg.value_or(-1), core ? *core : -1 - static_cast<long long>(cpu));
    }
    rec.cores = static_cast<int>(cores.size());
    readCaches(sys / "devices/system/cpu" / ("cpu" + std::to_string(cpus.front())), rec);
    auto id = identity.find(cpus.front());
    if (id == identity.end() && !identity.empty()) id = identity.begin();
    if (id != identity.end()) {
      rec.vendor = id->second.vendor;
      rec.model = id->second.model;
    }
    out.push_back(std::move(rec));
  }
  return out;
}

// ---- sysfs: PCI ---------------------------------------------------------------------------

// The link of a PCI function to its parent, from sysfs (hwloc reports only a combined speed).
void readPciLink(const fs::path& dev, PciRecord& rec) {
  auto width = [&](const char* file) {
    std::optional<long long> w = readInt(dev / file);
    return w && *w > 0 && *w <= 32 ? static_cast<int>(*w) : 0;
  };
  rec.curGen = parseLinkGen(readLine(dev / "current_link_speed").value_or(""));
  rec.maxGen = parseLinkGen(readLine(dev / "max_link_speed").value_or(""));
  rec.curWidth = width("current_link_width");
  rec.maxWidth = width("max_link_width");
}

std::vector<PciRecord> readSysfsPci(const DetectOptions& o, std::string* why) {
  const fs::path dir = fs::path(o.sysfsRoot) / "bus/pci/devices";
  std::vector<PciRecord> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    *why = "no " + dir.native();
    return out;
  }
  for (const fs::path& dev : listDir(dir)) {
    PciRecord rec;
    rec.busId = normalizeBusId(dev.filename().native());
    if (rec.busId.empty()) continue;
    // The parent is the directory above in the real path: a bridge's bus id, or "pciDDDD:BB"
    // for the host bridge.
    fs::path real = fs::canonical(dev, ec);
    if (!ec) {
      std::string parent = real.parent_path().filename().native();
      if (isBusIdName(parent)) rec.parentBusId = normalizeBusId(parent);
    }
    rec.pciClass = static_cast<uint32_t>(readInt(dev / "class").value_or(0) & 0xffffff);
    rec.vendor = static_cast<uint16_t>(readInt(dev / "vendor").value_or(0));
    rec.device = static_cast<uint16_t>(readInt(dev / "device").value_or(0));
    rec.numa = static_cast<int>(readInt(dev / "numa_node").value_or(-1));
    if (rec.numa < 0) {
      if (std::optional<std::string> local = readLine(dev / "local_cpulist")) {
        StatusOr<std::vector<int>> cpus = parseCpuList(*local);
        if (cpus.ok()) rec.localCpus = std::move(*cpus);
      }
    }
    readPciLink(dev, rec);
    out.push_back(std::move(rec));
  }
  return out;
}

// ---- sysfs: network interfaces and RDMA ports ---------------------------------------------

constexpr long long kArphrdLoopback = 772;
constexpr long long kArphrdInfiniband = 32;
constexpr long long kIffUp = 0x1, kIffLoopback = 0x8;

int numaOfBusId(const DetectOptions& o, const std::string& busId) {
  if (busId.empty()) return -1;
  return static_cast<int>(
      readInt(fs::path(o.sysfsRoot) / "bus/pci/devices" / busId / "numa_node").value_or(-1));
}

// Every interface but loopback. Interfaces without a PCI function (veth, bridges, ifb, tun, a
// hypervisor's paravirtual NIC) are kept, without a PCI parent: they are how traffic leaves a
// container or VM, and /sys/class/net lists them; the System says they are not on PCI.
std::vector<NetRecord> readSysfsNets(const DetectOptions& o) {
  std::vector<NetRecord> out;
  std::error_code ec;
  for (const fs::path& dev : listDir(fs::path(o.sysfsRoot) / "class/net")) {
    long long type = readInt(dev / "type").value_or(1);
    long long flags = readInt(dev / "flags").value_or(0);
    if (type == kArphrdLoopback || (flags & kIffLoopback)) continue;
    NetRecord rec;
    rec.name = dev.filename().native();
    fs::path real = fs::canonical(dev, ec);
    if (!ec) rec.busId = busIdOfPath(real);
    rec.numa = numaOfBusId(o, rec.busId);
    rec.kind = type == kArphrdInfiniband ? NicKind::kInfiniBand : NicKind::kEthernet;
    long long mbps = readInt(dev / "speed").value_or(-1);  // Mb/s; -1 or unreadable: unknown
    rec.speedGbps = mbps > 0 ? static_cast<double>(mbps) / 1000.0 : 0.0;
    // "unknown" is what drivers without carrier reporting (tun, some virtual NICs) say while
    // working; trust the administrative flag then.
    std::string state = readLine(dev / "operstate").value_or("unknown");
    rec.up = state == "up" || (state == "unknown" && (flags & kIffUp));
    rec.devPort = static_cast<int>(readInt(dev / "dev_port").value_or(0));
    out.push_back(std::move(rec));
  }
  return out;
}

NicKind nicKindOfLinkLayer(std::string_view linkLayer) {
  if (linkLayer == "InfiniBand") return NicKind::kInfiniBand;
  if (linkLayer == "Ethernet") return NicKind::kRoce;
  return NicKind::kUnknown;
}

// /sys/class/infiniband/<hca>/ports/<n>/{state,link_layer,rate}: "4: ACTIVE", "InfiniBand",
// "100 Gb/sec (4X EDR)".
std::vector<RdmaPort> readSysfsRdma(const DetectOptions& o) {
  std::vector<RdmaPort> out;
  std::error_code ec;
  for (const fs::path& hca : listDir(fs::path(o.sysfsRoot) / "class/infiniband")) {
    fs::path real = fs::canonical(hca, ec);
    std::string busId = ec ? std::string() : busIdOfPath(real);
    for (const fs::path& port : listDir(hca / "ports")) {
      std::optional<long long> num = parseInt(port.filename().native());
      if (!num || *num < 1 || *num > 255) continue;
      RdmaPort rec;
      rec.hca = hca.filename().native();
      rec.port = static_cast<int>(*num);
      rec.busId = busId;
      rec.kind = nicKindOfLinkLayer(readLine(port / "link_layer").value_or(""));
      std::string state = readLine(port / "state").value_or("");
      rec.up = state.rfind("4:", 0) == 0;  // IB_PORT_ACTIVE
      std::string rate = readLine(port / "rate").value_or("");
      rec.speedGbps = std::strtod(rate.c_str(), nullptr);
      rec.netdev = readLine(port / "gid_attrs/ndevs/0").value_or("");
      out.push_back(std::move(rec));
    }
  }
  return out;
}

// `cpus`, `pci`: whether hwloc left those to sysfs.
DetectorReport detectSysfs(const DetectOptions& o, bool cpus, bool pci, Inventory& inv) {
  DetectorReport r{"sysfs", DetectorState::kUsed, ""};
  std::string detail;
  if (cpus) {
    std::string why;
    inv.cpus = readSysfsCpus(o, &why);
    size_t n = 0;
    for (const CpuRecord& c : inv.cpus) n += c.cpus.size();
    if (inv.cpus.empty())
      detail += "CPUs: " + why + "; ";
    else
      detail += countOf(inv.cpus.size(), "NUMA node") + ", " + countOf(n, "CPU") + ", ";
  } else {
    detail += "CPUs from hwloc, ";
  }
  if (pci) {
    std::string why;
    inv.pci = readSysfsPci(o, &why);
    detail += why.empty() ? countOf(inv.pci.size(), "PCI function") + "; " : "PCI: " + why + "; ";
  } else {
    detail += "PCI from hwloc; ";
  }
  inv.nets = readSysfsNets(o);
  inv.rdma = readSysfsRdma(o);
  detail += countOf(inv.nets.size(), "network interface");
  if (!inv.nets.empty()) {
    detail += " (";
    for (size_t i = 0; i < inv.nets.size(); ++i)
      detail += (i ? ", " : "") + inv.nets[i].name;
    detail += ")";
  }
  detail += ", " + countOf(inv.rdma.size(), "RDMA port");
  r.detail = detail;
  if (cpus && inv.cpus.empty() && inv.nets.empty()) r.state = DetectorState::kUnavailable;
  return r;
}

// ---- hwloc --------------------------------------------------------------------------------

#ifdef CHORUS_HAVE_HWLOC
std::string busIdOf(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& a) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.%x", static_cast<unsigned>(a.domain),
                static_cast<unsigned>(a.bus), static_cast<unsigned>(a.dev),
                static_cast<unsigned>(a.func));
  return buf;
}

std::vector<int> cpusOf(hwloc_const_bitmap_t set) {
  std::vector<int> out;
  for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i)) out.push_back(i);
  return out;
}

PciRecord pciRecordOf(hwloc_topology_t topo, hwloc_obj_t obj, const hwloc_obj_attr_u::hwloc_pcidev_attr_s& a,
                      const DetectOptions& o) {
  PciRecord rec;
  rec.busId = busIdOf(a);
  rec.pciClass = static_cast<uint32_t>(a.class_id) << 8;
  rec.vendor = a.vendor_id;
  rec.device = a.device_id;
  rec.linkGBps = static_cast<double>(a.linkspeed);
  hwloc_obj_t parent = obj->parent;
  if (parent && parent->type == HWLOC_OBJ_BRIDGE &&
      parent->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI)
    rec.parentBusId = busIdOf(parent->attr->bridge.upstream.pci);
  hwloc_obj_t local = hwloc_get_non_io_ancestor_obj(topo, obj);
  if (local && local->nodeset && hwloc_bitmap_weight(local->nodeset) == 1)
    rec.numa = hwloc_bitmap_first(local->nodeset);
  else if (local && local->cpuset)
    rec.localCpus = cpusOf(local->cpuset);
  // Generation, width and the programming interface are only in sysfs.
  fs::path dev = fs::path(o.sysfsRoot) / "bus/pci/devices" / rec.busId;
  if (std::optional<long long> cls = readInt(dev / "class"))
    rec.pciClass = static_cast<uint32_t>(*cls & 0xffffff);
  readPciLink(dev, rec);
  return rec;
}

Status detectHwloc(const DetectOptions& o, Inventory& inv, DetectorReport& r) {
  hwloc_topology_t topo = nullptr;
  if (hwloc_topology_init(&topo) != 0) return systemError("hwloc_topology_init failed");
  struct Release {
    hwloc_topology_t t;
    ~Release() { hwloc_topology_destroy(t); }
  } release{topo};
  // The whole machine, not only the CPUs this process may use: the System describes the host,
  // and every rank on it must see the same one.
  hwloc_topology_set_flags(topo, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_ALL);
  if (hwloc_topology_load(topo) != 0) return errnoStatus("hwloc_topology_load", "this host");

  std::vector<CpuRecord> cpus;
  for (hwloc_obj_t numa = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, nullptr); numa;
       numa = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, numa)) {
    if (!numa->cpuset || hwloc_bitmap_iszero(numa->cpuset)) continue;  // memory-only node
    CpuRecord rec;
    rec.numa = static_cast<int>(numa->os_index);
    rec.cpus = cpusOf(numa->cpuset);
    rec.cores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, numa->cpuset, HWLOC_OBJ_CORE);
    hwloc_obj_t pu = hwloc_get_pu_obj_by_os_index(topo, static_cast<unsigned>(rec.cpus.front()));
    if (pu) {
      if (hwloc_obj_t l2 = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_L2CACHE, pu))
        rec.l2Bytes = l2->attr->cache.size;
      if (hwloc_obj_t l3 = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_L3CACHE, pu))
        rec.l3Bytes = l3->attr->cache.size;
      if (hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, pu)) {
        if (const char* v = hwloc_obj_get_info_by_name(pkg, "CPUVendor")) rec.vendor = v;
        if (const char* m = hwloc_obj_get_info_by_name(pkg, "CPUModel")) rec.model = m;
      }
    }
    cpus.push_back(std::move(rec));
  }
  if (cpus.empty()) return systemError("hwloc found no NUMA node with CPUs");
  std::sort(cpus.begin(), cpus.end(),
            [](const CpuRecord& a, const CpuRecord& b) { return a.numa < b.numa; });

  std::vector<PciRecord> pci;
  for (hwloc_obj_t b = hwloc_get_next_bridge(topo, nullptr); b; b = hwloc_get_next_bridge(topo, b))
    if (b->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI)
      pci.push_back(pciRecordOf(topo, b, b->attr->bridge.upstream.pci, o));
  for (hwloc_obj_t d = hwloc_get_next_pcidev(topo, nullptr); d; d = hwloc_get_next_pcidev(topo, d))
    pci.push_back(pciRecordOf(topo, d, d->attr->pcidev, o));
  std::sort(pci.begin(), pci.end(),
            [](const PciRecord& a, const PciRecord& b) { return a.busId < b.busId; });

  size_t ncpus = 0;
  for (const CpuRecord& c : cpus) ncpus += c.cpus.size();
  r.detail = countOf(cpus.size(), "NUMA node") + ", " + countOf(ncpus, "CPU") + ", " +
             countOf(pci.size(), "PCI function");
  inv.cpus = std::move(cpus);
  inv.pci = std::move(pci);
  return Status();
}
#endif  // CHORUS_HAVE_HWLOC

// ---- NVML (dlopen) ------------------------------------------------------------------------

// The part of NVML's C ABI used here, as its public documentation describes it.
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlPciInfo {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kNvmlFeatureEnabled = 1;
constexpr unsigned kNvmlMaxLinks = 18;
constexpr int kNvmlLinkGpu = 0, kNvmlLinkIbmNpu = 1, kNvmlLinkSwitch = 2;

template <typename Fn>
Fn symbol(void* lib, const char* name) {
  return reinterpret_cast<Fn>(::dlsym(lib, name));
}

std::string dlerrorText() {
  const char* e = ::dlerror();
  return e ? e : "unknown error";
}

DetectorReport detectNvml(const DetectOptions& o, Inventory& inv) {
  DetectorReport r{"nvml", DetectorState::kUnavailable, ""};
  void* lib = ::dlopen(o.nvmlLibrary.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    r.detail = "dlopen(" + o.nvmlLibrary + "): " + dlerrorText() + "; no GPUs from NVML";
    return r;
  }
  struct Close {
    void* lib;
    ~Close() { ::dlclose(lib); }
  } close{lib};
  auto init = symbol<NvmlReturn (*)()>(lib, "nvmlInit_v2");
  auto shutdown = symbol<NvmlReturn (*)()>(lib, "nvmlShutdown");
  auto errorString = symbol<const char* (*)(NvmlReturn)>(lib, "nvmlErrorString");
  auto getCount = symbol<NvmlReturn (*)(unsigned*)>(lib, "nvmlDeviceGetCount_v2");
  auto getHandle = symbol<NvmlReturn (*)(unsigned, NvmlDevice*)>(lib, "nvmlDeviceGetHandleByIndex_v2");
  auto getPci = symbol<NvmlReturn (*)(NvmlDevice, NvmlPciInfo*)>(lib, "nvmlDeviceGetPciInfo_v3");
  auto getCc = symbol<NvmlReturn (*)(NvmlDevice, int*, int*)>(lib, "nvmlDeviceGetCudaComputeCapability");
  auto linkState = symbol<NvmlReturn (*)(NvmlDevice, unsigned, int*)>(lib, "nvmlDeviceGetNvLinkState");
  auto linkRemote = symbol<NvmlReturn (*)(NvmlDevice, unsigned, NvmlPciInfo*)>(
      lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  auto linkType = symbol<NvmlReturn (*)(NvmlDevice, unsigned, int*)>(
      lib, "nvmlDeviceGetNvLinkRemoteDeviceType");  // newer drivers only
  if (!init || !shutdown || !getCount || !getHandle || !getPci) {
    r.detail = o.nvmlLibrary + " lacks nvmlInit_v2/nvmlDeviceGetPciInfo_v3 (driver too old); no GPUs from NVML";
    return r;
  }
  auto why = [&](const char* call, NvmlReturn rc) {
    return std::string(call) + ": " + (errorString ? errorString(rc) : "error") + " (" +
           std::to_string(rc) + ")";
  };
  if (NvmlReturn rc = init(); rc != kNvmlSuccess) {
    r.detail = why("nvmlInit_v2", rc) + "; no GPUs from NVML";
    return r;
  }
  unsigned count = 0;
  if (NvmlReturn rc = getCount(&count); rc != kNvmlSuccess) {
    r.detail = why("nvmlDeviceGetCount_v2", rc) + "; no GPUs from NVML";
    shutdown();
    return r;
  }
  std::vector<std::string> problems;
  size_t links = 0;
  for (unsigned i = 0; i < count; ++i) {
    NvmlDevice dev = nullptr;
    NvmlPciInfo pci{};
    if (NvmlReturn rc = getHandle(i, &dev); rc != kNvmlSuccess) {
      problems.push_back("GPU " + std::to_string(i) + ": " + why("nvmlDeviceGetHandleByIndex_v2", rc));
      continue;
    }
    if (NvmlReturn rc = getPci(dev, &pci); rc != kNvmlSuccess) {
      problems.push_back("GPU " + std::to_string(i) + ": " + why("nvmlDeviceGetPciInfo_v3", rc));
      continue;
    }
    GpuRecord gpu;
    gpu.busId = normalizeBusId(pci.busId);
    if (gpu.busId.empty()) {
      problems.push_back("GPU " + std::to_string(i) + ": unreadable bus id");
      continue;
    }
    int major = 0, minor = 0;
    if (getCc && getCc(dev, &major, &minor) == kNvmlSuccess) gpu.computeCapability = major * 10 + minor;
    for (unsigned link = 0; linkState && linkRemote && link < kNvmlMaxLinks; ++link) {
      int active = 0;
      // Links the GPU does not have answer NOT_SUPPORTED or INVALID_ARGUMENT: skipped.
      if (linkState(dev, link, &active) != kNvmlSuccess || active != kNvmlFeatureEnabled) continue;
      NvmlPciInfo remote{};
      if (linkRemote(dev, link, &remote) != kNvmlSuccess) continue;
      NvLinkRecord nl;
      nl.link = static_cast<int>(link);
      nl.remoteBusId = normalizeBusId(remote.busId);
      int type = -1;
      if (linkType && linkType(dev, link, &type) == kNvmlSuccess) {
        nl.remote = type == kNvmlLinkGpu      ? RemoteKind::kGpu
                    : type == kNvmlLinkSwitch ? RemoteKind::kSwitch
                    : type == kNvmlLinkIbmNpu ? RemoteKind::kCpu
                                              : RemoteKind::kUnknown;
      }
      gpu.nvlinks.push_back(std::move(nl));
      ++links;
    }
    inv.gpus.push_back(std::move(gpu));
  }
  shutdown();
  r.state = DetectorState::kUsed;
  r.detail = countOf(inv.gpus.size(), "GPU") + ", " + countOf(links, "active NVLink");
  for (const std::string& p : problems) r.detail += "; " + p;
  return r;
}

// ---- CUDA runtime (dlopen) ----------------------------------------------------------------

DetectorReport detectCuda(const DetectOptions& o, Inventory& inv) {
  DetectorReport r{"cuda", DetectorState::kUnavailable, ""};
  std::vector<std::string> names;
  if (!o.cudaLibrary.empty())
    names.push_back(o.cudaLibrary);
  else
    names = {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"};
  void* lib = nullptr;
  std::string tried, error;
  for (const std::string& n : names) {
    tried += (tried.empty() ? "" : ", ") + n;
    lib = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
    error = dlerrorText();
  }
  if (!lib) {
    r.detail = "dlopen(" + tried + ") failed: " + error + "; no CUDA device map";
    return r;
  }
  // The runtime stays loaded: it registers exit handlers, and unloading it under them crashes.
  auto getCount = symbol<int (*)(int*)>(lib, "cudaGetDeviceCount");
  auto getBusId = symbol<int (*)(char*, int, int)>(lib, "cudaDeviceGetPCIBusId");
  auto getAttr = symbol<int (*)(int*, int, int)>(lib, "cudaDeviceGetAttribute");
  auto errorString = symbol<const char* (*)(int)>(lib, "cudaGetErrorString");
  if (!getCount || !getBusId) {
    r.detail = "the CUDA runtime lacks cudaGetDeviceCount/cudaDeviceGetPCIBusId";
    return r;
  }
  int count = 0;
  if (int rc = getCount(&count); rc != 0) {
    r.detail = std::string("cudaGetDeviceCount: ") + (errorString ? errorString(rc) : "error") +
               " (" + std::to_string(rc) + "); no CUDA devices";
    return r;
  }
  constexpr int kAttrCcMajor = 75, kAttrCcMinor = 76;  // cudaDevAttrComputeCapabilityMajor/Minor
  int mapped = 0;
  for (int i = 0; i < count; ++i) {
    char buf[64] = {};
    if (getBusId(buf, sizeof(buf), i) != 0) continue;
    std::string busId = normalizeBusId(buf);
    if (busId.empty()) continue;
    auto it = std::find_if(inv.gpus.begin(), inv.gpus.end(),
                           [&](const GpuRecord& g) { return g.busId == busId; });
    if (it == inv.gpus.end()) {
      inv.gpus.push_back(GpuRecord{busId, -1, 0, {}});
      it = inv.gpus.end() - 1;
    }
    it->cudaDevice = i;
    int major = 0, minor = 0;
    if (it->computeCapability == 0 && getAttr && getAttr(&major, kAttrCcMajor, i) == 0 &&
        getAttr(&minor, kAttrCcMinor, i) == 0)
      it->computeCapability = major * 10 + minor;
    ++mapped;
  }
  r.state = DetectorState::kUsed;
  r.detail = countOf(static_cast<size_t>(count), "CUDA device") + ", " +
             std::to_string(mapped) + " mapped to a bus id";
  return r;
}

// ---- ibverbs (dlopen, types from the rdma-core headers) -----------------------------------

#ifdef CHORUS_HAVE_IBVERBS
// Per-lane signalling rate (Gb/s) of ibv_port_attr::active_speed, and the lanes of active_width.
double ibvLaneGbps(uint8_t speed) {
  switch (speed) {
    case 1: return 2.5;    // SDR
    case 2: return 5;      // DDR
    case 4: return 10;     // QDR
    case 8: return 10;     // FDR10
    case 16: return 14;    // FDR
    case 32: return 25;    // EDR
    case 64: return 50;    // HDR
    case 128: return 100;  // NDR
    default: return 0;
  }
}
int ibvLanes(uint8_t width) {
  switch (width) {
    case 1: return 1;
    case 2: return 4;
    case 4: return 8;
    case 8: return 12;
    case 16: return 2;
    default: return 0;
  }
}

DetectorReport detectIbverbs(const DetectOptions& o, Inventory& inv) {
  DetectorReport r{"ibverbs", DetectorState::kUnavailable, ""};
  void* lib = ::dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    r.detail = "dlopen(libibverbs.so.1): " + dlerrorText() + "; RDMA ports from sysfs only";
    return r;
  }
  struct Close {
    void* lib;
    ~Close() { ::dlclose(lib); }
  } close{lib};
  auto getList = symbol<ibv_device** (*)(int*)>(lib, "ibv_get_device_list");
  auto freeList = symbol<void (*)(ibv_device**)>(lib, "ibv_free_device_list");
  auto getName = symbol<const char* (*)(ibv_device*)>(lib, "ibv_get_device_name");
  auto open = symbol<ibv_context* (*)(ibv_device*)>(lib, "ibv_open_device");
  auto closeDev = symbol<int (*)(ibv_context*)>(lib, "ibv_close_device");
  auto queryDevice = symbol<int (*)(ibv_context*, ibv_device_attr*)>(lib, "ibv_query_device");
  auto queryPort = symbol<int (*)(ibv_context*, uint8_t, ibv_port_attr*)>(lib, "ibv_query_port");
  if (!getList || !freeList || !getName || !open || !closeDev || !queryDevice || !queryPort) {
    r.detail = "libibverbs.so.1 lacks a verbs entry point";
    return r;
  }
  int num = 0;
  errno = 0;
  ibv_device** list = getList(&num);
  if (!list) {
    r.state = DetectorState::kUsed;
    r.detail = std::string("no RDMA devices (ibv_get_device_list: ") +
               (errno ? std::strerror(errno) : "empty") + ")";
    return r;
  }
  std::vector<std::string> problems;
  int ports = 0;
  for (int i = 0; i < num; ++i) {
    std::string name = getName(list[i]) ? getName(list[i]) : "";
    ibv_context* ctx = open(list[i]);
    if (!ctx) {
      problems.push_back("ibv_open_device(" + name + "): " + std::strerror(errno));
      continue;
    }
    ibv_device_attr dattr{};
    if (queryDevice(ctx, &dattr) != 0) {
      problems.push_back("ibv_query_device(" + name + "): " + std::strerror(errno));
      closeDev(ctx);
      continue;
    }
    std::error_code ec;
    fs::path real = fs::canonical(fs::path(o.sysfsRoot) / "class/infiniband" / name, ec);
    std::string busId = ec ? std::string() : busIdOfPath(real);
    for (int p = 1; p <= dattr.phys_port_cnt; ++p) {
      ibv_port_attr pattr;
      std::memset(&pattr, 0, sizeof(pattr));
      if (queryPort(ctx, static_cast<uint8_t>(p), &pattr) != 0) {
        problems.push_back("ibv_query_port(" + name + ", " + std::to_string(p) + "): " + std::strerror(errno));
        continue;
      }
      auto it = std::find_if(inv.rdma.begin(), inv.rdma.end(),
                             [&](const RdmaPort& x) { return x.hca == name && x.port == p; });
      if (it == inv.rdma.end()) {
        inv.rdma.push_back(RdmaPort{name, p, busId, NicKind::kUnknown, 0, false, ""});
        it = inv.rdma.end() - 1;
      }
      it->up = pattr.state == IBV_PORT_ACTIVE;
      if (pattr.link_layer == IBV_LINK_LAYER_ETHERNET) it->kind = NicKind::kRoce;
      else if (pattr.link_layer == IBV_LINK_LAYER_INFINIBAND) it->kind = NicKind::kInfiniBand;
      double gbps = ibvLaneGbps(pattr.active_speed) * ibvLanes(pattr.active_width);
      if (gbps > 0) it->speedGbps = gbps;
      ++ports;
    }
    closeDev(ctx);
  }
  freeList(list);
  r.state = DetectorState::kUsed;
  r.detail = countOf(static_cast<size_t>(num), "RDMA device") + ", " +
             countOf(static_cast<size_t>(ports), "port");
  for (const std::string& p : problems) r.detail += "; " + p;
  return r;
}
#endif  // CHORUS_HAVE_IBVERBS

// ---- Building the System ------------------------------------------------------------------

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

void logReport(const DetectorReport& r) {
  CHORUS_LOG(INFO, TOPO) << "topology: " << r.name << ": " << detectorStateName(r.state)
                         << (r.detail.empty() ? "" : ": ") << r.detail;
}

}  // namespace

// ---- Public entry points ------------------------------------------------------------------

std::string_view detectorStateName(DetectorState s) {
  switch (s) {
    case DetectorState::kUsed: return "used";
    case DetectorState::kNotBuilt: return "not built";
    case DetectorState::kDisabled: return "disabled";
    case DetectorState::kUnavailable: return "unavailable";
  }
  return "?";
}

bool detectorBuilt(std::string_view name) {
  if (name == "hwloc") {
#ifdef CHORUS_HAVE_HWLOC
    return true;
#else
    return false;
#endif
  }
  if (name == "ibverbs") {
#ifdef CHORUS_HAVE_IBVERBS
    return true;
#else
    return false;
#endif
  }
  return name == "host" || name == "sysfs" || name == "nvml" || name == "cuda";
}

StatusOr<DetectOptions> DetectOptions::fromEnv() {
  DetectOptions o;
  std::string value = config::getString("CHORUS_TOPO_DETECT");
  bool forcedHwloc = false, forcedSysfs = false;
  size_t pos = 0;
  while (pos <= value.size()) {
    size_t comma = value.find(',', pos);
    if (comma == std::string::npos) comma = value.size();
    std::string word(trim(std::string_view(value).substr(pos, comma - pos)));
    pos = comma + 1;
    if (word.empty()) continue;
    bool off = word[0] == '^';
    std::string name = off ? word.substr(1) : word;
    if (name == "hwloc") {
      (off ? forcedSysfs : forcedHwloc) = true;
    } else if (name == "sysfs" && !off) {
      forcedSysfs = true;
    } else if (name == "nvml") {
      o.nvml = !off;
    } else if (name == "cuda") {
      o.cuda = !off;
    } else if (name == "ibverbs") {
      o.ibverbs = !off;
    } else {
      return invalidArgument("CHORUS_TOPO_DETECT='" + value + "': unknown word '" + word +
                             "' (expected hwloc, sysfs, nvml, cuda, ibverbs, or ^name to turn one "
                             "off; sysfs cannot be turned off)");
    }
  }
  if (forcedHwloc && forcedSysfs)
    return invalidArgument("CHORUS_TOPO_DETECT='" + value + "' asks for both hwloc and sysfs");
  if (forcedHwloc) o.cpuPci = CpuPciSource::kHwloc;
  if (forcedSysfs) o.cpuPci = CpuPciSource::kSysfs;
  return o;
}

StatusOr<Detection> detectSystemWithReport(const DetectOptions& o) {
  Inventory inv;
  Detection d;
  d.detectors.push_back(detectHost(o, inv));

  bool haveCpuPci = false;
  DetectorReport hw{"hwloc", DetectorState::kNotBuilt, ""};
  if (o.cpuPci == CpuPciSource::kSysfs) {
    hw.state = DetectorState::kDisabled;
    hw.detail = "CPU/PCI source is sysfs";
  } else {
#ifdef CHORUS_HAVE_HWLOC
    Status s = detectHwloc(o, inv, hw);
    if (s.ok()) {
      hw.state = DetectorState::kUsed;
      haveCpuPci = true;
    } else if (o.cpuPci == CpuPciSource::kHwloc) {
      return s.withContext("topology detection with hwloc");
    } else {
      hw.state = DetectorState::kUnavailable;
      hw.detail = s.message() + "; falling back to sysfs";
    }
#else
    if (o.cpuPci == CpuPciSource::kHwloc)
      return invalidUsage("topology detection with hwloc was asked for, but chorus was built "
                          "without hwloc (CHORUS_WITH_HWLOC=OFF)");
    hw.detail = "built without hwloc; using sysfs";
#endif
  }
  // hwloc without its PCI plugin sees no PCI at all; sysfs still can.
  bool pciFromSysfs = !haveCpuPci || inv.pci.empty();
  if (haveCpuPci && pciFromSysfs) hw.detail += " (PCI left to sysfs)";
  d.detectors.push_back(hw);
  d.detectors.push_back(detectSysfs(o, !haveCpuPci, pciFromSysfs, inv));

  const char* off = "turned off (options or CHORUS_TOPO_DETECT)";
  if (!o.nvml)
    d.detectors.push_back({"nvml", DetectorState::kDisabled, off});
  else
    d.detectors.push_back(detectNvml(o, inv));
  if (!o.cuda)
    d.detectors.push_back({"cuda", DetectorState::kDisabled, off});
  else
    d.detectors.push_back(detectCuda(o, inv));
#ifdef CHORUS_HAVE_IBVERBS
  if (!o.ibverbs)
    d.detectors.push_back({"ibverbs", DetectorState::kDisabled, off});
  else
    d.detectors.push_back(detectIbverbs(o, inv));
#else
  d.detectors.push_back({"ibverbs", DetectorState::kNotBuilt, "RDMA ports from sysfs only"});
#endif
  for (const DetectorReport& r : d.detectors) logReport(r);

  std::vector<std::string> notes;
  Builder builder(inv, o, &notes);
  StatusOr<System> sys = builder.build();
  for (const std::string& n : notes) CHORUS_LOG(INFO, TOPO) << "topology: " << n;
  if (!sys.ok()) return sys.status();
  d.system = std::move(sys).value();
  return d;
}

StatusOr<System> detectSystem(const DetectOptions& options) {
  CHORUS_ASSIGN_OR_RETURN(Detection d, detectSystemWithReport(options));
  return std::move(d.system);
}

// ---- Helpers ------------------------------------------------------------------------------

StatusOr<std::vector<int>> parseCpuList(std::string_view list) {
  std::vector<int> out;
  std::string_view s = trim(list);
  size_t pos = 0;
  while (pos < s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string_view::npos) comma = s.size();
    std::string_view item = trim(s.substr(pos, comma - pos));
    pos = comma + 1;
    if (item.empty()) continue;
    size_t dash = item.find('-');
    std::optional<long long> lo = parseInt(item.substr(0, dash));
    std::optional<long long> hi = dash == std::string_view::npos ? lo : parseInt(item.substr(dash + 1));
    constexpr long long kMaxCpu = 1 << 20;
    if (!lo || !hi || *lo < 0 || *hi < *lo || *hi >= kMaxCpu)
      return invalidArgument("malformed CPU list '" + std::string(s) + "' at '" + std::string(item) + "'");
    for (long long c = *lo; c <= *hi; ++c) out.push_back(static_cast<int>(c));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string formatCpuList(const std::vector<int>& cpusIn) {
  std::vector<int> cpus = cpusIn;
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace chorus::topo
