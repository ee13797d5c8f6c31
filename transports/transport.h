// The transport contract: how to reach one peer, and nothing about collectives.
//
// A Transport is created per communicator. At init every rank calls listen() and the resulting
// EndpointBlob travels to all peers inside PeerInfo (bootstrap all-gather). When the executor
// first needs peer p, the communicator picks the transport with the best canConnect() score and
// calls connect(p, p's blob). Both sides of a pair call connect() for each other; the transport
// decides internally who dials and who accepts, and must not deadlock when both call it at once.
//
// A Connection is ordered and reliable in each direction. Messages are matched in FIFO order:
// the k-th postSend on one side meets the k-th postRecv on the other, and their sizes and tags
// must agree (a mismatch fails the receiving op with kInvalidUsage naming both sizes/tags).
// test() never blocks and drives the connection's progress. cancel() fails every outstanding op
// with `why` and tells the peer (best effort), whose ops then fail with `why`'s code
// (kInvalidUsage stays kInvalidUsage, everything else becomes kRemoteError) and its message.
// A closed peer (EOF, reset) fails outstanding and future ops with kRemoteError naming the peer.
#pragma once

#include <poll.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/futex.h"
#include "src/base/status.h"

namespace chorus {

using Tag = uint64_t;
using EndpointBlob = std::vector<uint8_t>;

// What every rank tells every other at init (serialized by the bootstrap).
struct PeerInfo {
  int rank = -1;
  uint64_t hostId = 0;     // equal for ranks on the same host (boot id + hostname, or CHORUS_HOST_ID)
  int32_t pid = 0;
  uint64_t pidNamespace = 0;  // inode of /proc/self/ns/pid: pid liveness checks need the same one
  std::string hostname;
  // Where the rank runs on its host (src/topology/layout.h): NUMA node of its CPU affinity,
  // CUDA device, nearest NIC (index among the host's NICs); -1 when unknown or none.
  int32_t numa = -1;
  int32_t gpu = -1;
  int32_t nic = -1;
  std::map<std::string, EndpointBlob> endpoints;  // transport name -> its listen() blob
};

// canConnect's answer: ok with a score (higher wins) or not reachable.
struct Reach {
  bool ok = false;
  int score = 0;
};

// Opaque handle of one posted send or receive, valid on the connection that made it.
struct Op {
  uint64_t id = 0;
};

// Bytes moved by one connection; the communicator adds them up per transport and host class.
struct ConnStats {
  uint64_t bytesSent = 0;
  uint64_t bytesRecv = 0;
};

class Connection {
 public:
  virtual ~Connection() = default;
  virtual int peer() const = 0;

  // `src`/`dst` must stay valid until test() reports done. bytes may be 0.
  virtual StatusOr<Op> postSend(const void* src, size_t bytes, Tag tag) = 0;
  virtual StatusOr<Op> postRecv(void* dst, size_t bytes, Tag tag) = 0;
  // Never blocks. Sets *done when `op` has completed (send: buffer reusable; recv: data landed).
  virtual Status test(Op& op, bool* done) = 0;
  // Fails all outstanding ops with `why` and notifies the peer. Idempotent.
  virtual Status cancel(const Status& why) = 0;

  // For blocking waits: the fd to poll and the events that mean "progress may be possible now"
  // (POLLOUT only while sends are pending). fd -1 means the caller must keep polling test().
  virtual void pollInfo(int* fd, short* events) const = 0;

  // False while the peer has not finished its side of connect() (shared memory: the creator of
  // a segment returns before its peer has mapped it). The communicator waits, bounded, until
  // every new connection says true, so no rank leaves connection setup before its peers.
  virtual bool connected() const { return true; }

  // For blocking waits on shared-memory transports. Arms the peer's wake-up and appends the words
  // to sleep on; returns false instead when progress is possible right now (do not sleep). The
  // caller calls endWait() after sleeping. Transports with an fd leave the defaults.
  virtual bool prepareWait(std::vector<WaitWord>& /*words*/) { return false; }
  virtual void endWait() {}

  // One-sided read of the peer's memory: `bytes` at the peer's address `remote` into `dst`.
  // Only where canRead() (shared memory with cross-memory attach; later CUDA IPC, RDMA).
  // Blocking: returns when the bytes have landed.
  virtual bool canRead() const { return false; }
  virtual Status read(void* /*dst*/, uint64_t /*remote*/, size_t /*bytes*/) {
    return internalError("this transport cannot read peer memory");
  }

  virtual ConnStats stats() const = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string_view name() const = 0;
  virtual Reach canConnect(const PeerInfo& self, const PeerInfo& peer) const = 0;
  // Starts accepting connections; the blob is what peers need to reach us.
  virtual Status listen(EndpointBlob* out) = 0;
  // Bounded by `timeoutSeconds`. Both ends of a pair call this for each other.
  virtual StatusOr<std::unique_ptr<Connection>> connect(int peer, const EndpointBlob& peerBlob,
                                                        double timeoutSeconds) = 0;
};

}  // namespace chorus
