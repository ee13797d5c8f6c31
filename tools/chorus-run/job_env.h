// What chorus-run tells each rank about the job: the rendezvous address, the rank numbering and
// the job secret, as the CHORUS_* variables that chorusCommInitFromEnv reads (their names and
// docs are declared in src/core/config.cc; chorus-run does not link the library, so they are
// spelled here once).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace chorus::run {

inline constexpr const char* kEnvRoot = "CHORUS_ROOT";
inline constexpr const char* kEnvRank = "CHORUS_RANK";
inline constexpr const char* kEnvNranks = "CHORUS_NRANKS";
inline constexpr const char* kEnvLocalRank = "CHORUS_LOCAL_RANK";
inline constexpr const char* kEnvLocalNranks = "CHORUS_LOCAL_NRANKS";
inline constexpr const char* kEnvJobSecret = "CHORUS_JOB_SECRET";

// "host:port", with IPv6 literals bracketed ("[::1]:port") so the port stays unambiguous.
std::string formatRoot(const std::string& host, int port);

// 32 lowercase hex digits from the kernel's CSPRNG. Throws std::runtime_error when getrandom
// fails, because a predictable secret would let other local users join the job.
std::string makeJobSecret();

// A TCP port that is free right now on `host` (or on every interface when host does not resolve
// to a local address). The port is released before returning, so rank 0 can bind it; another
// process could take it in between, which is the price of not holding it across exec.
// Throws std::runtime_error when no socket can be bound.
int pickFreePort(const std::string& host);

// The variables local rank `localRank` of `localRanks` on this host gets, in a job of
// `worldSize` ranks whose ranks on this host start at `rankOffset` (single host: 0, localRanks).
std::vector<std::pair<std::string, std::string>> rankEnvironment(const std::string& root,
                                                                 const std::string& secret,
                                                                 int localRank, int localRanks,
                                                                 int rankOffset = 0,
                                                                 int worldSize = -1);

}  // namespace chorus::run
