// Helpers shared by the bootstrap tests: loopback addresses, a free port, forked ranks with a
// hard deadline, a store served by a process of its own, and scoped environment variables.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "src/base/socket_util.h"
#include "src/bootstrap/bootstrap.h"
#include "src/bootstrap/store.h"
#include "src/bootstrap/unique_id.h"
#include "tests/support/scoped_env.h"
#include "tools/chorus-run/job_env.h"

namespace chorus::bootstrap::testing {

inline net::SockAddr loopback(uint16_t port = 0) {
  auto a = net::parseHostPort("127.0.0.1:" + std::to_string(port));
  if (!a.ok()) std::abort();
  return *a;
}

// A port nobody listens on right now, which no connection on this host can be given before the
// test binds it (chorus-run's picker: below the kernel's ephemeral range).
inline uint16_t freePort() {
  int port = run::pickUnusedPort(AF_INET);
  if (port <= 0) std::abort();
  return static_cast<uint16_t>(port);
}

// Runs fn(i) for i in [0, n) in forked children and returns their exit codes. A child still
// running after `timeoutSeconds` is killed and reported as -1, so a hang fails the test rather
// than the CI run. Children leave with _exit: they must not run the parent's destructors
// (a store server's thread exists only in the parent).
inline std::vector<int> runForked(int n, const std::function<int(int)>& fn,
                                  double timeoutSeconds = 10.0) {
  std::vector<pid_t> pids(n, -1);
  for (int i = 0; i < n; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int rc = fn(i);
      std::fflush(nullptr);
      ::_exit(rc);
    }
    pids[i] = pid;
  }
  std::vector<int> codes(n, -1);
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(timeoutSeconds));
  int left = n;
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    for (int i = 0; i < n; ++i) {
      if (pids[i] <= 0) continue;
      int status = 0;
      if (::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pids[i] = -1;
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int i = 0; i < n; ++i) {
    if (pids[i] <= 0) continue;
    ::kill(pids[i], SIGKILL);
    int status = 0;
    ::waitpid(pids[i], &status, 0);
  }
  return codes;
}

// A job's bootstrap store (startJobStore, as chorusGetUniqueId makes it) served by a forked
// process of its own until this object goes, for tests that fork ranks: forking from a process
// with a running thread (the store's) can leave a child blocked forever on a lock that thread
// held at the fork (ASan's allocator: 6 of 150 runs of the unique-id test hung so).
class StoreProcess {
 public:
  StoreProcess() {
    int up[2], down[2];
    if (::pipe2(up, O_CLOEXEC) != 0 || ::pipe2(down, O_CLOEXEC) != 0) std::abort();
    pid_ = ::fork();
    if (pid_ < 0) std::abort();
    if (pid_ == 0) {
      ::close(up[0]);
      ::close(down[1]);
      auto started = startJobStore(loopback(0));
      chorusUniqueId id{};
      if (started.ok()) encodeUniqueId(*started, &id);
      bool sent = ::write(up[1], &id, sizeof id) == static_cast<ssize_t>(sizeof id);
      char c;
      while (sent && ::read(down[0], &c, 1) < 0 && errno == EINTR) {
      }  // serves until the test closes its end (or dies)
      if (started.ok()) releaseServer(started->root);
      ::_exit(started.ok() && sent ? 0 : 1);
    }
    ::close(up[1]);
    ::close(down[0]);
    stop_ = down[1];
    ssize_t got = 0;
    do {
      got = ::read(up[0], &id_, sizeof id_);
    } while (got < 0 && errno == EINTR);
    ::close(up[0]);
    ok_ = got == static_cast<ssize_t>(sizeof id_) && decodeUniqueId(id_).ok();
  }
  ~StoreProcess() { stop(); }
  StoreProcess(const StoreProcess&) = delete;
  StoreProcess& operator=(const StoreProcess&) = delete;

  bool ok() const { return ok_; }  // the store runs and id() reaches it
  const chorusUniqueId& id() const { return id_; }
  // Ends the store's process; true when it released the store and exited cleanly.
  bool stop() {
    if (pid_ <= 0) return exitedCleanly_;
    ::close(stop_);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    exitedCleanly_ = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    return exitedCleanly_;
  }

 private:
  pid_t pid_ = -1;
  int stop_ = -1;
  chorusUniqueId id_{};
  bool ok_ = false;
  bool exitedCleanly_ = false;
};

// Sets and unsets variables for one test and restores the previous environment afterwards.
using chorus::testing::ScopedEnv;

}  // namespace chorus::bootstrap::testing
