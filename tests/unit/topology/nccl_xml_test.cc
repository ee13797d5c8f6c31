// The NCCL topology XML importer: the three real Azure files, the hand-written DGX-like fixture,
// every syntax NCCL and sysfs produce, and malformed input of every kind (each an error or a
// warning naming the line and the element, never a crash).
#include "src/topology/nccl_xml.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <cstdio>
#include <random>

#include "src/topology/json.h"

namespace chorus::topo {
namespace {

std::string dataPath(const std::string& name) {
  return std::string(CHORUS_TEST_DATA_DIR) + "/topologies/" + name;
}

System load(const std::string& name) {
  std::vector<std::string> warnings;
  auto s = importNcclXmlFile(dataPath(name), &warnings);
  EXPECT_TRUE(s.ok()) << s.status().toString();
  for (const auto& w : warnings) ADD_FAILURE() << name << ": unexpected warning: " << w;
  return s.ok() ? std::move(s).value() : System();
}

size_t count(const System& s, NodeType t) { return s.ofType(t).size(); }

int bus(const System& s, std::string_view busId) {
  int i = s.findBusId(busId);
  EXPECT_GE(i, 0) << busId;
  return i;
}

// Imports `xml`, which must fail with every one of `parts` in the message.
void expectRefused(const std::string& xml, std::initializer_list<std::string_view> parts) {
  SCOPED_TRACE(xml.substr(0, 300));
  std::vector<std::string> warnings;
  auto s = importNcclXml(xml, &warnings);
  ASSERT_FALSE(s.ok()) << "accepted";
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
  for (std::string_view p : parts)
    EXPECT_NE(s.status().message().find(p), std::string::npos)
        << "'" << p << "' not in: " << s.status().message();
}

// Imports `xml`, which must succeed with one warning containing every one of `parts`.
System expectWarning(const std::string& xml, std::initializer_list<std::string_view> parts) {
  SCOPED_TRACE(xml.substr(0, 300));
  std::vector<std::string> warnings;
  auto s = importNcclXml(xml, &warnings);
  EXPECT_TRUE(s.ok()) << s.status().toString();
  EXPECT_EQ(warnings.size(), 1u);
  for (const auto& w : warnings)
    for (std::string_view p : parts)
      EXPECT_NE(w.find(p), std::string::npos) << "'" << p << "' not in: " << w;
  return s.ok() ? std::move(s).value() : System();
}

System expectClean(const std::string& xml) {
  SCOPED_TRACE(xml.substr(0, 300));
  std::vector<std::string> warnings;
  auto s = importNcclXml(xml, &warnings);
  EXPECT_TRUE(s.ok()) << s.status().toString();
  for (const auto& w : warnings) ADD_FAILURE() << "unexpected warning: " << w;
  return s.ok() ? std::move(s).value() : System();
}

// A one-CPU file around `body` (the <cpu> starts on line 2, `body` on line 3).
std::string inCpu(const std::string& body) {
  return "<system version=\"1\">\n<cpu numaid=\"0\" vendor=\"GenuineIntel\">\n" + body +
         "\n</cpu>\n</system>\n";
}

// ---- The real files ----------------------------------------------------------------------------

TEST(NcclXmlRealFiles, Ndv2) {
  System s = load("ndv2-topo.xml");
  EXPECT_EQ(count(s, NodeType::kCpu), 2u);
  EXPECT_EQ(count(s, NodeType::kGpu), 8u);
  EXPECT_EQ(count(s, NodeType::kNic), 1u);
  EXPECT_EQ(count(s, NodeType::kPciSwitch), 0u);
  EXPECT_EQ(count(s, NodeType::kNvSwitch), 0u);
  const Node& cpu0 = s.node(s.find("cpu0"));
  EXPECT_EQ(cpu0.cpuVendor, "GenuineIntel");
  EXPECT_EQ(cpu0.cpuModel, "x86_64 family 6 model 85");
  ASSERT_EQ(cpu0.cpus.size(), 20u);  // 000fffff
  EXPECT_EQ(cpu0.cpus.back(), 19);
  const Node& cpu1 = s.node(s.find("cpu1"));
  ASSERT_EQ(cpu1.cpus.size(), 20u);  // 000000ff,fff00000
  EXPECT_EQ(cpu1.cpus.front(), 20);
  EXPECT_EQ(cpu1.cpus.back(), 39);

  int gpu0 = bus(s, "0001:00:00.0"), gpu1 = bus(s, "0002:00:00.0"), gpu4 = bus(s, "0005:00:00.0");
  int nic = bus(s, "0101:00:00.0");
  EXPECT_EQ(s.node(nic).nicKind, NicKind::kInfiniBand);
  EXPECT_EQ(s.node(gpu0).pcieGen, 4);
  EXPECT_EQ(s.node(gpu0).pcieWidth, 16);
  EXPECT_EQ(s.node(gpu0).pciClass, 0x030200u);
  EXPECT_EQ(s.node(gpu4).numa, 1);

  Path p = s.path(gpu0, nic);
  EXPECT_EQ(p.type, PathType::kPhb);
  EXPECT_NEAR(p.bandwidthGBps, 31.51, 0.01);
  EXPECT_EQ(s.path(gpu0, gpu1).type, PathType::kPhb);
  p = s.path(gpu0, gpu4);
  EXPECT_EQ(p.type, PathType::kSys);
  EXPECT_NEAR(p.bandwidthGBps, 31.51, 0.01);
  EXPECT_EQ(p.nodes, (std::vector<int>{gpu0, s.find("cpu0"), s.find("cpu1"), gpu4}));
  // The file says nothing of the interconnect: one default link joins the sockets.
  int sysLinks = 0;
  for (const Link& l : s.links())
    if (l.type == LinkType::kCpuInterconnect) {
      ++sysLinks;
      EXPECT_EQ(l.bandwidthGBps, defaults::cpuInterconnectGBps("GenuineIntel"));
    }
  EXPECT_EQ(sysLinks, 1);
}

TEST(NcclXmlRealFiles, Ndv4) {
  System s = load("ndv4-topo.xml");
  EXPECT_EQ(count(s, NodeType::kCpu), 4u);
  EXPECT_EQ(count(s, NodeType::kGpu), 8u);
  EXPECT_EQ(count(s, NodeType::kNic), 8u);
  EXPECT_EQ(count(s, NodeType::kPciSwitch), 4u);
  // Placeholder bridge ids are kept as they are.
  int sw = bus(s, "ffff:ff:01.0");
  EXPECT_EQ(s.node(sw).type, NodeType::kPciSwitch);
  EXPECT_EQ(s.node(sw).parent, s.find("cpu0"));

  int gpu = bus(s, "0003:00:00.0"), nic = bus(s, "0103:00:00.0");
  int gpuNuma1 = bus(s, "0001:00:00.0"), gpuNuma3 = bus(s, "000b:00:00.0");
  Path p = s.path(gpu, nic);
  EXPECT_EQ(p.type, PathType::kPix);
  EXPECT_NEAR(p.bandwidthGBps, 31.51, 0.01);
  EXPECT_DOUBLE_EQ(p.latencyUs, 2 * defaults::pcieLatencyUs());
  EXPECT_EQ(p.nodes, (std::vector<int>{gpu, sw, nic}));
  EXPECT_EQ(s.path(gpu, bus(s, "0004:00:00.0")).type, PathType::kPix);
  EXPECT_EQ(s.path(gpu, bus(s, "0104:00:00.0")).type, PathType::kPix);
  p = s.path(gpu, gpuNuma1);
  EXPECT_EQ(p.type, PathType::kSys);
  EXPECT_NEAR(p.bandwidthGBps, 31.51, 0.01);
  EXPECT_EQ(s.path(gpuNuma1, gpuNuma3).type, PathType::kSys);
  EXPECT_EQ(s.node(gpuNuma3).numa, 3);
  // Four NUMA nodes, each pair joined once.
  int sysLinks = 0;
  for (const Link& l : s.links()) sysLinks += l.type == LinkType::kCpuInterconnect;
  EXPECT_EQ(sysLinks, 6);
}

TEST(NcclXmlRealFiles, Ndv5) {
  System s = load("ndv5-topo.xml");
  EXPECT_EQ(count(s, NodeType::kCpu), 2u);
  EXPECT_EQ(count(s, NodeType::kGpu), 8u);
  EXPECT_EQ(count(s, NodeType::kNic), 8u);
  EXPECT_EQ(count(s, NodeType::kPciSwitch), 8u);
  int gpu = bus(s, "0001:00:00.0");
  EXPECT_EQ(s.node(gpu).pcieGen, 5);  // "32.0 GT/s PCIe"
  Path p = s.path(gpu, bus(s, "0101:00:00.0"));
  EXPECT_EQ(p.type, PathType::kPix);
  EXPECT_NEAR(p.bandwidthGBps, 63.02, 0.01);
  // Another switch on the same socket: through the CPU.
  p = s.path(gpu, bus(s, "0002:00:00.0"));
  EXPECT_EQ(p.type, PathType::kPhb);
  EXPECT_EQ(p.nodes.size(), 5u);
  // The other socket: the interconnect (40 GB/s) is slower than gen5 x16.
  p = s.path(gpu, bus(s, "0009:00:00.0"));
  EXPECT_EQ(p.type, PathType::kSys);
  EXPECT_DOUBLE_EQ(p.bandwidthGBps, 40);
  EXPECT_EQ(s.node(bus(s, "ffff:ff:05.0")).vendor, 0);
}

// NC A100 v4: four A100s, one per NUMA node, and one Ethernet NIC known only by name. Each GPU
// lists an NVLink (count 12) whose target is its own bus id: NVML inside that VM reports active
// links but not their far end. The file loads with one warning per such link, and no NVLink is
// kept.
TEST(NcclXmlRealFiles, Ncv4WithSelfNvlinks) {
  std::vector<std::string> warnings;
  auto loaded = importNcclXmlFile(dataPath("ncv4-topo.xml"), &warnings);
  ASSERT_TRUE(loaded.ok()) << loaded.status().toString();
  const System& s = *loaded;
  EXPECT_EQ(count(s, NodeType::kCpu), 4u);
  EXPECT_EQ(count(s, NodeType::kGpu), 4u);
  EXPECT_EQ(count(s, NodeType::kNic), 1u);
  EXPECT_EQ(count(s, NodeType::kPciSwitch), 0u);
  EXPECT_EQ(count(s, NodeType::kNvSwitch), 0u);
  ASSERT_EQ(warnings.size(), 4u);
  const char* busIds[] = {"0001:00:00.0", "0002:00:00.0", "0003:00:00.0", "0004:00:00.0"};
  const int lines[] = {5, 15, 22, 29};
  for (int g = 0; g < 4; ++g) {
    int gpu = bus(s, busIds[g]);
    EXPECT_EQ(s.node(gpu).cudaDevice, g);
    EXPECT_EQ(s.node(gpu).computeCapability, 80);
    EXPECT_EQ(s.node(gpu).numa, g);
    EXPECT_EQ(s.node(gpu).parent, s.find("cpu" + std::to_string(g)));
    EXPECT_EQ(s.node(gpu).pcieGen, 0);  // link_speed="" link_width="0"
    std::string where = "line " + std::to_string(lines[g]) + ": <nvlink target=" + busIds[g] +
                        ">: target " + busIds[g] + " is the GPU itself; ignored";
    EXPECT_NE(warnings[static_cast<size_t>(g)].find(where), std::string::npos)
        << warnings[static_cast<size_t>(g)];
  }
  for (const Link& l : s.links()) {
    EXPECT_NE(l.type, LinkType::kNvLink);
    EXPECT_NE(l.a, l.b);
  }
  const Node& cpu3 = s.node(s.find("cpu3"));
  EXPECT_EQ(cpu3.cpuVendor, "AuthenticAMD");
  ASSERT_EQ(cpu3.cpus.size(), 24u);  // ffffff00,00000000,00000000
  EXPECT_EQ(cpu3.cpus.front(), 72);
  int nic = s.find("eth0");
  ASSERT_GE(nic, 0);
  EXPECT_EQ(s.node(nic).netDevice, "eth0");
  EXPECT_DOUBLE_EQ(s.node(nic).speedGbps, 100);
  EXPECT_EQ(s.node(nic).parent, s.find("cpu0"));
  // Without NVLinks the GPUs reach each other through the CPUs.
  EXPECT_EQ(s.path(bus(s, "0001:00:00.0"), bus(s, "0002:00:00.0")).type, PathType::kSys);
  EXPECT_EQ(s.path(bus(s, "0001:00:00.0"), nic).type, PathType::kPhb);
}

TEST(NcclXmlFixtures, DgxH100Like) {
  System s = load("dgx-h100-like.xml");
  EXPECT_EQ(count(s, NodeType::kCpu), 2u);
  EXPECT_EQ(count(s, NodeType::kGpu), 8u);
  EXPECT_EQ(count(s, NodeType::kNic), 8u);
  EXPECT_EQ(count(s, NodeType::kPciSwitch), 8u);
  EXPECT_EQ(count(s, NodeType::kNvSwitch), 4u);
  EXPECT_EQ(s.node(s.find("cpu0")).cpus.size(), 112u);

  std::vector<int> gpus = s.ofType(NodeType::kGpu), nics = s.ofType(NodeType::kNic);
  for (int i = 0; i < 8; ++i) {
    const Node& g = s.node(gpus[static_cast<size_t>(i)]);
    EXPECT_EQ(g.cudaDevice, i);
    EXPECT_EQ(g.computeCapability, 90);
    EXPECT_EQ(g.vendor, 0x10de);
    const Node& n = s.node(nics[static_cast<size_t>(i)]);
    EXPECT_EQ(n.netDevice, "mlx5_" + std::to_string(i));
    EXPECT_EQ(n.nicKind, NicKind::kInfiniBand);
    EXPECT_EQ(n.speedGbps, 400);
    EXPECT_EQ(n.port, 1);
  }
  int nvlinks = 0, nvlinkCount = 0;
  for (const Link& l : s.links())
    if (l.type == LinkType::kNvLink) {
      ++nvlinks;
      nvlinkCount += l.count;
      EXPECT_DOUBLE_EQ(l.bandwidthGBps, l.count * defaults::nvlinkGBps(90));
    }
  EXPECT_EQ(nvlinks, 32);
  EXPECT_EQ(nvlinkCount, 8 * 18);

  // Every GPU pair: NVLink through the switches, 18 links x 25 GB/s.
  for (int a : gpus)
    for (int b : gpus) {
      if (a == b) continue;
      Path p = s.path(a, b);
      ASSERT_EQ(p.type, PathType::kNvl) << a << " " << b;
      EXPECT_DOUBLE_EQ(p.bandwidthGBps, 450);
      ASSERT_EQ(p.nodes.size(), 3u);
      EXPECT_EQ(s.node(p.nodes[1]).type, NodeType::kNvSwitch);
      EXPECT_DOUBLE_EQ(p.latencyUs, 2 * defaults::nvlinkLatencyUs());
    }
  // GPU and NIC behind the same gen5 switch; a NIC on the other socket.
  Path p = s.path(gpus[0], nics[0]);
  EXPECT_EQ(p.type, PathType::kPix);
  EXPECT_NEAR(p.bandwidthGBps, 63.02, 0.01);
  EXPECT_EQ(s.path(gpus[0], nics[1]).type, PathType::kPhb);
  p = s.path(gpus[0], nics[4]);
  EXPECT_EQ(p.type, PathType::kSys);
  EXPECT_DOUBLE_EQ(p.bandwidthGBps, 40);
  EXPECT_EQ(s.path(nics[0], nics[7]).type, PathType::kSys);
}

// ---- Accepted syntax ---------------------------------------------------------------------------

TEST(NcclXmlSyntax, DeclarationCommentsQuotesEntitiesBomAndCrlf) {
  std::string xml =
      "\xef\xbb\xbf<?xml version='1.0'?>\r\n<!-- a comment with <tags> & stuff -->\r\n"
      "<system version='1'>\r\n  <?ignored processing instruction?>\r\n"
      "  <cpu numaid = '0' vendor=\"Genuine&amp;&#73;ntel&#x21;\" arch='x&quot;&apos;&lt;&gt;'>"
      "\r\n    <pci busid='0000:3B:00.0' class='0x030200' link_speed='8.0 GT/s' link_width=' 16 '/>"
      "\r\n  </cpu >\r\n</system>\r\n<!-- trailing comment -->\r\n";
  System s = expectClean(xml);
  const Node& cpu = s.node(s.find("cpu0"));
  EXPECT_EQ(cpu.cpuVendor, "Genuine&Intel!");
  EXPECT_EQ(cpu.cpuModel, "x\"'<>");
  int gpu = s.findBusId("0000:3b:00.0");  // normalised to lower case
  ASSERT_GE(gpu, 0);
  EXPECT_EQ(s.node(gpu).pcieGen, 3);
  EXPECT_EQ(s.node(gpu).pcieWidth, 16);
}

TEST(NcclXmlSyntax, AffinityMasks) {
  System s = expectClean("<system version='1'>\n<cpu numaid='0' affinity='0x0000000f,00000001'/>\n"
                         "<cpu numaid='1' affinity=''/>\n<cpu numaid='2' affinity='8000'/>\n"
                         "</system>");
  EXPECT_EQ(s.node(s.find("cpu0")).cpus, (std::vector<int>{0, 32, 33, 34, 35}));
  EXPECT_TRUE(s.node(s.find("cpu1")).cpus.empty());
  EXPECT_EQ(s.node(s.find("cpu2")).cpus, std::vector<int>{15});
  EXPECT_EQ(s.node(s.find("cpu2")).numa, 2);
}

TEST(NcclXmlSyntax, LinkSpeedsAsTheyAreWritten) {
  struct Case {
    const char* speed;
    int gen;
  };
  for (Case c : {Case{"2.5 GT/s", 1}, {"5 GT/s", 2}, {"5.0 GT/s PCIe", 2}, {"8.0 GT/s", 3},
                 {"16 GT/s", 4}, {"32.0 GT/s PCIe", 5}, {"64.0 GT/s PCIe", 6}, {"", 0},
                 {"Unknown", 0}, {"Unknown speed", 0}, {"0 GT/s", 0}, {"16", 4}}) {
    SCOPED_TRACE(c.speed);
    System s = expectClean(inCpu(std::string("<pci busid='0000:01:00.0' class='0x030200' "
                                             "link_width='16' link_speed='") +
                                 c.speed + "'/>"));
    int gpu = s.findBusId("0000:01:00.0");
    ASSERT_GE(gpu, 0);
    EXPECT_EQ(s.node(gpu).pcieGen, c.gen);
    double bw = c.gen ? pcieGBps(c.gen, 16) : defaults::unknownPcieGBps();
    EXPECT_DOUBLE_EQ(s.path(gpu, s.find("cpu0")).bandwidthGBps, bw);
  }
  System s = expectWarning(inCpu("<pci busid='0000:01:00.0' class='0x030200' link_speed='12 GT/s'/>"),
                           {"line 3", "<pci busid=0000:01:00.0>", "no PCIe generation"});
  EXPECT_EQ(s.node(s.findBusId("0000:01:00.0")).pcieGen, 0);
  expectWarning(inCpu("<pci busid='0000:01:00.0' class='0x030200' link_speed='fast'/>"),
                {"line 3", "not a transfer rate"});
  expectWarning(inCpu("<pci busid='0000:01:00.0' class='0x030200' link_speed='8 GB/s'/>"),
                {"line 3", "not a transfer rate"});
}

TEST(NcclXmlSyntax, FullNcclForm) {
  // Two A100s joined by 12 NVLinks listed from both sides, an NVLink to the CPU, a dual-port
  // RoCE NIC, a NIC known only by name, and an NVSwitch described as a <pci> element.
  std::string xml = R"(<system version="1">
  <cpu numaid="0" affinity="ff" arch="ppc64" vendor="IBM">
    <pci busid="0000:01:00.0" class="0x030200" vendor="0x10de" device="0x20b0" link_speed="16 GT/s" link_width="16">
      <gpu dev="0" sm="80" rank="0" gdr="1">
        <nvlink target="0000:02:00.0" count="12" tclass="0x030200"/>
        <nvlink target="0000:00:00.0" count="2" tclass="0x060000"/>
        <nvlink target="0000:a0:00.0" count="3" tclass="0x068000"/>
      </gpu>
    </pci>
    <pci busid="0000:02:00.0" class="0x030200" link_speed="16 GT/s" link_width="16">
      <gpu dev="1" sm="80" rank="1" gdr="1">
        <nvlink target="0000:01:00.0" count="12"/>
        <nvlink target="0000:a0:00.0" count="3"/>
      </gpu>
    </pci>
    <pci busid="0000:a0:00.0" class="0x068000" vendor="0x10de" link_speed="8 GT/s" link_width="4"/>
    <pci busid="0000:05:00.0" class="0x020000" link_speed="16 GT/s" link_width="16">
      <nic>
        <net name="mlx5_0" dev="0" speed="100000" port="1" guid="0x1" maxconn="131072" gdr="1"/>
        <net name="mlx5_0" dev="1" speed="100000" port="2" guid="0x1" maxconn="131072" gdr="1"/>
      </nic>
    </pci>
    <nic>
      <net name="eth0" dev="2" speed="10000" port="0"/>
    </nic>
  </cpu>
</system>)";
  System s = expectClean(xml);
  int g0 = s.findBusId("0000:01:00.0"), g1 = s.findBusId("0000:02:00.0");
  int nvs = s.findBusId("0000:a0:00.0"), cpu = s.find("cpu0");
  ASSERT_GE(g0, 0);
  ASSERT_GE(g1, 0);
  ASSERT_GE(nvs, 0);
  EXPECT_EQ(s.node(nvs).type, NodeType::kNvSwitch);
  EXPECT_EQ(s.node(nvs).parent, cpu);  // a described NVSwitch keeps its PCI place
  EXPECT_EQ(s.node(cpu).cpus, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));

