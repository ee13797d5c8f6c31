// The sysfs detector: CPUs, NUMA nodes and the PCI tree (when hwloc did not give them), and
// always the network interfaces and RDMA ports, read from the files docs/topology.md lists under
// DetectOptions::sysfsRoot and procRoot, so a recorded snapshot reads like the live machine. Also
// the small file readers the other detectors share (detect_internal.h).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "src/base/logging.h"
#include "src/base/strings.h"
#include "src/topology/bus_id.h"
#include "src/topology/detect_internal.h"

namespace chorus::topo::detail {
namespace {

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

}  // namespace

// ---- Shared file readers (detect_internal.h) -----------------------------------------------

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

std::optional<std::string> readLine(const fs::path& path) {
  std::optional<std::string> s = readFile(path);
  if (!s) return std::nullopt;
  return std::string(trim(*s));
}

std::optional<long long> readInt(const fs::path& path) {
  std::optional<std::string> s = readLine(path);
  if (!s) return std::nullopt;
  return parseInt(*s);
}

// The PCI function a sysfs object lives under: the last bus-id component of its real path.
std::string busIdOfPath(const fs::path& real) {
  std::string busId;
  for (const fs::path& part : real)
    if (isBusIdName(part.native())) busId = normalizeBusId(part.native());
  return busId;
}

// "1 GPU", "2 GPUs".
std::string countOf(size_t n, const char* what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

int numaOfBusId(const DetectOptions& o, const std::string& busId) {
  if (busId.empty()) return -1;
  return static_cast<int>(
      readInt(fs::path(o.sysfsRoot) / "bus/pci/devices" / busId / "numa_node").value_or(-1));
}

fs::path cacheDirOf(const DetectOptions& o, int cpu) {
  return fs::path(o.sysfsRoot) / "devices/system/cpu" / ("cpu" + std::to_string(cpu)) / "cache";
}

bool kernelListsCaches(const DetectOptions& o, int cpu) {
  std::error_code ec;
  return fs::is_directory(cacheDirOf(o, cpu), ec);
}

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

namespace {

// ---- sysfs: CPUs and NUMA nodes ------------------------------------------------------------

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
// Without a cache directory (virtual machines whose kernel found no cache description) both stay
// 0, which the System reads as unknown, and the caller says so.
void readCaches(const DetectOptions& o, int cpu, CpuRecord& rec) {
  for (const fs::path& index : listDir(cacheDirOf(o, cpu))) {
    if (trailingNumber(index.filename().native(), "index") < 0) continue;
    std::optional<long long> level = readInt(index / "level");
    std::optional<std::string> type = readLine(index / "type");
    std::optional<std::string> size = readLine(index / "size");
    if (!level || !size || (type && *type == "Instruction")) continue;
    if (*level == 2 && rec.l2Bytes == 0) rec.l2Bytes = parseCacheSize(*size);
    if (*level == 3 && rec.l3Bytes == 0) rec.l3Bytes = parseCacheSize(*size);
  }
}

// `noCaches`: the CPUs read for cache sizes that have no cache directory.
std::vector<CpuRecord> readSysfsCpus(const DetectOptions& o, std::string* why,
                                     std::vector<int>* noCaches) {
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
    if (kernelListsCaches(o, cpus.front()))
      readCaches(o, cpus.front(), rec);
    else
      noCaches->push_back(cpus.front());
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

// ---- sysfs: PCI ----------------------------------------------------------------------------

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

// ---- sysfs: network interfaces and RDMA ports ----------------------------------------------

constexpr long long kArphrdLoopback = 772;
constexpr long long kArphrdInfiniband = 32;
constexpr long long kIffUp = 0x1, kIffLoopback = 0x8;

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

}  // namespace

// `cpus`, `pci`: whether hwloc left those to sysfs.
DetectorReport detectSysfs(const DetectOptions& o, bool cpus, bool pci, Inventory& inv) {
  DetectorReport r{"sysfs", DetectorState::kUsed, ""};
  std::string detail;
  if (cpus) {
    std::string why;
    std::vector<int> noCaches;
    inv.cpus = readSysfsCpus(o, &why, &noCaches);
    size_t n = 0;
    for (const CpuRecord& c : inv.cpus) n += c.cpus.size();
    if (inv.cpus.empty())
      detail += "CPUs: " + why + "; ";
    else
      detail += countOf(inv.cpus.size(), "NUMA node") + ", " + countOf(n, "CPU") + ", ";
    if (!noCaches.empty())
      detail += "L2/L3 sizes unknown (no " + cacheDirOf(o, noCaches.front()).native() +
                (noCaches.size() > 1 ? " nor for " + countOf(noCaches.size() - 1, "other CPU") : "") +
                "), ";
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

}  // namespace chorus::topo::detail
