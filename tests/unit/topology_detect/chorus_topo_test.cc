// chorus-topo, run as a user would: on the recorded snapshots, on this machine, on the NCCL
// topology files of tests/data/topologies, and round-tripping its own JSON.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "src/base/host_id.h"
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

// --tune with the table's memory rates (CHORUS_TUNE=off): picks that do not depend on how fast
// this machine's memory measured.
ProcessResult tableTopo(std::vector<std::string> args, std::vector<std::string> env = {}) {
  env.push_back("CHORUS_TUNE=off");
  return topo(std::move(args), std::move(env));
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
  EXPECT_TRUE(contains(r.out, "host: " + localHostname() + " ")) << r.out;
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

// Azure's NC A100 v4 file: every GPU's NVLink names the GPU itself. chorus-topo used to exit 1
// on it; now it warns once per link and shows the four GPUs, joined by nothing but the CPUs.
TEST(ChorusTopo, NcA100V4FileLoadsWithWarnings) {
  ProcessResult r = topo({"--file", dataDir() + "/topologies/ncv4-topo.xml"});
  ASSERT_EQ(r.status, 0) << r.err;
  size_t warnings = 0;
  for (size_t p = r.err.find("is the GPU itself; ignored"); p != std::string::npos;
       p = r.err.find("is the GPU itself; ignored", p + 1))
    ++warnings;
  EXPECT_EQ(warnings, 4u) << r.err;
  EXPECT_TRUE(contains(r.err, "WARN")) << r.err;
  EXPECT_TRUE(contains(r.out, "GPUs (4)")) << r.out;
  std::string gpu0 = row(r.out, "Paths between GPUs and NICs", "GPU0");
  EXPECT_TRUE(contains(gpu0, "SYS")) << r.out;
  EXPECT_FALSE(contains(gpu0, "NV")) << r.out;  // no NV# bond
}

// --ranks N --ranks-per-host K: the layout of such a job. Three hosts of two: the ring crosses
// each host boundary once, every tree joins the hosts with two edges.
TEST(ChorusTopo, LayoutOfThreeHosts) {
  ProcessResult r = topo({"--ranks", "6", "--ranks-per-host", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string& out = r.out;
  EXPECT_TRUE(contains(out, "6 ranks on 3 hosts, 2 per host")) << out;
  EXPECT_TRUE(contains(out, "host 0: ranks 0 1\n")) << out;
  EXPECT_TRUE(contains(out, "host 2: ranks 4 5\n")) << out;
  EXPECT_TRUE(contains(out, "rails (same local rank): [0 2 4] [1 3 5]")) << out;
  EXPECT_TRUE(contains(out, "Ring: 0 1 | 2 3 | 4 5 |")) << out;
  EXPECT_TRUE(contains(out, "crosses 3 host boundaries")) << out;
  EXPECT_TRUE(contains(out, "root 0, depth 2, 2 inter-host edges")) << out;
  EXPECT_TRUE(contains(out, "Inter-host edges: ring 3, tree 2, double binary tree 2 + 2")) << out;
  // The machine report is not printed.
  EXPECT_FALSE(contains(out, "NUMA nodes")) << out;
}

TEST(ChorusTopo, LayoutOfOneHostAndBadFlags) {
  ProcessResult one = topo({"--ranks", "4"});
  ASSERT_EQ(one.status, 0) << one.err;
  EXPECT_TRUE(contains(one.out, "4 ranks on 1 host, 4 per host")) << one.out;
  EXPECT_TRUE(contains(one.out, "Ring: 0-3  (one host: crosses no host boundary)")) << one.out;
  EXPECT_TRUE(contains(one.out, "0->[1] 1->[2] 2->[3]")) << one.out;
  // Uneven hosts: the last one smaller.
  ProcessResult uneven = topo({"--ranks", "5", "--ranks-per-host", "2"});
  ASSERT_EQ(uneven.status, 0) << uneven.err;
  EXPECT_TRUE(contains(uneven.out, "5 ranks on 3 hosts, 1-2 per host")) << uneven.out;
  EXPECT_TRUE(contains(uneven.out, "crosses 3 host boundaries")) << uneven.out;

  EXPECT_EQ(topo({"--ranks", "0"}).status, 2);
  ProcessResult alone = topo({"--ranks-per-host", "2"});
  EXPECT_EQ(alone.status, 2);
  EXPECT_TRUE(contains(alone.err, "--ranks-per-host needs --ranks")) << alone.err;
}

// The line of `text` that starts with `prefix`, or "".
std::string lineStarting(const std::string& text, const std::string& prefix) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line))
    if (line.compare(0, prefix.size(), prefix) == 0) return line;
  return "";
}

