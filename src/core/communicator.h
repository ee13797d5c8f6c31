// The communicator: ranks, peers, and one path for every call — select, prepare (cached), run.
//
// Created collectively (bootstrap all-gather of PeerInfo, then one more round in which ranks
// agree on what selection may rely on) or by split. A collective call is turned into a
// CollDesc; the plan cache (plan_cache.h) returns the prepared plan for its signature or, the
// first time, the tuner (src/tuning/) picks a registered algorithm, its builder builds the
// rank's schedule in the layout's ring order where the algorithm wants it, and the executor
// prepares it (src/exec/plan.h). The executor then runs the plan; the communicator only binds
// buffers and handles the operators schedules do not see (avg divides after a sum; PreMulSum
// scales the input before it). Operations run in call order (op_queue.h). The first failure is
// sticky: connections are cancelled and the host window marked (so peers fail fast with the
// reason), and every later operation returns the same error.
//
// Files: communicator.cc (calls, failure, statistics), comm_create.cc (creation, agreement,
// calibration, host window), comm_plan.cc (selection and the plan cache), comm_split.cc,
// peers.cc (transports, connections, liveness), op_queue.cc (ordering and progress).
#pragma once

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "algorithms/common/schedule.h"
#include "algorithms/kernels/dtype.h"
#include "algorithms/kernels/quantize_ops.h"
#include "algorithms/registry.h"
#include "src/base/socket_util.h"
#include "src/base/status.h"
#include "src/core/op_queue.h"
#include "src/core/peers.h"
#include "src/core/plan_cache.h"
#include "src/cost/cost_model.h"
#include "src/exec/executor.h"
#include "src/topology/layout.h"
#include "src/tuning/tuner.h"

namespace chorus {

struct Vote;  // comm_internal.h

namespace bootstrap {
class Bootstrap;
struct JobId;
}  // namespace bootstrap

/// One collective call, as the API layer validated it. Pointers are the user's.
struct CollArgs {
  sched::Coll coll = sched::Coll::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  uint64_t count = 0;
  DataType dtype = DataType::kFloat32;
  int userOp = -1;  // chorusRedOp_t value; -1 when there is no reduction
  int root = -1;
  /// All-to-allv only (null otherwise), so the other calls' requests stay small.
  struct Counts {
    std::vector<uint64_t> sendCounts, sendDispls, recvCounts, recvDispls;
  };
  std::shared_ptr<const Counts> v;
  /// Quantized collectives (reduce-scatter, all-gather, all-reduce): the validated config
  /// (null otherwise; behind a pointer like `v`, so the other calls' requests stay small).
  std::shared_ptr<const kernels::QuantConfig> quant;
};

/// One point-to-point operation (a group of them runs as one plan).
struct P2POp {
  bool isSend = true;
  const void* buf = nullptr;  // recv buffers are written through const_cast
  uint64_t count = 0;
  DataType dtype = DataType::kFloat32;
  int peer = 0;
};

struct CommStats {
  std::vector<TransportStats> transports;
  std::map<std::string, uint64_t> algos;  // "allreduce:ring" -> count
};

class Communicator {
 public:
  /// Joins the job: all-gathers PeerInfo through `boot`, which the communicator keeps (rank 0 may
  /// be serving the store from it).
  /// `salt` (nonzero) tells this communicator's id apart from others of the same job (shrink).
  static StatusOr<std::unique_ptr<Communicator>> create(std::unique_ptr<bootstrap::Bootstrap> boot,
                                                        const bootstrap::JobId& job, int rank,
                                                        int nranks, uint64_t salt = 0);
  ~Communicator();

  int rank() const { return rank_; }
  int size() const { return nranks_; }

  Status collective(const CollArgs& args);
  /// Starts a nonblocking call. The caller owns the request (one block of the block pool) and
  /// may free it once test() or waitFor() has seen it done; `owner` is stored in it untouched.
  StatusOr<std::unique_ptr<Request>> collectiveAsync(CollArgs args, void* owner = nullptr);
  /// A group of point-to-point operations (the caller's ops: nothing is copied).
  Status sendRecv(std::span<const P2POp> ops);
  /// A nonblocking send or receive (one operation: nonblocking calls are not grouped), carried
  /// in its request.
  StatusOr<std::unique_ptr<Request>> sendRecvAsync(const P2POp& op, void* owner = nullptr);

  /// Collective over this communicator; *out is null for color < 0.
  Status split(int color, int key, std::unique_ptr<Communicator>* out);
  /// chorusCommSplitType: the ranks of this rank's host (kHost) or NUMA node (kNuma).
  Status splitType(topo::GroupKind kind, int key, std::unique_ptr<Communicator>* out);
  /// chorusCommShrink: a new communicator of the ranks not in `exclude`, made through the job's
  /// bootstrap store, not this communicator's connections (which may have failed).
  Status shrink(std::span<const int> exclude, std::unique_ptr<Communicator>* out);
  /// Cancels every connection (peers learn why) and fails queued operations.
  void abort(const std::string& why);

  /// What a queued request runs (with the execution lock held, in order).
  Status runCollective(const CollArgs& args) { return runNow(args); }
  /// The queue's head, a nonblocking collective, without waiting (execution lock held): a
  /// small call on a host window runs the steps that need no peer yet when it is posted or
  /// tested, so its data is out before its rank waits. *started: it has been prepared (then
  /// resumeCollective, not runCollective, completes it). True when it has completed (*out).
  bool advanceCollective(const CollArgs& args, bool* started, Status* out);
  /// Completes the started head call, waiting as a blocking call does.
  Status resumeCollective(const CollArgs& args);
  /// Progresses queued calls as far as they go without waiting (chorusTest; never blocks).
  void poke() { queue_.poke(); }
  Status runPointToPoint(std::span<const P2POp> ops) { return runP2PNow(ops); }

