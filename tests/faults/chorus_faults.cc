// chorus-faults: the fault matrix of issue 15, on one host (the multi-host faults — a link taken
// down, traffic dropped — are tests/netns's Silence.* tests).
//
//   chorus-faults [--transport T,...] [--phase P,...] [--fault F,...] [--ranks N]
//                 [--markdown] [--list]
//
// Transports: those named (any this build registers: shm, tcp, ucx when built), or by default
// every one usable here without being named (shm, tcp).
//
// Each cell forks N ranks (default 3) through the real environment bootstrap (rank 0 serves
// the store), and rank 1, the victim, meets the fault at the phase:
//   phases  init         the victim never arrives at chorusCommInitRank (bounded by
//                        CHORUS_TIMEOUT: before it arrives no one can tell it from a late rank)
//           connect      CHORUS_CONNECT=lazy: the survivors' first all-reduce connects to it
//           small, large inside an all-reduce of 4 floats / 8 MiB
//           nonblocking  survivors wait (chorusWait) on a chorusIAllReduce it joined
//           group        survivors in a group of a send to and a receive from it
//           split        survivors in chorusCommSplit
//           destroy      survivors destroy the communicator with an all-reduce it never joins
//                        still queued (destroy drains it, bounded)
//   faults  kill         SIGKILL
//           stop         SIGSTOP (a hung process; rank 0 kills it after the cell has its result)
//           exit         the process exits normally (std::exit) without leaving the call
//           abort        another thread of the victim calls chorusCommAbort while its main
//                        thread is inside the phase's call (which must fail too)
//           rootkill     (init only) rank 0, which serves the store, is killed 0.3 s into the
//                        rendezvous, which rank 2 joins 0.6 s late: rank 1 is waiting in it,
//                        rank 2 finds no store; both must fail (no shrink afterwards: no store)
// Every survivor must: fail the phase's call with chorusRemoteError or chorusTimeout naming
// rank 1 (or, for init, the missing rank) within the bound (5 s; init: CHORUS_TIMEOUT, set to
// 10 s here); then make a communicator without the victim (chorusCommShrink) and all-reduce
// on it correctly; then, with both communicators destroyed, hold no more descriptors or
// threads than before its first chorusCommInitRank. Nothing of the cell may be left in
// /dev/shm. The program prints one line per cell (a markdown table row with --markdown) and
// exits 1 if any cell failed.
#include <chorus/chorus.h>
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/multiproc/harness.h"

namespace {

using chorus::test::monotonicSeconds;
using chorus::test::RankOutcome;
using chorus::test::runRanks;

constexpr int kMaxRanks = 8;
constexpr int kVictim = 1;
constexpr double kBoundSeconds = 5.0;
constexpr double kInitTimeout = 10.0;

const char* const kPhases[] = {"init",  "connect", "small", "large",
                               "nonblocking", "group", "split", "destroy"};
const char* const kFaults[] = {"kill", "stop", "exit", "abort", "rootkill"};

// What the ranks of one cell write for the parent (MAP_SHARED, made before the fork).
struct Shared {
  std::atomic<double> faultAt;
  std::atomic<int> victimPid;
  struct Rank {
    double failedAt;    // when the phase's call returned its error
    int result;         // its chorusResult_t
    char message[512];  // chorusGetLastError
    int fdsBefore, fdsAfter, threadsBefore, threadsAfter;
    int shrunk;  // 1: the communicator without the victim worked
  } rank[kMaxRanks];
};

int countEntries(const char* dir) {
  DIR* d = ::opendir(dir);
  if (!d) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n - 1;  // the directory stream's own descriptor (for /proc/self/fd)
}
int openFds() { return countEntries("/proc/self/fd"); }
int threads() { return countEntries("/proc/self/task") + 1; }
// The names of this process's threads other than the calling one ("/proc/self/task/*/comm":
// chorus names its own, e.g. chorus-beat, chorus-progress, chorus-store), comma-separated.
std::string threadNames() {
  std::string names;
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return "?";
  const std::string self = std::to_string(::gettid());
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.' || self == e->d_name) continue;
    std::FILE* f = std::fopen((std::string("/proc/self/task/") + e->d_name + "/comm").c_str(), "r");
    char buf[32] = {};
    if (f) {
      if (!std::fgets(buf, sizeof buf, f)) buf[0] = '\0';
      std::fclose(f);
    }
    std::string name(buf);
    if (!name.empty() && name.back() == '\n') name.pop_back();
    names += (names.empty() ? "" : ", ") + std::string(e->d_name) + " " + name;
  }
  ::closedir(d);
  return names;
}

