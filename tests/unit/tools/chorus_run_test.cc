// chorus-run, tested as users run it: the real binary starting real processes. Every case is
// bounded by a deadline well under 10 s.
#include <dirent.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/tools/subprocess.h"

namespace chorus::test {
namespace {

const std::string kRun = CHORUS_RUN_PATH;

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Processes whose command line contains `marker` (a string no other process uses).
int countProcesses(const std::string& marker) {
  int n = 0;
  DIR* d = opendir("/proc");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/cmdline");
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    for (char& c : cmd) c = c == '\0' ? ' ' : c;
    if (cmd.find(marker) != std::string::npos && cmd.find("sleep") == 0) ++n;
  }
  closedir(d);
  return n;
}

TEST(ChorusRun, SetsEnvironmentOfEveryRank) {
  ProcessResult r = runProcess(
      {kRun, "-n", "3", "sh", "-c",
       "echo \"$CHORUS_RANK $CHORUS_NRANKS $CHORUS_LOCAL_RANK $CHORUS_LOCAL_NRANKS "
       "$CHORUS_ROOT $CHORUS_JOB_SECRET\""});
  ASSERT_FALSE(r.timedOut);
  ASSERT_EQ(r.status, 0) << r.err;
  std::map<int, std::vector<std::string>> byRank;
  for (const std::string& l : lines(r.out)) {
    std::istringstream in(l);
    std::string tag;
    in >> tag;
    std::vector<std::string> fields;
    for (std::string f; in >> f;) fields.push_back(f);
    ASSERT_EQ(fields.size(), 6u) << l;
    int rank = std::stoi(fields[0]);
    EXPECT_EQ(tag, "[" + std::to_string(rank) + "]");
    byRank[rank] = fields;
  }
  ASSERT_EQ(byRank.size(), 3u) << r.out;
  std::set<std::string> roots, secrets;
  for (const auto& [rank, f] : byRank) {
    EXPECT_EQ(f[1], "3");
    EXPECT_EQ(f[2], std::to_string(rank));
    EXPECT_EQ(f[3], "3");
    roots.insert(f[4]);
    secrets.insert(f[5]);
    EXPECT_EQ(f[4].rfind("127.0.0.1:", 0), 0u) << f[4];
    int port = std::stoi(f[4].substr(10));
    EXPECT_GT(port, 0);
    EXPECT_LT(port, 65536);
    ASSERT_EQ(f[5].size(), 32u);
    EXPECT_EQ(f[5].find_first_not_of("0123456789abcdef"), std::string::npos) << f[5];
  }
  EXPECT_EQ(roots.size(), 1u) << "all ranks must meet at one root";
  EXPECT_EQ(secrets.size(), 1u) << "all ranks must share the job secret";
}

TEST(ChorusRun, SecretDiffersBetweenJobs) {
  auto secret = [] {
    ProcessResult r = runProcess({kRun, "-n", "1", "--no-prefix", "sh", "-c", "echo $CHORUS_JOB_SECRET"});
    EXPECT_EQ(r.status, 0);
    return r.out;
  };
  EXPECT_NE(secret(), secret());
}

TEST(ChorusRun, PortAndRootHostOptions) {
  ProcessResult r = runProcess({kRun, "-n", "2", "--port", "29517", "--root-host", "10.1.2.3",
                                "sh", "-c", "echo $CHORUS_ROOT"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::multiset<std::string> got;
  for (const std::string& l : lines(r.out)) got.insert(l);
  EXPECT_EQ(got, (std::multiset<std::string>{"[0] 10.1.2.3:29517", "[1] 10.1.2.3:29517"}));

  r = runProcess({kRun, "-n", "1", "--port", "29518", "--root-host", "::1", "--no-prefix",
                  "sh", "-c", "echo $CHORUS_ROOT"});
  EXPECT_EQ(r.out, "[::1]:29518\n");
}

TEST(ChorusRun, PrefixesStdoutAndStderrLines) {
  ProcessResult r = runProcess(
      {kRun, "-n", "2", "sh", "-c", "echo out-a; echo err-a >&2; printf 'x\\ny\\n'; printf tail"});
  ASSERT_EQ(r.status, 0) << r.err;
  auto outLines = lines(r.out);
  std::multiset<std::string> out(outLines.begin(), outLines.end());
  std::multiset<std::string> want;
  for (std::string rk : {"[0] ", "[1] "}) {
    for (std::string l : {"out-a", "x", "y", "tail"}) want.insert(rk + l);
  }
  EXPECT_EQ(out, want);
  // Each rank's lines keep their order.
  std::vector<std::string> rank0;
  for (const std::string& l : outLines) {
    if (l.rfind("[0] ", 0) == 0) rank0.push_back(l);
  }
  EXPECT_EQ(rank0, (std::vector<std::string>{"[0] out-a", "[0] x", "[0] y", "[0] tail"}));
  auto errLines = lines(r.err);
  std::multiset<std::string> err(errLines.begin(), errLines.end());
  EXPECT_EQ(err, (std::multiset<std::string>{"[0] err-a", "[1] err-a"}));
}

TEST(ChorusRun, NoPrefixPassesOutputThrough) {
  ProcessResult r = runProcess({kRun, "-n", "1", "--no-prefix", "sh", "-c", "printf 'a\\nb'"});
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "a\nb");
}

TEST(ChorusRun, ProgramFlagsAfterDoubleDash) {
  ProcessResult r = runProcess({kRun, "-n", "1", "--", "echo", "-n", "--port", "7"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[0] --port 7\n");
  r = runProcess({kRun, "-n", "1", "echo", "-n", "x"});
  EXPECT_EQ(r.out, "[0] x\n");
}

TEST(ChorusRun, FailingRankExitCodeIsPropagatedAndOthersAreKilled) {
  ProcessResult r = runProcess({kRun, "-n", "3", "sh", "-c",
                                "if [ \"$CHORUS_RANK\" = 1 ]; then sleep 0.2; exit 3; fi; exec sleep 30"});
  ASSERT_FALSE(r.timedOut);
  EXPECT_EQ(r.status, 3);
  EXPECT_LT(r.seconds, 4.0) << "the surviving ranks must be terminated, not waited for";
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exited with code 3"), std::string::npos) << r.err;
}

TEST(ChorusRun, RankKilledBySignalGives128PlusSignal) {
  ProcessResult r = runProcess({kRun, "-n", "2", "sh", "-c",
                                "if [ \"$CHORUS_RANK\" = 0 ]; then kill -USR1 $$; fi; exec sleep 30"});
  ASSERT_FALSE(r.timedOut);
  EXPECT_EQ(r.status, 128 + SIGUSR1);
  EXPECT_LT(r.seconds, 4.0);
  EXPECT_NE(r.err.find("rank 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("signal " + std::to_string(SIGUSR1)), std::string::npos) << r.err;
}

TEST(ChorusRun, RanksIgnoringSigtermAreKilledAfterGrace) {
  // Rank 0 fails once rank 1 has had time to start ignoring SIGTERM.
  ProcessResult r = runProcess({kRun, "-n", "2", "--kill-grace", "0.5", "sh", "-c",
                                "if [ \"$CHORUS_RANK\" = 0 ]; then sleep 0.3; exit 5; fi; "
                                "trap '' TERM; while :; do sleep 0.1; done"});
  ASSERT_FALSE(r.timedOut);
  EXPECT_EQ(r.status, 5);
  EXPECT_GE(r.seconds, 0.75) << "SIGKILL must wait for the grace period";
  EXPECT_LT(r.seconds, 4.0);
}

TEST(ChorusRun, TimeoutKillsTheJobWith124) {
  ProcessResult r = runProcess({kRun, "-n", "2", "--timeout", "0.5", "sleep", "30"});
  ASSERT_FALSE(r.timedOut);
  EXPECT_EQ(r.status, 124);
  EXPECT_GE(r.seconds, 0.4);
  EXPECT_LT(r.seconds, 4.0);
  EXPECT_NE(r.err.find("timeout"), std::string::npos) << r.err;
}

TEST(ChorusRun, ForwardsSigint) {
  ProcessOptions o;
  o.signalAfterSeconds = 0.5;
  o.signal = SIGINT;
  // The ranks exit 0 on SIGINT, so no rank's failure tears down another before it handled it.
  ProcessResult r = runProcess(
      {kRun, "-n", "2", "sh", "-c", "trap 'echo got-int; exit 0' INT; while :; do sleep 0.05; done"}, o);
  ASSERT_FALSE(r.timedOut);
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("[0] got-int"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[1] got-int"), std::string::npos) << r.out;
}

TEST(ChorusRun, SigtermOfDefaultRanksGives143) {
  ProcessOptions o;
  o.signalAfterSeconds = 0.3;
  o.signal = SIGTERM;
  ProcessResult r = runProcess({kRun, "-n", "2", "sleep", "30"}, o);
  ASSERT_FALSE(r.timedOut);
  EXPECT_EQ(r.status, 128 + SIGTERM);
  EXPECT_LT(r.seconds, 4.0);
}

TEST(ChorusRun, LeavesNoOrphans) {
  // A rank that backgrounds a child and exits: the child must not outlive the job.
  const std::string marker = "31.4159";
  ProcessResult r = runProcess({kRun, "-n", "2", "sh", "-c", "sleep " + marker + " & echo started"});
  ASSERT_FALSE(r.timedOut);
  EXPECT_EQ(r.status, 0);
  EXPECT_LT(r.seconds, 4.0);
  EXPECT_EQ(countProcesses("sleep " + marker), 0);

  // The same after a failure.
  const std::string marker2 = "32.7182";
  r = runProcess({kRun, "-n", "2", "sh", "-c",
                  "sleep " + marker2 + " & if [ \"$CHORUS_RANK\" = 1 ]; then exit 4; fi; wait"});
  EXPECT_EQ(r.status, 4);
  EXPECT_LT(r.seconds, 4.0);
  EXPECT_EQ(countProcesses("sleep " + marker2), 0);
}

TEST(ChorusRun, ChildClosingStdoutEarlyDoesNotHang) {
  ProcessResult r = runProcess({kRun, "-n", "2", "sh", "-c", "exec >&- 2>&-; sleep 0.3; exit 0"});
  ASSERT_FALSE(r.timedOut);
  EXPECT_EQ(r.status, 0);
  EXPECT_LT(r.seconds, 4.0);
}

TEST(ChorusRun, MissingProgramFailsWith127) {
  ProcessResult r = runProcess({kRun, "-n", "2", "/nonexistent/chorus-program"});
  ASSERT_FALSE(r.timedOut);
  EXPECT_EQ(r.status, 127);
  EXPECT_NE(r.err.find("cannot execute"), std::string::npos) << r.err;
}

// Each rank's Cpus_allowed_list, by rank, from ranks that print it with their rank.
std::map<int, std::string> allowedListsByRank(const std::vector<std::string>& bindArgs,
                                              int nranks) {
  std::vector<std::string> cmd = {kRun, "-n", std::to_string(nranks)};
  cmd.insert(cmd.end(), bindArgs.begin(), bindArgs.end());
  cmd.insert(cmd.end(), {"sh", "-c",
                         "echo \"$CHORUS_LOCAL_RANK $(grep Cpus_allowed_list: /proc/self/status "
                         "| cut -f2)\""});
  ProcessResult r = runProcess(cmd);
  EXPECT_FALSE(r.timedOut);
  EXPECT_EQ(r.status, 0) << r.err;
  std::map<int, std::string> out;
  for (const std::string& l : lines(r.out)) {
    std::istringstream in(l);
    std::string tag, list;
    int rank = -1;
    in >> tag >> rank >> list;
    out[rank] = list;
  }
  return out;
}

// The CPUs this test may run on (chorus-run inherits them), in order.
std::vector<int> allowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

TEST(ChorusRun, BindToCoreGivesRankIOneAllowedCpuRoundRobin) {
  const std::vector<int> cpus = allowedCpus();
  ASSERT_FALSE(cpus.empty());
  // More ranks than CPUs on any machine this runs on up to 2 CPUs, and at least 3 ranks.
  const int n = std::max<int>(3, static_cast<int>(cpus.size()) + 1);
  ASSERT_LE(n, 64) << "this machine has too many CPUs for a quick test";
  std::map<int, std::string> got = allowedListsByRank({"--bind-to", "core"}, n);
  ASSERT_EQ(got.size(), static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(got[r], std::to_string(cpus[static_cast<size_t>(r) % cpus.size()])) << "rank " << r;
}

TEST(ChorusRun, WithoutBindingRanksInheritTheMask) {
  std::map<int, std::string> self = allowedListsByRank({"--bind-to", "none"}, 1);
  std::map<int, std::string> dflt = allowedListsByRank({}, 2);
  ASSERT_EQ(dflt.size(), 2u);
  EXPECT_EQ(dflt[0], self[0]);
  EXPECT_EQ(dflt[1], self[0]);
}

TEST(ChorusRun, RejectsBadArguments) {
  EXPECT_NE(runProcess({kRun, "-n", "0", "true"}).status, 0);
  EXPECT_NE(runProcess({kRun, "-n", "2"}).status, 0);
  EXPECT_NE(runProcess({kRun, "true"}).status, 0);  // -n is required
  ProcessResult bind = runProcess({kRun, "-n", "2", "--bind-to", "socket", "true"});
  EXPECT_EQ(bind.status, 2);
  EXPECT_NE(bind.err.find("--bind-to"), std::string::npos) << bind.err;
}

}  // namespace
}  // namespace chorus::test
