// The communicator: ranks, peers, connections, and the ordered execution of operations.
//
// Created collectively (bootstrap all-gather of PeerInfo) or by split. Connections are made
// lazily, the first time a schedule names a peer, with the best-scoring transport allowed by
// CHORUS_TRANSPORT. Operations run in the order they were started: a blocking call runs inline
// on the caller's thread when nothing is queued (no thread hop on the latency path); nonblocking
// calls are queued to one progress thread per communicator, which blocking calls then wait
// behind. The first failure is sticky: the connections are cancelled (so peers fail fast with
// the reason) and every later operation returns the same error.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/common/schedule.h"
#include "algorithms/kernels/dtype.h"
#include "algorithms/registry.h"
#include "src/core/executor.h"
#include "src/core/host_staging.h"
#include "src/base/socket_util.h"
#include "src/base/status.h"
#include "src/topology/layout.h"
#include "src/tuning/cost_model.h"
#include "transports/transport.h"

namespace chorus {

namespace bootstrap {
class Bootstrap;
struct JobId;
}  // namespace bootstrap

// One collective call, as the API layer validated it. Pointers are the user's.
struct CollArgs {
  sched::Coll coll = sched::Coll::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  uint64_t count = 0;
  DataType dtype = DataType::kFloat32;
  int userOp = -1;  // chorusRedOp_t value; -1 when there is no reduction
  int root = -1;
  std::vector<uint64_t> sendCounts, sendDispls, recvCounts, recvDispls;  // alltoallv
};

// One point-to-point operation (a group of them runs as one schedule).
struct P2POp {
  bool isSend = true;
  const void* buf = nullptr;  // recv buffers are written through const_cast
  uint64_t count = 0;
  DataType dtype = DataType::kFloat32;
  int peer = 0;
};

// A nonblocking operation's completion.
class Request {
 public:
  bool test(Status* out);  // never blocks

 private:
  friend class Communicator;
  void finish(Status s);
  std::mutex mu_;
  bool done_ = false;
  Status status_;
};

struct TransportStats {
  std::string name;
  uint64_t sentIntra = 0, recvIntra = 0, sentInter = 0, recvInter = 0;
};
struct CommStats {
  std::vector<TransportStats> transports;
  std::map<std::string, uint64_t> algos;  // "allreduce:ring" -> count
};

class Communicator {
 public:
  // Joins the job: all-gathers PeerInfo through `boot`, which the communicator keeps (rank 0 may
  // be serving the store from it).
  static StatusOr<std::unique_ptr<Communicator>> create(std::unique_ptr<bootstrap::Bootstrap> boot,
                                                        const bootstrap::JobId& job, int rank,
                                                        int nranks);
  ~Communicator();

  int rank() const { return rank_; }
  int size() const { return nranks_; }

  Status collective(const CollArgs& args);
  StatusOr<std::shared_ptr<Request>> collectiveAsync(CollArgs args);
  Status sendRecv(std::vector<P2POp> ops);
  StatusOr<std::shared_ptr<Request>> sendRecvAsync(std::vector<P2POp> ops);

  // Collective over this communicator; *out is null for color < 0.
  Status split(int color, int key, std::unique_ptr<Communicator>* out);
  // Cancels every connection (peers learn why) and fails queued operations.
  void abort(const std::string& why);

  // Completes `req`, running queued operations on this thread until it is done.
  Status waitFor(const std::shared_ptr<Request>& req);

  void setTimeout(double seconds) {
    timeoutSeconds_ = seconds;
    stagingEnv_.timeoutSeconds = seconds;
  }
  CommStats stats();
  // Where every rank runs (hosts, NUMA nodes, subgroups, ring order); built at creation.
  const topo::Layout& layout() const { return *layout_; }
  // chorusCommSplitType: the ranks of this rank's host (kHost) or NUMA node (kNuma).
  Status splitType(topo::GroupKind kind, int key, std::unique_ptr<Communicator>* out);

  // PreMulSum operators: scalar bytes of `dtype`; returns the new op value (>= chorusNumOps).
  StatusOr<int> createPreMulSum(const void* scalar, DataType dtype);
  Status destroyRedOp(int op);
  bool isValidOp(int op, DataType dtype, std::string* why) const;

  void setLastError(const std::string& msg);
  const char* lastError();