// Threads after teardown. One CI run (a loaded 2-core machine) failed a cell with "runs 1 more
// threads than before" after a clean teardown, and the cause is not known: a standalone check
// never saw a joined thread still listed in /proc/self/task (20,000 joins, pinned to one core
// or not). So an extra thread is waited for up to a second (one that was never joined stays),
// and whatever was seen is said on stderr with the threads' names, so the next occurrence
// names the thread.
int threadsSettledTo(int rank, int before) {
  int n = threads();
  if (n <= before) return n;
  const int seen = n;
  const std::string first = threadNames();
  int waitedMs = 0;
  for (; waitedMs < 1000 && n > before; ++waitedMs) {
    ::usleep(1000);
    n = threads();
  }
  std::fprintf(stderr, "chorus-faults: rank %d: %d threads after teardown, %d before (%s); %s\n",
               rank, seen, before, first.c_str(),
               n > before ? "still there after 1 s"
                          : ("gone " + std::to_string(waitedMs) + " ms later").c_str());
  return n;
}

// The victim's fault, at the moment of the call. For abort, `comm` is aborted by another thread
// shortly after (the caller is then inside its call); returns that thread.
std::thread bringAbout(const std::string& fault, Shared* sh, chorusComm_t comm) {
  sh->victimPid.store(static_cast<int>(::getpid()));
  if (fault == "abort") {
    return std::thread([sh, comm] {
      ::usleep(50000);
      sh->faultAt.store(monotonicSeconds());
      chorusCommAbort(comm);
    });
  }
  sh->faultAt.store(monotonicSeconds());
  if (fault == "kill") std::raise(SIGKILL);
  if (fault == "stop") std::raise(SIGSTOP);
  std::exit(0);  // "exit": atexit handlers and static destructors run; the communicator is left
}

struct Cell {
  std::string transport, phase, fault;
  int ranks = 3;
};

// The survivor's check of the phase's failed call; "" when it is as required.
std::string judge(const Cell& c, Shared* sh, int rank, chorusResult_t r, const std::string& msg) {
  Shared::Rank& me = sh->rank[rank];
  me.failedAt = monotonicSeconds();
  me.result = r;
  std::snprintf(me.message, sizeof(me.message), "%s", msg.c_str());
  if (r == chorusSuccess) return "the " + c.phase + " call succeeded although rank 1 had a fault";
  if (r != chorusRemoteError && r != chorusTimeout)
    return std::string("expected chorusRemoteError or chorusTimeout, got ") +
           chorusGetErrorString(r) + ": " + msg;
  // Init: a survivor may instead see the store go away (rank 0, serving it, gave up first).
  const bool named = msg.find("rank 1") != std::string::npos ||
                     msg.find("ranks 1") != std::string::npos ||
                     (c.phase == "init" && msg.find("store") != std::string::npos);
  if (c.fault == "rootkill") {
    if (msg.find("store") == std::string::npos && msg.find("rank 0") == std::string::npos)
      return "the error names neither the store nor rank 0: " + msg;
  } else if (!named) {
    return "the error does not name rank 1: " + msg;
  }
  const double at = sh->faultAt.load();
  if (at <= 0) return "failed before the fault: " + msg;
  const double bound = c.phase == "init" ? kInitTimeout + kBoundSeconds : kBoundSeconds;
  if (me.failedAt - at > bound) {
    char b[96];
    std::snprintf(b, sizeof(b), "noticed %.2f s after the fault (bound %.0f s): ",
                  me.failedAt - at, bound);
    return b + msg;
  }
  return "";
}

