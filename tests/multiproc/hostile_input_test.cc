// Hostile input to a running job's listening sockets (issue 15, part 2).
//
// A real 3-rank job (env bootstrap: rank 0 serves the store on CHORUS_ROOT; TCP transport only,
// connections made lazily at the first collective) initializes and stops. An attacker process
// then connects to the store and to every rank's TCP listener and sends what a port scanner, a
// stray job or a broken client would: garbage, truncated frames, a frame announcing 2^40 bytes, a
// wrong job secret, another job's valid handshake, a connection that never speaks, and (with the
// secret, as an insider) a frame announcing 1 GiB of which only 1 MiB ever comes. Only when every
// byte is sent does the job go on: its first all-reduce makes the connections, which is when
// each rank's listener takes the attacker's connections out of its backlog (transports/tcp:
// the listener is served while connecting; the bytes are already there, so the same polls that
// read the real peers' hellos read them). Then 20 all-reduces, every element checked.
//
// The outcome asserted: the job's results are right; the store answers a wrong secret and
// another job's hello with "wrong secret" and drops garbage and the huge frames; every listener
// answers the foreign hello with "wrong communicator" and drops the rest; each refusal is in the
// rank's log with its reason; rank 0's resident memory grows by less than 8 MiB over the store
// attack (the announced 1 TiB and 1 GiB are never allocated; the 1 MiB actually sent is
// buffered) and no rank's by more than 64 MiB over the whole job — peaks (VmHWM, reset by each
// rank once initialized), so memory taken and given back in between still counts. Ports are
// found the way an operator would: CHORUS_ROOT for the store, and each rank's log line
// "tcp: rank R listening on ADDR" (CHORUS_DEBUG=INFO, CHORUS_DEBUG_SUBSYS=NET). Every wait is
// bounded; nothing depends on timing: each step waits for the previous one to have happened.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "src/base/socket_util.h"
#include "src/bootstrap/store.h"
#include "src/bootstrap/store_protocol.h"
#include "src/bootstrap/unique_id.h"
#include "tests/multiproc/harness.h"
#include "transports/tcp/wire.h"

namespace chorus::test {
namespace {

constexpr int kRanks = 3;
constexpr const char* kSecretHex = "5ec2e75ec2e75ec2e75ec2e75ec2e7aa";
constexpr size_t kCount = 256 * 1024;  // int32 elements per all-reduce: 1 MiB
constexpr int kIterations = 20;
constexpr double kStepSeconds = 60;  // bound of every wait between the two sides

// Lives in memory shared by the test, the ranks and the attacker (sharedScratch).
struct Shared {
  std::atomic<int> ranksReady;    // ranks initialized and waiting
  std::atomic<int> attackSent;    // 1: every attacking byte is in the kernel; -1: gave up
  std::atomic<int> ranksDone;     // ranks through their all-reduces
  std::atomic<int> attackerDone;  // 1: the attacker has checked everything it can see
  std::atomic<int> ranksLeft;     // ranks past chorusCommDestroy
  int pid[kRanks];
  long rssBeforeKb[kRanks];  // resident once initialized (peak reset there)
  long rssAfterKb[kRanks];   // peak resident through the all-reduces
  long storeRssBeforeKb, storeRssAfterKb;  // rank 0: resident before, peak after the store attack
  int attacks;
  char attackerFailure[4096];
};

// VmRSS (resident now) or VmHWM (peak resident since the process reset it) of `pid`, in kB.
long statusKb(pid_t pid, const char* field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0) return std::atol(line.c_str() + std::strlen(field));
  return -1;
}
long rssKb(pid_t pid) { return statusKb(pid, "VmRSS:"); }
long peakKb(pid_t pid) { return statusKb(pid, "VmHWM:"); }

// Peaks are measured from here: a buffer allocated and freed in between still counts.
void resetPeak() {
  std::ofstream("/proc/self/clear_refs") << "5";
}

template <typename Pred>
bool waitFor(Pred pred, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// ---- The attacker ------------------------------------------------------------------------

struct Attack {
  std::string what;
  int fd = -1;
  // "eof"; "bytes:<hex>" then eof; "closes": eof after any bytes; "" (the line stays open).
  std::string expect;
};

int dialTo(const std::string& addr) {
  auto parsed = net::parseHostPort(addr);
  if (!parsed.ok()) return -1;
  int fd = ::socket(parsed->family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&parsed->storage), parsed->len) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool sendBytes(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

std::string hex(const std::vector<uint8_t>& b) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (uint8_t v : b) {
    s.push_back(kDigits[v >> 4]);
    s.push_back(kDigits[v & 15]);
  }
  return s;
}

// Everything the other side sends until it closes, within `seconds`; "timeout" if it does not
// close in time.
std::string readUntilClosed(int fd, double seconds) {
  std::vector<uint8_t> got;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now()).count();
    if (left <= 0) return "timeout after " + hex(got);
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    uint8_t buf[256];
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return got.empty() ? "eof" : "bytes:" + hex(got);
    if (n < 0) return std::string("recv: ") + std::strerror(errno);
    got.insert(got.end(), buf, buf + n);
    if (got.size() > 4096) return "too much: " + hex(got);
  }
}

