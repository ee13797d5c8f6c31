#include "tools/chorus-run/line_prefixer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "tools/chorus-run/job_env.h"

namespace chorus::run {
namespace {

TEST(LinePrefixer, PrefixesCompleteLines) {
  LinePrefixer p("[3] ");
  std::string out;
  p.feed("a\nbc\n", &out);
  EXPECT_EQ(out, "[3] a\n[3] bc\n");
  EXPECT_FALSE(p.hasPartial());
}

TEST(LinePrefixer, JoinsLinesSplitAcrossReads) {
  LinePrefixer p("[0] ");
  std::string out;
  p.feed("hel", &out);
  EXPECT_EQ(out, "");
  p.feed("lo\nwor", &out);
  EXPECT_EQ(out, "[0] hello\n");
  p.feed("ld\n", &out);
  EXPECT_EQ(out, "[0] hello\n[0] world\n");
}

TEST(LinePrefixer, FlushesPartialLineAtEnd) {
  LinePrefixer p("[1] ");
  std::string out;
  p.feed("no newline", &out);
  EXPECT_TRUE(p.hasPartial());
  p.finish(&out);
  EXPECT_EQ(out, "[1] no newline\n");
  p.finish(&out);  // nothing left: no empty line
  EXPECT_EQ(out, "[1] no newline\n");
}

TEST(LinePrefixer, KeepsEmptyLines) {
  LinePrefixer p("[0] ");
  std::string out;
  p.feed("\n\nx\n", &out);
  EXPECT_EQ(out, "[0] \n[0] \n[0] x\n");
}

TEST(LinePrefixer, SplitsOverlongLines) {
  LinePrefixer p("> ", 4);
  std::string out;
  p.feed("abcdefghij", &out);
  EXPECT_EQ(out, "> abcd\n> efgh\n");
  p.feed("\n", &out);
  EXPECT_EQ(out, "> abcd\n> efgh\n> ij\n");
  out.clear();
  p.feed("wxyz\n", &out);  // exactly the limit: one line, not an extra empty one
  EXPECT_EQ(out, "> wxyz\n");
}

TEST(JobEnv, FormatsRootAddresses) {
  EXPECT_EQ(formatRoot("127.0.0.1", 1234), "127.0.0.1:1234");
  EXPECT_EQ(formatRoot("node7", 80), "node7:80");
  EXPECT_EQ(formatRoot("::1", 5), "[::1]:5");
  EXPECT_EQ(formatRoot("[fe80::1]", 5), "[fe80::1]:5");
}

TEST(JobEnv, SecretIs32HexDigitsAndFresh) {
  std::string a = makeJobSecret();
  std::string b = makeJobSecret();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

TEST(JobEnv, PicksAUsablePort) {
  int port = pickFreePort("127.0.0.1");
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);
  EXPECT_GT(pickFreePort("no-such-host.invalid"), 0);  // falls back to any interface
}

// The picked port is outside the kernel's ephemeral range (so no connection can be given it
// before rank 0 binds it) and can be listened on, on every address, as the store does.
TEST(JobEnv, PickedPortIsBelowTheEphemeralRangeAndListenable) {
  unsigned lo = 32768, hi = 60999;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%u %u", &lo, &hi) != 2) lo = 32768;
    std::fclose(f);
  }
  if (lo < 2048) GTEST_SKIP() << "the ephemeral range starts at " << lo << ": no room below it";
  for (int i = 0; i < 20; ++i) {
    const int port = pickUnusedPort(AF_INET);
    ASSERT_GE(port, static_cast<int>(lo / 2));
    ASSERT_LT(port, static_cast<int>(lo));
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << "port " << port;
    EXPECT_EQ(::listen(fd, 1), 0) << "port " << port;
    ::close(fd);
  }
}

TEST(JobEnv, RankEnvironmentNamesEveryVariable) {
  auto env = rankEnvironment("h:1", "00ff", 2, 5);
  std::map<std::string, std::string> m(env.begin(), env.end());
  EXPECT_EQ(m.at("CHORUS_ROOT"), "h:1");
  EXPECT_EQ(m.at("CHORUS_RANK"), "2");
  EXPECT_EQ(m.at("CHORUS_NRANKS"), "5");
  EXPECT_EQ(m.at("CHORUS_LOCAL_RANK"), "2");
  EXPECT_EQ(m.at("CHORUS_LOCAL_NRANKS"), "5");
  EXPECT_EQ(m.at("CHORUS_JOB_SECRET"), "00ff");
  EXPECT_EQ(m.size(), 6u);
}

TEST(JobEnv, SeveralHostsNumberRanksGloballyAndLocally) {
  // Host 1 of a job of 6 ranks whose ranks 2 and 3 run here.
  auto env = rankEnvironment("h:1", "00ff", 1, 2, 2, 6);
  std::map<std::string, std::string> m(env.begin(), env.end());
  EXPECT_EQ(m.at("CHORUS_RANK"), "3");
  EXPECT_EQ(m.at("CHORUS_NRANKS"), "6");
  EXPECT_EQ(m.at("CHORUS_LOCAL_RANK"), "1");
  EXPECT_EQ(m.at("CHORUS_LOCAL_NRANKS"), "2");
}

}  // namespace
}  // namespace chorus::run