// A working communicator without the victim, then everything destroyed.
std::string afterwards(chorusComm_t comm, Shared* sh, int rank, int nranks) {
  std::string failure;
  if (comm) {
    const int exclude[] = {kVictim};
    chorusComm_t shrunk = nullptr;
    chorusResult_t r = chorusCommShrink(comm, exclude, 1, &shrunk);
    if (r != chorusSuccess) {
      failure = std::string("chorusCommShrink: ") + chorusGetErrorString(r) + ": " +
                chorusGetLastError(comm);
    } else {
      int64_t one = 1, sum = 0;
      r = chorusAllReduce(&one, &sum, 1, chorusInt64, chorusSum, shrunk, nullptr);
      if (r != chorusSuccess || sum != nranks - 1)
        failure = "all-reduce on the shrunk communicator: " + std::string(chorusGetErrorString(r)) +
                  ", sum " + std::to_string(sum) + ": " + chorusGetLastError(shrunk);
      else
        sh->rank[rank].shrunk = 1;
      chorusCommDestroy(shrunk);
    }
    chorusCommDestroy(comm);
  }
  return failure;
}

std::string runSurvivorOrVictim(const Cell& c, Shared* sh, int rank, int nranks) {
  Shared::Rank& me = sh->rank[rank];
  // A sanitizer's runtime may start a thread of its own at the process's first pthread_create
  // (ThreadSanitizer's background thread): one thread started and joined first counts it before.
  std::thread([] {}).join();
  me.fdsBefore = openFds();
  me.threadsBefore = threads();
  const bool victim = rank == kVictim;
  std::thread rootKiller;
  if (c.fault == "rootkill") {
    if (rank == 0) {
      rootKiller = std::thread([sh] {
        ::usleep(300000);
        sh->victimPid.store(static_cast<int>(::getpid()));
        sh->faultAt.store(monotonicSeconds());
        std::raise(SIGKILL);
      });
      rootKiller.detach();
    }
    if (rank == 2) ::usleep(600000);
  } else if (victim && c.phase == "init") {
    bringAbout(c.fault, sh, nullptr).join();
  }

  chorusComm_t comm = nullptr;
  chorusResult_t r = chorusCommInitFromEnv(&comm);
  if (c.phase == "init") {
    if (r == chorusSuccess) {
      chorusCommDestroy(comm);
      return "chorusCommInitFromEnv succeeded without rank 1";
    }
    std::string why = judge(c, sh, rank, r, chorusGetLastError(nullptr));
    if (rank == 0 && c.fault == "stop" && sh->victimPid.load() > 0)
      ::kill(sh->victimPid.load(), SIGKILL);
    me.fdsAfter = openFds();
    me.threadsAfter = threadsSettledTo(rank, me.threadsBefore);
    return why;
  }
  if (r != chorusSuccess)
    return std::string("chorusCommInitFromEnv: ") + chorusGetErrorString(r) + ": " +
           chorusGetLastError(nullptr);

  const size_t count = c.phase == "large" ? (size_t{8} << 20) / sizeof(float) : 4;
  std::vector<float> a(count, 1.f), b(count, 0.f);
  // A few good calls first (connect: none; the first call connects).
  if (c.phase != "connect")
    for (int i = 0; i < 3; ++i) {
      r = chorusAllReduce(a.data(), b.data(), count, chorusFloat32, chorusSum, comm, nullptr);
      if (r != chorusSuccess)
        return std::string("before the fault: ") + chorusGetErrorString(r) + ": " +
               chorusGetLastError(comm);
    }

  if (victim) {
    // The victim enters the phase's call where it has one, then meets the fault inside it.
    std::thread aborter;
    chorusRequest_t req = nullptr;
    if (c.phase == "small" || c.phase == "large" || c.phase == "nonblocking" ||
        c.phase == "connect") {
      chorusIAllReduce(a.data(), b.data(), count, chorusFloat32, chorusSum, comm, nullptr, &req);
      if (c.phase == "large") ::usleep(20000);
      aborter = bringAbout(c.fault, sh, comm);
      // Only abort gets here: the call returns (it may have completed before the abort).
      r = chorusWait(&req);
    } else {
      aborter = bringAbout(c.fault, sh, comm);
      ::usleep(200000);
      r = chorusRemoteError;  // nothing of its own was in flight
    }
    aborter.join();
    (void)r;
    return "";  // its communicator is gone (aborted)
  }

  std::string why;
  if (c.phase == "split") {
    chorusComm_t child = nullptr;
    r = chorusCommSplit(comm, 0, rank, &child);
    if (child) chorusCommDestroy(child);
    why = judge(c, sh, rank, r, chorusGetLastError(comm));
  } else if (c.phase == "nonblocking") {  // waits on nonblocking all-reduces until one fails
    for (int i = 0; i < 100000 && r == chorusSuccess; ++i) {
      chorusRequest_t req = nullptr;
      r = chorusIAllReduce(a.data(), b.data(), count, chorusFloat32, chorusSum, comm, nullptr,
                           &req);
      if (r == chorusSuccess) r = chorusWait(&req);
    }
    why = judge(c, sh, rank, r, chorusGetLastError(comm));
  } else if (c.phase == "group") {
    float out = 1, in = 0;
    chorusGroupStart();
    chorusSend(&out, 1, chorusFloat32, kVictim, comm, nullptr);
    chorusRecv(&in, 1, chorusFloat32, kVictim, comm, nullptr);
    r = chorusGroupEnd();
    why = judge(c, sh, rank, r, chorusGetLastError(comm));
  } else if (c.phase == "destroy") {
    chorusRequest_t req = nullptr;
    r = chorusIAllReduce(a.data(), b.data(), count, chorusFloat32, chorusSum, comm, nullptr, &req);
    const double t0 = monotonicSeconds();
    while (sh->faultAt.load() == 0 && monotonicSeconds() - t0 < 10) ::usleep(1000);
    // The shrink comes first here: destroy ends the communicator it needs.
    const int exclude[] = {kVictim};
    chorusComm_t shrunk = nullptr;
    chorusResult_t s = chorusCommShrink(comm, exclude, 1, &shrunk);
    // Destroy drains the queued all-reduce, which fails once the victim's fault is seen.
    r = chorusCommDestroy(comm);
    comm = nullptr;
    me.failedAt = monotonicSeconds();
    me.result = r;
    const double took = me.failedAt - sh->faultAt.load();
    if (r != chorusSuccess)
      why = std::string("chorusCommDestroy: ") + chorusGetErrorString(r);
    else if (took > kBoundSeconds)
      why = "chorusCommDestroy returned " + std::to_string(took) + " s after the fault";
    if (s != chorusSuccess) {
      why += std::string(why.empty() ? "" : "; ") + "chorusCommShrink: " + chorusGetErrorString(s);
    } else {
      int64_t one = 1, sum = 0;
      s = chorusAllReduce(&one, &sum, 1, chorusInt64, chorusSum, shrunk, nullptr);
      if (s == chorusSuccess && sum == nranks - 1) me.shrunk = 1;
      else
        why += std::string(why.empty() ? "" : "; ") +
               "all-reduce on the shrunk communicator failed";
      chorusCommDestroy(shrunk);
    }
  } else {  // connect, small, large: all-reduces until one fails
    for (int i = 0; i < 100000; ++i) {
      r = chorusAllReduce(a.data(), b.data(), count, chorusFloat32, chorusSum, comm, nullptr);
      if (r != chorusSuccess) break;
    }
    why = judge(c, sh, rank, r, chorusGetLastError(comm));
  }
  // A stopped victim never ends by itself: rank 0 ends it once it has its result.
  if (rank == 0 && c.fault == "stop" && sh->victimPid.load() > 0)
    ::kill(sh->victimPid.load(), SIGKILL);
  const std::string after = afterwards(comm, sh, rank, nranks);
  if (why.empty()) why = after;
  me.fdsAfter = openFds();
  me.threadsAfter = threadsSettledTo(rank, me.threadsBefore);
  if (why.empty() && me.fdsAfter > me.fdsBefore)
    why = "holds " + std::to_string(me.fdsAfter - me.fdsBefore) + " more descriptors than before";
  if (why.empty() && me.threadsAfter > me.threadsBefore)
    why = "runs " + std::to_string(me.threadsAfter - me.threadsBefore) +
          " more threads than before";
  return why;
}