std::vector<uint8_t> u64le(uint64_t v) {
  std::vector<uint8_t> b(8);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  return b;
}

std::vector<uint8_t> tcpHello(uint64_t commId, int from, int to) {
  std::vector<uint8_t> b(tcp::kHelloBytes);
  tcp::wire::encodeHello(tcp::Hello{tcp::kProtocolVersion, commId, from, to}, b.data());
  return b;
}

std::string allLogs(const std::string& dir) {
  std::string all;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return all;
  while (dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, "log.", 4) != 0) continue;
    std::ifstream in(dir + "/" + e->d_name);
    std::stringstream ss;
    ss << in.rdbuf();
    all += ss.str();
  }
  ::closedir(d);
  return all;
}

// "tcp: rank R listening on ADDR" from the ranks' logs.
std::map<int, std::string> listeningPorts(const std::string& dir) {
  std::map<int, std::string> out;
  std::istringstream in(allLogs(dir));
  std::string line;
  const std::string key = "tcp: rank ";
  while (std::getline(in, line)) {
    size_t at = line.find(key);
    size_t on = line.find(" listening on ");
    if (at == std::string::npos || on == std::string::npos) continue;
    out[std::atoi(line.c_str() + at + key.size())] = line.substr(on + 14);
  }
  return out;
}