  Path p = s.path(g0, g1);
  EXPECT_EQ(p.type, PathType::kNvl);
  EXPECT_DOUBLE_EQ(p.bandwidthGBps, 12 * 25 + 3 * 25);  // direct plus through the switch
  EXPECT_EQ(p.nodes, (std::vector<int>{g0, g1}));
  p = s.path(g0, cpu);
  EXPECT_EQ(p.type, PathType::kNvl);
  EXPECT_DOUBLE_EQ(p.bandwidthGBps, 50);
  EXPECT_EQ(s.path(g1, cpu).type, PathType::kPhb);
  int gpuLinks = 0;
  for (const Link& l : s.links())
    if (l.type == LinkType::kNvLink && ((l.a == g0 && l.b == g1) || (l.a == g1 && l.b == g0))) {
      ++gpuLinks;
      EXPECT_EQ(l.count, 12);
    }
  EXPECT_EQ(gpuLinks, 1);  // listed from both sides, linked once

  int nic = s.findBusId("0000:05:00.0");
  ASSERT_GE(nic, 0);
  EXPECT_EQ(s.node(nic).type, NodeType::kNic);
  EXPECT_EQ(s.node(nic).nicKind, NicKind::kRoce);
  EXPECT_EQ(s.node(nic).netDevice, "mlx5_0");
  EXPECT_EQ(s.node(nic).speedGbps, 100);
  int port2 = s.find("mlx5_0/2");
  ASSERT_GE(port2, 0);
  EXPECT_EQ(s.node(port2).parent, nic);
  EXPECT_EQ(s.node(port2).port, 2);
  EXPECT_EQ(s.node(port2).nicKind, NicKind::kRoce);
  EXPECT_EQ(s.path(port2, g0).type, PathType::kPhb);
  EXPECT_DOUBLE_EQ(s.path(port2, cpu).bandwidthGBps, pcieGBps(4, 16));
  int eth = s.find("eth0");
  ASSERT_GE(eth, 0);
  EXPECT_EQ(s.node(eth).parent, cpu);
  EXPECT_EQ(s.node(eth).busId, "");
  EXPECT_EQ(s.node(eth).speedGbps, 10);
  EXPECT_DOUBLE_EQ(s.path(eth, cpu).bandwidthGBps, 10.0 / 8);  // its line rate
  EXPECT_EQ(count(s, NodeType::kNic), 3u);
}

