// What creating a communicator costs at scale (issue 17, "init at scale"): a model of the
// messages chorus's creation path sends today, sized with the real encoders, not a simulation.
//
// What Communicator::create does (src/core/comm_create.cc, src/bootstrap, src/core/peers.cc):
//   1. every rank opens one TCP connection to the job's store (served by one thread, in rank 0's
//      process or chorusGetUniqueId's), says hello, claims its rank (add) and checks nranks
//      (rank 0 sets it, the others get it);
//   2. all-gather #1 of every rank's PeerInfo (bootstrap::serializePeerInfo) through the store:
//      one setMultiGet per rank (its key and value, then all n keys), answered when the last
//      rank's key arrives, with all n values;
//   3. connections: CHORUS_CONNECT=eager (what the default, auto, does up to 512 ranks) dials
//      every other rank, one after the other (Peers::connect: higher ranks first), one TCP
//      socket per peer on another host (shared memory inside a host); lazy connects the peers
//      of each plan at its first call;
//   4. all-gather #2 of the 12-byte votes (Vote::kBytes), through the store again.
// Heartbeats (src/core/heartbeat.h) run from creation on: a datagram to every other rank per
// interval, eager or lazy.
//
// Modelled per rank count n (K ranks per host): the store's bytes in and out and the time its
// NIC needs for them; the memory the store holds when it answers a gather (it encodes every
// parked rank's reply as soon as the last key arrives, store.cc completeParked); the store's
// key handling (n requests of n keys per gather) at an assumed cost per key; per rank, the
// sockets (file descriptors) eager and lazy, the time to dial them one by one, and the kernel
// buffer memory they may hold; per host, the heartbeat datagrams per second. Lazy peers are
// counted on the real plans: the union of the peers of the collectives listed (built by the
// registered builders), largest over a sample of ranks.
//
// Not modelled: contention of n ranks dialing at once (listen backlogs, SYN retransmits), the
// kernel's per-socket memory when idle (a few KiB, not measured here), TCP slow start on the
// store's replies, the UCX / ibverbs transports' own set-up.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/base/status.h"

namespace chorus::sim {

struct InitSpec {
  int ranksPerHost = 8;
  /// A serialized PeerInfo: 134 bytes measured on this machine (tcp and shm endpoints, a
  /// 10-character hostname; strace of chorus-run -n 2, the store frame of gather #1).
  uint64_t recordBytes = 134;
  uint64_t voteBytes = 12;  ///< Vote::kBytes (src/core/comm_internal.h)
  double storeGbps = 25;    ///< the store host's NIC (the cost model's Ethernet line rate)
  double storeKeyNs = 100;  ///< store CPU per key looked up and copied: assumed, not measured
  /// One dial (TCP handshake, chorus's hello and ack): two round trips of the cost model's
  /// Ethernet latency (10 us one way).
  double dialUs = 40;
  /// What chorus asks for (tcp_transport.cc kSocketBufferBytes); the kernel doubles a request
  /// and caps it at net.core.{r,w}mem_max (Debian's default 212992).
  uint64_t socketBufferBytes = 4 << 20;
  uint64_t bufferMax = 212992;
  uint64_t fdLimit = 1024;        ///< RLIMIT_NOFILE's soft default on Debian
  double heartbeatTimeoutS = 4;   ///< CHORUS_HEARTBEAT_TIMEOUT's default
  /// Collectives whose peers lazy connection makes ("allreduce:ring", ...).
  std::vector<std::string> lazyAlgos = {"allreduce:ring", "allreduce:tree", "allreduce:hier"};
};

struct InitRow {
  int ranks = 0;
  uint64_t gatherRequest = 0, gatherReply = 0;  ///< one rank's setMultiGet of PeerInfo, bytes
  double storeInBytes = 0, storeOutBytes = 0;   ///< the whole creation
  double storeNicUs = 0;      ///< the larger direction at storeGbps
  double storeKeysUs = 0;     ///< n^2 keys per gather at storeKeyNs
  double storePeakBytes = 0;  ///< every reply of gather #1 encoded at once, plus the values
  int eagerSockets = 0;       ///< per rank: TCP connections (peers on other hosts)
  int lazySockets = 0;        ///< per rank: other-host peers of lazyAlgos' plans
  int lazyPeers = 0;          ///< per rank: all peers of those plans
  double eagerDialUs = 0;     ///< per rank, dials one after the other
  double eagerBufferBytes = 0;  ///< per rank, socket buffers if every connection fills them
  double heartbeatsPerHostS = 0;  ///< datagrams received per second by one host
};

/// Rows for 8, 16, ..., maxRanks ranks (powers of two, at least one host of ranksPerHost).
StatusOr<std::vector<InitRow>> modelInit(const InitSpec& spec, int maxRanks);

/// The table as printed by chorus-sim --init, and the verdict on eager connections.
std::string initTable(const InitSpec& spec, const std::vector<InitRow>& rows);

/// One rank's store request and reply for an all-gather of `valueBytes` among n ranks (the
/// real encoder for the request, store.h's layout for the reply), and the gather's keys.
struct GatherBytes {
  uint64_t request = 0, reply = 0;
};
GatherBytes gatherBytes(int rank, int nranks, uint64_t call, uint64_t valueBytes);

}  // namespace chorus::sim
