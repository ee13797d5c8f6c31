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
    throw std::runtime_error("rank " + std::to_string(rank_) + ": " + what + " failed: " +
                             chorusGetErrorString(r) + ": " + chorusGetLastError(comm_));
  }

  chorusRequest_t iAllReduce(float* buf, size_t count, chorusRedOp_t op) {
    chorusRequest_t req = nullptr;
    check(chorusIAllReduce(buf, buf, count, chorusFloat32, op, comm_, nullptr, &req),
          "chorusIAllReduce");
    return req;
  }
  chorusRequest_t iReduceScatter(const float* send, float* recv, size_t recvCount,
                                 chorusRedOp_t op) {
    chorusRequest_t req = nullptr;
    check(chorusIReduceScatter(send, recv, recvCount, chorusFloat32, op, comm_, nullptr, &req),
          "chorusIReduceScatter");
    return req;
  }
  chorusRequest_t iAllGather(const float* send, float* recv, size_t sendCount) {
    chorusRequest_t req = nullptr;
    check(chorusIAllGather(send, recv, sendCount, chorusFloat32, comm_, nullptr, &req),
          "chorusIAllGather");
    return req;
  }
  /// Blocks (bounded by the timeout); the blocked time counts as exposed communication.
  void wait(chorusRequest_t& req, const std::string& what) {
    if (!req) return;
    auto t0 = std::chrono::steady_clock::now();
    chorusResult_t r = chorusWait(&req);
    waitSeconds_ += seconds(t0);
    check(r, "chorusWait(" + what + ")");
  }
  void allReduceDoubles(double* values, size_t count) {
    auto t0 = std::chrono::steady_clock::now();
    chorusResult_t r =
        chorusAllReduce(values, values, count, chorusFloat64, chorusSum, comm_, nullptr);
    waitSeconds_ += seconds(t0);
    check(r, "chorusAllReduce(float64 x" + std::to_string(count) + ")");
  }
  void barrier() {
    auto t0 = std::chrono::steady_clock::now();
    chorusResult_t r = chorusBarrier(comm_, nullptr);
    waitSeconds_ += seconds(t0);
    check(r, "chorusBarrier");
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
  double waitSeconds_ = 0;
};

/// Nonblocking operations in the order they were started (chorus completes them in that order),
/// each with what to do once it is complete.
class InFlight {
 public:
  explicit InFlight(Comm& comm) : comm_(comm) {}
  ~InFlight() {
    // Only reached with operations left on an error path: give the buffers time to be released.
    for (auto& p : ops_) {
      if (p.req) chorusWait(&p.req);
    }
  }
  void push(chorusRequest_t req, std::string what, std::function<void()> done = {}) {
    ops_.push_back({req, std::move(what), std::move(done)});
  }
  size_t size() const { return ops_.size(); }
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
