// Topology detection: the sysfs detector on recorded snapshots (this VM, a hand-written
// two-socket server), hwloc against sysfs on this machine, the NVML and CUDA detectors against
// stand-in libraries, and everything failing soft when the hardware or libraries are absent.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "src/base/host_id.h"
#include "src/topology/bus_id.h"
#include "src/topology/detect.h"

namespace chorus::topo {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) {
  return std::string(CHORUS_TEST_DATA_DIR) + "/sysfs/" + name;
}

// Reads a snapshot: sysfs only, none of this machine's libraries.
DetectOptions snapshot(const std::string& name) {
  DetectOptions o;
  o.sysfsRoot = fixture(name) + "/sys";
  o.procRoot = fixture(name) + "/proc";
  o.cpuPci = CpuPciSource::kSysfs;
  o.nvml = o.cuda = o.ibverbs = false;
  return o;
}

const DetectorReport* report(const Detection& d, const std::string& name) {
  for (const DetectorReport& r : d.detectors)
    if (r.name == name) return &r;
  return nullptr;
}

std::vector<std::string> names(const System& s, NodeType t) {
  std::vector<std::string> out;
  for (int i : s.ofType(t)) out.push_back(s.node(i).name);
  return out;
}

std::vector<int> range(int lo, int hi) {
  std::vector<int> v;
  for (int i = lo; i <= hi; ++i) v.push_back(i);
  return v;
}

// ---- This VM, recorded with tests/data/sysfs/record.sh -----------------------------------

