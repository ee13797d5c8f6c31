// Failure scenarios that every transport must pass, run through real forked ranks by
// behavior_test (shm, tcp) and ucx_test (UCX's transports and error modes). Each runs one job
// with `env` set in every rank and returns what went wrong, "" when every rank did right.
#pragma once

#include <cstddef>
#include <map>
#include <string>

namespace chorus::test {

using Env = std::map<std::string, std::string>;

// Rank 1 of `nranks` is killed with SIGKILL: with `count` > 1000 floats, inside a nonblocking
// all-reduce it posted 30 ms earlier (after 2 calls); otherwise between small all-reduces, after
// `smallCallsFirst` of them. Every other rank's call must fail with chorusRemoteError within 5 s
// of the kill, and exit 0 leaving nothing behind; rank 1 must end by SIGKILL.
std::string killedRankScenario(int nranks, size_t count, int smallCallsFirst, const Env& env,
                               double deadlineSeconds);

// Rank 0 aborts a communicator split from the job's from another thread while its all-reduce
// waits for rank 1 (which comes 1.5 s late): the call returns chorusRemoteError within 1 s of
// the abort, rank 1's late call fails too, and the parent communicator works on both.
std::string abortFromAnotherThreadScenario(const Env& env);

// Rank 1 of 2 exits without sending what rank 0 receives: rank 0's receive fails with
// chorusRemoteError naming rank 1 within 5 s.
std::string leftBeforeSendingScenario(const Env& env);

}  // namespace chorus::test
