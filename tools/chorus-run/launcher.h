// chorus-run's process supervisor: starts the ranks of a single-host job and owns them until
// they are all gone.
//
// Each rank runs in a process group of its own (so a rank that is a shell script takes its
// children with it when signalled, and a Ctrl-C at the terminal reaches chorus-run once, which
// forwards it). A rank's leader is only reaped at the very end: while it is a zombie its pid, and
// so its process-group id, cannot be reused, which makes signalling the group safe even after
// the rank has exited. PR_SET_PDEATHSIG in every rank is the backstop when chorus-run itself is
// killed without a chance to clean up.
#pragma once

#include <string>
#include <vector>

namespace chorus::run {

struct LaunchOptions {
  int nranks = 1;         // ranks started here
  // Several hosts: this host's ranks are rankOffset .. rankOffset + nranks - 1 of a job of
  // worldSize ranks (0: nranks, a single-host job). The job's secret comes from --job-secret or
  // CHORUS_JOB_SECRET, the same on every host; a single-host job makes one up.
  int rankOffset = 0;
  int worldSize = 0;
  std::string jobSecret;
  std::string rootHost = "127.0.0.1";
  int port = 0;                 // 0: pick a free one
  double timeoutSeconds = 0;    // 0: no limit
  bool prefix = true;           // "[r] " before every line of a rank's stdout/stderr
  double killGraceSeconds = 2;  // SIGTERM, then SIGKILL after this long
  // Each rank's CPU affinity. kCore: rank i of this host runs on the i-th CPU of chorus-run's
  // own affinity mask (so an outer taskset or cgroup is respected), round robin when there are
  // more ranks than CPUs; the rank's threads inherit it. kNone: the ranks inherit chorus-run's
  // mask and the kernel places them.
  enum class Bind { kNone, kCore };
  Bind bind = Bind::kNone;
  std::vector<std::string> command;
};

// Exit status chorus-run uses when --timeout expires (as coreutils' timeout does).
inline constexpr int kTimeoutExitStatus = 124;

// Runs the job and returns chorus-run's exit status: 0 when every rank exits 0; otherwise the
// status of the first rank seen failing (its exit code, or 128 + signal), or kTimeoutExitStatus.
// Throws std::runtime_error when the job cannot be set up at all.
int runJob(const LaunchOptions& opts);

}  // namespace chorus::run
