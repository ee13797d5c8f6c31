// chorus-run: starts N ranks of a chorus job on this host.
//
//   chorus-run -n 4 [--port P] [--root-host H] [--timeout S] [--no-prefix] [--bind-to core]
//              [--] prog args...
//   chorus-run -n 2 --rank-offset 2 --world-size 6 --port P --root-host H --job-secret S prog
//                                   (this host's share of a job on several hosts)
//
// Every rank gets CHORUS_ROOT, CHORUS_RANK, CHORUS_NRANKS, CHORUS_LOCAL_RANK,
// CHORUS_LOCAL_NRANKS and CHORUS_JOB_SECRET, which chorusCommInitFromEnv reads. The job fails
// as a whole: the first rank to fail takes the others down and its status becomes ours.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "tools/chorus-run/launcher.h"

int main(int argc, char** argv) {
  chorus::run::LaunchOptions opts;
  bool noPrefix = false;

  CLI::App app{"chorus-run -n N [options] [--] program [args...]\n\n"
               "Starts N local ranks of a chorus job; each rank's output lines are prefixed with "
               "\"[rank] \"."};
  app.set_version_flag("--version", "chorus-run 0.1.0");
  app.add_option("-n,--nranks", opts.nranks, "number of ranks to start")
      ->required()
      ->check(CLI::Range(1, 65536));
  app.add_option("--port", opts.port, "TCP port of the rendezvous store (default: a free one)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--root-host", opts.rootHost, "host part of CHORUS_ROOT")
      ->capture_default_str();
  app.add_option("--timeout", opts.timeoutSeconds,
                 "kill the job after this many seconds and exit with 124 (0: no limit)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kill-grace", opts.killGraceSeconds,
                 "seconds between SIGTERM and SIGKILL when the job is torn down")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--no-prefix", noPrefix, "pass the ranks' stdout/stderr through untouched");
  std::string bind = "none";
  app.add_option("--bind-to", bind,
                 "core: bind rank i of this host to the i-th CPU chorus-run may use (round "
                 "robin when ranks outnumber them); none: let the kernel place the ranks")
      ->check(CLI::IsMember({"none", "core"}))
      ->capture_default_str();
  app.add_option("--rank-offset", opts.rankOffset,
                 "several hosts: global rank of this host's first rank")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--world-size", opts.worldSize,
                 "several hosts: ranks in the whole job (needs --port, --root-host and the same "
                 "--job-secret or CHORUS_JOB_SECRET on every host)")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--job-secret", opts.jobSecret, "the job's secret (default: CHORUS_JOB_SECRET, "
                                                 "else a new random one)");
  // Everything from the program name on belongs to the program, including its own flags.
  app.prefix_command();
  app.footer("Example: chorus-run -n 4 chorus-perf -b 8 -e 128M -f 2");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; usage errors exit 2, as is customary for command-line tools.
    return app.exit(e) == 0 ? 0 : 2;
  }
  opts.command = app.remaining();
  if (!opts.command.empty() && opts.command.front() == "--") opts.command.erase(opts.command.begin());
  if (opts.command.empty()) {
    std::fprintf(stderr, "chorus-run: no program given\n%s", app.help().c_str());
    return 2;
  }
  opts.prefix = !noPrefix;
  opts.bind = bind == "core" ? chorus::run::LaunchOptions::Bind::kCore
                             : chorus::run::LaunchOptions::Bind::kNone;
  if (opts.jobSecret.empty()) {
    if (const char* s = std::getenv("CHORUS_JOB_SECRET")) opts.jobSecret = s;
  }
  if (opts.worldSize > 0) {
    if (opts.rankOffset + opts.nranks > opts.worldSize) {
      std::fprintf(stderr, "chorus-run: --rank-offset %d + -n %d exceeds --world-size %d\n",
                   opts.rankOffset, opts.nranks, opts.worldSize);
      return 2;
    }
    if (opts.worldSize > opts.nranks &&
        (opts.port == 0 || app.count("--root-host") == 0 || opts.jobSecret.empty())) {
      std::fprintf(stderr, "chorus-run: a job on several hosts (--world-size %d > -n %d) needs "
                           "--port, --root-host and --job-secret (or CHORUS_JOB_SECRET), the "
                           "same on every host\n", opts.worldSize, opts.nranks);
      return 2;
    }
  } else if (opts.rankOffset != 0) {
    std::fprintf(stderr, "chorus-run: --rank-offset needs --world-size\n");
    return 2;
  }

  try {
    return chorus::run::runJob(opts);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chorus-run: %s\n", e.what());
    return 1;
  }
}