TEST(NcclXmlSyntax, WarningsForOdditiesThatDoNotStopTheImport) {
  System s = expectWarning(inCpu("<pci busid='0000:01:00.0' class='0x0c0330'/>"),
                           {"line 3: <pci busid=0000:01:00.0>: PCI class 0x0c0330",
                            "kept as another PCI device"});
  EXPECT_EQ(s.node(s.findBusId("0000:01:00.0")).type, NodeType::kOtherPci);
  expectWarning(inCpu("<pci busid='0000:01:00.0'/>"), {"line 3", "no class"});
  expectWarning(inCpu("<gpu dev='0'/>"), {"line 3: <gpu dev=0>: not expected inside <cpu>"});
  expectWarning(inCpu("<pci busid='0000:01:00.0' class='0x030200'><gpu><c2c bw='1'/></gpu></pci>"),
                {"line 3: <c2c>: not expected inside <gpu>"});
  expectWarning("<system>\n<cpu numaid='0'/>\n</system>", {"line 1: <system>: no version"});
  expectWarning("<system version='2'><cpu numaid='0'/></system>", {"version \"2\" is not 1"});
  expectWarning("<system version='1'/>", {"line 1", "no <cpu> element"});
  s = expectWarning(inCpu("<pci busid='ffff:ff:01.0' class='0x060400'/>\n"
                          "<pci busid='ffff:ff:01.0' class='0x060400'/>"),
                    {"line 4", "placeholder bus id ffff:ff:01.0 is also used on line 3",
                     "'ffff:ff:01.0#2'"});
  EXPECT_EQ(count(s, NodeType::kPciSwitch), 2u);
  expectWarning(inCpu("<pci busid='0000:01:00.0' class='0x030200'><gpu sm='80'>"
                      "<nvlink target='0000:02:00.0' count='0'/></gpu></pci>"
                      "<pci busid='0000:02:00.0' class='0x030200'/>"),
                {"line 3: <nvlink target=0000:02:00.0>: count 0"});
  expectWarning(inCpu("<pci busid='0000:01:00.0' class='0x030200'><gpu><nvlink target='0000:02:00.0' count='2'/></gpu></pci>\n"
                      "<pci busid='0000:02:00.0' class='0x030200'><gpu><nvlink target='0000:01:00.0' count='3'/></gpu></pci>"),
                {"line 4", "count 3 differs from the 2 on line 3"});
  expectWarning(inCpu("<pci busid='0000:01:00.0' class='0x020700'><gpu/></pci>"),
                {"line 3", "not a GPU class"});
}

