// Helpers shared by the bootstrap tests: loopback addresses, a free port, forked ranks with a
// hard deadline, and scoped environment variables.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "src/base/socket_util.h"
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

// Sets and unsets variables for one test and restores the previous environment afterwards.
class ScopedEnv {
 public:
  ~ScopedEnv() {
    for (auto& [name, old] : saved_) {
      if (old) ::setenv(name.c_str(), old->c_str(), 1);
      else ::unsetenv(name.c_str());
    }
  }
  void set(const std::string& name, const std::string& value) {
    save(name);
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  void unset(const std::string& name) {
    save(name);
    ::unsetenv(name.c_str());
  }

 private:
  void save(const std::string& name) {
    if (saved_.count(name)) return;
    const char* v = std::getenv(name.c_str());
    saved_[name] = v ? std::optional<std::string>(v) : std::nullopt;
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

}  // namespace chorus::bootstrap::testing