struct CellResult {
  bool pass = true;
  std::string detection, leaks, notes;
};

CellResult runCell(const Cell& c) {
  auto* sh = static_cast<Shared*>(chorus::test::sharedScratch(sizeof(Shared)));
  std::memset(static_cast<void*>(sh), 0, sizeof(Shared));
  const int port = chorus::test::freeLoopbackPort();
  chorus::test::RunOptions opt;
  opt.deadlineSeconds = 60;
  opt.initComm = false;
  opt.env = {{"CHORUS_TRANSPORT", c.transport},
             {"MASTER_ADDR", "127.0.0.1"},
             {"MASTER_PORT", std::to_string(port)},
             {"CHORUS_NRANKS", std::to_string(c.ranks)},
             {"CHORUS_SOCKET_IFNAME", "lo"},
             {"CHORUS_TIMEOUT", c.phase == "init" ? "10" : "30"}};
  if (c.phase == "connect") opt.env["CHORUS_CONNECT"] = "lazy";
  opt.rankEnv = [](int r) {
    return std::map<std::string, std::string>{{"CHORUS_RANK", std::to_string(r)}};
  };
  auto out = runRanks(c.ranks, [&c, sh](chorusComm_t, int rank, int n) {
    return runSurvivorOrVictim(c, sh, rank, n);
  }, opt);

  CellResult res;
  double slowest = 0;
  int moreFds = 0, moreThreads = 0;
  for (const RankOutcome& o : out) {
    for (const std::string& f : o.leftovers) {
      res.pass = false;
      res.notes += "left " + f + "; ";
    }
    if (o.rank == (c.fault == "rootkill" ? 0 : kVictim)) {
      const bool ended = (c.fault == "kill" || c.fault == "stop" || c.fault == "rootkill")
                             ? o.signal == SIGKILL
                                                                  : o.exited && o.exitCode == 0;
      if (!ended) {
        res.pass = false;
        res.notes += "victim: " + chorus::test::summarize({o}) + "; ";
      }
      continue;
    }
    if (!o.exited || o.exitCode != 0) {
      res.pass = false;
      std::string s = chorus::test::summarize({o});
      while (!s.empty() && s.back() == '\n') s.pop_back();
      res.notes += s + "; ";
    }
    const Shared::Rank& r = sh->rank[o.rank];
    if (r.failedAt > 0 && sh->faultAt.load() > 0)
      slowest = std::max(slowest, r.failedAt - sh->faultAt.load());
    moreFds = std::max(moreFds, r.fdsAfter - r.fdsBefore);
    moreThreads = std::max(moreThreads, r.threadsAfter - r.threadsBefore);
  }
  char d[64];
  std::snprintf(d, sizeof(d), "%.2f s", slowest);
  res.detection = d;
  res.leaks = (moreFds > 0 || moreThreads > 0)
                  ? "+" + std::to_string(moreFds) + " fds, +" + std::to_string(moreThreads) +
                        " threads"
                  : "none";
  if (res.pass) {
    const std::string msg = sh->rank[0].message;
    res.notes = msg.substr(0, 160);
  }
  for (char& ch : res.notes)
    if (ch == '|' || ch == '\n') ch = ' ';
  return res;
}

