// The executor: runs one rank's schedule over the communicator's connections.
//
// It is a dataflow engine. Schedule::finalize() has turned program order into dependencies, so
// the executor posts every step whose dependencies are done: sends and receives go to the
// transports (in FIFO order per peer and direction, a bounded number in flight), local copies
// and reductions run inline, and a recvReduce lands in a staging buffer and is reduced into its
// destination as soon as it completes. Chunked schedules therefore pipeline by themselves:
// while chunk c is being reduced, chunk c+1 is on the wire and chunk c-1 is being forwarded.
//
// One-sided steps (kGet, kGetReduce) run inline like local steps, once their dependencies are
// done and the peer's header — which carries its buffer addresses — has arrived and been
// checked; a kGetReduce reads through a cache-sized bounce buffer and reduces piece by piece.
// kNotify / kWait are zero-byte messages in the peer's send / receive order.
//
// Before any data, one consistency header travels each way to every peer of the schedule
// (collective, sequence number, count, type, op, root, algorithm, and the bytes and messages
// each side will send the other). A disagreement fails the operation with kInvalidUsage naming
// both ranks' calls — never a hang or a wrong sum.
//
// Waiting spins for CHORUS_SPIN_US, then yields, then blocks in poll() on the connections' fds,
// waking at least every 100 ms to check the deadline and the liveness of same-host peers.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/common/schedule.h"
#include "algorithms/kernels/dtype.h"
#include "src/base/status.h"
#include "transports/transport.h"

namespace chorus {

// The header each rank sends each peer before a schedule's data (fixed layout, 112 bytes).
struct WireHeader {
  uint32_t magic = 0;
  uint16_t version = 0;
  uint8_t coll = 0;
  uint8_t dtype = 0;
  uint8_t op = 0;  // the user's op (chorusRedOp_t value, 0xff when none)
  uint8_t pad[3] = {};
  int32_t root = -1;
  uint64_t seq = 0;
  uint64_t count = 0;
  uint64_t bytesToPeer = 0;
  uint64_t bytesFromPeer = 0;
  uint32_t msgsToPeer = 0;
  uint32_t msgsFromPeer = 0;
  char algo[32] = {};
  // Where the sender's input, output and scratch are, for peers that read them one-sidedly.
  uint64_t bufAddr[3] = {};
};
static_assert(sizeof(WireHeader) == 112);

// What the caller says about the operation, for the header and for messages.
struct OpIdentity {
  sched::Coll coll = sched::Coll::kAllReduce;
  uint64_t seq = 0;  // communicator-wide collective number; 0 for point-to-point
  uint64_t count = 0;
  DataType dtype = DataType::kFloat32;
  int userOp = -1;   // chorusRedOp_t, -1 when the collective has no reduction
  int root = -1;
};

std::string describeCall(const OpIdentity& id, const char* algo);

struct ExecEnv {
  int rank = 0;
  // The connection to `peer`; the caller connected every peer of the schedule before run().
  std::function<Connection*(int peer)> connection;
  // Returns a non-ok status when a peer is known dead (same-host pid gone). Cheap; called at
  // most every 100 ms while blocked.
  std::function<Status(const std::vector<int>& peers)> checkPeers;
  std::chrono::steady_clock::time_point deadline;
  double timeoutSeconds = 300;
  int spinUs = 20;
  // When set (chorusCommAbort, possibly from another thread), the run stops within ~100 ms.
  const std::atomic<bool>* abortFlag = nullptr;
};

class Executor {
 public:
  // buffers[id] for every BufId the schedule uses (kScratch is provided by the executor when
  // buffers[kScratch] is null). Runs to completion, or fails and leaves the connections in an
  // unknown state (the communicator then cancels them).
  Status run(const sched::Schedule& schedule, std::vector<std::byte*> buffers, DataType dtype,
             ReduceOp op, const OpIdentity& id, const ExecEnv& env);

 private:
  std::byte* stagingFor(size_t slot, uint64_t bytes);
  // Runs a kGet / kGetReduce whose source is `remote` in the peer's address space.
  template <class Ptr>
  Status runOneSided(const sched::Step& s, Connection* conn, uint64_t remote, Ptr ptr,
                     DataType dtype, ReduceOp op);
  std::byte* scratch(uint64_t bytes);

  std::vector<std::unique_ptr<std::byte[]>> staging_;
  std::vector<uint64_t> stagingSize_;
  std::unique_ptr<std::byte[]> scratch_;
  uint64_t scratchSize_ = 0;
  std::unique_ptr<std::byte[]> bounce_;  // one-sided reads that are reduced land here first
};

}  // namespace chorus
