// The executor: runs one rank's prepared plan (src/exec/plan.h) over the communicator's
// connections and host window.
//
// Message plans run as a dataflow. The plan's dependencies say what may run when, so the
// executor posts every step whose dependencies are done: sends and receives go to the
// transports (in FIFO order per peer and direction, a bounded number in flight), local copies
// and reductions run inline, and a recvReduce lands in a staging buffer and is reduced into its
// destination as soon as it completes. Chunked schedules therefore pipeline by themselves: while
// chunk c is being reduced, chunk c+1 is on the wire and chunk c-1 is being forwarded.
// One-sided steps run inline like local steps, once their dependencies are done and the peer's
// header and memory handles have arrived and been checked; a kGetReduce reads through a
// cache-sized bounce buffer and reduces piece by piece. kNotify / kWait are zero-byte messages.
// Quantization steps are local steps too, running the kernels of algorithms/kernels/quantize.h
// with the call's config (OpIdentity::quant); a block size that does not match that config is
// an internal error, not a buffer overrun.
//
// Before any data, one consistency header travels each way to every message peer (collective,
// sequence number, count, type, op, root, algorithm, and the bytes and messages each side will
// send the other); plans that read their peers' buffers send their memory handles right after
// it. A disagreement fails the operation with kInvalidUsage naming both ranks' calls — never a
// hang or a wrong sum. Point-to-point plans (sequence 0) send no header: the transports match
// sizes and tags message by message.
//
// The host window protocol. On a communicator with a host window every collective call s
//   1. waits until every peer has entered call s-1 (usually already true: no wait, one load
//      per peer). So a rank rewrites its line and region of parity s mod 2 only once every
//      peer is past call s-2, the last call that read them — whatever algorithms ran since;
//   2. enters call s: publishes its header in the window with its first signal. A window plan
//      does it at its first kSignal step (after the steps before it, so a small message
//      published there travels with the header); any other plan at its start, so a rank on a
//      window plan and a rank on a message plan for the same call see each other's header and
//      both fail instead of waiting for each other;
//   3. a window plan's kAwait(q, k) waits until q has made k signals in call s; the first one
//      on q checks q's header.
// Window plans have no message steps: they run in program order, a loop over a few steps.
//
// Waiting spins for CHORUS_SPIN_US, then yields for CHORUS_YIELD_US, then blocks in poll() on
// the connections' fds (or futexes on shared-memory words), waking at least every 100 ms to check the deadline and
// the liveness of same-host peers. A peer whose process is gone is not a failure by itself:
// its connection is told (Connection::peerGone) and fails only what the peer's delivered
// messages cannot complete — a peer that did its part of the call and exited has failed no one.
#pragma once

#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "algorithms/common/schedule.h"
#include "algorithms/kernels/dtype.h"
#include "algorithms/kernels/quantize_ops.h"
#include "algorithms/kernels/reduce_ops.h"
#include "src/base/status.h"
#include "src/exec/consistency.h"
#include "src/exec/plan.h"
#include "transports/transport.h"

namespace chorus::exec {

/// What the executor needs of the communicator's peers.
class PeerAccess {
 public:
  virtual ~PeerAccess() = default;
  /// The connection to `peer` (connected before run()), or nullptr.
  virtual Connection* connection(int peer) = 0;
  /// Non-ok when `peer`'s process is known to be gone (same-host pid). Cheap; called at most
  /// every 100 ms per wait.
  virtual Status alive(int peer) = 0;
};

struct ExecEnv {
  int rank = 0;
  int nranks = 1;
  PeerAccess* peers = nullptr;
  HostWindow* window = nullptr;  ///< the communicator's host window, if it has one
  WaitPolicy wait;               ///< deadline, spin, abort flag (checkPeer: unused here)
};

/// The buffers of one run, by BufId: input, output, scratch (null: the executor's own), the
/// window (bound by the executor), then the user buffers of a grouped point-to-point plan; and
/// the size of each (what a peer may read of input, output and scratch). The executor fills in
/// the scratch and window entries; the caller keeps one Bindings for call after call.
struct Bindings {
  std::vector<std::byte*> buf;
  std::vector<uint64_t> bytes;
};

class Executor {
 public:
  Executor();
  ~Executor();
  /// Runs `plan` to completion, or fails and leaves the connections in an unknown state (the
  /// communicator then cancels them).
  Status run(const Plan& plan, Bindings& bind, DataType dtype, ReduceOp op, const OpIdentity& id,
             const ExecEnv& env);
  /// One point-to-point message without a plan: what run() does for a plan of a single send
  /// or receive at seq 0 (Plan::single), for a lone chorusSend / chorusRecv (or its nonblocking
  /// form). `algo` names the call in errors.
  Status runMessage(bool send, int peer, void* buf, uint64_t bytes, const OpIdentity& id,
                    const char* algo, const ExecEnv& env);
  /// A sequential plan (plan.sequential: window and local steps only) in parts, for a
  /// nonblocking call that progresses when it is posted or tested: runs steps while none has to
  /// wait, and returns with *done false at the first that would (entering the call before every
  /// peer has entered the previous one, or a kAwait whose signal is not there yet). The next
  /// call with `resume` continues at that step; `mayBlock` waits as run() does, to the end.
  /// Between a part that returned *done false and the part that finishes, nothing else may run
  /// on this executor and `bind` must not change (the communicator's queue keeps the call at
  /// its head meanwhile).
  Status runInParts(const Plan& plan, Bindings& bind, DataType dtype, ReduceOp op,
                    const OpIdentity& id, const ExecEnv& env, bool resume, bool mayBlock,
                    bool* done);

