// Detecting the System of this host.
//
// Several detectors each contribute what they know, and each may be missing at build time, at
// run time, or both; a missing one costs one INFO line (subsystem TOPO) and the picture it would
// have added, never an error:
//
//   host     host id and name (src/base/host_id.h: boot id + hostname, or CHORUS_HOST_ID)
//   hwloc    NUMA nodes (CPUs, cores, caches, vendor/model) and the PCI tree   [CHORUS_HAVE_HWLOC]
//   sysfs    the same from /sys when hwloc is not built, fails, sees no PCI or is not wanted;
//            and always the network interfaces (/sys/class/net) and RDMA ports
//            (/sys/class/infiniband)
//   nvml     GPUs and their NVLinks, from libnvidia-ml.so.1 loaded with dlopen
//   cuda     the CUDA device index <-> PCI bus id map, from libcudart loaded with dlopen
//   ibverbs  state, link layer and active speed x width of RDMA ports       [CHORUS_HAVE_IBVERBS]
//
// All of them are merged into one System (system.h): one CPU node per NUMA node that has CPUs
// ("cpu<numa>"), PCIe switches (named by the bus id of their upstream port), GPUs (named by bus
// id), NICs (named by interface, or by RDMA device when there is no interface) and NVSwitches.
// docs/topology.md describes what each detector reads and how to record a sysfs snapshot for a
// test.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/status.h"
#include "src/topology/system.h"

namespace chorus::topo {

// Where NUMA nodes, CPUs and the PCI tree come from.
enum class CpuPciSource : uint8_t {
  kAuto,   // hwloc when it is built and loads, else sysfs
  kHwloc,  // hwloc only: an error when it is not built or fails
  kSysfs,  // sysfs only (also how recorded snapshots are read)
};

struct DetectOptions {
  // Roots of the kernel's file systems; tests point them at a recorded snapshot
  // (tests/data/sysfs/<name>/sys and .../proc). The live-hardware detectors (hwloc, nvml, cuda,
  // ibverbs) describe the running machine, so they are meant for the default roots only.
  std::string sysfsRoot = "/sys";
  std::string procRoot = "/proc";
  CpuPciSource cpuPci = CpuPciSource::kAuto;
  bool nvml = true;
  bool cuda = true;
  bool ibverbs = true;
  // Keep every PCI function, not only GPUs, NICs, NVSwitches and the switches above them.
  bool allPciDevices = false;
  // The libraries dlopen'ed; empty cudaLibrary tries libcudart.so, .so.13, .so.12, .so.11.0.
  std::string nvmlLibrary = "libnvidia-ml.so.1";
  std::string cudaLibrary;

  // The defaults adjusted by CHORUS_TOPO_DETECT (comma-separated: "hwloc" or "sysfs" force the
  // CPU/PCI source, "^hwloc" means sysfs, "^nvml", "^cuda", "^ibverbs" turn a detector off).
  // A malformed value is an InvalidArgument naming the variable and the word.
  static StatusOr<DetectOptions> fromEnv();
};

enum class DetectorState : uint8_t {
  kUsed,         // it ran and what it found is in the System (possibly nothing: "no HCA")
  kNotBuilt,     // compiled out (CHORUS_WITH_<X>=OFF)
  kDisabled,     // turned off by DetectOptions / CHORUS_TOPO_DETECT
  kUnavailable,  // it could not run here: library missing, no driver, unreadable files
};
std::string_view detectorStateName(DetectorState s);  // "used", "not built", ...

// What one detector did, for chorus-topo and the INFO log.
struct DetectorReport {
  std::string name;  // "host", "hwloc", "sysfs", "nvml", "cuda", "ibverbs"
  DetectorState state = DetectorState::kUnavailable;
  std::string detail;  // what it found, or why it found nothing
};

struct Detection {
  System system;
  std::vector<DetectorReport> detectors;  // in the order they ran
};

// Detects this host. Fails only when the options ask for something impossible (kHwloc when hwloc
// is not built or fails) or when the merged System breaks its invariants (a bug, kInternal).
StatusOr<System> detectSystem(const DetectOptions& options = {});
// The same, with the report of every detector.
StatusOr<Detection> detectSystemWithReport(const DetectOptions& options = {});

// Whether a detector was compiled in ("hwloc", "ibverbs": build options; the others: always).
bool detectorBuilt(std::string_view name);

// Helpers shared with chorus-topo and the file importers (bus ids: bus_id.h).

// Linux CPU lists: "0-3,8-11" -> {0,1,2,3,8,9,10,11}; "" -> {}. Sorted, without duplicates.
StatusOr<std::vector<int>> parseCpuList(std::string_view list);
// The inverse, with ranges: {0,1,2,3,8} -> "0-3,8"; {} -> "".
std::string formatCpuList(const std::vector<int>& cpus);

}  // namespace chorus::topo
