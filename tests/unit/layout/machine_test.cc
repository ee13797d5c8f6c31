// Self-sizing and self-calibration with injected machines: the size derivation for caches this
// VM does not have, and the calibration cache file (round trip, corrupt, mismatching key,
// unwritable directory). Nothing here depends on this machine's caches or on timing.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

#include "src/core/calibration.h"
#include "src/cost/cost_model.h"
#include "tests/support/scoped_env.h"
#include "src/cost/machine.h"

namespace chorus::cost {
namespace {

constexpr uint64_t kKiB = 1024, kMiB = 1024 * 1024;

TEST(DeriveSizes, UnknownCachesKeepTheTable) {
  const DerivedSizes d = deriveSizes(MachineDesc{0, 0, 2});
  EXPECT_EQ(d.slotBytes, kTableSlotBytes);
  EXPECT_EQ(d.roundBytes, kTableRoundBytes);
  EXPECT_EQ(d.cacheBytes, kTableCacheBytes);
  EXPECT_EQ(d.slotSource, Source::kTable);
  EXPECT_EQ(d.roundSource, Source::kTable);
  EXPECT_EQ(d.cacheSource, Source::kTable);
  EXPECT_EQ(d.llcBytes, kTableLlcBytes);
  EXPECT_EQ(d.llcSource, Source::kTable);
}

TEST(DeriveSizes, TheTablesMachineGivesTheTable) {
  // A 1 MiB L2 and a 32 MiB L3 shared by two ranks: the development machine's figures.
  const DerivedSizes d = deriveSizes(MachineDesc{1 * kMiB, 32 * kMiB, 2});
  EXPECT_EQ(d.slotBytes, 32 * kKiB);
  EXPECT_EQ(d.roundBytes, 256 * kKiB);
  EXPECT_EQ(d.cacheBytes, 512 * kKiB);
  EXPECT_EQ(d.roundSource, Source::kDetected);
  EXPECT_EQ(d.llcBytes, kTableLlcBytes);
  EXPECT_EQ(d.llcSource, Source::kDetected);
}

struct Case {
  uint64_t l2, l3;
  int ranks;
  uint64_t slot, round, cache;
};

TEST(DeriveSizes, OtherMachines) {
  const Case cases[] = {
      // A 512 KiB L2 (Zen 2/3): half the rounds the 1 MiB L2 keeps.
      {512 * kKiB, 0, 2, 16 * kKiB, 128 * kKiB, 256 * kKiB},
      // A 2 MiB L2 with a large L3.
      {2 * kMiB, 64 * kMiB, 4, 64 * kKiB, 512 * kKiB, 1 * kMiB},
      // A 1.25 MiB L2 (not a power of two): rounded down.
      {1280 * kKiB, 0, 2, 32 * kKiB, 256 * kKiB, 640 * kKiB},
      // Huge L2: clamped.
      {64 * kMiB, 0, 2, 128 * kKiB, 1 * kMiB, 8 * kMiB},
      // Tiny L2: clamped from below.
      {64 * kKiB, 0, 2, 8 * kKiB, 64 * kKiB, 128 * kKiB},
      // A small L3 shared by 8 ranks caps the rounds: 8 x 2 x 128 KiB = half of 4 MiB.
      {1 * kMiB, 4 * kMiB, 8, 32 * kKiB, 128 * kKiB, 512 * kKiB},
      // Only an L3 known: the table's round within its cap.
      {0, 2 * kMiB, 4, kTableSlotBytes, 128 * kKiB, kTableCacheBytes},
      {0, 256 * kMiB, 4, kTableSlotBytes, kTableRoundBytes, kTableCacheBytes},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("l2 " + sizeText(c.l2) + " l3 " + sizeText(c.l3) + " ranks " +
                 std::to_string(c.ranks));
    const DerivedSizes d = deriveSizes(MachineDesc{c.l2, c.l3, c.ranks});
    EXPECT_EQ(d.slotBytes, c.slot);
    EXPECT_EQ(d.roundBytes, c.round);
    EXPECT_EQ(d.cacheBytes, c.cache);
  }
}

TEST(DeriveSizes, RoundsShrinkAsRanksShareTheL3) {
  uint64_t last = ~0ull;
  for (int ranks = 1; ranks <= 64; ranks *= 2) {
    const DerivedSizes d = deriveSizes(MachineDesc{2 * kMiB, 16 * kMiB, ranks});
    EXPECT_LE(d.roundBytes, last) << ranks << " ranks";
    EXPECT_GE(d.roundBytes, 64 * kKiB);
    last = d.roundBytes;
  }
}

TEST(ResolveSizes, EnvironmentOverrides) {
  ::setenv("CHORUS_SHM_STAGING_ROUND", "96K", 1);
  ::unsetenv("CHORUS_SHM_STAGING");
  StatusOr<DerivedSizes> d = resolveSizes(MachineDesc{512 * kKiB, 0, 2});
  ASSERT_TRUE(d.ok()) << d.status().toString();
  EXPECT_EQ(d->roundBytes, 96 * kKiB);
  EXPECT_EQ(d->roundSource, Source::kEnv);
  EXPECT_EQ(d->slotBytes, 16 * kKiB);
  EXPECT_EQ(d->slotSource, Source::kDetected);
  ::setenv("CHORUS_SHM_STAGING", "lots", 1);
  d = resolveSizes(MachineDesc{});
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("CHORUS_SHM_STAGING"), std::string::npos);
  ::unsetenv("CHORUS_SHM_STAGING");
  ::unsetenv("CHORUS_SHM_STAGING_ROUND");
}

// A fresh private directory under the test's temporary directory, removed with its files.
class CacheDir {
 public:
  CacheDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/chorus-cal-test-XXXXXX";
    if (::mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~CacheDir() {
    ::chmod(path_.c_str(), 0700);
    std::system(("rm -rf '" + path_ + "'").c_str());
  }
  const std::string& path() const { return path_; }
  std::string file() const { return path_ + "/calibration"; }

 private:
  std::string path_;
};

void expectRates(const HostCalibration& c) {
  for (double v : {c.memBwGBps, c.cacheBwGBps, c.copyGBps, c.reduceGBps}) {
    EXPECT_TRUE(std::isfinite(v)) << v;
    EXPECT_GT(v, 0);
  }
  EXPECT_GE(c.cacheBwGBps, c.memBwGBps);
}

HostCalibration sample() {
  HostCalibration c;
  c.memBwGBps = 23.5;
  c.cacheBwGBps = 71.25;
  c.copyGBps = 18.125;
  c.reduceGBps = 27.5;
  c.links = {.lineNs = 212.5, .crossCoreGBps = 8.5, .handoffUs = 3.125, .tcpLatencyUs = 7.75,
             .tcpBwGBps = 3.5};
  return c;
}

TEST(Calibration, MeasuresPositiveFiniteRates) {
  // Small buffers: what is checked is that the rates are rates, not what they are.
  const HostCalibration c = measureHost(1 << 20, 16 << 10, 5);
  expectRates(c);
  EXPECT_EQ(c.source, Source::kCalibrated);
  EXPECT_GT(c.measureMs, 0);
}

TEST(Calibration, LinkTermsAreTimesAndRatesOrNotMeasured) {
  // What is checked is that each term is 0 (not measured) or a plausible time or rate, and that
  // the probes end within their budget, not what they measure.
  const auto t0 = std::chrono::steady_clock::now();
  const LinkCalibration l = measureLinks(200);
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 5.0);  // the 200 ms budget, with room for thread start-up on a loaded machine
  for (double v : {l.lineNs, l.crossCoreGBps, l.handoffUs, l.tcpLatencyUs, l.tcpBwGBps}) {
    EXPECT_TRUE(std::isfinite(v)) << v;
    EXPECT_GE(v, 0);
  }
  // (Any term may be 0: on a loaded machine a probe runs out of its budget, which is the point
  // of the budget; the values themselves are timing and are not asserted.)
  // A budget already spent measures nothing, and says so with zeros, at once.
  const LinkCalibration none = measureLinks(0);
  EXPECT_EQ(none.lineNs, 0);
  EXPECT_EQ(none.crossCoreGBps, 0);
  EXPECT_EQ(none.handoffUs, 0);
  EXPECT_EQ(none.tcpLatencyUs, 0);
  EXPECT_EQ(none.tcpBwGBps, 0);
}

TEST(Calibration, AppliedTermsReplaceTheTablesAndZerosKeepThem) {
  const CostModel table;
  CostModel m;
  applyCalibration(sample(), 2 << 20, &m);
  EXPECT_DOUBLE_EQ(m.host().memBwGBps, 23.5);
  EXPECT_DOUBLE_EQ(m.host().cacheBwGBps, 71.25);
  EXPECT_EQ(m.host().cacheBytes, 2u << 20);
  EXPECT_DOUBLE_EQ(m.host().lineUs, 0.2125);
  EXPECT_DOUBLE_EQ(m.host().crossCoreGBps, 8.5);
  EXPECT_DOUBLE_EQ(m.host().contextSwitchUs, 3.125);
  const LinkConstants tcp = m.constants(LinkClass::kTcpLoopback);
  EXPECT_DOUBLE_EQ(tcp.bandwidthGBps, 3.5);
  // The half round trip less a send's and a receive's CPU time.
  EXPECT_DOUBLE_EQ(tcp.latencyUs, 7.75 - 2 * tcp.stepOverheadUs);
  EXPECT_EQ(m.constants(LinkClass::kShm).latencyUs, table.constants(LinkClass::kShm).latencyUs);
  CostModel z;
  applyCalibration(HostCalibration{}, 0, &z);
  EXPECT_EQ(z.host().memBwGBps, table.host().memBwGBps);
  EXPECT_EQ(z.host().lineUs, table.host().lineUs);
  EXPECT_EQ(z.host().crossCoreGBps, table.host().crossCoreGBps);
  EXPECT_EQ(z.host().contextSwitchUs, table.host().contextSwitchUs);
  EXPECT_EQ(z.host().cacheBytes, table.host().cacheBytes);
  EXPECT_EQ(z.constants(LinkClass::kTcpLoopback).bandwidthGBps,
            table.constants(LinkClass::kTcpLoopback).bandwidthGBps);
}

TEST(Calibration, KeyNamesCpuKernelBootVersionAndBuild) {
  const std::string key = hostKey();
  for (const char* part : {"cpu=", ";kernel=", ";boot=", ";chorus=", ";tcp=", ";build="})
    EXPECT_NE(key.find(part), std::string::npos) << key;
  const std::string build = key.substr(key.find(";build=") + 7);
  EXPECT_TRUE(build == "optimized" || build == "unoptimized" || build == "sanitized") << key;
  EXPECT_EQ(key.find('\n'), std::string::npos);
  // The TCP terms were measured with one congestion control: another one is another key.
  testing::ScopedEnv env;
  env.set("CHORUS_TCP_CONGESTION", "reno");
  const std::string reno = hostKey();
  env.set("CHORUS_TCP_CONGESTION", "system");
  const std::string system = hostKey();
  EXPECT_NE(reno.find(";tcp=reno;"), std::string::npos) << reno;
  EXPECT_NE(system.find(";tcp=system;"), std::string::npos) << system;
}

TEST(Calibration, FileRoundTripIsPrivate) {
  CacheDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string sub = dir.path() + "/chorus";  // made by the write, 0700
  ASSERT_TRUE(writeCacheFile(sub, "key-a", sample()).ok());
  struct stat st {};
  ASSERT_EQ(::stat((sub + "/calibration").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(sub.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  StatusOr<HostCalibration> got = readCacheFile(sub, "key-a");
  ASSERT_TRUE(got.ok()) << got.status().toString();
  EXPECT_EQ(got->source, Source::kCachedFile);
  EXPECT_DOUBLE_EQ(got->memBwGBps, 23.5);
  EXPECT_DOUBLE_EQ(got->cacheBwGBps, 71.25);
  EXPECT_DOUBLE_EQ(got->copyGBps, 18.125);
  EXPECT_DOUBLE_EQ(got->reduceGBps, 27.5);
  EXPECT_DOUBLE_EQ(got->links.lineNs, 212.5);
  EXPECT_DOUBLE_EQ(got->links.crossCoreGBps, 8.5);
  EXPECT_DOUBLE_EQ(got->links.handoffUs, 3.125);
  EXPECT_DOUBLE_EQ(got->links.tcpLatencyUs, 7.75);
  EXPECT_DOUBLE_EQ(got->links.tcpBwGBps, 3.5);
  // A term that could not be measured is stored as 0 and read back as 0.
  HostCalibration partial = sample();
  partial.links.lineNs = 0;
  ASSERT_TRUE(writeCacheFile(sub, "key-b", partial).ok());
  got = readCacheFile(sub, "key-b");
  ASSERT_TRUE(got.ok()) << got.status().toString();
  EXPECT_EQ(got->links.lineNs, 0);
  EXPECT_DOUBLE_EQ(got->links.handoffUs, 3.125);
  ASSERT_TRUE(writeCacheFile(sub, "key-a", sample()).ok());
  // calibrateHost takes the file as it is, without measuring.
  std::string note;
  const HostCalibration c = calibrateHost(sub, "key-a", &note);
  EXPECT_EQ(c.source, Source::kCachedFile);
  EXPECT_DOUBLE_EQ(c.memBwGBps, 23.5);
  EXPECT_NE(note.find("read"), std::string::npos) << note;
}

TEST(Calibration, CorruptFileIsMeasuredAndRewritten) {
  const std::string ok = "chorus-calibration 2\nkey key-a\nmembw 1\ncachebw 1\ncopy 1\nreduce 1\n";
  const std::string links =
      "line_ns 200\ncross_core_bw 9\nhandoff_us 3\ntcp_latency_us 8\ntcp_bw 3\n";
  const std::string corrupt[] = {
      "",
      "chorus-calibration 2\nkey key-a\nmembw 20\n",  // truncated
      ok,                                            // no link terms
      "chorus-calibration 2\nkey key-a\nmembw x\ncachebw 1\ncopy 1\nreduce 1\n" + links,
      "chorus-calibration 2\nkey key-a\nmembw inf\ncachebw 1\ncopy 1\nreduce 1\n" + links,
      "chorus-calibration 2\nkey key-a\nmembw -3\ncachebw 1\ncopy 1\nreduce 1\n" + links,
      "chorus-calibration 2\nkey key-a\nmembw 1e9\ncachebw 1\ncopy 1\nreduce 1\n" + links,
      "chorus-calibration 2\nkey key-a\ncachebw 1\nmembw 1\ncopy 1\nreduce 1\n" + links,
      ok + links + "more\n",
      ok + "line_ns -1\ncross_core_bw 9\nhandoff_us 3\ntcp_latency_us 8\ntcp_bw 3\n",
      ok + "line_ns 200\ncross_core_bw 9\nhandoff_us nan\ntcp_latency_us 8\ntcp_bw 3\n",
      ok + "line_ns 200\ncross_core_bw 9\nhandoff_us 3\ntcp_latency_us 1e300\ntcp_bw 3\n",
      ok + "line_ns 200\ncross_core_bw 9\nhandoff_us 3\ntcp_bw 3\ntcp_latency_us 8\n",
      ok + "line_ns 200\nhandoff_us 3\ntcp_latency_us 8\ntcp_bw 3\n",  // a term missing
      // The first format (no link terms) is another format: measured again.
      "chorus-calibration 1\nkey key-a\nmembw 1\ncachebw 1\ncopy 1\nreduce 1\n",
      "chorus-calibration 3\nkey key-a\nmembw 1\ncachebw 1\ncopy 1\nreduce 1\n" + links,
      "\x7f\x45\x4c\x46 binary",
  };
  // The well-formed file these vary is accepted.
  {
    CacheDir dir;
    ASSERT_FALSE(dir.path().empty());
    { std::ofstream(dir.file()) << ok + links; }
    StatusOr<HostCalibration> got = readCacheFile(dir.path(), "key-a");
    ASSERT_TRUE(got.ok()) << got.status().toString();
    EXPECT_EQ(got->links.lineNs, 200);
  }
  bool first = true;
  for (const std::string& text : corrupt) {
    SCOPED_TRACE(text);
    CacheDir dir;
    ASSERT_FALSE(dir.path().empty());
    { std::ofstream(dir.file()) << text; }
    StatusOr<HostCalibration> got = readCacheFile(dir.path(), "key-a");
    ASSERT_FALSE(got.ok());
    EXPECT_NE(got.status().message().find(dir.file()), std::string::npos)
        << got.status().message();
    // Each file is refused above; measuring and rewriting follow one path whatever was wrong
    // (and a measurement is the slow part of this test), so only the first case goes on.
    if (!first) continue;
    first = false;
    std::string note;
    const HostCalibration c = calibrateHost(dir.path(), "key-a", &note);
    EXPECT_EQ(c.source, Source::kCalibrated);
    expectRates(c);
    EXPECT_NE(note.find("written"), std::string::npos) << note;
    got = readCacheFile(dir.path(), "key-a");
    ASSERT_TRUE(got.ok()) << got.status().toString();
    EXPECT_NEAR(got->memBwGBps, c.memBwGBps, 1e-5 * c.memBwGBps);
  }
}

TEST(Calibration, MismatchingKeyIsMeasuredAndRewritten) {
  CacheDir dir;
  ASSERT_FALSE(dir.path().empty());
  ASSERT_TRUE(writeCacheFile(dir.path(), "cpu=A;kernel=1;boot=x;chorus=1", sample()).ok());
  StatusOr<HostCalibration> got = readCacheFile(dir.path(), "cpu=B;kernel=1;boot=x;chorus=1");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("another host"), std::string::npos)
      << got.status().message();
  std::string note;
  const HostCalibration c = calibrateHost(dir.path(), "cpu=B;kernel=1;boot=x;chorus=1", &note);
  EXPECT_EQ(c.source, Source::kCalibrated);
  expectRates(c);
  EXPECT_TRUE(readCacheFile(dir.path(), "cpu=B;kernel=1;boot=x;chorus=1").ok());
  EXPECT_FALSE(readCacheFile(dir.path(), "cpu=A;kernel=1;boot=x;chorus=1").ok());
}

TEST(Calibration, UnwritableDirectoryMeasuresWithoutError) {
  CacheDir dir;
  ASSERT_FALSE(dir.path().empty());
  // A directory that cannot exist (its parent is a file) fails for every user, root included.
  { std::ofstream(dir.path() + "/plain") << "x"; }
  const std::string impossible = dir.path() + "/plain/chorus";
  std::string note;
  HostCalibration c = calibrateHost(impossible, "key-a", &note);
  EXPECT_EQ(c.source, Source::kCalibrated);
  expectRates(c);
  EXPECT_NE(note.find("not cached"), std::string::npos) << note;
  EXPECT_NE(note.find("mkdir"), std::string::npos) << note;
  // A read-only directory: root may write it anyway; either way a calibration comes back.
  const std::string ro = dir.path() + "/ro";
  ASSERT_EQ(::mkdir(ro.c_str(), 0500), 0);
  c = calibrateHost(ro, "key-a", &note);
  EXPECT_EQ(c.source, Source::kCalibrated);
  expectRates(c);
  if (::geteuid() != 0) {
    EXPECT_NE(note.find("not cached"), std::string::npos) << note;
  }
}

TEST(Calibration, SharedOrForeignDirectoryIsNotTrusted) {
  CacheDir dir;
  ASSERT_FALSE(dir.path().empty());
  ASSERT_TRUE(writeCacheFile(dir.path(), "key-a", sample()).ok());
  ASSERT_EQ(::chmod(dir.path().c_str(), 0777), 0);
  StatusOr<HostCalibration> got = readCacheFile(dir.path(), "key-a");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("private"), std::string::npos)
      << got.status().message();
  EXPECT_FALSE(writeCacheFile(dir.path(), "key-a", sample()).ok());
  // A symlink in place of the directory is refused too.
  ASSERT_EQ(::chmod(dir.path().c_str(), 0700), 0);
  const std::string link = dir.path() + "/link";
  ASSERT_EQ(::symlink(dir.path().c_str(), link.c_str()), 0);
  EXPECT_FALSE(readCacheFile(link, "key-a").ok());
}

}  // namespace
}  // namespace chorus::cost
