// The system model: names, PCIe arithmetic, building rules, path classification and invariants,
// on systems built by hand so every expected number can be worked out on paper.
#include "src/topology/system.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace chorus::topo {
namespace {

void expectError(const Status& s, std::initializer_list<std::string_view> parts) {
  ASSERT_FALSE(s.ok()) << "expected an error containing '" << *parts.begin() << "'";
  for (std::string_view p : parts)
    EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' not in: " << s.message();
}

int add(System* s, NodeType type, const std::string& name, int gen = 0, int width = 0,
        const std::string& busId = "") {
  Node n;
  n.type = type;
  n.name = name;
  n.busId = busId;
  n.pcieGen = gen;
  n.pcieWidth = width;
  auto i = s->addNode(n);
  EXPECT_TRUE(i.ok()) << i.status().toString();
  return i.ok() ? *i : -1;
}

Link link(int a, int b, LinkType type, double bw, double latency = 0, int count = 1) {
  Link l;
  l.a = a;
  l.b = b;
  l.type = type;
  l.bandwidthGBps = bw;
  l.latencyUs = latency;
  l.count = count;
  return l;
}

TEST(TopologyNames, EveryNameParsesBack) {
  for (int i = 0; i <= static_cast<int>(NodeType::kOtherPci); ++i) {
    auto t = static_cast<NodeType>(i);
    auto back = parseNodeType(nodeTypeName(t));
    ASSERT_TRUE(back.ok()) << nodeTypeName(t);
    EXPECT_EQ(*back, t);
  }
  for (int i = 0; i <= static_cast<int>(PathType::kDis); ++i) {
    auto t = static_cast<PathType>(i);
    auto back = parsePathType(pathTypeName(t));
    ASSERT_TRUE(back.ok()) << pathTypeName(t);
    EXPECT_EQ(*back, t);
  }
  for (int i = 0; i <= static_cast<int>(NicKind::kUnknown); ++i) {
    auto k = static_cast<NicKind>(i);
    auto back = parseNicKind(nicKindName(k));
    ASSERT_TRUE(back.ok()) << nicKindName(k);
    EXPECT_EQ(*back, k);
  }
  for (int i = 0; i <= static_cast<int>(LinkType::kNetwork); ++i) {
    auto t = static_cast<LinkType>(i);
    auto back = parseLinkType(linkTypeName(t));
    ASSERT_TRUE(back.ok()) << linkTypeName(t);
    EXPECT_EQ(*back, t);
  }
  EXPECT_EQ(nodeTypeName(NodeType::kPciSwitch), "pci");
  EXPECT_EQ(nodeTypeName(NodeType::kOtherPci), "pcidev");
  EXPECT_EQ(linkTypeName(LinkType::kCpuInterconnect), "sys");
  EXPECT_EQ(pathTypeName(PathType::kPxb), "PXB");
  EXPECT_EQ(nicKindName(NicKind::kInfiniBand), "infiniband");
}

TEST(TopologyNames, UnknownNamesAreRefusedWithTheChoices) {
  expectError(parseNodeType("GPU").status(), {"unknown node type 'GPU'", "gpu, nic"});
  expectError(parsePathType("nvl").status(), {"unknown path type 'nvl'", "NVL"});
  expectError(parseNicKind("").status(), {"unknown NIC kind ''"});
  expectError(parseLinkType("pci").status(), {"unknown link type 'pci'", "pcie"});
}

TEST(PcieArithmetic, BandwidthPerGenerationAndWidth) {
  EXPECT_DOUBLE_EQ(pcieGBps(1, 1), 0.25);
  EXPECT_DOUBLE_EQ(pcieGBps(2, 1), 0.5);
  EXPECT_NEAR(pcieGBps(3, 1), 0.985, 0.001);
  EXPECT_NEAR(pcieGBps(4, 1), 1.969, 0.001);
  EXPECT_NEAR(pcieGBps(5, 1), 3.938, 0.001);
  EXPECT_NEAR(pcieGBps(6, 1), 7.877, 0.001);
  EXPECT_NEAR(pcieGBps(3, 16), 15.754, 0.001);
  EXPECT_NEAR(pcieGBps(4, 16), 31.508, 0.001);
  EXPECT_NEAR(pcieGBps(5, 16), 63.015, 0.001);
  EXPECT_DOUBLE_EQ(pcieGBps(2, 8), 4.0);
  EXPECT_DOUBLE_EQ(pcieGBps(4, 32), 2 * pcieGBps(4, 16));
  for (auto [gen, width] : {std::pair{0, 16}, {7, 16}, {-1, 16}, {3, 0}, {3, 33}, {3, -4}})
    EXPECT_EQ(pcieGBps(gen, width), 0) << gen << " x" << width;
}

TEST(PcieArithmetic, GenerationOfATransferRate) {
  EXPECT_EQ(pcieGenOfGTs(2.5), 1);
  EXPECT_EQ(pcieGenOfGTs(5), 2);
  EXPECT_EQ(pcieGenOfGTs(8), 3);
  EXPECT_EQ(pcieGenOfGTs(16), 4);
  EXPECT_EQ(pcieGenOfGTs(16.0), 4);
  EXPECT_EQ(pcieGenOfGTs(32), 5);
  EXPECT_EQ(pcieGenOfGTs(64), 6);
  for (double gts : {0.0, 12.0, 128.0, -16.0, std::nan(""), 1e300})
    EXPECT_EQ(pcieGenOfGTs(gts), 0) << gts;
}

TEST(TopologyDefaults, OneTable) {
  EXPECT_EQ(defaults::nvlinkGBps(60), 20);
  EXPECT_EQ(defaults::nvlinkGBps(70), 25);
  EXPECT_EQ(defaults::nvlinkGBps(80), 25);
  EXPECT_EQ(defaults::nvlinkGBps(90), 25);
  EXPECT_EQ(defaults::nvlinkGBps(100), 50);
  EXPECT_EQ(defaults::nvlinkGBps(0), 25);
  EXPECT_EQ(defaults::cpuInterconnectGBps("GenuineIntel"), 40);
  EXPECT_EQ(defaults::cpuInterconnectGBps("AuthenticAMD"), 50);
  EXPECT_EQ(defaults::cpuInterconnectGBps("SomethingElse"), 20);
  EXPECT_DOUBLE_EQ(defaults::unknownPcieGBps(), pcieGBps(3, 16));
  EXPECT_GT(defaults::pcieLatencyUs(), 0);
  EXPECT_GT(defaults::nvlinkLatencyUs(), 0);
  EXPECT_GT(defaults::cpuInterconnectLatencyUs(), 0);
}

TEST(SystemBuilding, NamesAndBusIdsAreUnique) {
  System s;
  add(&s, NodeType::kCpu, "cpu0");
  add(&s, NodeType::kGpu, "gpu0", 4, 16, "0000:01:00.0");
  Node dup;
  dup.name = "cpu0";
  expectError(s.addNode(dup).status(), {"two topology nodes are named 'cpu0'"});
  dup.name = "other";
  dup.busId = "0000:01:00.0";
  expectError(s.addNode(dup).status(), {"bus id 0000:01:00.0", "'gpu0'"});
  dup.name = "";
  expectError(s.addNode(dup).status(), {"needs a name"});
  EXPECT_EQ(s.nodes().size(), 2u);
  EXPECT_EQ(s.find("gpu0"), 1);
  EXPECT_EQ(s.find("nope"), -1);
  EXPECT_EQ(s.findBusId("0000:01:00.0"), 1);
  EXPECT_EQ(s.findBusId(""), -1);
  EXPECT_EQ(s.findBusId("0000:02:00.0"), -1);
}

TEST(SystemBuilding, BadLinksAreRefused) {
  System s;
  int a = add(&s, NodeType::kCpu, "cpu0");
  int b = add(&s, NodeType::kCpu, "cpu1");
  expectError(s.addLink(link(a, a, LinkType::kCpuInterconnect, 1)), {"to itself"});
  expectError(s.addLink(link(a, 7, LinkType::kCpuInterconnect, 1)), {"does not exist"});
  expectError(s.addLink(link(-1, b, LinkType::kCpuInterconnect, 1)), {"does not exist"});
  expectError(s.addLink(link(a, b, LinkType::kCpuInterconnect, std::nan(""))), {"finite"});
  expectError(s.addLink(link(a, b, LinkType::kCpuInterconnect, -1)), {"non-negative"});
  expectError(s.addLink(link(a, b, LinkType::kCpuInterconnect, 1,
                             std::numeric_limits<double>::infinity())),
              {"finite"});
  expectError(s.addLink(link(a, b, LinkType::kNvLink, 1, 0, 0)), {"count must be at least 1"});
  EXPECT_TRUE(s.links().empty());
  EXPECT_TRUE(s.linksOf(a).empty());
  EXPECT_TRUE(s.addLink(link(a, b, LinkType::kCpuInterconnect, 12.5, 0.1)).ok());
  EXPECT_EQ(s.linksOf(a), std::vector<int>{0});
  EXPECT_EQ(s.linksOf(b), std::vector<int>{0});
  EXPECT_TRUE(s.linksOf(99).empty());
}

TEST(SystemBuilding, AttachSetsTheParentAndAPcieLink) {
  System s;
  int cpu = add(&s, NodeType::kCpu, "cpu0");
  int sw = add(&s, NodeType::kPciSwitch, "sw", 5, 16);
  int gpu = add(&s, NodeType::kGpu, "gpu", 0, 16);  // generation unknown
  ASSERT_TRUE(s.attach(sw, cpu).ok());
  ASSERT_TRUE(s.attach(gpu, sw, 9.5).ok());
  EXPECT_EQ(s.node(sw).parent, cpu);
  EXPECT_EQ(s.node(gpu).parent, sw);
  ASSERT_EQ(s.links().size(), 2u);
  EXPECT_EQ(s.links()[0].type, LinkType::kPcie);
  EXPECT_DOUBLE_EQ(s.links()[0].bandwidthGBps, pcieGBps(5, 16));
  EXPECT_DOUBLE_EQ(s.links()[0].latencyUs, defaults::pcieLatencyUs());
  EXPECT_DOUBLE_EQ(s.links()[1].bandwidthGBps, 9.5);  // the fallback
  EXPECT_EQ(s.cpuOf(gpu), cpu);
  EXPECT_EQ(s.cpuOf(cpu), cpu);
  EXPECT_EQ(s.cpuOf(-3), -1);
  EXPECT_TRUE(s.validate().ok()) << s.validate().toString();

  expectError(s.attach(gpu, cpu), {"already attached below node 'sw'"});
  expectError(s.attach(cpu, sw), {"cannot attach CPU"});
  expectError(s.attach(gpu, gpu), {"to itself"});
  expectError(s.attach(gpu, 42), {"no such node"});
  // A loose subtree cannot be hung below its own descendant.
  int top = add(&s, NodeType::kPciSwitch, "top");
  int below = add(&s, NodeType::kPciSwitch, "below");
  ASSERT_TRUE(s.attach(below, top).ok());
  expectError(s.attach(top, below), {"below its own descendant"});
  EXPECT_EQ(s.cpuOf(below), -1);
}

TEST(SystemBuilding, OfTypeKeepsInsertionOrder) {
  System s;
  add(&s, NodeType::kGpu, "g1");
  add(&s, NodeType::kCpu, "c");
  add(&s, NodeType::kGpu, "g0");
  EXPECT_EQ(s.ofType(NodeType::kGpu), (std::vector<int>{0, 2}));
  EXPECT_EQ(s.ofType(NodeType::kNic), std::vector<int>{});
}

// Two sockets:
//   cpu0 ─ swA ─ swA1 ─ gpu0, nic0 (x8)
//        │     └ swA2 ─ gpu1
//        └ gpu2 (gen3)
//   cpu1 ─ swB ─ gpu3
struct TwoSockets {
  System s;
  int cpu0, cpu1, swA, swA1, swA2, swB, gpu0, gpu1, gpu2, gpu3, nic0;
  TwoSockets() {
    cpu0 = add(&s, NodeType::kCpu, "cpu0");
    cpu1 = add(&s, NodeType::kCpu, "cpu1");
    swA = add(&s, NodeType::kPciSwitch, "swA", 4, 16);
    swA1 = add(&s, NodeType::kPciSwitch, "swA1", 4, 16);
    swA2 = add(&s, NodeType::kPciSwitch, "swA2", 4, 16);
    swB = add(&s, NodeType::kPciSwitch, "swB", 4, 16);
    gpu0 = add(&s, NodeType::kGpu, "gpu0", 4, 16);
    gpu1 = add(&s, NodeType::kGpu, "gpu1", 4, 16);
    gpu2 = add(&s, NodeType::kGpu, "gpu2", 3, 16);
    gpu3 = add(&s, NodeType::kGpu, "gpu3", 4, 16);
    nic0 = add(&s, NodeType::kNic, "nic0", 4, 8);
    for (auto [child, parent] : {std::pair{swA, cpu0}, {swA1, swA}, {swA2, swA}, {gpu0, swA1},
                                 {nic0, swA1}, {gpu1, swA2}, {gpu2, cpu0}, {swB, cpu1},
                                 {gpu3, swB}})
      EXPECT_TRUE(s.attach(child, parent).ok());
  }
};

TEST(SystemPaths, PciTreeClassification) {
  TwoSockets t;
  const System& s = t.s;
  double x16 = pcieGBps(4, 16), pcie = defaults::pcieLatencyUs();

  Path p = s.path(t.gpu0, t.nic0);
  EXPECT_EQ(p.type, PathType::kPix);
  EXPECT_DOUBLE_EQ(p.bandwidthGBps, pcieGBps(4, 8));  // the NIC's x8 link
  EXPECT_DOUBLE_EQ(p.latencyUs, 2 * pcie);
  EXPECT_EQ(p.nodes, (std::vector<int>{t.gpu0, t.swA1, t.nic0}));

  p = s.path(t.gpu0, t.gpu1);  // through swA1, swA and swA2
  EXPECT_EQ(p.type, PathType::kPxb);
  EXPECT_DOUBLE_EQ(p.bandwidthGBps, x16);
  EXPECT_DOUBLE_EQ(p.latencyUs, 4 * pcie);
  EXPECT_EQ(p.nodes, (std::vector<int>{t.gpu0, t.swA1, t.swA, t.swA2, t.gpu1}));

  p = s.path(t.gpu0, t.gpu2);
  EXPECT_EQ(p.type, PathType::kPhb);
  EXPECT_DOUBLE_EQ(p.bandwidthGBps, pcieGBps(3, 16));
  EXPECT_EQ(p.nodes, (std::vector<int>{t.gpu0, t.swA1, t.swA, t.cpu0, t.gpu2}));

  p = s.path(t.swA1, t.gpu0);  // a switch and a device right below it
  EXPECT_EQ(p.type, PathType::kPix);
  EXPECT_EQ(p.nodes, (std::vector<int>{t.swA1, t.gpu0}));

  p = s.path(t.gpu0, t.cpu0);
  EXPECT_EQ(p.type, PathType::kPhb);
  EXPECT_EQ(p.nodes, (std::vector<int>{t.gpu0, t.swA1, t.swA, t.cpu0}));

  p = s.path(t.gpu0, t.gpu0);
  EXPECT_EQ(p.type, PathType::kLoc);
  EXPECT_TRUE(std::isinf(p.bandwidthGBps));
  EXPECT_EQ(p.latencyUs, 0);
  EXPECT_EQ(p.nodes, std::vector<int>{t.gpu0});

  // No interconnect described: the sockets are disconnected until connectCpus().
  EXPECT_EQ(s.path(t.gpu0, t.gpu3).type, PathType::kDis);
  EXPECT_TRUE(s.path(t.gpu0, t.gpu3).nodes.empty());
  EXPECT_EQ(s.path(t.gpu0, 99).type, PathType::kDis);
  EXPECT_EQ(s.path(-1, t.gpu0).type, PathType::kDis);
  // Paths are symmetric in type and bandwidth.
  for (int a = 0; a < static_cast<int>(s.nodes().size()); ++a)
    for (int b = 0; b < static_cast<int>(s.nodes().size()); ++b) {
      EXPECT_EQ(s.path(a, b).type, s.path(b, a).type) << a << " " << b;
      EXPECT_EQ(s.path(a, b).bandwidthGBps, s.path(b, a).bandwidthGBps) << a << " " << b;
    }
}

TEST(SystemPaths, AcrossSocketsTheInterconnectCanBeTheBottleneck) {
  TwoSockets t;
  ASSERT_TRUE(t.s.addLink(link(t.cpu0, t.cpu1, LinkType::kCpuInterconnect, 10.0, 0.3)).ok());
  EXPECT_EQ(t.s.connectCpus(), 0);  // already joined
  Path p = t.s.path(t.gpu0, t.gpu3);
  EXPECT_EQ(p.type, PathType::kSys);
  EXPECT_DOUBLE_EQ(p.bandwidthGBps, 10.0);
  EXPECT_DOUBLE_EQ(p.latencyUs, 5 * defaults::pcieLatencyUs() + 0.3);
  EXPECT_EQ(p.nodes, (std::vector<int>{t.gpu0, t.swA1, t.swA, t.cpu0, t.cpu1, t.swB, t.gpu3}));
  p = t.s.path(t.cpu1, t.cpu0);
  EXPECT_EQ(p.type, PathType::kSys);
  EXPECT_EQ(p.nodes, (std::vector<int>{t.cpu1, t.cpu0}));
  EXPECT_TRUE(t.s.validate().ok());
}

TEST(SystemPaths, ConnectCpusJoinsEveryComponentOnce) {
  TwoSockets t;
  int cpu2 = add(&t.s, NodeType::kCpu, "cpu2");
  t.s.node(t.cpu0).cpuVendor = "AuthenticAMD";
  t.s.node(t.cpu1).cpuVendor = "AuthenticAMD";
  ASSERT_TRUE(t.s.addLink(link(t.cpu0, t.cpu1, LinkType::kCpuInterconnect, 70)).ok());
  EXPECT_EQ(t.s.connectCpus(), 2);  // cpu2 to cpu0 and to cpu1
  EXPECT_EQ(t.s.connectCpus(), 0);
  const Link& l = t.s.links().back();
  EXPECT_EQ(l.type, LinkType::kCpuInterconnect);
  EXPECT_EQ(l.b, cpu2);
  // cpu2 has no vendor: the smaller of the two ends' defaults.
  EXPECT_DOUBLE_EQ(l.bandwidthGBps, defaults::cpuInterconnectGBps(""));
  EXPECT_EQ(t.s.path(t.gpu3, cpu2).type, PathType::kSys);
  EXPECT_DOUBLE_EQ(t.s.path(t.gpu0, t.gpu3).bandwidthGBps, pcieGBps(4, 16));
}

TEST(SystemPaths, NvlinkDirectAndThroughOneGpu) {
  TwoSockets t;
  System& s = t.s;
  t.s.connectCpus();
  for (int g : {t.gpu0, t.gpu1, t.gpu2, t.gpu3}) s.node(g).computeCapability = 80;
  // gpu0 = gpu1 (2 links) = gpu2 (1 link); gpu3 has none.
  ASSERT_TRUE(s.addLink(link(t.gpu0, t.gpu1, LinkType::kNvLink, 50, 0.2, 2)).ok());
  ASSERT_TRUE(s.addLink(link(t.gpu1, t.gpu2, LinkType::kNvLink, 25, 0.2, 1)).ok());

  Path p = s.path(t.gpu0, t.gpu1);
  EXPECT_EQ(p.type, PathType::kNvl);
  EXPECT_DOUBLE_EQ(p.bandwidthGBps, 50);
  EXPECT_DOUBLE_EQ(p.latencyUs, 0.2);
  EXPECT_EQ(p.nodes, (std::vector<int>{t.gpu0, t.gpu1}));

  p = s.path(t.gpu2, t.gpu0);
  EXPECT_EQ(p.type, PathType::kNvb);
  EXPECT_DOUBLE_EQ(p.bandwidthGBps, 25);
  EXPECT_DOUBLE_EQ(p.latencyUs, 0.4);
  EXPECT_EQ(p.nodes, (std::vector<int>{t.gpu2, t.gpu1, t.gpu0}));

  EXPECT_EQ(s.path(t.gpu0, t.gpu3).type, PathType::kSys);
  // NVB is for GPU pairs only: the NIC next to gpu0 still goes over PCIe.
  EXPECT_EQ(s.path(t.nic0, t.gpu1).type, PathType::kPxb);

  // A second bundle between the same pair adds up.
  ASSERT_TRUE(s.addLink(link(t.gpu0, t.gpu1, LinkType::kNvLink, 25, 0.2, 1)).ok());
  EXPECT_DOUBLE_EQ(s.path(t.gpu1, t.gpu0).bandwidthGBps, 75);
}

TEST(SystemPaths, NvswitchFabrics) {
  System s;
  int cpu = add(&s, NodeType::kCpu, "cpu0");
  int g0 = add(&s, NodeType::kGpu, "g0", 5, 16);
  int g1 = add(&s, NodeType::kGpu, "g1", 5, 16);
  int g2 = add(&s, NodeType::kGpu, "g2", 5, 16);
  int sw1 = add(&s, NodeType::kNvSwitch, "nvs1");
  int sw2 = add(&s, NodeType::kNvSwitch, "nvs2");
  for (int g : {g0, g1, g2}) ASSERT_TRUE(s.attach(g, cpu).ok());
  // g0: 3 links to nvs1, 2 to nvs2; g1: 1 to nvs1, 4 to nvs2; g2: 2 to nvs2 only.
  for (auto [g, sw, n] : {std::tuple{g0, sw1, 3}, {g0, sw2, 2}, {g1, sw1, 1}, {g1, sw2, 4},
                          {g2, sw2, 2}})
    ASSERT_TRUE(s.addLink(link(g, sw, LinkType::kNvLink, 25.0 * n, 0.15, n)).ok());

  // Separate switches: each carries min(in, out); the sum is the path's bandwidth.
  Path p = s.path(g0, g1);
  EXPECT_EQ(p.type, PathType::kNvl);
  EXPECT_DOUBLE_EQ(p.bandwidthGBps, 25 * (std::min(3, 1) + std::min(2, 4)));
  ASSERT_EQ(p.nodes.size(), 3u);
  EXPECT_EQ(p.nodes[1], sw2);  // the wider of the two
  EXPECT_DOUBLE_EQ(p.latencyUs, 0.3);
  EXPECT_DOUBLE_EQ(s.path(g2, g0).bandwidthGBps, 50);
  EXPECT_EQ(s.path(g0, sw1).type, PathType::kNvl);
  EXPECT_DOUBLE_EQ(s.path(g0, sw1).bandwidthGBps, 75);
  EXPECT_EQ(s.path(sw1, cpu).type, PathType::kDis);  // the switches hang from no CPU

  // Joined switches form one fabric: min(all of g0's links, all of g1's).
  ASSERT_TRUE(s.addLink(link(sw1, sw2, LinkType::kNvLink, 500, 0.15, 20)).ok());
  p = s.path(g0, g1);
  EXPECT_DOUBLE_EQ(p.bandwidthGBps, 25 * 5);
  EXPECT_EQ(p.nodes.front(), g0);
  EXPECT_EQ(p.nodes.back(), g1);
  // g2 reaches only nvs2; from g0 the route may cross nvs1 -> nvs2, but it starts and ends right.
  p = s.path(g0, g2);
  EXPECT_EQ(p.type, PathType::kNvl);
  EXPECT_DOUBLE_EQ(p.bandwidthGBps, 50);
  EXPECT_EQ(s.node(p.nodes[1]).type, NodeType::kNvSwitch);
  EXPECT_TRUE(s.validate().ok()) << s.validate().toString();
}

TEST(SystemInvariants, ValidateFindsBrokenModels) {
  {
    TwoSockets t;
    EXPECT_TRUE(t.s.validate().ok()) << t.s.validate().toString();
  }
  {
    TwoSockets t;
    t.s.node(t.swA).parent = t.gpu0;  // gpu0 -> swA1 -> swA -> gpu0
    expectError(t.s.validate(), {"loops back"});
    EXPECT_EQ(t.s.cpuOf(t.gpu0), -1);  // and no endless walk
    EXPECT_EQ(t.s.path(t.gpu0, t.gpu1).type, PathType::kDis);
  }
  {
    TwoSockets t;
    t.s.node(t.gpu3).parent = 99;
    expectError(t.s.validate(), {"'gpu3'", "parent 99 does not exist"});
  }
  {
    TwoSockets t;
    t.s.node(t.gpu3).parent = t.cpu0;  // no link to the new parent
    expectError(t.s.validate(), {"'gpu3'", "no pcie link to its parent 'cpu0'"});
  }
  {
    TwoSockets t;
    ASSERT_TRUE(t.s.addLink(link(t.gpu0, t.gpu3, LinkType::kPcie, 1)).ok());
    expectError(t.s.validate(), {"gpu0 - gpu3", "must join a node to its parent"});
  }
  {
    TwoSockets t;
    ASSERT_TRUE(t.s.addLink(link(t.gpu0, t.cpu1, LinkType::kCpuInterconnect, 1)).ok());
    expectError(t.s.validate(), {"must join two CPUs"});
  }
  {
    TwoSockets t;
    t.s.node(t.cpu1).parent = t.cpu0;
    expectError(t.s.validate(), {"'cpu1'", "a CPU cannot have a parent"});
  }
  {
    TwoSockets t;
    t.s.node(t.cpu0).cpus = {0, 1, -2};
    expectError(t.s.validate(), {"negative CPU id -2"});
  }
  {
    TwoSockets t;
    t.s.node(t.nic0).netDevice = "eth\xff";
    expectError(t.s.validate(), {"not valid UTF-8"});
    t.s.node(t.nic0).netDevice = "\xed\xa0\x80";  // a surrogate
    expectError(t.s.validate(), {"not valid UTF-8"});
    t.s.node(t.nic0).netDevice = "\xc0\xaf";  // overlong '/'
    expectError(t.s.validate(), {"not valid UTF-8"});
    t.s.node(t.nic0).netDevice = "\xe2\x82";  // truncated
    expectError(t.s.validate(), {"not valid UTF-8"});
    t.s.node(t.nic0).netDevice = "r\xc3\xa9seau-\xf0\x9f\x94\x97";
    EXPECT_TRUE(t.s.validate().ok()) << t.s.validate().toString();
  }
  {
    TwoSockets t;
    t.s.node(t.nic0).pcieWidth = 64;
    expectError(t.s.validate(), {"pcieWidth 64"});
    t.s.node(t.nic0).pcieWidth = 8;
    t.s.node(t.nic0).speedGbps = std::nan("");
    expectError(t.s.validate(), {"speed"});
    t.s.node(t.nic0).speedGbps = 100;
    t.s.node(t.nic0).pciClass = 0x1000000;
    expectError(t.s.validate(), {"24 bits"});
  }
}

TEST(SystemInvariants, EqualityComparesContentNotIndexes) {
  TwoSockets a, b;
  EXPECT_TRUE(a.s == b.s);
  b.s.hostName = "other";
  EXPECT_FALSE(a.s == b.s);
  TwoSockets c;
  c.s.node(c.gpu0).cudaDevice = 3;
  EXPECT_FALSE(a.s == c.s);
  TwoSockets d;
  d.s.connectCpus();
  EXPECT_FALSE(a.s == d.s);
}

}  // namespace
}  // namespace chorus::topo
