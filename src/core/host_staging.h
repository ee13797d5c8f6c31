// The host staging segment: one shared segment per communicator whose ranks are all on one host,
// through which small and medium all-reduces run without messages.
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
// Larger all-reduces run two-shot through a second area per rank, in rounds: each rank
// copies a round's worth of its input into its area, reduces its own slice of the round from
// every rank's area (in rank order) into its output and back into its area, and copies the other
// ranks' reduced slices out of theirs. Against two-shot over cross-memory attach this costs one
// more copy of the input but no system call: process_vm_readv pins every remote page on every
// call, which is most of the time of a 1–8 MiB all-reduce here, and small rounds keep a round's
// data in the caches between its copy in, its reduction and its copies out, so from DRAM each
// input byte is read once and each output byte written once (docs/performance.md). A step
// word per rank (a futex) says how far the rank is; rounds alternate between two halves of the
// area, so a rank refills one half only after every rank has filled the other, i.e. has
// finished reading the first.
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
#include "src/base/status.h"
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
                                                       size_t roundBytes, const WaitEnv& env);
  ~HostStaging();

  size_t slotBytes() const { return slotBytes_; }
  // Bytes of the user's buffer per two-shot round (0: no two-shot area).
  size_t roundBytes() const { return roundBytes_; }

  // Publishes operation `id` (id.seq > 0) for a collective that runs as a schedule.
  Status announce(const OpIdentity& id, const WaitEnv& env);
  // One-shot all-reduce through the slots: count * size(dtype) <= slotBytes().
  Status allReduce(const OpIdentity& id, const void* send, void* recv, uint64_t count,
                   DataType dtype, ReduceOp op, const WaitEnv& env);
  // Two-shot all-reduce through the round areas (roundBytes() > 0), any count.
  Status twoShot(const OpIdentity& id, const void* send, void* recv, uint64_t count,
                 DataType dtype, ReduceOp op, const WaitEnv& env);
  // All-gather (the direct algorithm) through the round areas: each round, every rank copies
  // its part of the round into its area and the other ranks' parts out of theirs. `count`
  // elements of `elemSize` bytes per rank; in place when send is recv's own block.
  Status allGather(const OpIdentity& id, const void* send, void* recv, uint64_t count,
                   size_t elemSize, const WaitEnv& env);
  // Tells the other ranks this rank's communicator has failed (their waits end at once).
  void markFailed(const Status& why);

 public:
  struct OpHeader;  // public only for its layout check

 private:
  struct RankCtl;
  HostStaging() = default;
  RankCtl& ctl(int rank) const;
  std::byte* data(int rank, int parity) const;
  std::byte* area(int rank, int parity) const;
  // How an operation runs, in its header: ranks must agree.
  enum Mode : uint8_t { kSchedule = 0, kOneShot = 1, kTwoShot = 2, kAllGather = 3 };
  Status publish(const OpIdentity& id, const void* payload, size_t bytes, Mode mode,
                 const WaitEnv& env, std::chrono::steady_clock::time_point deadline);
  // Waits until `rank` has published `seq` or later.
  Status waitFor(int rank, uint64_t seq, const OpIdentity& id, const WaitEnv& env,
                 std::chrono::steady_clock::time_point deadline);
  // Waits until `rank`'s two-shot step word reaches `step`.
  Status waitStep(int rank, uint32_t step, const OpIdentity& id, const WaitEnv& env,
                  std::chrono::steady_clock::time_point deadline);
  // The wait both of them are: until `word` (of `rank`'s control block) reaches `target`.
  Status waitWord(int rank, std::atomic<uint32_t>& word, std::atomic<uint32_t>& waiters,
                  uint32_t target, const char* what, const OpIdentity& id, const char* algo,
                  const WaitEnv& env, std::chrono::steady_clock::time_point deadline);
  void setStep(uint32_t step);
  // Publishes `id` with `mode` and waits until every rank has, checking their headers.
  Status enter(const OpIdentity& id, Mode mode, const WaitEnv& env,
               std::chrono::steady_clock::time_point deadline);
  // Round t: once every rank is done with this half, copies `bytes` of `src` into this rank's
  // half t & 1 and publishes step 2t+1.
  Status fillRound(uint64_t t, const std::byte* src, size_t bytes, const OpIdentity& id,
                   const WaitEnv& env, std::chrono::steady_clock::time_point deadline);
  Status checkHeader(int rank, const OpIdentity& id, Mode mode) const;

  shm::Segment seg_;
  int rank_ = 0;
  int nranks_ = 0;
  size_t slotBytes_ = 0;
  size_t roundBytes_ = 0;
  size_t rankBytes_ = 0;
  uint64_t rounds_ = 0;  // two-shot rounds run so far (the same on every rank)
};

}  // namespace chorus