TEST(SysfsDetect, ThisVmCpusAndNics) {
  StatusOr<Detection> d = detectSystemWithReport(snapshot("this-vm"));
  ASSERT_TRUE(d.ok()) << d.status().toString();
  const System& s = d->system;
  ASSERT_TRUE(s.validate().ok());
  EXPECT_EQ(s.hostName, "vm");

  ASSERT_EQ(names(s, NodeType::kCpu), std::vector<std::string>{"cpu0"});
  const Node& cpu = s.node(s.find("cpu0"));
  EXPECT_EQ(cpu.numa, 0);
  EXPECT_EQ(cpu.cpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(cpu.cores, 2);
  EXPECT_EQ(cpu.l2Bytes, 1024u << 10);
  EXPECT_EQ(cpu.l3Bytes, 32u << 20);
  EXPECT_EQ(cpu.cpuVendor, "AuthenticAMD");
  EXPECT_EQ(cpu.cpuModel, "AMD EPYC");

  // eth0 is a virtio NIC on PCI; ifb0/ifb1 are virtual; lo is left out.
  EXPECT_EQ(names(s, NodeType::kNic), (std::vector<std::string>{"eth0", "ifb0", "ifb1"}));
  const Node& eth0 = s.node(s.find("eth0"));
  EXPECT_EQ(eth0.busId, "0000:00:03.0");
  EXPECT_EQ(eth0.pciClass, 0x020000u);
  EXPECT_EQ(eth0.vendor, 0x1af4);
  EXPECT_EQ(eth0.parent, s.find("cpu0"));
  EXPECT_EQ(eth0.numa, 0);  // numa_node is -1; local_cpulist 0-1 places it
  EXPECT_EQ(eth0.netDevice, "eth0");
  EXPECT_EQ(eth0.nicKind, NicKind::kEthernet);
  EXPECT_EQ(eth0.speedGbps, 0);  // virtio reports -1: unknown
  EXPECT_TRUE(eth0.linkUp);
  EXPECT_EQ(eth0.pcieGen, 0);  // no link files in a VM: the assumed bandwidth
  Path p = s.path(s.find("cpu0"), s.find("eth0"));
  EXPECT_DOUBLE_EQ(p.bandwidthGBps, defaults::unknownPcieGBps());
  for (const char* name : {"ifb0", "ifb1"}) {
    const Node& n = s.node(s.find(name));
    EXPECT_EQ(n.parent, -1) << name;
    EXPECT_EQ(n.busId, "") << name;
    EXPECT_FALSE(n.linkUp) << name;
    EXPECT_EQ(s.path(s.find("eth0"), s.find(name)).type, PathType::kDis) << name;
  }
  EXPECT_EQ(s.find("lo"), -1);
  EXPECT_TRUE(s.ofType(NodeType::kGpu).empty());
  EXPECT_TRUE(s.ofType(NodeType::kPciSwitch).empty());
  EXPECT_TRUE(s.ofType(NodeType::kOtherPci).empty());  // only with allPciDevices

  ASSERT_NE(report(*d, "sysfs"), nullptr);
  EXPECT_EQ(report(*d, "sysfs")->state, DetectorState::kUsed);
  EXPECT_NE(report(*d, "sysfs")->detail.find("6 PCI functions"), std::string::npos)
      << report(*d, "sysfs")->detail;
  EXPECT_EQ(report(*d, "hwloc")->state, DetectorState::kDisabled);
  EXPECT_EQ(report(*d, "nvml")->state, DetectorState::kDisabled);
  EXPECT_EQ(report(*d, "host")->state, DetectorState::kUsed);
}

TEST(SysfsDetect, ThisVmAllPciDevices) {
  DetectOptions o = snapshot("this-vm");
  o.allPciDevices = true;
  StatusOr<System> s = detectSystem(o);
  ASSERT_TRUE(s.ok()) << s.status().toString();
  // Host bridge, virtio console/block/balloon/rng: five functions besides the NIC.
  EXPECT_EQ(names(*s, NodeType::kOtherPci),
            (std::vector<std::string>{"0000:00:00.0", "0000:00:01.0", "0000:00:02.0",
                                      "0000:00:04.0", "0000:00:05.0"}));
  for (int i : s->ofType(NodeType::kOtherPci)) EXPECT_EQ(s->node(i).parent, s->find("cpu0"));
  EXPECT_EQ(s->node(s->find("0000:00:02.0")).pciClass, 0x018000u);
}

// ---- The hand-written two-socket server ---------------------------------------------------

// The same kind of VM, recorded on a host whose kernel lists no caches: no
// devices/system/cpu/cpu*/cache at all. The sizes are unknown (0), and the sysfs report says why;
// everything else reads as on this-vm.
TEST(SysfsDetect, VmWithoutCacheDirectories) {
  ASSERT_FALSE(fs::exists(fixture("vm-no-cache") + "/sys/devices/system/cpu/cpu0/cache"));
  StatusOr<Detection> d = detectSystemWithReport(snapshot("vm-no-cache"));
  ASSERT_TRUE(d.ok()) << d.status().toString();
  const System& s = d->system;
  ASSERT_EQ(names(s, NodeType::kCpu), std::vector<std::string>{"cpu0"});
  const Node& cpu = s.node(s.find("cpu0"));
  EXPECT_EQ(cpu.cpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(cpu.cores, 2);
  EXPECT_EQ(cpu.l2Bytes, 0u);
  EXPECT_EQ(cpu.l3Bytes, 0u);
  EXPECT_EQ(cpu.cpuVendor, "AuthenticAMD");
  const DetectorReport* sysfs = report(*d, "sysfs");
  ASSERT_NE(sysfs, nullptr);
  EXPECT_EQ(sysfs->state, DetectorState::kUsed);
  EXPECT_NE(sysfs->detail.find("L2/L3 sizes unknown (no " + fixture("vm-no-cache") +
                               "/sys/devices/system/cpu/cpu0/cache)"),
            std::string::npos)
      << sysfs->detail;
  EXPECT_EQ(names(s, NodeType::kNic), (std::vector<std::string>{"eth0", "ifb0", "ifb1"}));
  // A snapshot with the caches says nothing of them.
  StatusOr<Detection> withCaches = detectSystemWithReport(snapshot("this-vm"));
  ASSERT_TRUE(withCaches.ok());
  EXPECT_EQ(report(*withCaches, "sysfs")->detail.find("sizes unknown"), std::string::npos);
}

TEST(SysfsDetect, TwoSocketNumaNodes) {
  StatusOr<System> s = detectSystem(snapshot("two-socket"));
  ASSERT_TRUE(s.ok()) << s.status().toString();
  EXPECT_EQ(s->hostName, "two-socket");
  ASSERT_EQ(names(*s, NodeType::kCpu), (std::vector<std::string>{"cpu0", "cpu1"}));
  const Node& c0 = s->node(s->find("cpu0"));
  const Node& c1 = s->node(s->find("cpu1"));
  std::vector<int> cpus0 = range(0, 3), cpus1 = range(4, 7);
  for (int c : range(8, 11)) cpus0.push_back(c);
  for (int c : range(12, 15)) cpus1.push_back(c);
  EXPECT_EQ(c0.cpus, cpus0);
  EXPECT_EQ(c1.cpus, cpus1);
  EXPECT_EQ(c0.numa, 0);
  EXPECT_EQ(c1.numa, 1);
  EXPECT_EQ(c0.cpus.size(), 8u);
  EXPECT_EQ(c0.cores, 4);  // two hyperthreads per core
  EXPECT_EQ(c1.cores, 4);
  EXPECT_EQ(c0.l2Bytes, 1u << 20);  // the instruction cache at level 1 is skipped, L2 is index2
  EXPECT_EQ(c1.l3Bytes, 16u << 20);
  EXPECT_EQ(c1.cpuVendor, "GenuineIntel");
  // The two sockets are joined by the CPU interconnect.
  Path p = s->path(s->find("cpu0"), s->find("cpu1"));
  EXPECT_EQ(p.type, PathType::kSys);
  EXPECT_DOUBLE_EQ(p.bandwidthGBps, defaults::cpuInterconnectGBps("GenuineIntel"));
}

TEST(SysfsDetect, TwoSocketNicsAndPciTree) {
  StatusOr<System> s = detectSystem(snapshot("two-socket"));
  ASSERT_TRUE(s.ok()) << s.status().toString();
  EXPECT_EQ(names(*s, NodeType::kNic), (std::vector<std::string>{"ens1f0", "ens2f0", "docker0"}));

  // Socket 0: a 25G NIC straight under a root port.
  const Node& a = s->node(s->find("ens1f0"));
  EXPECT_EQ(a.busId, "0000:01:00.0");
  EXPECT_EQ(a.parent, s->find("cpu0"));
  EXPECT_EQ(a.numa, 0);
  EXPECT_EQ(a.speedGbps, 25);
  EXPECT_EQ(a.nicKind, NicKind::kEthernet);
  EXPECT_EQ(a.netDevice, "ens1f0");
  EXPECT_EQ(a.pcieGen, 3);
  EXPECT_EQ(a.pcieWidth, 8);
  EXPECT_EQ(a.vendor, 0x8086);

  // Socket 1: a ConnectX behind a PCIe switch (upstream 81:00.0, downstream 82:00.0 collapsed
  // into one node); its RDMA port is in RoCE mode and merged into the interface.
  ASSERT_EQ(names(*s, NodeType::kPciSwitch), std::vector<std::string>{"0000:81:00.0"});
  int sw = s->find("0000:81:00.0");
  EXPECT_EQ(s->node(sw).parent, s->find("cpu1"));
  EXPECT_EQ(s->node(sw).pcieGen, 4);
  EXPECT_EQ(s->node(sw).pcieWidth, 16);
  const Node& b = s->node(s->find("ens2f0"));
  EXPECT_EQ(b.busId, "0000:83:00.0");
  EXPECT_EQ(b.parent, sw);
  EXPECT_EQ(b.numa, 1);
  EXPECT_EQ(b.speedGbps, 25);
  EXPECT_EQ(b.nicKind, NicKind::kRoce);
  EXPECT_EQ(b.netDevice, "mlx5_0");
  EXPECT_EQ(b.port, 1);
  EXPECT_TRUE(b.linkUp);
  // The downstream port could run gen 4, the NIC only gen 3 (it currently also runs gen 3).
  EXPECT_EQ(b.pcieGen, 3);
  EXPECT_EQ(b.pcieWidth, 16);
  EXPECT_EQ(s->find("mlx5_0"), -1);

  const Node& docker = s->node(s->find("docker0"));
  EXPECT_EQ(docker.parent, -1);
  EXPECT_FALSE(docker.linkUp);
  EXPECT_EQ(docker.speedGbps, 0);
  EXPECT_EQ(s->find("lo"), -1);
  EXPECT_EQ(s->find("0000:02:00.0"), -1);  // the NVMe drive: only with allPciDevices

  // NIC to NIC crosses the sockets; the bottleneck is the gen 3 x8 NIC link.
  Path p = s->path(s->find("ens1f0"), s->find("ens2f0"));
  EXPECT_EQ(p.type, PathType::kSys);
  EXPECT_DOUBLE_EQ(p.bandwidthGBps,
                   std::min(pcieGBps(3, 8), defaults::cpuInterconnectGBps("GenuineIntel")));
  EXPECT_EQ(s->cpuOf(s->find("ens2f0")), s->find("cpu1"));
}

TEST(SysfsDetect, TwoSocketAllPciDevices) {
  DetectOptions o = snapshot("two-socket");
  o.allPciDevices = true;
  StatusOr<System> s = detectSystem(o);
  ASSERT_TRUE(s.ok()) << s.status().toString();
  int nvme = s->find("0000:02:00.0");
  ASSERT_GE(nvme, 0);
  EXPECT_EQ(s->node(nvme).type, NodeType::kOtherPci);
  EXPECT_EQ(s->node(nvme).parent, s->find("cpu0"));
  EXPECT_EQ(s->node(nvme).pcieWidth, 4);
  EXPECT_EQ(s->node(nvme).pciClass, 0x010802u);
  // Root ports belong to the CPU, the switch's downstream port to its upstream port.
  EXPECT_EQ(s->find("0000:00:01.0"), -1);
  EXPECT_EQ(s->find("0000:82:00.0"), -1);
}

// record.sh run on a snapshot (instead of /sys) must reproduce it: same files, same symlinks,
// so the same System.
TEST(SysfsDetect, RecordScriptReproducesASnapshot) {
  namespace fs = std::filesystem;
  fs::path out = fs::temp_directory_path() / ("chorus_record_test_" + std::to_string(getpid()));
  fs::remove_all(out);
  std::string from = fixture("two-socket");
  std::string cmd = "SYSFS_ROOT='" + from + "/sys' PROC_ROOT='" + from + "/proc' bash '" +
                    CHORUS_TEST_DATA_DIR + "/sysfs/record.sh' '" + out.string() + "' >/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  DetectOptions copy = snapshot("two-socket");
  copy.sysfsRoot = out.string() + "/sys";
  copy.procRoot = out.string() + "/proc";
  copy.allPciDevices = true;
  DetectOptions original = snapshot("two-socket");
  original.allPciDevices = true;
  StatusOr<System> a = detectSystem(original);
  StatusOr<System> b = detectSystem(copy);
  fs::remove_all(out);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(*a == *b);
  EXPECT_EQ(b->nodes().size(), a->nodes().size());
  EXPECT_EQ(b->hostName, "two-socket");
}

// ---- Failing soft -------------------------------------------------------------------------

TEST(SysfsDetect, MissingTreeStillGivesACpu) {
  DetectOptions o = snapshot("no-such-snapshot");
  StatusOr<Detection> d = detectSystemWithReport(o);
  ASSERT_TRUE(d.ok()) << d.status().toString();
  EXPECT_EQ(d->system.ofType(NodeType::kCpu).size(), 1u);
  EXPECT_TRUE(d->system.ofType(NodeType::kNic).empty());
  EXPECT_EQ(d->system.hostName, "snapshot");
  EXPECT_EQ(report(*d, "sysfs")->state, DetectorState::kUnavailable);
}

TEST(LiveDetect, MissingLibrariesAreNotErrors) {
  DetectOptions o;
  o.nvmlLibrary = "/nonexistent/libnvidia-ml.so.1";
  o.cudaLibrary = "/nonexistent/libcudart.so";
  StatusOr<Detection> d = detectSystemWithReport(o);
  ASSERT_TRUE(d.ok()) << d.status().toString();
  for (const char* name : {"nvml", "cuda"}) {
    const DetectorReport* r = report(*d, name);
    ASSERT_NE(r, nullptr) << name;
    EXPECT_EQ(r->state, DetectorState::kUnavailable) << name;
    EXPECT_NE(r->detail.find("dlopen(/nonexistent/"), std::string::npos) << r->detail;
  }
  for (int g : d->system.ofType(NodeType::kGpu)) {
    EXPECT_EQ(d->system.node(g).cudaDevice, -1);  // only PCI could have named it
    EXPECT_EQ(d->system.node(g).computeCapability, 0);
  }
}

// With the default options on this machine: no GPU, no RDMA device, still a System.
TEST(LiveDetect, Defaults) {
  StatusOr<Detection> d = detectSystemWithReport();
  ASSERT_TRUE(d.ok()) << d.status().toString();
  const System& s = d->system;
  EXPECT_TRUE(s.validate().ok());
  EXPECT_EQ(s.hostName, localHostname());
  EXPECT_EQ(s.hostId, localHostId());
  EXPECT_FALSE(s.ofType(NodeType::kCpu).empty());
  ASSERT_EQ(d->detectors.size(), 6u);
  std::vector<std::string> order;
  for (const DetectorReport& r : d->detectors) order.push_back(r.name);
  EXPECT_EQ(order, (std::vector<std::string>{"host", "hwloc", "sysfs", "nvml", "cuda", "ibverbs"}));
  for (const DetectorReport& r : d->detectors) EXPECT_FALSE(r.detail.empty()) << r.name;
  const DetectorReport* nvml = report(*d, "nvml");
  const DetectorReport* cuda = report(*d, "cuda");
  if (nvml->state != DetectorState::kUsed && cuda->state != DetectorState::kUsed) {
    // No GPU stack: whatever GPU PCI knows of has no CUDA identity.
    for (int g : s.ofType(NodeType::kGpu)) EXPECT_EQ(s.node(g).cudaDevice, -1);
  }
  if (detectorBuilt("hwloc")) {
    EXPECT_EQ(report(*d, "hwloc")->state, DetectorState::kUsed);
  }
  if (!detectorBuilt("ibverbs")) {
    EXPECT_EQ(report(*d, "ibverbs")->state, DetectorState::kNotBuilt);
  }
}

// hwloc and sysfs read the same machine: they must agree on NUMA nodes, CPUs and interfaces.
TEST(LiveDetect, HwlocAgreesWithSysfs) {
  if (!detectorBuilt("hwloc")) GTEST_SKIP() << "built without hwloc";
  DetectOptions viaHwloc, viaSysfs;
  viaHwloc.cpuPci = CpuPciSource::kHwloc;
  viaSysfs.cpuPci = CpuPciSource::kSysfs;
  viaHwloc.nvml = viaHwloc.cuda = viaSysfs.nvml = viaSysfs.cuda = false;
  StatusOr<System> h = detectSystem(viaHwloc);
  StatusOr<System> s = detectSystem(viaSysfs);
  ASSERT_TRUE(h.ok()) << h.status().toString();
  ASSERT_TRUE(s.ok()) << s.status().toString();
  std::vector<int> hc = h->ofType(NodeType::kCpu), sc = s->ofType(NodeType::kCpu);
  ASSERT_EQ(hc.size(), sc.size());
  size_t total = 0;
  for (size_t i = 0; i < hc.size(); ++i) {
    const Node& a = h->node(hc[i]);
    const Node& b = s->node(sc[i]);
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.numa, b.numa);
    EXPECT_EQ(a.cpus, b.cpus) << a.name;
    EXPECT_EQ(a.cores, b.cores) << a.name;
    // Cache sizes: compared where both know them. Where the kernel lists no caches (some VMs)
    // sysfs has none, and hwloc drops what it read from CPUID alone (docs/topology.md).
    if (a.l2Bytes > 0 && b.l2Bytes > 0) {
      EXPECT_EQ(a.l2Bytes, b.l2Bytes) << a.name;
    }
    if (a.l3Bytes > 0 && b.l3Bytes > 0) {
      EXPECT_EQ(a.l3Bytes, b.l3Bytes) << a.name;
    }
    std::string cacheDir = "/sys/devices/system/cpu/cpu" + std::to_string(a.cpus.front()) + "/cache";
    if (!fs::exists(cacheDir)) {
      EXPECT_EQ(b.l2Bytes + b.l3Bytes, 0u) << a.name;
      EXPECT_EQ(a.l2Bytes + a.l3Bytes, 0u) << a.name << ": hwloc kept sizes the kernel does not list";
    }
    EXPECT_EQ(a.cpuVendor, b.cpuVendor) << a.name;
    total += a.cpus.size();
  }
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  EXPECT_EQ(static_cast<long>(total), online);
  EXPECT_EQ(names(*h, NodeType::kNic), names(*s, NodeType::kNic));
  EXPECT_EQ(names(*h, NodeType::kGpu), names(*s, NodeType::kGpu));
  EXPECT_EQ(names(*h, NodeType::kPciSwitch), names(*s, NodeType::kPciSwitch));
  for (int i : h->ofType(NodeType::kNic)) {
    const Node& a = h->node(i);
    const Node& b = s->node(s->find(a.name));
    EXPECT_EQ(a.busId, b.busId) << a.name;
    EXPECT_EQ(a.pciClass, b.pciClass) << a.name;
    EXPECT_EQ(a.numa, b.numa) << a.name;
    EXPECT_EQ(a.parent >= 0 ? h->node(a.parent).name : "-", b.parent >= 0 ? s->node(b.parent).name : "-")
        << a.name;
  }
}

TEST(LiveDetect, HwlocForcedWithoutHwlocIsAnError) {
  if (detectorBuilt("hwloc")) GTEST_SKIP() << "built with hwloc";
  DetectOptions o;
  o.cpuPci = CpuPciSource::kHwloc;
  StatusOr<System> s = detectSystem(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("without hwloc"), std::string::npos);
}

// ---- NVML and the CUDA runtime, through stand-in libraries -------------------------------

TEST(GpuDetect, NvmlAndCudaStandIns) {
  DetectOptions o = snapshot("this-vm");
  o.nvml = o.cuda = true;
  o.nvmlLibrary = CHORUS_FAKE_NVML;
  o.cudaLibrary = CHORUS_FAKE_CUDART;
  StatusOr<Detection> d = detectSystemWithReport(o);
  ASSERT_TRUE(d.ok()) << d.status().toString();
  EXPECT_EQ(report(*d, "nvml")->state, DetectorState::kUsed);
  EXPECT_EQ(report(*d, "nvml")->detail, "4 GPUs, 20 active NVLinks");
  EXPECT_EQ(report(*d, "cuda")->state, DetectorState::kUsed);
  const System& s = d->system;
  ASSERT_TRUE(s.validate().ok()) << s.validate().toString();

  ASSERT_EQ(names(s, NodeType::kGpu), (std::vector<std::string>{"0000:07:00.0", "0000:0f:00.0",
                                                                 "0000:47:00.0", "0000:4e:00.0"}));
  int g0 = s.find("0000:07:00.0"), g1 = s.find("0000:0f:00.0");
  int g2 = s.find("0000:47:00.0"), g3 = s.find("0000:4e:00.0");
  // CUDA numbers them its own way; the bus id ties the two together.
  EXPECT_EQ(s.node(g0).cudaDevice, 1);
  EXPECT_EQ(s.node(g1).cudaDevice, 0);
  EXPECT_EQ(s.node(g2).cudaDevice, 3);
  EXPECT_EQ(s.node(g3).cudaDevice, 2);
  for (int g : {g0, g1, g2, g3}) {
    EXPECT_EQ(s.node(g).computeCapability, 80);
    EXPECT_EQ(s.node(g).parent, s.find("cpu0"));  // not in the snapshot's PCI tree: the only CPU
  }

  // GPU 0 - GPU 1: one bond of 4 links (seen from both ends, added once; the down link left out).
  Path p01 = s.path(g0, g1);
  EXPECT_EQ(p01.type, PathType::kNvl);
  EXPECT_DOUBLE_EQ(p01.bandwidthGBps, 4 * defaults::nvlinkGBps(80));
  int nvlinks01 = 0;
  for (const Link& l : s.links())
    if (l.type == LinkType::kNvLink && ((l.a == g0 && l.b == g1) || (l.a == g1 && l.b == g0))) {
      ++nvlinks01;
      EXPECT_EQ(l.count, 4);
    }
  EXPECT_EQ(nvlinks01, 1);

  // GPU 2 - GPU 3 through the NVSwitch, which is not on PCI.
  ASSERT_EQ(names(s, NodeType::kNvSwitch), std::vector<std::string>{"0000:c1:00.0"});
  EXPECT_EQ(s.node(s.find("0000:c1:00.0")).parent, -1);
  Path p23 = s.path(g2, g3);
  EXPECT_EQ(p23.type, PathType::kNvl);
  EXPECT_DOUBLE_EQ(p23.bandwidthGBps, 6 * defaults::nvlinkGBps(80));

  // No NVLink between the pairs: through the CPU's host bridge.
  EXPECT_EQ(s.path(g0, g2).type, PathType::kPhb);
}

TEST(GpuDetect, CudaWithoutNvml) {
  DetectOptions o = snapshot("two-socket");
  o.cuda = true;
  o.cudaLibrary = CHORUS_FAKE_CUDART;
  StatusOr<System> s = detectSystem(o);
  ASSERT_TRUE(s.ok()) << s.status().toString();
  ASSERT_EQ(s->ofType(NodeType::kGpu).size(), 4u);
  EXPECT_EQ(s->node(s->find("0000:47:00.0")).cudaDevice, 3);
  EXPECT_EQ(s->node(s->find("0000:47:00.0")).computeCapability, 80);
  EXPECT_TRUE(s->ofType(NodeType::kNvSwitch).empty());
  // Two NUMA nodes and no PCI record of these GPUs: attached to the first, NUMA unknown.
  EXPECT_EQ(s->node(s->find("0000:47:00.0")).parent, s->find("cpu0"));
  EXPECT_EQ(s->node(s->find("0000:47:00.0")).numa, -1);
}

// ---- Options and helpers ------------------------------------------------------------------

class TopoDetectEnv : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("CHORUS_TOPO_DETECT"); }
};