  /// After a run whose call asked (OpIdentity::segments >= 0): 1 when every rank's input and
  /// output lay in chorusMemAlloc segments (its own, and each peer's header flag), 0 when some
  /// rank's did not, -1 when the call did not ask or this rank did not hear from every peer.
  /// What a rank hears depends on the plan: on a plan where every rank hears every other
  /// (AlgoInfo::hearsEveryPeer), every rank learns the same answer.
  int segmentsSeen() const;

 private:
  struct PeerRun;
  struct Posted {
    Op op;
    uint32_t step;
    int peerIdx;
    int stagingSlot;  // -1 unless recvReduce
  };
  Status bind(const Plan& plan, Bindings& bind, const OpIdentity& id, const ExecEnv& env);
  Status enterWindow(const Plan& plan, const OpIdentity& id, const ExecEnv& env);
  // Runs steps from partNext_; without mayBlock, stops (*done false) at an await not yet met.
  Status runSequential(const Plan& plan, const OpIdentity& id, DataType dtype, ReduceOp op,
                       const ExecEnv& env, bool mayBlock, bool* done);
  Status runDataflow(const Plan& plan, const OpIdentity& id, DataType dtype, ReduceOp op,
                     const ExecEnv& env);
  Status runSingle(const Plan& plan, const OpIdentity& id, const ExecEnv& env);
  // Nothing moved: blocks until one of `conns` may progress or `waitMs` pass (a connection that
  // can progress right now, or has nothing to block on, makes it return at once).
  Status block(std::span<Connection* const> conns, int waitMs, bool windowPending,
               const OpIdentity& id, const char* algo);
  Status awaitWindow(const sched::Step& s, size_t index, const Plan& plan, const OpIdentity& id,
                     const ExecEnv& env);
  Status checkWindowHeader(int peer, const Plan& plan, const OpIdentity& id,
                           const ExecEnv& env);
  void noteSegments(int peer, uint8_t flags);  // a peer's header flags, once per run
  WindowHeader windowHeader(const Plan& plan, const OpIdentity& id) const;
  std::byte* ptr(const sched::Range& r) const { return buf_[r.buf] + r.offset; }
  std::byte* peerWindow(int peer, const sched::Range& r, const OpIdentity& id,
                        const ExecEnv& env) const {
    return env.window->region(peer, static_cast<int>(id.seq & 1)) + r.offset;
  }
  std::byte* stagingFor(size_t slot, uint64_t bytes);
  std::byte* scratch(uint64_t bytes);

  // Per run, reused from run to run (no allocation once warm).
  std::byte** buf_ = nullptr;  // the run's Bindings (by BufId), which the executor may fill in
  std::vector<uint32_t> remaining_;
  std::vector<uint32_t> readyLocal_;
  std::vector<uint64_t> headerCheckedAt_;  // per rank: the run whose window header was checked
  uint64_t runEpoch_ = 0;
  uint64_t* bytes_ = nullptr;
  std::vector<std::unique_ptr<PeerRun>> peerRuns_;
  std::vector<Posted> posted_;
  std::vector<int> freeSlots_;
  std::vector<Connection*> conns_;  // the message peers' connections, in plan.peers order
  std::vector<pollfd> fds_;
  std::vector<WaitWord> words_;
  uint32_t signalled_ = 0;
  WindowHeader myHeader_;  // this run's header in the host window
  // What the headers say of the ranks' buffers (segmentsSeen()), for a run that asks.
  bool segmentsAsked_ = false;
  int segmentsPending_ = 0;  // peers not heard from yet
  bool segmentsAll_ = false;
  uint64_t segmentsEpoch_ = 0;
  std::vector<uint64_t> segmentsSeenAt_;  // per rank: the epoch its header was noted in
  // A sequential plan run in parts (runInParts): whether the call was entered, and the step
  // to continue at.
  bool partEntered_ = false;
  size_t partNext_ = 0;

  std::vector<std::unique_ptr<std::byte[]>> staging_;
  std::vector<uint64_t> stagingSize_;
  std::unique_ptr<std::byte[]> scratch_;
  uint64_t scratchSize_ = 0;
  std::unique_ptr<std::byte[]> bounce_;  // one-sided reads that are reduced land here first
  std::vector<const void*> quantSources_;  // a dequantize / requantize step's blocks
};

}  // namespace chorus::exec
