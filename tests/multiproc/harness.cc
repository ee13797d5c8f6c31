#include "tests/multiproc/harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tools/chorus-run/job_env.h"

namespace chorus::test {
namespace {

bool writeAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool readAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = ::read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

[[noreturn]] void childMain(int rank, int nranks, const RankFn& fn, const RunOptions& opt,
                            int idRead, const std::vector<int>& idWrites, int resultWrite) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  for (const auto& [k, v] : opt.env) ::setenv(k.c_str(), v.c_str(), 1);
  if (opt.rankEnv)
    for (const auto& [k, v] : opt.rankEnv(rank)) ::setenv(k.c_str(), v.c_str(), 1);
  std::string failure;
  chorusComm_t comm = nullptr;
  if (opt.initComm) {
    chorusUniqueId id{};
    if (rank == 0) {
      chorusResult_t r = chorusGetUniqueId(&id);
      if (r != chorusSuccess) {
        failure = std::string("chorusGetUniqueId: ") + chorusGetLastError(nullptr);
        std::memset(&id, 0, sizeof(id));
      }
      for (int fd : idWrites) writeAll(fd, &id, sizeof(id));
    } else if (!readAll(idRead, &id, sizeof(id))) {
      failure = "could not read the unique id from rank 0";
    }
    if (failure.empty()) {
      chorusResult_t r = chorusCommInitRank(&comm, nranks, id, rank);
      if (r != chorusSuccess)
        failure = std::string("chorusCommInitRank: ") + chorusGetErrorString(r) + ": " +
                  chorusGetLastError(nullptr);
    }
  }
  if (failure.empty()) failure = fn(comm, rank, nranks);
  if (comm) chorusCommDestroy(comm);
  writeAll(resultWrite, failure.data(), failure.size());
  ::close(resultWrite);
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(failure.empty() ? 0 : 1);
}

}  // namespace

double monotonicSeconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

int freeLoopbackPort() {
  int port = run::pickUnusedPort(AF_INET);
  return port > 0 ? port : 0;
}

void* sharedScratch(size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("mmap");
    std::abort();
  }
  std::memset(p, 0, bytes);
  return p;
}

std::vector<RankOutcome> runRanks(int nranks, const RankFn& fn, const RunOptions& opt) {
  std::vector<int> idPipeRead(static_cast<size_t>(nranks), -1),
      idPipeWrite(static_cast<size_t>(nranks), -1);
  std::vector<int> resultRead(static_cast<size_t>(nranks), -1);
  std::vector<pid_t> pids(static_cast<size_t>(nranks), -1);
  for (int r = 1; r < nranks; ++r) {
    int p[2];
    if (::pipe(p) != 0) std::abort();
    idPipeRead[static_cast<size_t>(r)] = p[0];
    idPipeWrite[static_cast<size_t>(r)] = p[1];
  }
  std::fflush(stdout);
  std::fflush(stderr);
  for (int r = 0; r < nranks; ++r) {
    int res[2];
    if (::pipe(res) != 0) std::abort();
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(res[0]);
      std::vector<int> writes;
      if (r == 0)
        for (int k = 1; k < nranks; ++k) writes.push_back(idPipeWrite[static_cast<size_t>(k)]);
      childMain(r, nranks, fn, opt, idPipeRead[static_cast<size_t>(r)], writes, res[1]);
    }
    ::close(res[1]);
    resultRead[static_cast<size_t>(r)] = res[0];
    pids[static_cast<size_t>(r)] = pid;
  }
  for (int r = 1; r < nranks; ++r) {
    ::close(idPipeRead[static_cast<size_t>(r)]);
    ::close(idPipeWrite[static_cast<size_t>(r)]);
  }

  std::vector<RankOutcome> out(static_cast<size_t>(nranks));
  std::vector<bool> reaped(static_cast<size_t>(nranks), false);
  double deadline = monotonicSeconds() + opt.deadlineSeconds;
  int left = nranks;
  bool killed = false;
  while (left > 0) {
    for (int r = 0; r < nranks; ++r) {
      if (reaped[static_cast<size_t>(r)]) continue;
      int status = 0;
      pid_t w = ::waitpid(pids[static_cast<size_t>(r)], &status, WNOHANG);
      if (w == 0) continue;
      reaped[static_cast<size_t>(r)] = true;
      --left;
      RankOutcome& o = out[static_cast<size_t>(r)];
      o.rank = r;
      o.timedOut = killed;
      if (WIFEXITED(status)) {
        o.exited = true;
        o.exitCode = WEXITSTATUS(status);
      } else if (WIFSIGNALED(status)) {
        o.signal = WTERMSIG(status);
      }
      char buf[4096];
      ssize_t n;
      while ((n = ::read(resultRead[static_cast<size_t>(r)], buf, sizeof(buf))) > 0)
        o.failure.append(buf, static_cast<size_t>(n));
      ::close(resultRead[static_cast<size_t>(r)]);
    }
    if (left == 0) break;
    if (!killed && monotonicSeconds() > deadline) {
      killed = true;
      for (int r = 0; r < nranks; ++r)
        if (!reaped[static_cast<size_t>(r)]) ::kill(pids[static_cast<size_t>(r)], SIGKILL);
    }
    ::usleep(2000);
  }
  // Every name a rank created must be gone: unlinked once all peers mapped it, crash or not.
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(dir)) {
      std::string name = e->d_name;
      if (name.rfind("chorus-", 0) != 0) continue;
      for (int r = 0; r < nranks; ++r) {
        if (name.find("-" + std::to_string(pids[static_cast<size_t>(r)]) + "-") == std::string::npos)
          continue;
        out[static_cast<size_t>(r)].leftovers.push_back("/dev/shm/" + name);
        ::unlink(("/dev/shm/" + name).c_str());  // so one failure does not pile up
      }
    }
    ::closedir(dir);
  }
  return out;
}

std::string summarize(const std::vector<RankOutcome>& outcomes) {
  std::string s;
  for (const RankOutcome& o : outcomes) {
    for (const std::string& f : o.leftovers)
      s += "rank " + std::to_string(o.rank) + ": left " + f + " behind\n";
    if (o.exited && o.exitCode == 0) continue;
    s += "rank " + std::to_string(o.rank) + ": ";
    if (o.timedOut) s += "killed at the test deadline; ";
    if (o.exited) s += "exit " + std::to_string(o.exitCode);
    else s += std::string("killed by signal ") + strsignal(o.signal);
    if (!o.failure.empty()) s += ": " + o.failure;
    s += "\n";
  }
  return s;
}

}  // namespace chorus::test
