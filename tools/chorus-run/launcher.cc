#include "tools/chorus-run/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tools/chorus-run/job_env.h"
#include "tools/chorus-run/line_prefixer.h"

namespace chorus::run {
namespace {

using Clock = std::chrono::steady_clock;

// Signals chorus-run passes on to every rank; the third one escalates to SIGKILL so a job that
// ignores them can still be stopped from the terminal.
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP};
constexpr int kSignalsBeforeKill = 3;
// How long to keep reading output after the last SIGKILL: a descendant that left the rank's
// process group may hold a pipe open forever, and chorus-run must not wait for it.
constexpr auto kFinalDrain = std::chrono::milliseconds(500);
constexpr size_t kReadChunk = 64 * 1024;

std::string errnoText(const char* call) { return std::string(call) + ": " + std::strerror(errno); }

void writeAll(int fd, const char* data, size_t len, bool* broken) {
  while (len > 0 && !*broken) {
    ssize_t n = write(fd, data, len);
    if (n > 0) {
      data += n;
      len -= static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 100);
    } else {
      // Our own stdout/stderr went away (e.g. `| head`): keep supervising, drop the output.
      *broken = true;
    }
  }
}

// Closes whichever ends are open, keeping errno for the caller's message.
void closePipes(int (&pipes)[2][2]) {
  int saved = errno;
  for (auto& p : pipes) {
    for (int& fd : p) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  }
  errno = saved;
}

std::string describeSignal(int sig) {
  const char* name = strsignal(sig);
  return "signal " + std::to_string(sig) + (name != nullptr ? std::string(" (") + name + ")" : "");
}

struct Stream {
  int fd = -1;
  int sink = STDOUT_FILENO;
  LinePrefixer prefixer{""};
};

struct RankProc {
  int rank = 0;
  pid_t pid = -1;
  bool exited = false;  // the leader has exited; it stays a zombie until reaped
  bool reaped = false;
  int code = 0;         // CLD_EXITED, CLD_KILLED or CLD_DUMPED
  int status = 0;       // exit code or signal number
  Stream streams[2];
};

class Launcher {
 public:
  explicit Launcher(const LaunchOptions& opts) : opts_(opts), ranks_(opts.nranks) {}
  ~Launcher();
  int run();

 private:
  void setupSignals();
  void spawnAll();
  void spawn(RankProc& r, const std::vector<char*>& argv, int devNull);
  // --bind-to core: the CPUs the ranks are bound to, in rank order (empty: no binding).
  void planBinding();
  void pollOnce(std::optional<Clock::time_point> deadline);
  void handleSignalFd();
  void checkChildren();
  void readStream(Stream& s);
  void closeStream(Stream& s);
  void signalGroups(int sig);
  void beginTermination(int exitStatus);
  void message(const std::string& text);
  bool allExited() const;
  bool anyStreamOpen() const;
  void reapAll();

  LaunchOptions opts_;
  std::vector<RankProc> ranks_;
  std::string root_;
  std::string secret_;
  std::vector<int> cpus_;  // chorus-run's allowed CPUs when binding, else empty
  int signalFd_ = -1;
  sigset_t oldMask_{};
  bool masked_ = false;
  struct sigaction oldPipe_{};
  bool terminating_ = false;
  bool killSent_ = false;
  Clock::time_point killAt_{};
  int exitStatus_ = 0;
  int forwarded_ = 0;
  bool sinkBroken_[3] = {false, false, false};
};

Launcher::~Launcher() {
  // Only reached with ranks alive when run() threw: take them down before leaving.
  for (RankProc& r : ranks_) {
    if (r.pid > 0 && !r.reaped) kill(-r.pid, SIGKILL);
    for (Stream& s : r.streams) {
      if (s.fd >= 0) close(s.fd);
    }
  }
  reapAll();
  if (signalFd_ >= 0) close(signalFd_);
  if (masked_) {
    sigprocmask(SIG_SETMASK, &oldMask_, nullptr);
    sigaction(SIGPIPE, &oldPipe_, nullptr);
  }
}

void Launcher::message(const std::string& text) {
  std::string line = "chorus-run: " + text + "\n";
  writeAll(STDERR_FILENO, line.data(), line.size(), &sinkBroken_[STDERR_FILENO]);
}