// ---- Malformed input ---------------------------------------------------------------------------

TEST(NcclXmlMalformed, XmlStructure) {
  expectRefused("<system version=\"1\">\n  <cpu numaid=\"0\">\n    <pci busid=\"0000:01:00.0\" "
                "class=\"0x030200\">\n",
                {"line 4: unclosed tag", "the last start tag before it is <pci busid=0000:01:00.0> on line 3"});
  expectRefused("<system>\n<cpu numaid='0'>\n<pci busid='0000:01:00.0' class='0x030200'>\n</cpu>\n"
                "</system>",
                {"line 4: </cpu> does not close the element open there",
                 "<pci busid=0000:01:00.0> on line 3"});
  expectRefused("<system>\n</system>\n</system>", {"line 3: </system> does not close"});
  expectRefused("<system>\n</system\n", {"line 2: </system>: malformed end tag"});
  // pugixml reports where it stopped in a start tag, not why: the messages quote the place.
  expectRefused("<system>\n<cpu numaid='0'", {"line 2: <cpu>: unterminated start tag"});
  expectRefused("<system>\n<cpu numaid='0>\n</cpu></system>",
                {"line 2: <cpu>: malformed start tag at '0>\\x0a</cpu>"});
  expectRefused("<system>\n<cpu numaid=0/></system>", {"line 2: <cpu>: malformed start tag at '0/>"});
  expectRefused("<system>\n<cpu numaid/></system>", {"line 2: <cpu>: malformed start tag at '>"});
  expectRefused("<system>\n<cpu numaid='0' numaid='1'/></system>",
                {"line 2: <cpu numaid=0>: attribute numaid appears twice"});
  expectRefused("<system>\n<cpu numaid='0'vendor='x'/></system>",
                {"line 2: <cpu>: malformed start tag at 'vendor='x'", "separated by spaces"});
  expectRefused("<system>\n<cpu numaid='0' / ></system>", {"line 2: <cpu>: malformed start tag at ' >"});
  expectRefused("<system>\n<cpu numaid='0' $/></system>", {"line 2: <cpu>: malformed start tag at '$"});
  expectRefused("<system>\n<cpu vendor='a<b'/></system>", {"line 2: <cpu>", "'<' in the value"});
  expectRefused("<system>\n<cpu vendor='&bogus;'/></system>",
                {"line 2: <cpu>", "unknown entity '&bogus;'"});
  expectRefused("<system>\n<cpu vendor='a & b'/></system>", {"line 2", "'&' that starts no entity"});
  expectRefused("<system>\n<cpu vendor='&#0;'/></system>", {"line 2", "bad character reference"});
  expectRefused("<system>\n<cpu vendor='&#xd800;'/></system>", {"bad character reference"});
  expectRefused("<system>\n<cpu vendor='&#99999999999;'/></system>", {"bad character reference"});
  expectRefused("<system>\n< cpu/></system>", {"line 2: '<' is not followed by an element name"});
  expectRefused("<system>\nhello\n</system>",
                {"line 2: unexpected text 'hello' inside <system>"});
  expectRefused("garbage", {"line 1: unexpected text 'garbage' outside the root element"});
  expectRefused("<system/>\n<system/>", {"line 2: <system>: a second root element", "line 1"});
  expectRefused("<!DOCTYPE system [<!ENTITY x 'y'>]><system/>",
                {"line 1: <!DOCTYPE", "not supported"});
  expectRefused("<system><![CDATA[x]]></system>", {"line 1", "not supported"});
  expectRefused("<system>\n<!-- never closed", {"line 2: unterminated comment"});
  expectRefused("<?xml version='1.0'", {"line 1: unterminated processing instruction"});
  expectRefused("<cpu numaid='0'/>", {"line 1: <cpu numaid=0>: the root element must be <system>"});
}