TEST_F(TopoDetectEnv, FromEnv) {
  unsetenv("CHORUS_TOPO_DETECT");
  StatusOr<DetectOptions> o = DetectOptions::fromEnv();
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->cpuPci, CpuPciSource::kAuto);
  EXPECT_TRUE(o->nvml && o->cuda && o->ibverbs);

  setenv("CHORUS_TOPO_DETECT", "sysfs, ^nvml,^cuda", 1);
  o = DetectOptions::fromEnv();
  ASSERT_TRUE(o.ok()) << o.status().toString();
  EXPECT_EQ(o->cpuPci, CpuPciSource::kSysfs);
  EXPECT_FALSE(o->nvml);
  EXPECT_FALSE(o->cuda);
  EXPECT_TRUE(o->ibverbs);

  setenv("CHORUS_TOPO_DETECT", "hwloc,^ibverbs", 1);
  o = DetectOptions::fromEnv();
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->cpuPci, CpuPciSource::kHwloc);
  EXPECT_FALSE(o->ibverbs);

  setenv("CHORUS_TOPO_DETECT", "^hwloc", 1);
  o = DetectOptions::fromEnv();
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->cpuPci, CpuPciSource::kSysfs);

  for (const char* bad : {"nvlm", "hwloc,sysfs", "^sysfs", "^"}) {
    setenv("CHORUS_TOPO_DETECT", bad, 1);
    o = DetectOptions::fromEnv();
    ASSERT_FALSE(o.ok()) << bad;
    EXPECT_EQ(o.status().code(), Code::kInvalidArgument);
    EXPECT_NE(o.status().message().find("CHORUS_TOPO_DETECT"), std::string::npos);
  }
}

