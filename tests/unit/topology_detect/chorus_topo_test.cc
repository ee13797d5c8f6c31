// chorus-topo, run as a user would: on the recorded snapshots, on this machine, on the NCCL
// topology files of tests/data/topologies, and round-tripping its own JSON.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "src/bootstrap/peer_info.h"
#include "src/topology/json.h"
#include "tests/unit/tools/subprocess.h"

namespace chorus::test {
namespace {

namespace fs = std::filesystem;

std::string dataDir() { return CHORUS_TEST_DATA_DIR; }

ProcessResult topo(std::vector<std::string> args, std::vector<std::string> env = {}) {
  args.insert(args.begin(), CHORUS_TOPO_PATH);
  ProcessOptions o;
  o.deadlineSeconds = 30;
  o.extraEnv = std::move(env);
  return runProcess(args, o);
}

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// The first row of the table under the line starting with `section` that has the cell `cell`
// (the column headings are not a row).
std::string row(const std::string& text, const std::string& section, const std::string& cell) {
  size_t pos = text.find("\n" + section);
  if (pos == std::string::npos) return "";
  std::istringstream lines(text.substr(pos + 1));
  std::string line;
  std::getline(lines, line);  // the title
  std::getline(lines, line);  // the headings
  while (std::getline(lines, line) && !line.empty()) {
    std::istringstream cells(line);
    std::string c;
    while (cells >> c)
      if (c == cell) return line;
  }
  return "";
}

TEST(ChorusTopo, ThisVmSnapshot) {
  ProcessResult r = topo({"--root", dataDir() + "/sysfs/this-vm"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string& out = r.out;
  EXPECT_TRUE(contains(out, "host: vm ")) << out;
  EXPECT_TRUE(contains(out, "source: snapshot ")) << out;
  EXPECT_TRUE(contains(out, "NUMA nodes (1)")) << out;
  std::string cpu = row(out, "NUMA nodes", "cpu0");
  EXPECT_TRUE(contains(cpu, "cpu0") && contains(cpu, "0-1") && contains(cpu, "1 MiB") &&
              contains(cpu, "32 MiB") && contains(cpu, "AuthenticAMD AMD EPYC"))
      << cpu;
  EXPECT_TRUE(contains(out, "GPUs (0)")) << out;
  EXPECT_TRUE(contains(out, "NICs (3)")) << out;
  std::string eth0 = row(out, "NICs (3)", "eth0");
  EXPECT_TRUE(contains(eth0, "0000:00:03.0") && contains(eth0, " up ")) << eth0;
  std::string ifb0 = row(out, "NICs (3)", "ifb0");
  EXPECT_TRUE(contains(ifb0, "(not on PCI)") && contains(ifb0, "down")) << ifb0;
  // The matrix: eth0 (NIC0) to itself X, to the virtual interfaces no path; its CPU and NUMA
  // affinity.
  EXPECT_TRUE(contains(row(out, "NICs (3)", "eth0"), "NIC0"));
  std::string m = row(out, "Paths between", "NIC0");
  EXPECT_TRUE(contains(m, "NIC0  X     DIS   DIS   0-1           0")) << m;
  EXPECT_FALSE(contains(out, " lo ")) << out;
}

TEST(ChorusTopo, TwoSocketSnapshot) {
  ProcessResult r = topo({"--root", dataDir() + "/sysfs/two-socket"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string& out = r.out;
  EXPECT_TRUE(contains(out, "NUMA nodes (2)")) << out;
  EXPECT_TRUE(contains(row(out, "NUMA nodes", "cpu1"), "4-7,12-15")) << out;
  EXPECT_TRUE(contains(out, "PCIe switches (1)")) << out;
  std::string ens2 = row(out, "NICs (3)", "ens2f0");
  EXPECT_TRUE(contains(ens2, "mlx5_0 port 1") && contains(ens2, "roce") &&
              contains(ens2, "25 Gb/s") && contains(ens2, "gen3 x16") &&
              contains(ens2, "0000:81:00.0") && contains(ens2, "4-7,12-15"))
      << ens2;
  // NIC0 (ens1f0, socket 0) and NIC1 (ens2f0, socket 1) are a socket apart; docker0 is not on
  // PCI; the bottleneck between the NICs is ens1f0's gen3 x8 link.
  EXPECT_TRUE(contains(row(out, "NICs (3)", "ens1f0"), "NIC0"));
  EXPECT_TRUE(contains(row(out, "Paths between", "NIC0"), "NIC0  X     SYS   DIS   0-3,8-11"))
      << out;
  EXPECT_TRUE(contains(row(out, "Bottleneck bandwidth", "NIC1"), "NIC1  7.9   -     -")) << out;
}

TEST(ChorusTopo, JsonRoundTrip) {
  ProcessResult r = topo({"--root", dataDir() + "/sysfs/two-socket", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  StatusOr<topo::System> sys = topo::fromJson(r.out);
  ASSERT_TRUE(sys.ok()) << sys.status().toString() << "\n" << r.out;
  EXPECT_EQ(sys->ofType(topo::NodeType::kNic).size(), 3u);
  EXPECT_EQ(sys->hostName, "two-socket");

  // Printing the JSON back gives the report of the snapshot, but for the source line and the
  // detector table.
  fs::path file = fs::temp_directory_path() / ("chorus_topo_test_" + std::to_string(getpid()) + ".json");
  std::ofstream(file) << r.out;
  ProcessResult fromFile = topo({"--file", file.string()});
  ProcessResult fromRoot = topo({"--root", dataDir() + "/sysfs/two-socket"});
  fs::remove(file);
  ASSERT_EQ(fromFile.status, 0) << fromFile.err;
  auto body = [](const std::string& text) { return text.substr(text.find("\nNUMA nodes")); };
  EXPECT_EQ(body(fromFile.out), body(fromRoot.out));
}

TEST(ChorusTopo, ThisMachine) {
  ProcessResult r = topo({}, {"CHORUS_DEBUG=INFO", "CHORUS_DEBUG_SUBSYS=TOPO"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "host: " + bootstrap::localHostname() + " ")) << r.out;
  EXPECT_TRUE(contains(r.out, "source: detected on this host")) << r.out;
  for (const char* d : {"host", "hwloc", "sysfs", "nvml", "cuda", "ibverbs"})
    EXPECT_NE(row(r.out, "Detectors", d), "") << d << "\n" << r.out;
  // Every detector says at INFO what it did.
  EXPECT_TRUE(contains(r.err, "topology: nvml: ")) << r.err;
  EXPECT_TRUE(contains(r.err, "topology: sysfs: used")) << r.err;
  // Every interface but loopback in /sys/class/net is listed.
  for (const auto& e : fs::directory_iterator("/sys/class/net")) {
    std::string name = e.path().filename().string();
    if (name == "lo") continue;
    EXPECT_NE(row(r.out, "NICs", name), "") << name << "\n" << r.out;
  }
}

TEST(ChorusTopo, BadInputs) {
  ProcessResult missing = topo({"--file", "/nonexistent/topo.xml"});
  EXPECT_NE(missing.status, 0);
  EXPECT_TRUE(contains(missing.err, "/nonexistent/topo.xml")) << missing.err;

  fs::path file = fs::temp_directory_path() / ("chorus_topo_bad_" + std::to_string(getpid()) + ".xml");
  std::ofstream(file) << "<system version=\"1\"><cpu numaid=\"0\">\n";
  ProcessResult bad = topo({"--file", file.string()});
  fs::remove(file);
  EXPECT_EQ(bad.status, 1);
  EXPECT_TRUE(contains(bad.err, file.string())) << bad.err;

  ProcessResult env = topo({}, {"CHORUS_TOPO_DETECT=bogus"});
  EXPECT_EQ(env.status, 2);
  EXPECT_TRUE(contains(env.err, "CHORUS_TOPO_DETECT")) << env.err;

  EXPECT_EQ(topo({"--frobnicate"}).status, 2);
}

// Every NCCL topology XML checked in imports and prints a matrix over its GPUs and NICs.
TEST(ChorusTopo, NcclXmlFiles) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dataDir() + "/topologies", ec))
    if (e.path().extension() == ".xml") files.push_back(e.path());
  if (files.empty()) GTEST_SKIP() << "no XML files in " << dataDir() << "/topologies";
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    ProcessResult r = topo({"--file", f.string()});
    ASSERT_EQ(r.status, 0) << f << "\n" << r.err;
    EXPECT_TRUE(contains(r.out, "source: file " + f.string())) << r.out;
    EXPECT_TRUE(contains(r.out, "Paths between GPUs and NICs")) << r.out;
    // Some GPU or NIC is there, so the matrix has an X on its diagonal.
    EXPECT_TRUE(contains(r.out, " X ") || contains(r.out, " X\n")) << f << "\n" << r.out;
    ProcessResult json = topo({"--file", f.string(), "--json"});
    ASSERT_EQ(json.status, 0) << json.err;
    EXPECT_TRUE(topo::fromJson(json.out).ok()) << f;
  }
}

}  // namespace
}  // namespace chorus::test