void Launcher::setupSignals() {
  // Signals are consumed synchronously through a signalfd, so the supervisor loop never runs
  // code in a signal handler and never misses a SIGCHLD that arrives between checks.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  for (int sig : kForwardedSignals) sigaddset(&mask, sig);
  if (sigprocmask(SIG_BLOCK, &mask, &oldMask_) != 0) throw std::runtime_error(errnoText("sigprocmask"));
  masked_ = true;
  struct sigaction ignore{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &oldPipe_);
  signalFd_ = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  if (signalFd_ < 0) throw std::runtime_error(errnoText("signalfd"));
}

void Launcher::spawnAll() {
  int port = opts_.port != 0 ? opts_.port : pickFreePort(opts_.rootHost);
  root_ = formatRoot(opts_.rootHost, port);
  secret_ = opts_.jobSecret.empty() ? makeJobSecret() : opts_.jobSecret;

  std::vector<std::string> args = opts_.command;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  planBinding();
  int devNull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devNull < 0) throw std::runtime_error(errnoText("open /dev/null"));
  for (int i = 0; i < opts_.nranks; ++i) {
    ranks_[i].rank = i;
    try {
      spawn(ranks_[i], argv, devNull);
    } catch (const std::exception& e) {
      message(std::string("cannot start rank ") + std::to_string(i) + ": " + e.what());
      for (int j = i; j < opts_.nranks; ++j) {
        ranks_[j].rank = j;
        ranks_[j].exited = ranks_[j].reaped = true;
      }
      beginTermination(EXIT_FAILURE);
      break;
    }
  }
  close(devNull);
}

void Launcher::planBinding() {
  if (opts_.bind != LaunchOptions::Bind::kCore) return;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
    throw std::runtime_error(errnoText("--bind-to core: sched_getaffinity"));
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) cpus_.push_back(cpu);
  }
  if (cpus_.empty()) throw std::runtime_error("--bind-to core: no CPU in chorus-run's mask");
  if (static_cast<size_t>(opts_.nranks) > cpus_.size()) {
    message("--bind-to core: " + std::to_string(opts_.nranks) + " ranks on " +
            std::to_string(cpus_.size()) + " CPUs, so ranks share CPUs (rank i on CPU i mod " +
            std::to_string(cpus_.size()) + " of the allowed ones)");
  }
}

void Launcher::spawn(RankProc& r, const std::vector<char*>& argv, int devNull) {
  int pipes[2][2] = {{-1, -1}, {-1, -1}};
  if (opts_.prefix) {
    for (auto& p : pipes) {
      if (pipe2(p, O_CLOEXEC) != 0) {
        closePipes(pipes);
        throw std::runtime_error(errnoText("pipe2"));
      }
    }
  }
  auto env = rankEnvironment(root_, secret_, r.rank, opts_.nranks, opts_.rankOffset,
                             opts_.worldSize > 0 ? opts_.worldSize : opts_.nranks);
  // A rank in its own process group must not read the terminal (it would be stopped by
  // SIGTTIN), so a terminal stdin is replaced by /dev/null; a piped stdin goes to rank 0.
  bool inheritStdin = r.rank == 0 && !isatty(STDIN_FILENO);
  pid_t parent = getpid();
  // Made before fork: the child only calls sched_setaffinity.
  cpu_set_t cpu;
  CPU_ZERO(&cpu);
  const int bindCpu = cpus_.empty() ? -1 : cpus_[static_cast<size_t>(r.rank) % cpus_.size()];
  if (bindCpu >= 0) CPU_SET(bindCpu, &cpu);
  std::string bindError;
  if (bindCpu >= 0) {
    bindError = "chorus-run: rank " + std::to_string(opts_.rankOffset + r.rank) +
                ": cannot bind to CPU " + std::to_string(bindCpu) + ": ";
  }

  pid_t pid = fork();
  if (pid < 0) {
    closePipes(pipes);
    throw std::runtime_error(errnoText("fork"));
  }
  if (pid == 0) {
    // Child. chorus-run is single-threaded, so the libc calls below are safe after fork.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // chorus-run died before prctl took effect
    setpgid(0, 0);
    struct sigaction dfl{};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &dfl, nullptr);
    sigprocmask(SIG_SETMASK, &oldMask_, nullptr);
    if (opts_.prefix) {
      dup2(pipes[0][1], STDOUT_FILENO);
      dup2(pipes[1][1], STDERR_FILENO);
    }
    if (!inheritStdin) dup2(devNull, STDIN_FILENO);
    if (bindCpu >= 0 && sched_setaffinity(0, sizeof(cpu), &cpu) != 0) {
      bindError += std::strerror(errno);
      bindError += "\n";
      ssize_t ignored = write(STDERR_FILENO, bindError.data(), bindError.size());
      (void)ignored;
      _exit(126);
    }
    for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
    execvp(argv[0], argv.data());
    int err = errno;
    std::string msg = "chorus-run: cannot execute '" + std::string(argv[0]) + "': " +
                      std::strerror(err) + "\n";
    ssize_t ignored = write(STDERR_FILENO, msg.data(), msg.size());
    (void)ignored;
    _exit(err == ENOENT ? 127 : 126);
  }
  // Parent. Setting the group here too closes the race with signalling it before the child ran.
  setpgid(pid, pid);
  r.pid = pid;
  if (opts_.prefix) {
    for (int k = 0; k < 2; ++k) {
      close(pipes[k][1]);
      int fl = fcntl(pipes[k][0], F_GETFL);
      fcntl(pipes[k][0], F_SETFL, fl | O_NONBLOCK);
      r.streams[k].fd = pipes[k][0];
      r.streams[k].sink = k == 0 ? STDOUT_FILENO : STDERR_FILENO;
      r.streams[k].prefixer =
          LinePrefixer("[" + std::to_string(opts_.rankOffset + r.rank) + "] ");
    }
  }
}