TEST(NcclXmlMalformed, EmptyAndGarbage) {
  expectRefused("", {"line 1: no <system> element (the input is empty)"});
  expectRefused(" \n\t\r\n", {"line 3: no <system> element"});
  expectRefused("<!-- only a comment -->", {"no <system> element"});
  expectRefused(std::string("\0\0\0", 3), {"line 1: a NUL byte"});
  expectRefused(std::string("<system>\n\n<cpu numaid='\0'/>", 27), {"line 3: a NUL byte"});
  expectRefused("\xff\xfe<\x00s", {"line 1: unexpected text '\\xff\\xfe'"});
  expectRefused("<<<<>>>>", {"line 1"});
  expectRefused(">", {"line 1: unexpected text '>'"});
  expectRefused("<system>\n<cpu numaid='0'>\n<pci busid='0000:01:00.0' class='\x01'/></cpu></system>",
                {"line 3: <pci busid=0000:01:00.0>: class=\"\\x01\" is not a hex number"});

  // Random bytes, and real files with random bytes changed: an error or a valid system, never a
  // crash; every error names a line.
  uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto file = readTopologyFile(dataPath("dgx-h100-like.xml"));
  ASSERT_TRUE(file.ok());
  const char alphabet[] = "<>/=\"' \n&;!?-abcxyz0123456789:.pcinvlkgtsytem\xff";
  for (int i = 0; i < 2000; ++i) {
    std::string text;
    if (i < 500) {
      text.resize(rng() % 200);
      for (char& c : text) c = static_cast<char>(rng());
    } else if (i < 1000) {
      text.resize(rng() % 300);
      for (char& c : text) c = alphabet[rng() % (sizeof alphabet - 1)];
    } else {
      text = *file;
      for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k)
        text[rng() % text.size()] = alphabet[rng() % (sizeof alphabet - 1)];
    }
    std::vector<std::string> warnings;
    auto s = importNcclXml(text, &warnings);
    if (s.ok()) {
      ASSERT_TRUE(s->validate().ok()) << text;
      auto back = fromJson(toJson(*s));
      ASSERT_TRUE(back.ok() && *back == *s) << text;
    } else {
      ASSERT_EQ(s.status().message().rfind("line ", 0), 0u)
          << s.status().message() << "\n" << text;
    }
  }
}