std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

bool known(const std::string& v, const char* const* list, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (v == list[i]) return true;
  return false;
}

}  // namespace

// The transports this build registers (all of them, or those usable here by default: a
// transport may ask to be named, as ucx does without an RDMA device).
std::vector<std::string> registeredTransports(bool usableOnly) {
  std::vector<std::string> v;
  const char *name = nullptr, *unavailable = nullptr;
  for (int i = 0; chorusGetTransportInfo(i, &name, nullptr, &unavailable) == chorusSuccess; ++i)
    if (!usableOnly || unavailable == nullptr) v.emplace_back(name);
  return v;
}

int main(int argc, char** argv) {
  const std::vector<std::string> registered = registeredTransports(false);
  std::vector<std::string> transports = registeredTransports(true), phases(std::begin(kPhases), std::end(kPhases)),
      faults(std::begin(kFaults), std::end(kFaults));
  int ranks = 3;
  bool markdown = false, list = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "chorus-faults: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--transport") transports = splitList(value());
    else if (a == "--phase") phases = splitList(value());
    else if (a == "--fault") faults = splitList(value());
    else if (a == "--ranks") ranks = std::atoi(value().c_str());
    else if (a == "--markdown") markdown = true;
    else if (a == "--list") list = true;
    else {
      std::fprintf(stderr,
                   "usage: chorus-faults [--transport T,...] [--phase P,...] [--fault F,...] "
                   "[--ranks N] [--markdown] [--list]\n");
      return 2;
    }
  }
  for (const auto& t : transports)
    if (std::find(registered.begin(), registered.end(), t) == registered.end()) {
      std::string names;
      for (const auto& u : registered) names += (names.empty() ? "" : ", ") + u;
      std::fprintf(stderr, "chorus-faults: this build has no transport '%s' (%s)\n", t.c_str(),
                   names.c_str());
      return 2;
    }
  for (const auto& p : phases)
    if (!known(p, kPhases, std::size(kPhases))) {
      std::fprintf(stderr, "chorus-faults: unknown phase '%s'\n", p.c_str());
      return 2;
    }
  for (const auto& f : faults)
    if (!known(f, kFaults, std::size(kFaults))) {
      std::fprintf(stderr, "chorus-faults: unknown fault '%s'\n", f.c_str());
      return 2;
    }
  if (ranks < 3 || ranks > kMaxRanks) {
    std::fprintf(stderr, "chorus-faults: --ranks must be 3..%d (rank 1 is the victim, rank 0 "
                         "serves the store)\n", kMaxRanks);
    return 2;
  }
  if (markdown)
    std::printf("| fault | phase | transport | outcome | slowest survivor | leaked "
                "| rank 0's error |\n"
                "| --- | --- | --- | --- | ---: | --- | --- |\n");
  int failed = 0, cells = 0;
  for (const auto& f : faults)
    for (const auto& p : phases)
      for (const auto& t : transports) {
        if (f == "abort" && p == "init") continue;  // nothing to abort before init
        if (f == "rootkill" && p != "init") continue;  // a fault of the rendezvous
        Cell c{t, p, f, ranks};
        if (list) {
          std::printf("%s %s %s\n", f.c_str(), p.c_str(), t.c_str());
          continue;
        }
        const double t0 = monotonicSeconds();
        CellResult r = runCell(c);
        ++cells;
        failed += r.pass ? 0 : 1;
        if (markdown)
          std::printf("| %s | %s | %s | %s | %s | %s | %s |\n", f.c_str(), p.c_str(), t.c_str(),
                      r.pass ? "pass" : "**FAIL**", r.detection.c_str(), r.leaks.c_str(),
                      r.notes.c_str());
        else
          std::printf("%s %s %s %s: detected in %s, leaked %s (cell %.1f s): %s\n",
                      r.pass ? "PASS" : "FAIL", f.c_str(), p.c_str(), t.c_str(),
                      r.detection.c_str(), r.leaks.c_str(), monotonicSeconds() - t0,
                      r.notes.c_str());
        std::fflush(stdout);
      }
  if (!list) std::printf("%d cells, %d passed, %d failed\n", cells, cells - failed, failed);
  return failed == 0 ? 0 : 1;
}
