// The hwloc detector: NUMA nodes with their CPUs, cores, L2/L3 sizes and CPU vendor/model, and
// the PCI bridges and functions, from hwloc's view of the whole machine. PCIe generation and
// width are not in hwloc's attributes; they come from sysfs (readPciLink). Cache sizes are kept
// only where the kernel lists the CPU's caches. Compiled to nothing without CHORUS_HAVE_HWLOC.
#include "src/topology/detect_internal.h"

#ifdef CHORUS_HAVE_HWLOC
#include <hwloc.h>

#include <algorithm>
#include <cstdio>

namespace chorus::topo::detail {
namespace {

std::string busIdOf(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& a) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.%x", static_cast<unsigned>(a.domain),
                static_cast<unsigned>(a.bus), static_cast<unsigned>(a.dev),
                static_cast<unsigned>(a.func));
  return buf;
}

// "1 MiB", "508 MiB", "48 KiB", "-" for 0.
std::string sizeText(uint64_t bytes) {
  if (bytes == 0) return "-";
  if (bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes % (1u << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
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

}  // namespace

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
  std::string dropped;  // cache sizes hwloc gave that the kernel does not confirm
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
    // Where the kernel lists no caches, hwloc has read the sizes from CPUID alone, and a
    // hypervisor fills CPUID as it likes (an L3 of 508 MiB on a 2-CPU VM was seen). Buffers get
    // sized from these numbers: unknown is safer than wrong.
    if ((rec.l2Bytes > 0 || rec.l3Bytes > 0) && !kernelListsCaches(o, rec.cpus.front())) {
      dropped += (dropped.empty() ? "" : ", ") + ("cpu" + std::to_string(rec.cpus.front())) +
                 " L2 " + sizeText(rec.l2Bytes) + " L3 " + sizeText(rec.l3Bytes);
      rec.l2Bytes = rec.l3Bytes = 0;
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
  if (!dropped.empty())
    r.detail += "; cache sizes from CPUID that the kernel does not list (no " +
                cacheDirOf(o, cpus.front().cpus.front()).native() + ") taken as unknown: " + dropped;
  inv.cpus = std::move(cpus);
  inv.pci = std::move(pci);
  return Status();
}

}  // namespace chorus::topo::detail
#endif  // CHORUS_HAVE_HWLOC