void Launcher::signalGroups(int sig) {
  for (const RankProc& r : ranks_) {
    // Safe while unreaped: the zombie leader keeps the group id from being reused.
    if (r.pid > 0 && !r.reaped) kill(-r.pid, sig);
  }
}

void Launcher::beginTermination(int exitStatus) {
  if (terminating_) return;
  terminating_ = true;
  exitStatus_ = exitStatus;
  killAt_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(opts_.killGraceSeconds));
  signalGroups(SIGTERM);
}

void Launcher::checkChildren() {
  for (RankProc& r : ranks_) {
    if (r.exited || r.pid <= 0) continue;
    siginfo_t info{};
    // WNOWAIT: learn the status but leave the zombie in place (see the header comment).
    if (waitid(P_PID, static_cast<id_t>(r.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) continue;
    if (info.si_pid == 0) continue;
    r.exited = true;
    r.code = info.si_code;
    r.status = info.si_status;
    bool failed = r.code != CLD_EXITED || r.status != 0;
    if (!failed || terminating_) continue;
    std::string how = r.code == CLD_EXITED
                          ? "exited with code " + std::to_string(r.status)
                          : "was killed by " + describeSignal(r.status) +
                                (r.code == CLD_DUMPED ? " (core dumped)" : "");
    bool othersRunning = false;
    for (const RankProc& o : ranks_) othersRunning |= (!o.exited && o.pid > 0);
    message("rank " + std::to_string(opts_.rankOffset + r.rank) + " (pid " + std::to_string(r.pid) + ") " + how +
            (othersRunning ? "; terminating the other ranks" : ""));
    beginTermination(r.code == CLD_EXITED ? r.status : 128 + r.status);
  }
}

void Launcher::handleSignalFd() {
  signalfd_siginfo si;
  bool child = false;
  while (read(signalFd_, &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
    int sig = static_cast<int>(si.ssi_signo);
    if (sig == SIGCHLD) {
      child = true;
      continue;
    }
    ++forwarded_;
    if (forwarded_ >= kSignalsBeforeKill) {
      message("received " + describeSignal(sig) + " again; killing all ranks");
      signalGroups(SIGKILL);
    } else {
      signalGroups(sig);
    }
  }
  if (child) checkChildren();
}

void Launcher::readStream(Stream& s) {
  char buf[kReadChunk];
  for (;;) {
    ssize_t n = read(s.fd, buf, sizeof(buf));
    if (n > 0) {
      std::string out;
      s.prefixer.feed(std::string_view(buf, static_cast<size_t>(n)), &out);
      writeAll(s.sink, out.data(), out.size(), &sinkBroken_[s.sink]);
      if (static_cast<size_t>(n) < sizeof(buf)) return;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      return;
    } else {
      closeStream(s);  // EOF, or an error that will not go away
      return;
    }
  }
}

void Launcher::closeStream(Stream& s) {
  if (s.fd < 0) return;
  close(s.fd);
  s.fd = -1;
  std::string out;
  s.prefixer.finish(&out);
  writeAll(s.sink, out.data(), out.size(), &sinkBroken_[s.sink]);
}

void Launcher::pollOnce(std::optional<Clock::time_point> deadline) {
  std::vector<pollfd> fds;
  std::vector<Stream*> streams;
  fds.push_back({signalFd_, POLLIN, 0});
  for (RankProc& r : ranks_) {
    for (Stream& s : r.streams) {
      if (s.fd < 0) continue;
      fds.push_back({s.fd, POLLIN, 0});
      streams.push_back(&s);
    }
  }
  int timeoutMs = -1;
  if (deadline) {
    auto left = std::chrono::duration<double, std::milli>(*deadline - Clock::now()).count();
    timeoutMs = left <= 0 ? 0 : static_cast<int>(std::ceil(left));
  }
  int n = poll(fds.data(), fds.size(), timeoutMs);
  if (n < 0) {
    if (errno == EINTR) return;
    throw std::runtime_error(errnoText("poll"));
  }
  for (size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].revents != 0) readStream(*streams[i - 1]);
  }
  if (fds[0].revents != 0) handleSignalFd();
}

bool Launcher::allExited() const {
  for (const RankProc& r : ranks_) {
    if (!r.exited && r.pid > 0) return false;
  }
  return true;
}

bool Launcher::anyStreamOpen() const {
  for (const RankProc& r : ranks_) {
    for (const Stream& s : r.streams) {
      if (s.fd >= 0) return true;
    }
  }
  return false;
}

void Launcher::reapAll() {
  for (RankProc& r : ranks_) {
    if (r.pid <= 0 || r.reaped) continue;
    int status = 0;
    while (waitpid(r.pid, &status, 0) < 0 && errno == EINTR) {
    }
    r.reaped = true;
  }
}

int Launcher::run() {
  setupSignals();
  spawnAll();
  std::optional<Clock::time_point> timeoutAt;
  if (opts_.timeoutSeconds > 0) {
    timeoutAt = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(opts_.timeoutSeconds));
  }
  checkChildren();  // a rank may have died before the signalfd saw its SIGCHLD
  while (!allExited()) {
    std::optional<Clock::time_point> deadline;
    if (!terminating_) deadline = timeoutAt;
    if (terminating_ && !killSent_) deadline = killAt_;
    pollOnce(deadline);
    auto now = Clock::now();
    if (!terminating_ && timeoutAt && now >= *timeoutAt) {
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%g", opts_.timeoutSeconds);
      message(std::string("timeout: the job ran longer than ") + secs + " s; terminating all ranks");
      beginTermination(kTimeoutExitStatus);
    }
    if (terminating_ && !killSent_ && now >= killAt_) {
      signalGroups(SIGKILL);
      killSent_ = true;
    }
  }

  // Every rank's leader is gone. Whatever it left behind in its group (background children,
  // a pipeline's tail) is stopped too, first politely: output that is still in flight is read
  // while we wait for the pipes to close.
  signalGroups(SIGTERM);
  auto graceEnd = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(opts_.killGraceSeconds));
  while (anyStreamOpen() && Clock::now() < graceEnd) pollOnce(graceEnd);
  signalGroups(SIGKILL);
  auto drainEnd = Clock::now() + kFinalDrain;
  while (anyStreamOpen() && Clock::now() < drainEnd) pollOnce(drainEnd);
  for (RankProc& r : ranks_) {
    for (Stream& s : r.streams) {
      if (s.fd >= 0) readStream(s);
      closeStream(s);
    }
  }
  reapAll();
  return exitStatus_;
}

}  // namespace

int runJob(const LaunchOptions& opts) {
  if (opts.nranks < 1) throw std::runtime_error("the number of ranks must be at least 1");
  if (opts.command.empty()) throw std::runtime_error("no program to run");
  Launcher launcher(opts);
  return launcher.run();
}

}  // namespace chorus::run