std::string attacker(Shared* sh, const std::string& dir, const std::string& storeAddr) {
  if (!waitFor([&] { return sh->ranksReady.load() == kRanks; }, kStepSeconds))
    return "the ranks did not initialize";
  std::map<int, std::string> ports = listeningPorts(dir);
  if (ports.size() != kRanks)
    return "found " + std::to_string(ports.size()) + " tcp ports in the logs";

  std::vector<Attack> attacks;
  auto open = [&](const std::string& what, const std::string& addr,
                  const std::vector<uint8_t>& bytes, const std::string& expect) -> std::string {
    Attack a{what + " -> " + addr, dialTo(addr), expect};
    if (a.fd < 0) return "could not connect for " + a.what;
    if (!bytes.empty() && !sendBytes(a.fd, bytes.data(), bytes.size()))
      return "could not send " + a.what;
    attacks.push_back(a);
    return "";
  };
#define ATTACK(...)                          \
  do {                                       \
    std::string e_ = open(__VA_ARGS__);      \
    if (!e_.empty()) return e_;              \
  } while (0)

  // ---- The store (served by rank 0's process, always polling) ----
  const long storeRssBefore = rssKb(sh->pid[0]);
  auto parsedSecret = bootstrap::secretFromHex(kSecretHex, "secret");
  auto storeSock = net::parseHostPort(storeAddr);
  if (!parsedSecret.ok() || !storeSock.ok()) return "bad test constants";
  const bootstrap::Secret secret = *parsedSecret;
  bootstrap::Secret wrong = secret;
  wrong[0] ^= 1;
  bootstrap::Secret otherJob = bootstrap::deriveSecret("another job on this network");
  // A frame of 1 byte: kHelloWrongSecret.
  const std::string refusal = "bytes:" + hex(u64le(1)) + "01";
  ATTACK("store: garbage", storeAddr, std::vector<uint8_t>(64, 0xa7), "eof");
  std::vector<uint8_t> notHello = u64le(4);
  for (char c : std::string("GET ")) notHello.push_back(static_cast<uint8_t>(c));
  ATTACK("store: a small frame that is not a hello", storeAddr, notHello, "closes");
  ATTACK("store: a frame announcing 2^40 bytes", storeAddr, u64le(uint64_t{1} << 40), "eof");
  std::vector<uint8_t> hello =
      bootstrap::encodeStoreHello({bootstrap::kStoreProtocolVersion, secret});
  ATTACK("store: a truncated hello", storeAddr,
         std::vector<uint8_t>(hello.begin(), hello.begin() + 13), "");
  ATTACK("store: a wrong job secret", storeAddr,
         bootstrap::encodeStoreHello({bootstrap::kStoreProtocolVersion, wrong}), refusal);
  ATTACK("store: another job's valid hello", storeAddr,
         bootstrap::encodeStoreHello({bootstrap::kStoreProtocolVersion, otherJob}), refusal);
  ATTACK("store: a connection that never speaks", storeAddr, {}, "");
  // An insider (knows the secret): a frame above the 1 GiB limit is refused at its header...
  std::vector<uint8_t> insider = hello;
  std::vector<uint8_t> tooBig = u64le((uint64_t{1} << 30) + 1);
  insider.insert(insider.end(), tooBig.begin(), tooBig.end());
  // (the hello's "ok" is queued, and may be dropped with the connection)
  ATTACK("store: an authenticated frame above 1 GiB", storeAddr, insider, "closes");
  // ...and one of exactly 1 GiB is buffered only as far as its bytes actually come.
  std::vector<uint8_t> slow = hello;
  std::vector<uint8_t> gib = u64le(uint64_t{1} << 30);
  slow.insert(slow.end(), gib.begin(), gib.end());
  slow.push_back(static_cast<uint8_t>(bootstrap::StoreOp::kSet));
  slow.resize(slow.size() + (1 << 20), 0x5a);
  ATTACK("store: 1 MiB of an authenticated 1 GiB frame", storeAddr, slow, "");


  // The store answers from its own thread, at once. Each attack with an expectation is read
  // until its connection closes and checked once (its expectation is then cleared).
  std::string failures;
  auto checkAnswers = [&] {
    for (Attack& a : attacks) {
      if (a.expect.empty()) continue;
      std::string got = readUntilClosed(a.fd, kStepSeconds);
      const bool closed = got == "eof" || got.rfind("bytes:", 0) == 0;
      if (a.expect == "closes" ? !closed : got != a.expect)
        failures += a.what + ": expected " + a.expect + ", got " + got + "\n";
      a.expect.clear();
    }
  };
  checkAnswers();
  // A well-behaved client still gets served. Its answer also orders the measurement: the store's
  // one thread reads every readable client in each round, so by the time it answers this
  // request (sent after every attacking byte above) it has read the slow frame's header.
  {
    auto probe = bootstrap::StoreClient::connect(*storeSock, secret,
                                                 net::deadlineIn(kStepSeconds));
    if (!probe.ok()) return "a good client could not connect: " + probe.status().toString();
    auto v = (*probe)->add("hostile-input-probe", 41);
    if (!v.ok() || *v != 41) return "a good client was not served: " + v.status().toString();
  }
  const long storeRssAfter = peakKb(sh->pid[0]);
  sh->storeRssBeforeKb = storeRssBefore;
  sh->storeRssAfterKb = storeRssAfter;
  if (storeRssBefore <= 0 || storeRssAfter - storeRssBefore > 8 * 1024)
    failures += "rank 0 (the store) grew from " + std::to_string(storeRssBefore) + " to " +
                std::to_string(storeRssAfter) + " kB under the store attack\n";

  // ---- Every rank's TCP listener (served only while the rank connects) ----
  for (const auto& [rank, addr] : ports) {
    const std::string r = "rank " + std::to_string(rank);
    ATTACK("tcp " + r + ": garbage", addr, std::vector<uint8_t>(tcp::kHelloBytes, 0xa7), "eof");
    std::vector<uint8_t> frame(tcp::kFrameHeaderBytes);
    tcp::wire::encodeFrameHeader({tcp::FrameType::kData, 0, uint64_t{1} << 40}, frame.data());
    ATTACK("tcp " + r + ": a data frame announcing 2^40 bytes instead of a hello", addr, frame,
           "eof");
    std::vector<uint8_t> h = tcpHello(0x0123456789abcdefull, 0, rank);
    ATTACK("tcp " + r + ": a truncated hello", addr,
           std::vector<uint8_t>(h.begin(), h.begin() + 10), "");
    // What a rank of another job (another secret, so another communicator id) sends.
    std::vector<uint8_t> ack(tcp::kAckBytes);
    tcp::wire::encodeAck(tcp::AckResult::kWrongCommunicator, ack.data());
    ATTACK("tcp " + r + ": another job's valid hello", addr, h, "bytes:" + hex(ack));
    ATTACK("tcp " + r + ": a connection that never speaks", addr, {}, "");
  }
  sh->attacks = static_cast<int>(attacks.size());
  sh->attackSent.store(1);

  // The listeners answer while the job connects.
  checkAnswers();
  if (!waitFor([&] { return sh->ranksDone.load() == kRanks; }, kStepSeconds))
    return failures + "the ranks did not finish their all-reduces";
  // Every refusal is logged with its reason (written before the ranks went on).
  const std::string logs = allLogs(dir);
  const std::vector<std::string> logged = {
      "presented a wrong job secret; disconnected",
      "sent a frame of 1099511627776 bytes (limit 256 before hello); disconnected",
      "sent a frame of 1073741825 bytes (limit 1073741824); disconnected",
      "did not start with a hello; disconnected",
      "not a chorus tcp hello",
      "of communicator 0x0123456789abcdef for rank",
  };
  for (const std::string& l : logged)
    if (logs.find(l) == std::string::npos) failures += "no log line with '" + l + "'\n";
  for (int r = 0; r < kRanks; ++r) {
    const std::string refused = "tcp: rank " + std::to_string(r) + " (communicator";
    if (logs.find(refused) == std::string::npos)
      failures += "rank " + std::to_string(r) + " logged no refused connection\n";
  }
  sh->attackerDone.store(1);
  // The silent and half-open connections stay open until the ranks have left: destroying the
  // communicator (and the store) must not wait for them.
  if (!waitFor([&] { return sh->ranksLeft.load() == kRanks; }, kStepSeconds))
    failures += "the ranks did not leave with the attacker's connections open\n";
  for (Attack& a : attacks) ::close(a.fd);
  return failures;
}

