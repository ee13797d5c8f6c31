// The trainer's view of chorus: the C API with every failure turned into an exception naming
// the rank and the call, every wait bounded by the communicator's timeout, and the time spent
// blocked in a wait counted as exposed communication.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <stdexcept>
#include <string>

#include "chorus/chorus.h"

namespace train {

class Comm {
 public:
  Comm() = default;
  /// Joins the job from the environment (chorus-run, torchrun or mpirun variables).
  void initFromEnv(double timeoutSeconds) {
    check(chorusCommInitFromEnv(&comm_), "chorusCommInitFromEnv");
    check(chorusCommUserRank(comm_, &rank_), "chorusCommUserRank");
    check(chorusCommCount(comm_, &size_), "chorusCommCount");
    check(chorusCommSetTimeout(comm_, timeoutSeconds), "chorusCommSetTimeout");
  }
  ~Comm() {
    if (comm_) chorusCommDestroy(comm_);
  }
  /// Collective: the ranks of this host as a communicator whose waits count into this one's
  /// exposed-communication time.
  void splitHost(Comm& host) {
    chorusComm_t c = nullptr;
    check(chorusCommSplitType(comm_, CHORUS_SPLIT_HOST, rank_, &c), "chorusCommSplitType(HOST)");
    host.comm_ = c;
    host.sink_ = sink_;
    host.check(chorusCommUserRank(c, &host.rank_), "chorusCommUserRank(host)");
    host.check(chorusCommCount(c, &host.size_), "chorusCommCount(host)");
    host.worldRank_ = rank_;
  }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  /// Tells the peers this rank gives up, so they fail at once instead of at their timeout.
  void abort() {
    if (comm_) chorusCommAbort(comm_);
    comm_ = nullptr;
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  chorusComm_t get() const { return comm_; }

  void check(chorusResult_t r, const std::string& what) const {
    if (r == chorusSuccess) return;
    throw std::runtime_error("rank " + std::to_string(worldRank_ < 0 ? rank_ : worldRank_) +
                             ": " + what + " failed: " +
                             chorusGetErrorString(r) + ": " + chorusGetLastError(comm_));
  }

  // Buffers are float32 or bfloat16 (`dt`), as the trainer's --dtype says.
  chorusRequest_t iAllReduce(void* buf, size_t count, chorusDataType_t dt, chorusRedOp_t op) {
    chorusRequest_t req = nullptr;
    check(chorusIAllReduce(buf, buf, count, dt, op, comm_, nullptr, &req),
          "chorusIAllReduce");
    return req;
  }
  chorusRequest_t iReduceScatter(const void* send, void* recv, size_t recvCount,
                                 chorusDataType_t dt, chorusRedOp_t op) {
    chorusRequest_t req = nullptr;
    check(chorusIReduceScatter(send, recv, recvCount, dt, op, comm_, nullptr, &req),
          "chorusIReduceScatter");
    return req;
  }
  chorusRequest_t iAllGather(const void* send, void* recv, size_t sendCount,
                             chorusDataType_t dt) {
    chorusRequest_t req = nullptr;
    check(chorusIAllGather(send, recv, sendCount, dt, comm_, nullptr, &req),
          "chorusIAllGather");
    return req;
  }
  chorusRequest_t iReduceScatterQuantized(const void* send, void* recv, size_t recvCount,
                                          chorusDataType_t dt, chorusRedOp_t op,
                                          const chorusQuantConfig_t* config) {
    chorusRequest_t req = nullptr;
    check(chorusIReduceScatterQuantized(send, recv, recvCount, dt, op, config, comm_, nullptr,
                                        &req),
          "chorusIReduceScatterQuantized");
    return req;
  }
  chorusRequest_t iAllGatherQuantized(const void* send, void* recv, size_t sendCount,
                                      chorusDataType_t dt, const chorusQuantConfig_t* config) {
    chorusRequest_t req = nullptr;
    check(chorusIAllGatherQuantized(send, recv, sendCount, dt, config, comm_, nullptr, &req),
          "chorusIAllGatherQuantized");
    return req;
  }
  /// Blocks (bounded by the timeout); the blocked time counts as exposed communication.
  void wait(chorusRequest_t& req, const std::string& what) {
    if (!req) return;
    auto t0 = std::chrono::steady_clock::now();
    chorusResult_t r = chorusWait(&req);
    *sink_ += seconds(t0);
    check(r, "chorusWait(" + what + ")");
  }
  void allReduceDoubles(double* values, size_t count) {
    auto t0 = std::chrono::steady_clock::now();
    chorusResult_t r =
        chorusAllReduce(values, values, count, chorusFloat64, chorusSum, comm_, nullptr);
    *sink_ += seconds(t0);
    check(r, "chorusAllReduce(float64 x" + std::to_string(count) + ")");
  }
  void barrier() {
    auto t0 = std::chrono::steady_clock::now();
    chorusResult_t r = chorusBarrier(comm_, nullptr);
    *sink_ += seconds(t0);
    check(r, "chorusBarrier");
  }
  /// Bytes this rank sent so far on this communicator: to peers on its host, on other hosts.
  void bytesSent(uint64_t& intraHost, uint64_t& interHost) const {
    if (!comm_) return;
    chorusStats_t st{};
    st.structSize = sizeof st;
    check(chorusCommGetStats(comm_, &st), "chorusCommGetStats");
    for (int i = 0; i < st.numTransports; ++i) {
      intraHost += st.transports[i].bytesSentIntraHost;
      interHost += st.transports[i].bytesSentInterHost;
    }
  }
  /// "allreduce:ring x12, ..." : the algorithms the tuner ran on this communicator.
  std::string algorithms() const {
    chorusStats_t st{};
    st.structSize = sizeof st;
    check(chorusCommGetStats(comm_, &st), "chorusCommGetStats");
    std::string out;
    for (int i = 0; i < st.numAlgos; ++i) {
      if (!out.empty()) out += ", ";
      out += std::string(st.algos[i].name) + " x" + std::to_string(st.algos[i].count);
    }
    return out;
  }
  /// Seconds spent blocked in waits and blocking calls since the last call.
  double takeWaitSeconds() {
    double s = waitSeconds_;
    waitSeconds_ = 0;
    return s;
  }

 private:
  static double seconds(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  chorusComm_t comm_ = nullptr;
  int rank_ = 0;
  int size_ = 1;
  int worldRank_ = -1;  // for a split: the rank in the parent, which messages name
  double waitSeconds_ = 0;
  double* sink_ = &waitSeconds_;
};

/// Nonblocking operations in the order they were started (chorus completes them in that order),
/// each with what to do once it is complete.
class InFlight {
 public:
  explicit InFlight(Comm& comm) : comm_(comm) {}
  ~InFlight() {
    for (auto& p : ops_) {
      if (p.req) chorusWait(&p.req);
    }
  }
  void push(chorusRequest_t req, std::string what, std::function<void()> done = {}) {
    ops_.push_back({req, std::move(what), std::move(done)});
  }
  size_t size() const { return ops_.size(); }
  /// Error path after an abort: forgets the operations without waiting, keeping what their
  /// completions hold (buffers) alive for the rest of the process.
  void abandon() {
    new std::deque<Op>(std::move(ops_));  // deliberately leaked
    ops_.clear();
  }
  void waitOldest() {
    Op op = std::move(ops_.front());
    ops_.pop_front();
    comm_.wait(op.req, op.what);
    if (op.done) op.done();
  }
  void drain() {
    while (!ops_.empty()) waitOldest();
  }

 private:
  struct Op {
    chorusRequest_t req;
    std::string what;
    std::function<void()> done;
  };
  Comm& comm_;
  std::deque<Op> ops_;
};

}  // namespace train
