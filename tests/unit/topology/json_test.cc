// The chorus-topology JSON format: exact round trips (real files, fixtures, random systems),
// the hand-written two-socket fixture, and errors that name the element.
#include "src/topology/json.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "src/topology/nccl_xml.h"

namespace chorus::topo {
namespace {

std::string dataPath(const std::string& name) {
  return std::string(CHORUS_TEST_DATA_DIR) + "/topologies/" + name;
}

void expectError(const Status& s, std::initializer_list<std::string_view> parts) {
  ASSERT_FALSE(s.ok()) << "expected an error containing '" << *parts.begin() << "'";
  for (std::string_view p : parts)
    EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' not in: " << s.message();
}

void expectExactRoundTrip(const System& s) {
  std::string text = toJson(s);
  auto back = fromJson(text);
  ASSERT_TRUE(back.ok()) << back.status().toString() << "\n" << text;
  EXPECT_TRUE(*back == s) << text;
  EXPECT_EQ(toJson(*back), text);
}

TEST(TopologyJson, RealFilesAndFixturesRoundTripExactly) {
  for (const char* name :
       {"ndv2-topo.xml", "ndv4-topo.xml", "ndv5-topo.xml", "dgx-h100-like.xml"}) {
    SCOPED_TRACE(name);
    auto s = importNcclXmlFile(dataPath(name));
    ASSERT_TRUE(s.ok()) << s.status().toString();
    s->hostName = "host-" + std::string(name);
    s->hostId = 0xfedcba9876543210ull;
    expectExactRoundTrip(*s);
  }
  auto cpuOnly = loadJsonFile(dataPath("two-socket-cpu.json"));
  ASSERT_TRUE(cpuOnly.ok()) << cpuOnly.status().toString();
  expectExactRoundTrip(*cpuOnly);
  expectExactRoundTrip(System());
}

TEST(TopologyJson, TwoSocketFixture) {
  auto loaded = loadJsonFile(dataPath("two-socket-cpu.json"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().toString();
  const System& s = *loaded;
  EXPECT_EQ(s.hostName, "cpu-server-2s");
  EXPECT_EQ(s.hostId, 0xc0ffee02u);
  EXPECT_EQ(s.ofType(NodeType::kCpu).size(), 2u);
  EXPECT_EQ(s.ofType(NodeType::kNic).size(), 2u);
  EXPECT_EQ(s.ofType(NodeType::kGpu).size(), 0u);
  const Node& cpu1 = s.node(s.find("cpu1"));
  EXPECT_EQ(cpu1.numa, 1);
  EXPECT_EQ(cpu1.cores, 32);
  ASSERT_EQ(cpu1.cpus.size(), 64u);
  EXPECT_EQ(cpu1.cpus.front(), 32);
  EXPECT_EQ(cpu1.cpus[31], 63);
  EXPECT_EQ(cpu1.cpus[32], 96);
  EXPECT_EQ(cpu1.cpus.back(), 127);
  EXPECT_EQ(cpu1.l3Bytes, 48u << 20);
  int eth0 = s.findBusId("0000:17:00.0"), eth1 = s.findBusId("0000:b1:00.0");
  ASSERT_GE(eth0, 0);
  ASSERT_GE(eth1, 0);
  EXPECT_EQ(s.node(eth0).netDevice, "eth0");
  EXPECT_EQ(s.node(eth0).nicKind, NicKind::kEthernet);
  EXPECT_EQ(s.node(eth0).speedGbps, 25);
  EXPECT_EQ(s.node(eth1).numa, 1);
  EXPECT_EQ(s.cpuOf(eth1), s.find("cpu1"));

  Path p = s.path(eth0, s.find("cpu0"));
  EXPECT_EQ(p.type, PathType::kPhb);
  EXPECT_DOUBLE_EQ(p.bandwidthGBps, 7.877);
  p = s.path(eth0, eth1);
  EXPECT_EQ(p.type, PathType::kSys);
  EXPECT_DOUBLE_EQ(p.bandwidthGBps, 7.877);
  EXPECT_DOUBLE_EQ(p.latencyUs, 0.25 + 0.1 + 0.25);
  EXPECT_EQ(p.nodes, (std::vector<int>{eth0, s.find("cpu0"), s.find("cpu1"), eth1}));
  p = s.path(s.find("cpu0"), s.find("cpu1"));
  EXPECT_EQ(p.type, PathType::kSys);
  EXPECT_DOUBLE_EQ(p.bandwidthGBps, 40);
}

// A system with every field set to fresh random values, including awkward strings and doubles
// with full mantissas, so "exact" means exact.
System randomSystem(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> real(0, 1000);
  auto pick = [&rng](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  const char* strings[] = {"plain", "with \"quotes\" and \\ backslash", "tab\there",
                           "caf\xc3\xa9 \xe2\x82\xac", "\x01\x1f control", ""};
  System s;
  s.hostName = strings[pick(6)];
  s.hostId = rng();
  int n = 3 + pick(30);
  for (int i = 0; i < n; ++i) {
    Node x;
    x.type = i < 2 ? NodeType::kCpu : static_cast<NodeType>(1 + pick(5));
    x.name = "n" + std::to_string(i) + strings[pick(6)];
    if (x.type != NodeType::kCpu && pick(3)) {
      char bus[16];
      std::snprintf(bus, sizeof bus, "%04x:%02x:00.0", i, pick(256));
      x.busId = bus;
    }
    x.pciClass = static_cast<uint32_t>(rng() & 0xffffff);
    x.vendor = static_cast<uint16_t>(rng());
    x.device = static_cast<uint16_t>(rng());
    x.pcieGen = pick(7);
    x.pcieWidth = pick(33);
    x.numa = pick(9) - 1;
    for (int c = 0, k = pick(40); c < k; ++c) x.cpus.push_back(pick(4) ? c : pick(1000));
    x.cores = pick(200);
    x.l2Bytes = rng();
    x.l3Bytes = rng() >> pick(64);
    x.cpuVendor = strings[pick(6)];
    x.cpuModel = strings[pick(6)];
    x.cudaDevice = pick(10) - 1;
    x.computeCapability = pick(120);
    x.netDevice = strings[pick(6)];
    x.port = pick(3);
    x.nicKind = static_cast<NicKind>(pick(4));
    x.speedGbps = pick(4) ? real(rng) : 0.0;
    x.linkUp = pick(2);
    auto index = s.addNode(x);
    EXPECT_TRUE(index.ok()) << index.status().toString();
    if (i >= 2 && index.ok()) {
      // A parent among the earlier non-leaf-looking nodes keeps the tree acyclic.
      EXPECT_TRUE(s.attach(*index, pick(i), real(rng)).ok());
    }
  }
  for (int k = 0, m = pick(20); k < m; ++k) {
    Link l;
    l.a = pick(n);
    l.b = pick(n);
    if (l.a == l.b) continue;
    l.type = LinkType::kNvLink;
    if (s.node(l.a).type == NodeType::kCpu && s.node(l.b).type == NodeType::kCpu)
      l.type = LinkType::kCpuInterconnect;
    else if (pick(4) == 0)
      l.type = LinkType::kNetwork;
    l.bandwidthGBps = real(rng);
    l.latencyUs = real(rng) / 1000;
    l.count = 1 + pick(18);
    EXPECT_TRUE(s.addLink(l).ok());
  }
  return s;
}

TEST(TopologyJson, RandomSystemsRoundTripExactly) {
  uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 50; ++i) {
    System s = randomSystem(rng);
    ASSERT_TRUE(s.validate().ok()) << s.validate().toString();
    expectExactRoundTrip(s);
  }
}

TEST(TopologyJson, CpuListsKeepTheirOrder) {
  System s;
  Node cpu;
  cpu.type = NodeType::kCpu;
  cpu.name = "cpu0";
  cpu.cpus = {5, 3, 4, 0, 1, 2, 7, 7, 9, 10, 11, 12};
  ASSERT_TRUE(s.addNode(cpu).ok());
  std::string text = toJson(s);
  EXPECT_NE(text.find("\"cpus\":\"5,3,4,0-2,7,7,9-12\""), std::string::npos) << text;
  expectExactRoundTrip(s);
}

TEST(TopologyJson, TheFormatIsReadable) {
  auto s = loadJsonFile(dataPath("two-socket-cpu.json"));
  ASSERT_TRUE(s.ok());
  std::string text = toJson(*s);
  EXPECT_EQ(text.rfind("{\n  \"format\": \"chorus-topology\",\n  \"version\": 1,\n", 0), 0u)
      << text;
  EXPECT_NE(text.find("\"id\":\"0x00000000c0ffee02\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"pciClass\":\"0x020000\""), std::string::npos) << text;
  // One node or link per line: 4 nodes, 3 links, and the frame.
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4 + 4 + 3 + 4 + 1);
  // Defaults are left out.
  EXPECT_EQ(text.find("cudaDevice"), std::string::npos);
  EXPECT_EQ(text.find("\"count\""), std::string::npos);
}

TEST(TopologyJson, ErrorsNameTheElement) {
  const std::string head = R"({"format": "chorus-topology", "version": 1, )";
  const std::string cpu = R"({"name": "cpu0", "type": "cpu"})";
  struct Case {
    std::string text;
    std::vector<std::string_view> parts;
  };
  const Case cases[] = {
      {"", {"not valid JSON", "line 1"}},
      {"{\"format\": ", {"not valid JSON"}},
      {"[1, 2]", {"expected a JSON object"}},
      {R"({"version": 1})", {"format: missing"}},
      {R"({"format": "nccl", "version": 1})", {"'nccl' is not 'chorus-topology'"}},
      {R"({"format": "chorus-topology"})", {"version: missing"}},
      {R"({"format": "chorus-topology", "version": 2})", {"version: 2 is not supported"}},
      {R"({"format": "chorus-topology", "version": "1"})", {"version: expected an integer"}},
      {head + R"("extra": 1})", {"topology: unknown field 'extra'"}},
      {head + R"("host": []})", {"host: expected an object"}},
      {head + R"("host": {"id": "0xzz"}})", {"host.id: expected a hex string"}},
      {head + R"("host": {"id": -5}})", {"host.id", "out of range"}},
      {head + R"("nodes": {}})", {"nodes: expected an array"}},
      {head + R"("nodes": [5]})", {"nodes[0]: expected an object"}},
      {head + R"("nodes": [{"type": "cpu"}]})", {"nodes[0].name: missing"}},
      {head + R"("nodes": [)" + cpu + R"(, {"name": "g", "type": "gpu", "busId": 7}]})",
       {"nodes[1].busId: expected a string"}},
      {head + R"("nodes": [{"name": "g", "type": "gpux"}]})",
       {"nodes[0].type: unknown node type 'gpux'"}},
      {head + R"("nodes": [{"name": "g", "type": "gpu", "pcieGne": 4}]})",
       {"nodes[0]: unknown field 'pcieGne'"}},
      {head + R"("nodes": [{"name": "g", "type": "gpu", "pcieGen": 4.5}]})",
       {"nodes[0].pcieGen: expected an integer"}},
      {head + R"("nodes": [{"name": "g", "type": "gpu", "pcieGen": 4294967296}]})",
       {"nodes[0].pcieGen", "out of range"}},
      {head + R"("nodes": [{"name": "g", "type": "gpu", "pciClass": "0x1000000"}]})",
       {"nodes[0].pciClass: 0x1000000 is larger than 0xffffff"}},
      {head + R"("nodes": [{"name": "g", "type": "gpu", "vendor": "10de"}]})",
       {"nodes[0].vendor: expected a hex string"}},
      {head + R"("nodes": [{"name": "c", "type": "cpu", "cpus": "3-1"}]})",
       {"nodes[0].cpus: '3-1' is not a CPU id"}},
      {head + R"("nodes": [{"name": "c", "type": "cpu", "cpus": "0-1000000000"}]})",
       {"nodes[0].cpus: more than"}},
      {head + R"("nodes": [{"name": "c", "type": "cpu", "cpus": [1, 2]}]})",
       {"nodes[0].cpus: expected a string"}},
      {head + R"("nodes": [{"name": "c", "type": "cpu", "l2Bytes": -1}]})",
       {"nodes[0].l2Bytes", "out of range"}},
      {head + R"("nodes": [{"name": "n", "type": "nic", "nicKind": "wifi"}]})",
       {"nodes[0].nicKind: unknown NIC kind 'wifi'"}},
      {head + R"("nodes": [{"name": "n", "type": "nic", "linkUp": 1}]})",
       {"nodes[0].linkUp: expected true or false"}},
      {head + R"("nodes": [)" + cpu + ", " + cpu + "]}", {"nodes[1]", "named 'cpu0'"}},
      {head + R"("nodes": [{"name": "g", "type": "gpu", "parent": "sw"}]})",
       {"nodes[0].parent: no node named 'sw'"}},
      {head + R"("nodes": [)" + cpu +
           R"(], "links": [{"a": "cpu0", "b": "nope", "type": "sys", "bandwidthGBps": 1, "latencyUs": 0}]})",
       {"links[0].b: no node named 'nope'"}},
      {head + R"("nodes": [)" + cpu +
           R"(, {"name": "c1", "type": "cpu"}], "links": [{"a": "cpu0", "b": "c1", "type": "sys", "latencyUs": 0}]})",
       {"links[0].bandwidthGBps: missing"}},
      {head + R"("nodes": [)" + cpu +
           R"(, {"name": "c1", "type": "cpu"}], "links": [{"a": "cpu0", "b": "c1", "type": "sys", "bandwidthGBps": -2, "latencyUs": 0}]})",
       {"links[0]", "non-negative"}},
      {head + R"("nodes": [)" + cpu +
           R"(, {"name": "c1", "type": "cpu"}], "links": [{"a": "cpu0", "b": "c1", "type": "sys", "bandwidthGBps": 2, "latencyUs": 0, "count": 0}]})",
       {"links[0]", "count must be at least 1"}},
      // Parents without their pcie link, and a parent cycle: validate() speaks.
      {head + R"("nodes": [)" + cpu + R"(, {"name": "g", "type": "gpu", "parent": "cpu0"}]})",
       {"'g'", "no pcie link to its parent"}},
      {head +
           R"("nodes": [{"name": "a", "type": "pci", "parent": "b"}, {"name": "b", "type": "pci", "parent": "a"}],
              "links": [{"a": "a", "b": "b", "type": "pcie", "bandwidthGBps": 1, "latencyUs": 0}]})",
       {"loops back"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto s = fromJson(c.text);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
    for (std::string_view p : c.parts)
      EXPECT_NE(s.status().message().find(p), std::string::npos)
          << "'" << p << "' not in: " << s.status().message();
  }
}

TEST(TopologyJson, DeeplyNestedOrHugeInputIsRefusedCleanly) {
  std::string deep(200000, '[');
  deep += std::string(200000, ']');
  expectError(fromJson(deep).status(), {"expected a JSON object"});
  expectError(fromJson(std::string(100000, '{')).status(), {"not valid JSON"});
}

TEST(TopologyJson, Files) {
  auto s = importNcclXmlFile(dataPath("ndv4-topo.xml"));
  ASSERT_TRUE(s.ok()) << s.status().toString();
  std::string path = ::testing::TempDir() + "topology_json_test." + std::to_string(getpid()) + ".json";
  ASSERT_TRUE(saveJsonFile(*s, path).ok());
  auto back = loadJsonFile(path);
  ASSERT_TRUE(back.ok()) << back.status().toString();
  EXPECT_TRUE(*back == *s);
  std::remove(path.c_str());
  expectError(loadJsonFile(path).status(), {"fopen(" + path + ")", "No such file"});
  expectError(saveJsonFile(*s, "/nonexistent-dir/x.json"), {"fopen(/nonexistent-dir/x.json)"});
  // An XML file is not JSON, and the error says which file.
  expectError(loadJsonFile(dataPath("ndv2-topo.xml")).status(), {"ndv2-topo.xml", "not valid JSON"});
}

}  // namespace
}  // namespace chorus::topo