TEST(DetectHelpers, NormalizeBusId) {
  EXPECT_EQ(normalizeBusId("0000:3B:00.0"), "0000:3b:00.0");
  EXPECT_EQ(normalizeBusId("00000000:3b:00.0"), "0000:3b:00.0");
  EXPECT_EQ(normalizeBusId("3b:1f.7"), "0000:3b:1f.7");
  EXPECT_EQ(normalizeBusId(" 0001:00:02.1\n"), "0001:00:02.1");
  EXPECT_EQ(normalizeBusId("10000:00:00.0"), "10000:00:00.0");  // VMD domains are wider
  for (const char* bad : {"", "pci0000:00", "virtio2", "0000:3b:00", "0000:3b:20.0", "0000:3b:00.8",
                          "0000:100:00.0", "zz:00.0", "0000:3b:00.0.1", "123456789:00:00.0"})
    EXPECT_EQ(normalizeBusId(bad), "") << bad;
}

TEST(DetectHelpers, CpuLists) {
  EXPECT_EQ(parseCpuList("0-3,8-11\n").value(), (std::vector<int>{0, 1, 2, 3, 8, 9, 10, 11}));
  EXPECT_EQ(parseCpuList("5").value(), std::vector<int>{5});
  EXPECT_EQ(parseCpuList("").value(), std::vector<int>{});
  EXPECT_EQ(parseCpuList("3,1,1-2").value(), (std::vector<int>{1, 2, 3}));
  for (const char* bad : {"a", "3-1", "-1", "1-", "1-2-3", "99999999"})
    EXPECT_FALSE(parseCpuList(bad).ok()) << bad;
  EXPECT_EQ(formatCpuList({0, 1, 2, 3, 8, 9, 10, 11}), "0-3,8-11");
  EXPECT_EQ(formatCpuList({7, 5, 6, 1}), "1,5-7");
  EXPECT_EQ(formatCpuList({}), "");
  std::vector<int> odd{0, 2, 4, 5, 6, 9};
  EXPECT_EQ(parseCpuList(formatCpuList(odd)).value(), odd);
}

}  // namespace
}  // namespace chorus::topo