TEST(NcclXmlMalformed, BusIds) {
  expectRefused(inCpu("<pci class='0x030200'/>"), {"line 3: <pci>: missing busid"});
  expectRefused(inCpu("<pci busid='' class='0x030200'/>"), {"line 3: <pci busid=>: missing busid"});
  for (const char* bad : {"zz", "0000:01:00", "0000:01:00.8", "0000:01:20.0", "0000:001:00.0",
                          "123456789:01:00.0", "0000:01:00.0.0", ":01:00.0"})
    expectRefused(inCpu(std::string("<pci busid='") + bad + "' class='0x030200'/>"),
                  {"line 3: <pci busid=", "is not a PCI address"});
  expectRefused(inCpu("<pci busid='0000:01:00.0' class='0x030200'/>\n"
                      "<pci busid='0000:01:00.0' class='0x020700'/>"),
                {"line 4: <pci busid=0000:01:00.0>: bus id 0000:01:00.0 is already used on line 3"});
  // "01:00.0" is domain 0: the same device.
  expectRefused(inCpu("<pci busid='0000:01:00.0' class='0x030200'/>\n"
                      "<pci busid='01:00.0' class='0x020700'/>"),
                {"line 4", "already used on line 3"});
  expectRefused("<system>\n<cpu numaid='0'/>\n<cpu numaid='0'/>\n</system>",
                {"line 3: <cpu numaid=0>: numaid 0 is already used on line 2"});
  expectRefused("<system>\n<cpu affinity='ff'/>\n</system>", {"line 2: <cpu>: missing numaid"});
  expectRefused("<system>\n<cpu numaid='0' affinity='fg'/>\n</system>",
                {"line 2: <cpu numaid=0>: affinity=\"fg\" is not a hex CPU mask"});
  expectRefused(inCpu("<pci busid='0000:01:00.0' class='0x030200'><gpu/><gpu/></pci>"),
                {"line 3: <gpu>: a second <gpu> in the same <pci>"});
  expectRefused(inCpu("<pci busid='0000:01:00.0' class='0x030200'><gpu/><nic/></pci>"),
                {"line 3: <pci busid=0000:01:00.0>: has both a <gpu> and a <nic>"});
}