// --tune on shared memory, as a 2-rank job on one host gets it: one-shot through the host window
// for small all-reduces, two-shot through it for large ones.
TEST(ChorusTopo, TuneSharedMemory) {
  ProcessResult r = tableTopo({"--tune", "--transport", "shm", "--cores", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string& out = r.out;
  EXPECT_TRUE(contains(out, "Tuning a job of 2 ranks, 2 per host: transport shm: intra-host shm, "
                            "host window: 32 KiB one-shot slot + 256 KiB rounds, one-sided"))
      << out;
  EXPECT_TRUE(contains(out, "Cost model constants")) << out;
  EXPECT_NE(lineStarting(out, "tcp-loopback "), "") << out;
  EXPECT_TRUE(contains(out, "# tuner: 2 ranks on 1 host")) << out;
  std::string small = lineStarting(out, "allreduce             8 B");
  EXPECT_TRUE(contains(small, "oneshot_staged")) << out;
  EXPECT_TRUE(contains(lineStarting(out, "allreduce         256 MiB"), "twoshot_staged")) << out;
  EXPECT_NE(lineStarting(out, "barrier"), "") << out;

  ProcessResult csv =
      tableTopo({"--tune-csv", "--transport", "shm", "--cores", "2", "--max", "4M"});
  ASSERT_EQ(csv.status, 0) << csv.err;
  EXPECT_EQ(lineStarting(csv.out, "coll,"), "coll,nranks,bytes,algorithm,predicted_us");
  EXPECT_NE(lineStarting(csv.out, "allreduce,2,8,oneshot_staged,"), "") << csv.out;
  EXPECT_NE(lineStarting(csv.out, "allreduce,2,4194304,twoshot_staged,"), "") << csv.out;
  EXPECT_EQ(lineStarting(csv.out, "allreduce,2,16777216,"), "") << csv.out;  // beyond --max

  // The window variables reach the prediction as they reach a job: no slot, no window paths.
  ProcessResult off = tableTopo({"--tune-csv", "--transport", "shm", "--cores", "2", "--max",
                                 "4M"},
                                {"CHORUS_SHM_STAGING=0"});
  ASSERT_EQ(off.status, 0) << off.err;
  EXPECT_FALSE(contains(off.out, "_staged")) << off.out;
  ProcessResult bad = tableTopo({"--tune"}, {"CHORUS_SHM_STAGING=lots"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_TRUE(contains(bad.err, "CHORUS_SHM_STAGING")) << bad.err;
}

// --tune over TCP: no window, nothing one-sided; large all-reduces go around the ring.
TEST(ChorusTopo, TuneTcp) {
  for (const char* ranks : {"2", "4"}) {
    ProcessResult r = tableTopo({"--tune-csv", "--transport", "tcp", "--ranks", ranks, "--cores",
                                 "2",
                            "--max", "64M"});
    ASSERT_EQ(r.status, 0) << r.err;
    const std::string n = ranks;
    // 2 ranks: one message each way; 4: recursive doubling's 2 hops beat one-shot's 3 messages
    // per rank (measured over tcp: 79.5 against 127 us at 8 B).
    const std::string small = n == "2" ? "oneshot" : "recursive_doubling";
    EXPECT_NE(lineStarting(r.out, "allreduce," + n + ",8," + small + ","), "") << r.out;
    EXPECT_NE(lineStarting(r.out, "allreduce," + n + ",67108864,ring,"), "") << r.out;
    EXPECT_FALSE(contains(r.out, "_staged")) << r.out;
  }
  ProcessResult human = tableTopo({"--tune", "--transport", "tcp", "--ranks", "4", "--cores", "2"});
  ASSERT_EQ(human.status, 0) << human.err;
  EXPECT_TRUE(contains(human.out, "intra-host tcp-loopback, no host window, not one-sided"))
      << human.out;
  EXPECT_TRUE(contains(human.out, "time-shared x2")) << human.out;
}

// What --tune says about self-sizing and calibration: the table's rates with CHORUS_TUNE=off,
// measured or cached ones by default (positive, whatever they are), the window's sizes and
// where each came from; an environment override is named as such.
TEST(ChorusTopo, TuneShowsSelfSizingAndCalibration) {
  ProcessResult off = tableTopo({"--tune", "--transport", "shm", "--cores", "2", "--max", "8"});
  ASSERT_EQ(off.status, 0) << off.err;
  EXPECT_TRUE(contains(off.out, "Self-sizing and calibration")) << off.out;
  EXPECT_TRUE(contains(off.out, "memory rates: 36.0 GB/s beyond the cache, 100.0 GB/s within (table"))
      << off.out;
  EXPECT_TRUE(contains(off.out, "cost model cache rule: ")) << off.out;
  EXPECT_TRUE(contains(off.out, "\n  link terms: table\n")) << off.out;

  ProcessResult env = tableTopo({"--tune", "--transport", "shm", "--cores", "2", "--max", "8"},
                                {"CHORUS_SHM_STAGING_ROUND=128K"});
  ASSERT_EQ(env.status, 0) << env.err;
  EXPECT_TRUE(contains(env.out, "round 128 KiB (env override)")) << env.out;
  EXPECT_TRUE(contains(env.out, "+ 128 KiB rounds")) << env.out;

  ProcessResult cal = topo({"--tune", "--transport", "shm", "--cores", "2", "--max", "8"});
  ASSERT_EQ(cal.status, 0) << cal.err;
  const std::string rates = lineStarting(cal.out, "  memory rates: ");
  EXPECT_TRUE(contains(rates, "(calibrated") || contains(rates, "(cached file")) << cal.out;
  const double mem = std::atof(rates.c_str() + std::string("  memory rates: ").size());
  EXPECT_GT(mem, 0) << rates;
  // The link terms, each a measurement or "not measured" (one CPU, a probe out of time).
  const std::string links = lineStarting(cal.out, "  link terms (");
  EXPECT_TRUE(contains(links, "(calibrated): cache line between cores ") ||
              contains(links, "(cached file): cache line between cores "))
      << cal.out;
  for (const char* part : {" streaming), core hand-over ", ", loopback TCP ", " half round trip, ",
                           " each way"})
    EXPECT_TRUE(contains(links, part)) << part << " in " << links;
  EXPECT_EQ(topo({"--tune"}, {"CHORUS_TUNE=sometimes"}).status, 2);
}

// Several hosts: Ethernet between them at the fastest NIC of the System shown, or --nic-gbps.
TEST(ChorusTopo, TuneSeveralHosts) {
  ProcessResult r = tableTopo({"--tune", "--ranks", "8", "--ranks-per-host", "4", "--root",
                          dataDir() + "/sysfs/two-socket"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "no host window, not one-sided; inter-host ethernet at 25 Gb/s "
                              "(the fastest NIC, ens1f0)"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "# tuner: 8 ranks on 2 hosts (4 per host")) << r.out;
  // No layout report: with --tune, --ranks only describes the job.
  EXPECT_FALSE(contains(r.out, "Ring:")) << r.out;
  ProcessResult fast = tableTopo({"--tune", "--ranks", "4", "--ranks-per-host", "2", "--nic-gbps",
                             "100", "--root", dataDir() + "/sysfs/two-socket"});
  ASSERT_EQ(fast.status, 0) << fast.err;
  EXPECT_TRUE(contains(fast.out, "inter ethernet 100 Gb/s")) << fast.out;
  EXPECT_EQ(tableTopo({"--tune", "--transport", "ucx"}).status, 2);
  EXPECT_EQ(tableTopo({"--tune", "--constants", "shm.speed=3"}).status, 2);
}

}  // namespace
}  // namespace chorus::test