// ---- The job -------------------------------------------------------------------------------

std::string rankMain(Shared* sh, int rank, int nranks, const std::string& root) {
  ::setenv("CHORUS_ROOT", root.c_str(), 1);
  ::setenv("CHORUS_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("CHORUS_NRANKS", std::to_string(nranks).c_str(), 1);
  ::setenv("CHORUS_JOB_SECRET", kSecretHex, 1);
  chorusComm_t comm = nullptr;
  RANK_OK(chorusCommInitFromEnv(&comm));
  sh->pid[rank] = static_cast<int>(::getpid());
  resetPeak();
  sh->rssBeforeKb[rank] = rssKb(::getpid());
  sh->ranksReady.fetch_add(1);
  RANK_CHECK(waitFor([&] { return sh->attackSent.load() != 0; }, kStepSeconds),
             "the attacker never finished sending");
  RANK_CHECK(sh->attackSent.load() == 1, "the attacker gave up");

  std::vector<int32_t> in(kCount), out(kCount);
  for (int it = 0; it < kIterations; ++it) {
    for (size_t i = 0; i < kCount; ++i)
      in[i] = static_cast<int32_t>((i * 2654435761u + static_cast<size_t>(rank) * 40503u +
                                    static_cast<size_t>(it) * 977u) % 100003);
    std::fill(out.begin(), out.end(), -7);  // poisoned: an unwritten element is caught
    RANK_OK(chorusAllReduce(in.data(), out.data(), kCount, chorusInt32, chorusSum, comm, nullptr));
    for (size_t i = 0; i < kCount; ++i) {
      int64_t want = 0;
      for (int r = 0; r < nranks; ++r)
        want += static_cast<int64_t>((i * 2654435761u + static_cast<size_t>(r) * 40503u +
                                      static_cast<size_t>(it) * 977u) % 100003);
      if (out[i] != want)
        return "rank " + std::to_string(rank) + ": all-reduce " + std::to_string(it) +
               " element " + std::to_string(i) + " is " + std::to_string(out[i]) + ", not " +
               std::to_string(want);
    }
  }
  sh->rssAfterKb[rank] = peakKb(::getpid());
  sh->ranksDone.fetch_add(1);
  // The store lives in rank 0's process: the job stays up until the attacker has looked.
  RANK_CHECK(waitFor([&] { return sh->attackerDone.load() == 1; }, kStepSeconds),
             "the attacker did not finish");
  RANK_OK(chorusCommDestroy(comm));
  sh->ranksLeft.fetch_add(1);
  return "";
}

TEST(HostileInput, JobFinishesWhileItsPortsAreAttacked) {
  auto* sh = static_cast<Shared*>(sharedScratch(sizeof(Shared)));
  new (sh) Shared{};
  char tmpl[] = "/tmp/chorus-hostile-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string root = "127.0.0.1:" + std::to_string(freeLoopbackPort());

  pid_t attackerPid = ::fork();
  ASSERT_GE(attackerPid, 0);
  if (attackerPid == 0) {
    std::string failure = attacker(sh, dir, root);
    if (sh->attackSent.load() == 0) sh->attackSent.store(-1);
    std::snprintf(sh->attackerFailure, sizeof sh->attackerFailure, "%s", failure.c_str());
    ::_exit(failure.empty() ? 0 : 1);
  }

  RunOptions opt;
  opt.deadlineSeconds = 240;
  opt.initComm = false;
  opt.env = {{"CHORUS_TRANSPORT", "tcp"},
             {"CHORUS_CONNECT", "lazy"},
             {"CHORUS_SOCKET_IFNAME", "lo"},
             {"CHORUS_TIMEOUT", "60"},
             {"CHORUS_DEBUG", "INFO"},
             {"CHORUS_DEBUG_SUBSYS", "INIT,NET"},
             {"CHORUS_DEBUG_FILE", dir + "/log.%p"}};
  auto outcomes = runRanks(kRanks, [&](chorusComm_t, int rank, int nranks) {
    return rankMain(sh, rank, nranks, root);
  }, opt);

  // The attacker ends by itself once the ranks have left (bounded waits); make sure of it.
  int status = 0;
  bool attackerExited = waitFor(
      [&] { return ::waitpid(attackerPid, &status, WNOHANG) == attackerPid; }, kStepSeconds);
  if (!attackerExited) {
    ::kill(attackerPid, SIGKILL);
    ::waitpid(attackerPid, &status, 0);
  }
  EXPECT_EQ(summarize(outcomes), "");
  EXPECT_TRUE(attackerExited) << "the attacker was still running";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "attacker: " << sh->attackerFailure;
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_GT(sh->rssBeforeKb[r], 0);
    EXPECT_LT(sh->rssAfterKb[r] - sh->rssBeforeKb[r], 64 * 1024)
        << "rank " << r << " grew from " << sh->rssBeforeKb[r] << " to " << sh->rssAfterKb[r]
        << " kB";
  }
  std::printf("%d attacking connections; rank 0 (the store) %ld -> %ld kB across the store "
              "attack (peak); over the job (peak):",
              sh->attacks, sh->storeRssBeforeKb, sh->storeRssAfterKb);
  for (int r = 0; r < kRanks; ++r)
    std::printf(" rank %d %ld -> %ld kB;", r, sh->rssBeforeKb[r], sh->rssAfterKb[r]);
  std::printf("\n");
  if (!HasFailure()) std::system(("rm -rf " + dir).c_str());
  else std::fprintf(stderr, "ranks' logs kept in %s\n", dir.c_str());
}

}  // namespace
}  // namespace chorus::test