TEST(NcclXmlMalformed, AbsurdNumbers) {
  const std::string gpu = "<pci busid='0000:01:00.0' class='0x030200' ";
  expectRefused(inCpu(gpu + "link_width='64'/>"),
                {"line 3: <pci busid=0000:01:00.0>: link_width=\"64\" is out of range (0 to 32)"});
  expectRefused(inCpu(gpu + "link_width='-4'/>"), {"line 3", "link_width=\"-4\" is out of range"});
  expectRefused(inCpu(gpu + "link_width='x16'/>"), {"line 3", "link_width=\"x16\" is not an integer"});
  expectRefused(inCpu(gpu + "link_width='99999999999999999999'/>"), {"line 3", "out of range"});
  expectRefused(inCpu(gpu + "link_speed='-8 GT/s'/>"), {"line 3", "link_speed=\"-8 GT/s\" is out of range"});
  expectRefused(inCpu(gpu + "link_speed='1e9 GT/s'/>"), {"line 3", "out of range"});
  expectRefused(inCpu(gpu + "link_speed='1e999 GT/s'/>"), {"line 3", "out of range"});
  expectRefused(inCpu(gpu + "link_speed='nan GT/s'/>"), {"line 3", "out of range"});
  expectRefused(inCpu("<pci busid='0000:01:00.0' class='0x1000000'/>"),
                {"line 3", "class=\"0x1000000\" is not a hex number up to 0xffffff"});
  expectRefused(inCpu("<pci busid='0000:01:00.0' class='0x030200' vendor='0x10000'/>"),
                {"line 3", "vendor"});
  const std::string nic = "<pci busid='0000:05:00.0' class='0x020700'><nic>\n";
  expectRefused(inCpu(nic + "<net name='mlx5_0' speed='20000000'/></nic></pci>"),
                {"line 4: <net name=mlx5_0>: speed=\"20000000\" is out of range"});
  expectRefused(inCpu(nic + "<net name='mlx5_0' speed='-1'/></nic></pci>"),
                {"line 4: <net name=mlx5_0>: speed=\"-1\" is out of range"});
  expectRefused(inCpu(nic + "<net name='mlx5_0' port='-1'/></nic></pci>"),
                {"line 4", "port=\"-1\" is out of range"});
  expectRefused(inCpu(nic + "<net speed='100000'/></nic></pci>"), {"line 4: <net>: missing name"});
  expectRefused(inCpu(nic + "<net name='" + std::string(300, 'x') + "'/></nic></pci>"),
                {"line 4", "longer than 256"});
  expectRefused(inCpu(nic + "<net name='caf\xc3\xa9'/></nic></pci>"),
                {"line 4", "outside printable ASCII"});
  expectRefused(inCpu("<nic><net name='eth0'/>\n<net name='eth0'/></nic>"),
                {"line 4: <net name=eth0>: port 0 of eth0 is listed twice"});
  expectRefused(inCpu(gpu + "><gpu dev='-2'/></pci>"), {"line 3: <gpu dev=-2>", "out of range"});
  expectRefused(inCpu(gpu + "><gpu sm='123456'/></pci>"), {"line 3: <gpu>", "sm=\"123456\""});
  std::string many = "<system>";
  for (int i = 0; i < 300; ++i) many += "<cpu numaid='" + std::to_string(i) + "'/>";
  expectRefused(many + "</system>", {"line 1: <cpu numaid=256>: more than 256 <cpu> elements"});
}

TEST(NcclXmlMalformed, Nvlinks) {
  auto gpuWith = [](const std::string& bus, const std::string& nvlinks) {
    return "<pci busid='" + bus + "' class='0x030200'><gpu sm='80'>\n" + nvlinks + "\n</gpu></pci>";
  };
  const std::string other = "<pci busid='0000:02:00.0' class='0x030200'/>";
  // A link to the GPU itself (Azure NC A100 v4 files have them) is a warning, and no link.
  System self = expectWarning(
      inCpu(gpuWith("0000:01:00.0", "<nvlink target='0000:01:00.0' count='2'/>")),
      {"line 4: <nvlink target=0000:01:00.0>: target 0000:01:00.0 is the GPU itself; ignored"});
  for (const Link& l : self.links()) EXPECT_NE(l.type, LinkType::kNvLink);
  expectWarning(inCpu(gpuWith("0000:01:00.0", "<nvlink target='1:00.0' count='2' tclass='0x068000'/>")),
                {"line 4", "is the GPU itself"});
  expectRefused(inCpu(gpuWith("0000:01:00.0", "<nvlink target='0000:09:00.0' count='2'/>")),
                {"line 4: <nvlink target=0000:09:00.0>: target 0000:09:00.0 is not a device of this file"});
  expectRefused(inCpu(gpuWith("0000:01:00.0",
                              "<nvlink target='0000:09:00.0' count='2' tclass='0x030200'/>")),
                {"line 4", "not a device of this file"});
  expectRefused(inCpu(gpuWith("0000:01:00.0", "<nvlink count='2'/>")),
                {"line 4: <nvlink>: missing target"});
  expectRefused(inCpu(gpuWith("0000:01:00.0", "<nvlink target='gpu1'/>")),
                {"line 4", "target \"gpu1\" is not a PCI address"});
  expectRefused(inCpu(gpuWith("0000:01:00.0", "<nvlink target='0000:02:00.0' count='65'/>") + other),
                {"line 4: <nvlink target=0000:02:00.0>: count=\"65\" is out of range (0 to 64)"});
  expectRefused(inCpu(gpuWith("0000:01:00.0", "<nvlink target='0000:02:00.0' count='-1'/>") + other),
                {"line 4", "count=\"-1\" is out of range"});
  expectRefused(inCpu(gpuWith("0000:01:00.0", "<nvlink target='0000:02:00.0'/>\n"
                                              "<nvlink target='0000:02:00.0'/>") + other),
                {"line 5", "a second <nvlink> from this GPU to 0000:02:00.0 (the first is on line 4)"});
  expectRefused(inCpu(gpuWith("0000:01:00.0", "<nvlink target='0000:05:00.0'/>") +
                      "<pci busid='0000:05:00.0' class='0x020700'/>"),
                {"line 4", "is a nic", "NVLinks join GPUs, NVSwitches and CPUs"});
  expectRefused(inCpu(gpuWith("0000:01:00.0", "<nvlink target='0000:02:00.0' tclass='0x068000'/>") +
                      other),
                {"line 4", "tclass says NVSwitch, but 0000:02:00.0 is a gpu"});
  expectRefused(inCpu(gpuWith("0000:01:00.0", "<nvlink target='0000:05:00.0' tclass='0x030200'/>") +
                      "<pci busid='0000:05:00.0' class='0x020700'/>"),
                {"line 4", "is a nic"});
}

