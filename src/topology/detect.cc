// Topology detection's entry points (detect.h): the order the detectors run in, the host
// detector, CHORUS_TOPO_DETECT, and the CPU-list helpers. The detectors themselves are in
// detect_sysfs.cc, detect_hwloc.cc, detect_gpu.cc and detect_ibverbs.cc; detect_builder.cc
// turns what they found into a System (detect_internal.h describes how the pieces fit).
#include "src/base/host_id.h"
#include "src/topology/detect.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "src/base/config.h"
#include "src/base/logging.h"
#include "src/base/strings.h"
#include "src/topology/detect_internal.h"

namespace chorus::topo {

using namespace detail;  // the detectors and the builder (detect_internal.h)

namespace {

// ---- host ----------------------------------------------------------------------------------

DetectorReport detectHost(const DetectOptions& o, Inventory& inv) {
  DetectorReport r{"host", DetectorState::kUsed, ""};
  if (o.procRoot == "/proc" || config::isSet("CHORUS_HOST_ID")) {
    inv.hostName = localHostname();
    inv.hostId = localHostId();
  } else {
    // A snapshot: the recorded hostname names it; its id only has to differ from other hosts.
    std::optional<std::string> name = readLine(fs::path(o.procRoot) / "sys/kernel/hostname");
    inv.hostName = name && !name->empty() ? *name : "snapshot";
    inv.hostId = hash64("snapshot/" + inv.hostName);
  }
  char id[32];
  std::snprintf(id, sizeof(id), "%016llx", static_cast<unsigned long long>(inv.hostId));
  r.detail = inv.hostName + " (id " + id + ")";
  return r;
}

void logReport(const DetectorReport& r) {
  CHORUS_LOG(INFO, TOPO) << "topology: " << r.name << ": " << detectorStateName(r.state)
                         << (r.detail.empty() ? "" : ": ") << r.detail;
}

}  // namespace

// ---- Public entry points -------------------------------------------------------------------

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
  StatusOr<System> sys = buildSystem(inv, o, &notes);
  for (const std::string& n : notes) CHORUS_LOG(INFO, TOPO) << "topology: " << n;
  if (!sys.ok()) return sys.status();
  d.system = std::move(sys).value();
  return d;
}

StatusOr<System> detectSystem(const DetectOptions& options) {
  CHORUS_ASSIGN_OR_RETURN(Detection d, detectSystemWithReport(options));
  return std::move(d.system);
}

// ---- Helpers -------------------------------------------------------------------------------

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
    if (j > i) {
      out += '-';  // not "-" + ...: g++ 12 warns (-Wrestrict, wrongly) on that once inlined
      out += std::to_string(cpus[j]);
    }
    i = j + 1;
  }
  return out;
}

}  // namespace chorus::topo
