// Runs a command to completion for a test: captures stdout and stderr separately, and kills the
// command's process group when a deadline passes, so a hang fails one test instead of the run.
#pragma once

#include <signal.h>

#include <string>
#include <vector>

namespace chorus::test {

struct ProcessResult {
  int status = -1;        // exit code, or 128 + signal
  bool timedOut = false;  // the deadline killed it
  double seconds = 0;     // wall time until exit
  std::string out;
  std::string err;
};

struct ProcessOptions {
  double deadlineSeconds = 10;
  std::vector<std::string> extraEnv;  // "NAME=value"
  // Sent to the command after this many seconds (0: never); for signal-forwarding tests.
  double signalAfterSeconds = 0;
  int signal = SIGTERM;
};

ProcessResult runProcess(const std::vector<std::string>& argv, const ProcessOptions& opts = {});

}  // namespace chorus::test