 private:
  Communicator(int rank, int nranks);
  Status buildLayout();
  void setupCostInput();
  Status calibrate();
  sched::Schedule buildInRingOrder(const algo::AlgoInfo& algo, const sched::CollDesc& d) const;
  Status runNow(const CollArgs& args);
  Status runP2PNow(const std::vector<P2POp>& ops);
  Status runSchedule(const sched::Schedule& s, std::vector<std::byte*> buffers, DataType dtype,
                     ReduceOp op, const OpIdentity& id);
  Status ensureConnected(const std::vector<int>& peers);
  Status connectEagerly();
  // Creates staging_ when every rank is on this host and shared memory may be used.
  Status setupStaging();
  // The algorithm's name for `d`: CHORUS_ALGO's, else the default rule's for this platform.
  std::string_view chooseAlgorithm(const sched::CollDesc& d);
  HostStaging::WaitEnv stagingEnv();  // CHORUS_CONNECT=eager (default): the full mesh at creation
  Status checkPeers(const std::vector<int>& peers);
  StatusOr<std::shared_ptr<const sched::Schedule>> scheduleFor(const sched::CollDesc& d,
                                                                 std::string* algoName);
  Status fail(const Status& why);
  // Runs `work` in order with everything queued before it; inline when the queue is idle.
  Status runOrdered(std::function<Status()> work);
  std::shared_ptr<Request> enqueue(std::function<Status()> work);
  bool runNextQueued();  // caller holds execMu_
  void workerLoop();

  int rank_ = 0;
  int nranks_ = 1;
  uint64_t commId_ = 0;
  net::SockAddr listenAddr_;
  double timeoutSeconds_ = 300;
  int spinUs_ = 20;
  uint64_t chunkBytes_ = 1 << 20;
  std::map<sched::Coll, std::string> forcedAlgo_;

  std::unique_ptr<bootstrap::Bootstrap> boot_;
  std::vector<PeerInfo> peers_;
  std::unique_ptr<topo::Layout> layout_;
  tune::CostInput costInput_;
  tune::CostModel costModel_ = tune::defaultCostModel();
  uint32_t minCores_ = 0;    // the fewest cores any rank's host has (agreed at creation)
  uint32_t minNicMbps_ = 0;  // the slowest nearest-NIC speed of any rank (0: unknown)
  bool shmInside_ = false;   // shared memory joins the ranks of every host (agreed)
  std::map<std::pair<int, uint64_t>, std::string> tunerChoices_;  // (coll, bytes) -> algorithm
  std::vector<std::unique_ptr<Transport>> transports_;
  std::vector<std::unique_ptr<Connection>> conns_;  // by peer rank, lazily
  std::vector<int> connTransport_;                  // index into transports_, -1 if none
  Executor executor_;
  // All ranks on this host: small all-reduces run through this segment (see host_staging.h).
  std::unique_ptr<HostStaging> staging_;
  HostStaging::WaitEnv stagingEnv_;  // built once: the per-call path allocates nothing
  // Every peer is reachable one-sidedly (shared memory with cross-memory attach).
  bool oneSided_ = false;
  uint64_t collSeq_ = 0;
  uint64_t splitSeq_ = 0;
  Status failed_;

  struct CacheKey {
    sched::Coll coll;
    uint64_t count;
    size_t elemSize;
    int root;
    bool inPlace;
    auto operator<=>(const CacheKey&) const = default;
  };
  std::map<CacheKey, std::pair<std::shared_ptr<const sched::Schedule>, std::string>> cache_;
  std::map<std::string, uint64_t> algoCounts_;

  struct PreMul {
    DataType dtype;
    std::array<std::byte, 8> scalar;
  };
  std::map<int, PreMul> preMulOps_;
  int nextOp_ = 5;  // chorusNumOps

  // Ordered execution.
  std::mutex execMu_;  // held while an operation runs
  std::mutex queueMu_;
  std::condition_variable queueCv_;
  std::deque<std::pair<std::function<Status()>, std::shared_ptr<Request>>> queue_;
  int waiters_ = 0;
  std::atomic<bool> aborting_{false};  // set by abort(), possibly from another thread  // threads inside waitFor(); the worker stands aside while > 0
  bool stopping_ = false;
  std::thread worker_;

  std::mutex errMu_;
  std::string lastError_;
};

}  // namespace chorus