  /// Completes `req`, running queued operations on this thread until it is done.
  Status waitFor(Request* req) { return queue_.wait(req); }

  void setTimeout(double seconds);
  CommStats stats();
  /// Where every rank runs (hosts, NUMA nodes, subgroups, ring order); built at creation.
  const topo::Layout& layout() const { return *layout_; }
  /// What selection relies on (agreed by every rank at creation).
  const algo::Platform& platform() const { return platform_; }
  /// The prepared plans by call signature (tests read its size, bytes and evictions).
  const PlanCache& planCache() const { return plans_; }

  /// PreMulSum operators: scalar bytes of `dtype`; returns the new op value (>= chorusNumOps).
  StatusOr<int> createPreMulSum(const void* scalar, DataType dtype);
  Status destroyRedOp(int op);
  bool isValidOp(int op, DataType dtype, std::string* why) const;

  void setLastError(const std::string& msg);
  const char* lastError();

 private:
  Communicator(int rank, int nranks);
  Status readConfig();
  Status buildLayout();
  Status agree();
  Status setupWindow();
  Status calibrate();
  Status selfCalibrate(Vote* mine);
  void finishSetup();

  // Calls. A collective is prepared (its plan, identity and bindings), run, and finished (its
  // counter, avg's division); a nonblocking one may be run in parts in between.
  struct Call {
    std::shared_ptr<const exec::Plan> plan;
    exec::OpIdentity id;
    ReduceOp op = ReduceOp::kSum;
    std::unique_ptr<std::byte[]> scaled;  // PreMulSum's scaled input
    bool inParts = false;                 // the executor holds a part-run plan
  };
  Status prepare(const CollArgs& a, Call* c);
  Status finish(const CollArgs& a, const Call& c);
  Status runNow(const CollArgs& args);
  Status runP2PNow(std::span<const P2POp> ops);
  Status runPlan(const exec::Plan& plan, exec::Bindings& bind, DataType dtype, ReduceOp op,
                 const exec::OpIdentity& id);
  Status fail(const Status& why);
  Status checkUsable() const;
  bool urgent(const CollArgs& a);

  // Selection and plans (comm_plan.cc).
  sched::CollDesc describe(const CollArgs& a, bool inPlace, bool segments) const;
  StatusOr<std::shared_ptr<const exec::Plan>> planFor(const sched::CollDesc& d);
  StatusOr<std::shared_ptr<const exec::Plan>> p2pPlan(std::span<const P2POp> ops);
  StatusOr<std::shared_ptr<const exec::Plan>> p2pPlanFor(std::span<const P2POp> ops);

  int rank_ = 0;
  int nranks_ = 1;
  uint64_t commId_ = 0;
  double timeoutSeconds_ = 300;
  int spinUs_ = 20;
  int yieldUs_ = 200;
  uint64_t chunkBytes_ = 1 << 20;
  tune::AlgoMask mask_;

  std::unique_ptr<bootstrap::Bootstrap> boot_;
  std::shared_ptr<const bootstrap::JobId> job_;  // the job's store, shared with splits (shrink)
  std::unique_ptr<Peers> peers_;
  std::unique_ptr<topo::Layout> layout_;
  std::vector<int> hostOf_;  // per rank (several hosts only), for host-aware builders
  tune::Agreement agreed_;
  algo::Platform platform_;
  cost::CostModel model_ = cost::defaultCostModel();
  std::unique_ptr<HostWindow> window_;

  PlanCache plans_;
  // Per collective: whether every rank's buffers lay in chorusMemAlloc segments in the last
  // call that asked and heard every rank (-1: not known yet). Equal on every rank: each learns
  // it from the same call's headers (exec::Executor::segmentsSeen). See prepare().
  std::array<int8_t, static_cast<size_t>(sched::Coll::kSendRecv) + 1> segments_{};
  // Per collective: one host, one-sided reads over shared memory, and a registered algorithm
  // of the collective on which every rank hears every other (the calls ask only then).
  std::array<bool, static_cast<size_t>(sched::Coll::kSendRecv) + 1> learnSegments_{};
  PlanKey lastKey_;  // the last collective's signature and plan
  std::shared_ptr<const exec::Plan> lastPlan_;
  struct RecentP2P {
    std::vector<uint64_t> ops;  // per op: peer << 1 | is-send, then bytes
    std::shared_ptr<const exec::Plan> plan;
  };
  std::array<RecentP2P, 4> recentP2P_;  // the last point-to-point groups' plans
  size_t nextRecentP2P_ = 0;
  exec::Executor executor_;
  exec::ExecEnv env_;
  exec::Bindings bindings_;  // reused from call to call
  // The started call at the queue's head (advanceCollective); only the head can be started.
  Call head_;
  std::shared_ptr<const exec::Plan> lastCounted_;
  uint64_t* lastCounter_ = nullptr;  // algoCounts_'s entry of lastCounted_
  uint64_t* p2pCounter_ = nullptr;   // algoCounts_'s entry of point-to-point groups
  std::atomic<bool> aborting_{false};  // set by abort(), possibly from another thread

  uint64_t collSeq_ = 0;
  uint64_t splitSeq_ = 0;
  uint64_t shrinkSeq_ = 0;
  Status failed_;
  std::map<std::string, uint64_t> algoCounts_;

  struct PreMul {
    DataType dtype;
    std::array<std::byte, 8> scalar;
  };
  std::map<int, PreMul> preMulOps_;
  int nextOp_ = 5;  // chorusNumOps

  std::mutex errMu_;
  std::string lastError_;

  OpQueue queue_;  // last: its worker runs operations on everything above

  friend class CommBuilder;
};

}  // namespace chorus
