// chorus as a c10d::ProcessGroup (PyTorch 1.13), over chorus's C API.
//
// How work runs. Every operation is queued on the process group in the order it was started
// and runs as chorus's *blocking* call, under the group's execution lock, on whichever thread
// gets to it first:
//   - the caller, in Work::wait(): it runs the queue up to and including its own operation, so
//     a synchronous `dist.all_reduce` is chorus's blocking call on the caller's thread — no
//     thread hand-off, the path chorus-perf measures;
//   - the group's progress thread, for work nobody waits on (DDP waits on getFuture(), never
//     wait()): it runs an operation at once when it is large (worth a wake-up: it should overlap
//     the backward pass), otherwise once it has stayed queued for kGraceUs — long enough that a
//     caller about to wait gets it first, short enough for DDP's small buckets. While callers
//     take every operation themselves, the thread's tick backs off (up to 4 ms) and large
//     operations stop waking it: its wake-ups would preempt the ranks (process_group.cc).
// Whoever runs an operation completes its Work and its future (the output tensors), so the
// future is completed by the group's own progress even when nobody calls wait().
//
// Why not chorus's nonblocking calls: chorus's queue already runs operations this way, but the
// C API has no completion callback, so something would still have to wait on each request to
// complete the future — the same thread and hand-off problem one level up, with a second queue.
// Running the blocking calls from our own queue keeps one queue and no copy of any state.
//
// Point-to-point: consecutive queued sends and receives run as one chorus group, so a rank's
// isend+irecv pair (both posted before either is waited for) cannot deadlock against a peer
// doing the same; they are never run early by the progress thread's size rule.
//
// Failures: the first failure is the group's error; every later operation fails with it (chorus's
// communicator is unusable after an error) and starting one raises it, so an error nobody waited
// for surfaces at the next call. The destructor drains the queue (each step bounded by chorus's
// timeout) and aborts the communicator when it has failed, so the process never hangs at exit.
#pragma once

#include <chorus/chorus.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace chorus_torch {

class ProcessGroupChorus;

/// One operation's completion: wait() runs the group's queue up to it; the future holds the
/// output tensors.
class ChorusWork : public c10d::Work {
 public:
  ChorusWork(ProcessGroupChorus* pg, int rank, c10d::OpType type, std::vector<at::Tensor> outputs);
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }
  void abort() override;

 private:
  friend class ProcessGroupChorus;
  void complete(std::exception_ptr error);

  ProcessGroupChorus* pg_;  // the group outlives its work: its destructor drains the queue
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

/// Quantization parameters as Python passes them (see chorusQuantConfig_t).
struct QuantOptions {
  int bits = 8;
  std::string mode = "symmetric";
  std::string rounding = "nearest";
  int64_t groupSize = 256;
  uint64_t seed = 0;
  chorusQuantConfig_t config() const;
};

class ProcessGroupChorus : public c10d::ProcessGroup {
 public:
  /// Joins the job named by `uniqueId` (CHORUS_UNIQUE_ID_BYTES bytes) as `rank` of `size`.
  ProcessGroupChorus(const std::string& uniqueId, int rank, int size,
                     std::chrono::milliseconds timeout);
  ~ProcessGroupChorus() override;

  /// A fresh chorus unique id (rank 0 makes it and shares it through the c10d store).
  static std::string makeUniqueId();

  const std::string getBackendName() const override { return "chorus"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void setSequenceNumberForGroup() override { seq_ = 0; }
  uint64_t getSequenceNumberForGroup() override { return seq_; }

  // The quantized collectives (chorus.h), exposed as chorus_torch module functions.
  c10::intrusive_ptr<c10d::Work> allreduceQuantized(at::Tensor& tensor, const std::string& op,
                                                    const QuantOptions& q);
  c10::intrusive_ptr<c10d::Work> reduceScatterQuantized(at::Tensor& output, at::Tensor& input,
                                                        const std::string& op,
                                                        const QuantOptions& q);
  c10::intrusive_ptr<c10d::Work> allgatherQuantized(at::Tensor& output, at::Tensor& input,
                                                    const QuantOptions& q);

  /// Traffic and algorithm counters of the communicator (chorusCommGetStats), as text.
  std::string stats();

 private:
  friend class ChorusWork;
  struct Op {
    c10::intrusive_ptr<ChorusWork> work;
    std::function<chorusResult_t(chorusComm_t)> run;  // the chorus call(s)
    std::function<void()> after;                      // copies out of staging tensors
    std::chrono::steady_clock::time_point posted;
    std::chrono::milliseconds timeout;                // this operation's chorus timeout
    bool p2p = false;
    bool urgent = false;
  };

  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                         size_t bytes, std::chrono::milliseconds timeout,
                                         std::function<chorusResult_t(chorusComm_t)> run,
                                         std::function<void()> after = nullptr, bool p2p = false);
  /// Runs queued operations until `until` is complete; false when `deadline` passed first.
  bool runUntil(ChorusWork* until, std::chrono::steady_clock::time_point deadline);
  /// Pops and runs the next operation (a run of point-to-point ones as one group). Caller holds
  /// execMu_. False when the queue is empty.
  bool runNext();
  void progressLoop();
  std::exception_ptr failure(const std::string& what);
  void checkUsable();
  std::chrono::milliseconds opTimeout(std::chrono::milliseconds t) const {
    return t == c10d::kUnsetTimeout ? timeout_ : t;
  }

  chorusComm_t comm_ = nullptr;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds commTimeout_{0};  // what chorusCommSetTimeout last set
  uint64_t seq_ = 0;

  std::timed_mutex execMu_;  // held while an operation runs; pops happen under it
  std::mutex queueMu_;
  std::condition_variable queueCv_;
  std::deque<Op> queue_;
  bool stopping_ = false;
  bool idle_ = false;  // the progress thread sleeps until woken
  std::chrono::microseconds tick_{500};  // its period while work arrives (process_group.cc)
  std::chrono::steady_clock::time_point lastPost_;
  std::mutex errorMu_;
  std::string error_;  // the first failure; empty while healthy
  std::thread progress_;
};

}  // namespace chorus_torch
