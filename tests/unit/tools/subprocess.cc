#include "tests/unit/tools/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace chorus::test {

ProcessResult runProcess(const std::vector<std::string>& argv, const ProcessOptions& opts) {
  using Clock = std::chrono::steady_clock;
  ProcessResult res;
  int outPipe[2], errPipe[2];
  if (pipe2(outPipe, O_CLOEXEC) != 0 || pipe2(errPipe, O_CLOEXEC) != 0) return res;
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (std::string& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::vector<std::string> env = opts.extraEnv;

  auto start = Clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    // The command gets a group of its own (so the deadline can kill everything it started) and
    // default signal handling (the test runner may ignore some signals).
    setpgid(0, 0);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD}) signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(outPipe[1], STDOUT_FILENO);
    dup2(errPipe[1], STDERR_FILENO);
    for (std::string& e : env) putenv(e.data());
    execvp(cargv[0], cargv.data());
    _exit(127);
  }
  setpgid(pid, pid);
  close(outPipe[1]);
  close(errPipe[1]);

  auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(opts.deadlineSeconds));
  auto signalAt = start + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(opts.signalAfterSeconds));
  bool signalled = opts.signalAfterSeconds <= 0;
  int fds[2] = {outPipe[0], errPipe[0]};
  std::string* sinks[2] = {&res.out, &res.err};
  bool exited = false;
  int wstatus = 0;
  while (true) {
    if (!exited && waitpid(pid, &wstatus, WNOHANG) == pid) {
      exited = true;
      res.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    }
    if (exited && fds[0] < 0 && fds[1] < 0) break;
    auto now = Clock::now();
    if (now >= deadline) {
      res.timedOut = true;
      kill(-pid, SIGKILL);
      if (!exited) {
        waitpid(pid, &wstatus, 0);
        exited = true;
        res.seconds = std::chrono::duration<double>(Clock::now() - start).count();
      }
      break;
    }
    if (!signalled && now >= signalAt) {
      kill(pid, opts.signal);
      signalled = true;
    }
    pollfd p[2];
    int n = 0;
    for (int k = 0; k < 2; ++k) {
      if (fds[k] >= 0) p[n++] = {fds[k], POLLIN, 0};
    }
    poll(p, static_cast<nfds_t>(n), 10);
    for (int i = 0; i < n; ++i) {
      if (p[i].revents == 0) continue;
      int k = p[i].fd == fds[0] ? 0 : 1;
      char buf[4096];
      ssize_t got = read(fds[k], buf, sizeof(buf));
      if (got > 0) {
        sinks[k]->append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        close(fds[k]);
        fds[k] = -1;
      }
    }
  }
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
  if (WIFEXITED(wstatus)) res.status = WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) res.status = 128 + WTERMSIG(wstatus);
  return res;
}

}  // namespace chorus::test
