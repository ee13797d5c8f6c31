// What the pieces of topology detection share; internal to src/topology/ (detect.h is the
// folder's interface).
//
// Detectors fill an Inventory of plain records, then one builder turns the records into a
// System. Keeping the two apart is what lets every source be optional: hwloc and sysfs both
// produce CpuRecords and PciRecords (the PCI tree as "each function and the bridge above it");
// sysfs always produces NetRecords (interfaces) and RdmaPorts; NVML and the CUDA runtime produce
// GpuRecords; ibverbs refines RdmaPorts. The builder does not care who said what.
//
//   detect.cc          entry points, the host detector, CHORUS_TOPO_DETECT, CPU lists
//   detect_sysfs.cc    sysfs and /proc, and the file readers below
//   detect_hwloc.cc    hwloc                                          [CHORUS_HAVE_HWLOC]
//   detect_gpu.cc      NVML and the CUDA runtime (dlopen)
//   detect_ibverbs.cc  libibverbs (dlopen)                            [CHORUS_HAVE_IBVERBS]
//   detect_builder.cc  Inventory -> System
#pragma once

#include <dlfcn.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/status.h"
#include "src/topology/detect.h"
#include "src/topology/system.h"

namespace chorus::topo::detail {

namespace fs = std::filesystem;

// ---- Records: what the detectors found, before it becomes a System -------------------------

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

// ---- File readers and parsers (detect_sysfs.cc) --------------------------------------------

// A file's contents without surrounding white space; nothing when it cannot be read (sysfs
// answers EINVAL to a read of the speed of a link that is down, and a snapshot leaves such files
// out).
std::optional<std::string> readLine(const fs::path& path);
// Decimal, or hexadecimal with 0x ("0x020000"), white space around it ignored.
std::optional<long long> parseInt(std::string_view text);
// A file's contents as such a number.
std::optional<long long> readInt(const fs::path& path);
// The PCI function a sysfs object lives under: the last bus-id component of its real path.
std::string busIdOfPath(const fs::path& real);
// The NUMA node sysfs gives a PCI function; -1 when unknown or `busId` is "".
int numaOfBusId(const DetectOptions& o, const std::string& busId);
// Fills the generation and width (current and maximum) of the link above the function at `dev`.
void readPciLink(const fs::path& dev, PciRecord& rec);
// "1 GPU", "2 GPUs".
std::string countOf(size_t n, const char* what);
// <sysfsRoot>/devices/system/cpu/cpu<cpu>/cache, and whether it exists: the kernel's list of the
// caches a CPU uses. Kernels in some virtual machines have none (no usable CPUID cache leaves,
// or no ACPI PPTT); then no cache size can be confirmed (docs/topology.md, "Cache sizes").
fs::path cacheDirOf(const DetectOptions& o, int cpu);
bool kernelListsCaches(const DetectOptions& o, int cpu);

// ---- dlopen --------------------------------------------------------------------------------

template <typename Fn>
Fn symbol(void* lib, const char* name) {
  return reinterpret_cast<Fn>(::dlsym(lib, name));
}

inline std::string dlerrorText() {
  const char* e = ::dlerror();
  return e ? e : "unknown error";
}

// ---- The detectors: each fills its part of `inv` and says what it did ----------------------

// `cpus`, `pci`: whether hwloc left those to sysfs.
DetectorReport detectSysfs(const DetectOptions& o, bool cpus, bool pci, Inventory& inv);
#ifdef CHORUS_HAVE_HWLOC
// Fails when hwloc cannot load the topology or finds no NUMA node with CPUs; `r.detail` says
// what it found otherwise.
Status detectHwloc(const DetectOptions& o, Inventory& inv, DetectorReport& r);
#endif
DetectorReport detectNvml(const DetectOptions& o, Inventory& inv);
DetectorReport detectCuda(const DetectOptions& o, Inventory& inv);
#ifdef CHORUS_HAVE_IBVERBS
DetectorReport detectIbverbs(const DetectOptions& o, Inventory& inv);
#endif

// The System of everything in `inv`; what had to be guessed is appended to `notes`.
StatusOr<System> buildSystem(const Inventory& inv, const DetectOptions& o,
                             std::vector<std::string>* notes);

}  // namespace chorus::topo::detail