// ---- Size --------------------------------------------------------------------------------------
// Work must be linear: a quadratic importer takes minutes on these, a linear one milliseconds.
// The bound below is loose on purpose (this is not a benchmark); the time is printed.

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(NcclXmlSize, NestingDepth) {
  auto nested = [](int depth) {  // <system> and <cpu> are two levels
    std::string xml = "<system version='1'>\n<cpu numaid='0'>\n";
    char bus[32];
    for (int i = 0; i < depth - 2; ++i) {
      std::snprintf(bus, sizeof bus, "%04x:00:00.0", i);
      xml += std::string("<pci busid='") + bus + "' class='0x060400'>\n";
    }
    for (int i = 0; i < depth - 2; ++i) xml += "</pci>";
    return xml + "</cpu></system>";
  };
  System s = expectClean(nested(64));
  EXPECT_EQ(count(s, NodeType::kPciSwitch), 62u);
  int leaf = s.findBusId("003d:00:00.0");
  ASSERT_GE(leaf, 0);
  EXPECT_EQ(s.path(leaf, s.findBusId("0000:00:00.0")).type, PathType::kPxb);
  expectRefused(nested(65), {"line 65: <pci busid=003e:00:00.0>: elements nested deeper than 64"});
  auto t0 = std::chrono::steady_clock::now();
  expectRefused(nested(100000), {"nested deeper than 64"});
  expectRefused(std::string(1000000, '<') , {"line 1"});
  std::string opens;
  for (int i = 0; i < 100000; ++i) opens += "<system>";
  expectRefused(opens, {"line 1: unclosed tag"});  // pugixml reads to the end first
  EXPECT_LT(secondsSince(t0), 5.0);
}

TEST(NcclXmlSize, HundredThousandElements) {
  // 2 sockets x 7500 groups of 7 elements: a switch holding a GPU (with an NVLink to the next
  // GPU) and a NIC with one port.
  constexpr int kGroups = 15000;
  std::string xml = "<system version='1'>\n";
  char line[512];
  for (int cpu = 0; cpu < 2; ++cpu) {
    xml += "<cpu numaid='" + std::to_string(cpu) + "' vendor='GenuineIntel'>\n";
    for (int g = cpu * kGroups / 2; g < (cpu + 1) * kGroups / 2; ++g) {
      std::snprintf(line, sizeof line,
                    "<pci busid='%04x:00:00.0' class='0x060400' link_speed='32 GT/s' link_width='16'>"
                    "<pci busid='%04x:01:00.0' class='0x030200' link_speed='32 GT/s' link_width='16'>"
                    "<gpu dev='%d' sm='90'><nvlink target='%04x:01:00.0' count='4'/></gpu></pci>"
                    "<pci busid='%04x:02:00.0' class='0x020700'><nic><net name='mlx5_%d' "
                    "speed='400000' port='1'/></nic></pci></pci>\n",
                    g, g, g, (g + 1) % kGroups, g, g);
      xml += line;
    }
    xml += "</cpu>\n";
  }
  xml += "</system>\n";
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> warnings;
  auto s = importNcclXml(xml, &warnings);
  double seconds = secondsSince(t0);
  std::printf("[          ] %d elements, %zu bytes imported in %.3f s\n", kGroups * 7 + 3,
              xml.size(), seconds);
  ASSERT_TRUE(s.ok()) << s.status().toString();
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(count(*s, NodeType::kGpu), static_cast<size_t>(kGroups));
  EXPECT_EQ(count(*s, NodeType::kNic), static_cast<size_t>(kGroups));
  EXPECT_EQ(count(*s, NodeType::kPciSwitch), static_cast<size_t>(kGroups));
  // GPU g lists g+1, so every link is listed once; the ring closes.
  Path p = s->path(s->findBusId("0000:01:00.0"), s->findBusId("3a97:01:00.0"));
  EXPECT_EQ(p.type, PathType::kNvl);
  EXPECT_DOUBLE_EQ(p.bandwidthGBps, 100);
  EXPECT_EQ(s->path(s->findBusId("0000:01:00.0"), s->findBusId("0002:01:00.0")).type,
            PathType::kNvb);
  EXPECT_LT(seconds, 5.0);
}

TEST(NcclXmlSize, ManyWarningsAreCapped) {
  std::string xml = "<system version='1'><cpu numaid='0'>\n";
  for (int i = 0; i < 100000; ++i) {
    char line[96];
    std::snprintf(line, sizeof line, "<pci busid='%04x:%02x:00.0' class='0x010802'/>\n",
                  i / 256, i % 256);
    xml += line;
  }
  xml += "</cpu></system>";
  std::vector<std::string> warnings;
  auto t0 = std::chrono::steady_clock::now();
  auto s = importNcclXml(xml, &warnings);
  ASSERT_TRUE(s.ok()) << s.status().toString();
  EXPECT_EQ(count(*s, NodeType::kOtherPci), 100000u);
  ASSERT_EQ(warnings.size(), 101u);
  EXPECT_NE(warnings[0].find("line 2: <pci busid=0000:00:00.0>: PCI class 0x010802"),
            std::string::npos)
      << warnings[0];
  EXPECT_EQ(warnings.back(), "... and 99900 more warnings");
  EXPECT_LT(secondsSince(t0), 5.0);
}

TEST(NcclXmlSize, TooManyElementsOrBytesAreRefused) {
  std::string xml = "<system>";
  for (int i = 0; i < 1000001; ++i) xml += "<x/>";
  xml += "</system>";
  expectRefused(xml, {"line 1: <x>: more than 1000000 elements"});
  std::string huge((64u << 20) + 1, ' ');
  expectRefused(huge, {"line 1: the input has 67108865 bytes, more than the 64 MiB"});
}

}  // namespace
}  // namespace chorus::topo

// The fuzzer's corpus (fuzz/corpus/nccl_xml, built up by fuzz/run.sh) replayed in the normal
// build: every input imports or is refused with a line-numbered message, and what imports is a
// valid system that survives a JSON round trip. Crashes found once stay found.
TEST(NcclXmlCorpus, EveryCorpusInputIsHandled) {
  namespace fs = std::filesystem;
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(CHORUS_FUZZ_CORPUS_DIR)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::string> warnings;
    auto sys = chorus::topo::importNcclXml(text, &warnings);
    ++files;
    if (!sys.ok()) {
      EXPECT_EQ(sys.status().message().rfind("line ", 0), 0u)
          << entry.path() << ": " << sys.status().message();
      continue;
    }
    EXPECT_TRUE(sys->validate().ok()) << entry.path();
    auto back = chorus::topo::fromJson(chorus::topo::toJson(*sys));
    ASSERT_TRUE(back.ok()) << entry.path() << ": " << back.status().message();
    EXPECT_TRUE(*back == *sys) << entry.path();
  }
  EXPECT_GT(files, 100u);
}
