// The host staging segment: one shared segment per communicator whose ranks are all on one host,
// through which small all-reduces run without messages.
//
// It is the "shared staging segment" exposure of the one-shot algorithm (algorithms/direct/):
// each rank copies its input into its own slot, publishes the operation's sequence number, waits
// until every other rank has published the same number, and reduces all slots, in rank order,
// into its output. Every rank reads every input once; nobody sends anything. Latency is a few
// cache-line transfers instead of a message round per peer, which is what the executor and
// the rings cost (see docs/performance.md for the numbers).
//
// Per rank the segment holds a sequence word (a futex), an operation header and a data slot for
// each parity of the sequence number (double buffering). Slot reuse is safe without any
// acknowledgment: before a rank writes its parity-p slot for operation s it waits until every
// rank has published s-1, i.e. has finished s-2, the last reader of that slot.
//
// Every collective of the communicator (not only the staged ones) publishes its header and
// number here. So a rank that runs the staged path while another runs a schedule (different
// calls) sees the other's header, and both fail with kInvalidUsage naming both calls, instead
// of waiting for each other. Waits are bounded: they spin, yield, then sleep on the peer's
// futex word, and give up on the deadline, on an abort, when the peer's process is gone, or
// when the peer marks itself failed.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/kernels/dtype.h"
#include "algorithms/kernels/reduce_ops.h"
#include "src/core/executor.h"
#include "src/core/status.h"
#include "transports/shm/segment.h"

namespace chorus {

class HostStaging {
 public:
  // Messages up to this size travel inside the header's cache line.
  static constexpr size_t kInlineBytes = 32;

  struct WaitEnv {
    int spinUs = 20;
    double timeoutSeconds = 300;
    const std::atomic<bool>* abortFlag = nullptr;
    std::function<Status(const std::vector<int>& peers)> checkPeers;
  };

  // Collective over all `nranks` ranks of the communicator, all on this host: rank 0 creates
  // the segment (named after its pid `rank0Pid` and `commId`), the others map it; the last to map
  // it removes the name. Bounded by env.timeoutSeconds.
  static StatusOr<std::unique_ptr<HostStaging>> create(int rank, int nranks, uint64_t commId,
                                                       int rank0Pid, size_t slotBytes,
                                                       const WaitEnv& env);
  ~HostStaging();

  size_t slotBytes() const { return slotBytes_; }

  // Publishes operation `id` (id.seq > 0) for a collective that runs as a schedule.
  Status announce(const OpIdentity& id, const WaitEnv& env);
  // One-shot all-reduce through the slots: count * size(dtype) <= slotBytes().
  Status allReduce(const OpIdentity& id, const void* send, void* recv, uint64_t count,
                   DataType dtype, ReduceOp op, const WaitEnv& env);
  // Tells the other ranks this rank's communicator has failed (their waits end at once).
  void markFailed(const Status& why);

 public:
  struct OpHeader;  // public only for its layout check

 private:
  struct RankCtl;
  HostStaging() = default;
  RankCtl& ctl(int rank) const;
  std::byte* data(int rank, int parity) const;
  Status publish(const OpIdentity& id, const void* payload, size_t bytes, bool staged,
                 const WaitEnv& env, std::chrono::steady_clock::time_point deadline);
  // Waits until `rank` has published `seq` or later.
  Status waitFor(int rank, uint64_t seq, const OpIdentity& id, const WaitEnv& env,
                 std::chrono::steady_clock::time_point deadline);
  Status checkHeader(int rank, const OpIdentity& id, bool staged) const;

  shm::Segment seg_;
  int rank_ = 0;
  int nranks_ = 0;
  size_t slotBytes_ = 0;
  size_t rankBytes_ = 0;
};

}  // namespace chorus
