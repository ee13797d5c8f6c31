// Forks real ranks through the real bootstrap and transports.
//
// runRanks(n, fn) forks n processes. Rank 0 calls chorusGetUniqueId (its process serves the
// rendezvous store) and hands the id to the others through pipes, as an MPI broadcast would;
// every rank then calls chorusCommInitRank and runs fn. fn returns "" on success or a
// description of what was wrong; the child exits 0 or 1 accordingly. A hard deadline kills every
// rank still running, so a hang fails the test instead of the CI run.
#pragma once

#include <chorus/chorus.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace chorus::test {

struct RankOutcome {
  int rank = 0;
  bool exited = false;   // false: killed by a signal (or by the deadline)
  int exitCode = -1;
  int signal = 0;
  std::string failure;   // what fn reported
  bool timedOut = false;
  // Shared-memory segments this rank created that still exist after every rank has ended
  // (/dev/shm/chorus-<pidns>-<pid>-...): there must be none, even after a crash.
  std::vector<std::string> leftovers;
};

struct RunOptions {
  double deadlineSeconds = 120;
  std::map<std::string, std::string> env;  // set in every rank before init
  // Set in rank r before init, after `env` (e.g. a CHORUS_HOST_ID per rank: pretend hosts).
  std::function<std::map<std::string, std::string>(int rank)> rankEnv;
  bool initComm = true;                     // false: fn gets comm == nullptr and does its own init
};

// Inside a rank function with `rank` and `comm` in scope: return a failure naming the rank.
#define RANK_CHECK(cond, msg)                                                  \
  do {                                                                         \
    if (!(cond)) return "rank " + std::to_string(rank) + ": " + std::string(msg); \
  } while (0)

#define RANK_OK(call)                                                                  \
  do {                                                                                 \
    chorusResult_t r_ = (call);                                                        \
    if (r_ != chorusSuccess)                                                           \
      return "rank " + std::to_string(rank) + ": " #call " -> " + chorusGetErrorString(r_) + \
             ": " + chorusGetLastError(comm);                                          \
  } while (0)

using RankFn = std::function<std::string(chorusComm_t comm, int rank, int nranks)>;

std::vector<RankOutcome> runRanks(int nranks, const RankFn& fn, const RunOptions& options = {});

// "" when every rank exited 0; otherwise one line per failed rank.
std::string summarize(const std::vector<RankOutcome>& outcomes);

// Seconds on CLOCK_MONOTONIC (comparable across processes on one host).
double monotonicSeconds();

// A TCP port nobody listens on right now, for tests whose rank 0 serves the bootstrap store on a
// port of its own: chorus-run's picker (tools/chorus-run/job_env.h), below the kernel's ephemeral
// range, so no connection of another test can be given it before rank 0 binds it (a port from
// the kernel's own pick could be: chorus-faults once lost a cell to that).
int freeLoopbackPort();

// A small anonymous MAP_SHARED area created before the fork: ranks share timestamps through it.
void* sharedScratch(size_t bytes);

}  // namespace chorus::test
