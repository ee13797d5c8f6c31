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

// A TCP port that is free right now on every address of `family` (AF_INET or AF_INET6) and lies
// below the kernel's ephemeral range (net.ipv4.ip_local_port_range): the port is released before
// returning so that rank 0 can bind it, and no connect() or bind to port 0 on this host can be
// given it in between (a port from the kernel could be, on a busy host). Candidates are tried
// from a random start, so two launchers starting together pick apart. When the range starts
// below 2048 or every candidate is taken, a port from the kernel. -1 with errno when no socket
// can be bound.
int pickUnusedPort(int family);

// pickUnusedPort for the family `host` resolves to (IPv4 when it does not resolve).
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
