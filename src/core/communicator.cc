// Calls: collectives and point-to-point groups through select -> prepare (cached) -> run, the
// operators schedules do not see, failure and abort, statistics.
#include "src/core/communicator.h"

#include <algorithm>
#include <cstring>

#include "algorithms/kernels/quantize.h"
#include "algorithms/kernels/reduce.h"
#include "src/base/block_pool.h"
#include "src/base/logging.h"
#include "src/base/shared_alloc.h"
#include "src/bootstrap/bootstrap.h"

namespace chorus {
namespace {

constexpr int kNumBuiltinOps = 5;  // chorusSum..chorusAvg
constexpr int kOpAvg = 4;
// A call this large says in its headers whether its buffers lie in chorusMemAlloc segments:
// two registry lookups (a lock, a map, getpid; about 0.2 us) are noise beside its data.
constexpr uint64_t kSegmentsMinBytes = 32 << 10;
// A nonblocking operation this large wakes the progress thread at once: it takes longer than a
// wake-up costs. Smaller ones are usually waited for right away (op_queue.h).
constexpr uint64_t kUrgentBytes = 32 << 10;

bool rooted(sched::Coll c) {
  return c == sched::Coll::kBroadcast || c == sched::Coll::kReduce ||
         c == sched::Coll::kGather || c == sched::Coll::kScatter;
}

}  // namespace

Status Communicator::checkUsable() const {
  if (failed_.ok()) return Status();
  return Status(failed_.code(),
                "the communicator failed earlier and cannot be used: " + failed_.message());
}

Status Communicator::runPlan(const exec::Plan& plan, exec::Bindings& bind, DataType dtype,
                             ReduceOp op, const exec::OpIdentity& id) {
  // Lazy connections (CHORUS_CONNECT=lazy): the plan's peers now; eager: nothing to do.
  Status connected = peers_->connect(plan.schedule.peers);
  if (!connected.ok())
    return connected.withContext(exec::describeCall(id, plan.schedule.algo.c_str()));
  // No deadline is set: each wait of the run counts the timeout from when it begins
  // (WaitPolicy::deadline), so a call whose peers' data is already there reads no clock.
  return executor_.run(plan, bind, dtype, op, id, env_);
}

Status Communicator::prepare(const CollArgs& a, Call* c) {
  CHORUS_RETURN_IF_ERROR(checkUsable());
  const size_t elem = dataTypeSize(a.dtype);
  const std::byte* send = static_cast<const std::byte*>(a.send);
  std::byte* recv = static_cast<std::byte*>(a.recv);
  bool inPlace = false;
  uint64_t inBytes = a.count * elem, outBytes = a.count * elem;
  const uint64_t n = static_cast<uint64_t>(nranks_);
  switch (a.coll) {
    case sched::Coll::kAllReduce:
    case sched::Coll::kBroadcast:
    case sched::Coll::kReduce: inPlace = send == recv && send; break;
    case sched::Coll::kAllToAll:
      inPlace = send == recv && send;
      inBytes = outBytes = n * a.count * elem;
      break;
    case sched::Coll::kAllGather:
      inPlace = recv && send == recv + static_cast<uint64_t>(rank_) * a.count * elem;
      outBytes = n * a.count * elem;
      break;
    case sched::Coll::kReduceScatter:
      inPlace = send && recv == send + static_cast<uint64_t>(rank_) * a.count * elem;
      inBytes = n * a.count * elem;
      break;
    case sched::Coll::kGather: outBytes = n * a.count * elem; break;
    case sched::Coll::kScatter: inBytes = n * a.count * elem; break;
    default: break;
  }

  // PreMulSum: scale this rank's input once, then sum. Avg: sum, then divide.
  c->op = ReduceOp::kSum;
  c->scaled.reset();
  c->inParts = false;
  if (a.userOp >= 0 && a.userOp < kNumBuiltinOps && a.userOp != kOpAvg) {
    c->op = static_cast<ReduceOp>(a.userOp);
  } else if (a.userOp >= kNumBuiltinOps) {
    auto it = preMulOps_.find(a.userOp);
    if (it == preMulOps_.end())
      return invalidArgument("reduction op " + std::to_string(a.userOp) + " was destroyed");
    const uint64_t inCount = inBytes / elem;
    c->scaled.reset(new std::byte[std::max<uint64_t>(inBytes, 1)]);
    kernels::scale(c->scaled.get(), send, inCount, a.dtype, it->second.scalar.data());
    send = c->scaled.get();
    inPlace = false;  // the scaled copy is the input now
  }

  // Zero-copy reads (issue 16): a peer reads a buffer in a chorusMemAlloc segment through a
  // mapping, at memory speed, and any other buffer by cross-memory attach, pinning its pages
  // per call. Which the tuner prices must be equal on every rank, and a rank knows only its
  // own buffers before the call, so the call's headers carry each rank's answer and the next
  // call of this collective is priced by what every rank said in the last one that asked
  // (segments_, updated in finish()). A rank whose buffers changed costs one call priced on
  // the old answer; every algorithm is correct on any buffer.
  int8_t inSegments = -1;
  if (learnSegments_[static_cast<size_t>(a.coll)] &&
      std::max(inBytes, outBytes) >= kSegmentsMinBytes) {
    mem::SegmentRef ref;
    const bool in = inBytes == 0 || mem::find(send, inBytes, &ref);
    inSegments = in && (outBytes == 0 || mem::find(recv, outBytes, &ref)) ? 1 : 0;
  }

  PlanKey key;
  key.coll = a.coll;
  key.segments = segments_[static_cast<size_t>(a.coll)] > 0;
  key.inPlace = inPlace;
  key.elemSize = static_cast<uint32_t>(elem);
  key.root = rooted(a.coll) ? a.root : -1;
  key.count = a.count;
  key.quant = a.quant ? kernels::quantWords(*a.quant).shape : 0;
  if (a.coll == sched::Coll::kAllToAllv && a.v) {
    for (const auto* v : {&a.v->sendCounts, &a.v->sendDispls, &a.v->recvCounts, &a.v->recvDispls})
      key.extra.insert(key.extra.end(), v->begin(), v->end());
  }
  // The last call's plan first: a repeated call (the latency-bound case) skips the hash.
  std::shared_ptr<const exec::Plan>& plan = c->plan;
  if (lastPlan_ && key == lastKey_) {
    plan = lastPlan_;
  } else {
    plan = plans_.find(key);
    if (!plan) {
      CHORUS_ASSIGN_OR_RETURN(plan, planFor(describe(a, inPlace, key.segments)));
      plans_.insert(key, plan);
    }
    lastKey_ = key;
    lastPlan_ = plan;
  }

  exec::OpIdentity& id = c->id;
  id = exec::OpIdentity();
  id.coll = a.coll;
  id.count = a.coll == sched::Coll::kAllToAllv ? 0 : a.count;
  id.dtype = a.dtype;
  id.userOp = a.userOp;
  id.root = a.root;
  id.seq = ++collSeq_;
  id.quant = a.quant.get();
  id.segments = inSegments;
  exec::Bindings& bind = bindings_;
  bind.buf.resize(sched::kFirstUserBuf);
  bind.bytes.resize(sched::kFirstUserBuf);
  bind.buf[sched::kInput] = const_cast<std::byte*>(send);
  bind.buf[sched::kOutput] = recv;
  bind.buf[sched::kScratch] = nullptr;
  bind.bytes[sched::kInput] = inBytes;
  bind.bytes[sched::kOutput] = outBytes;
  return Status();
}

Status Communicator::finish(const CollArgs& a, const Call& c) {
  if (c.plan != lastCounted_) {
    lastCounted_ = c.plan;
    lastCounter_ = &algoCounts_[c.plan->name];
  }
  ++*lastCounter_;
  if (c.id.segments >= 0) {
    // Learned only from a plan on which every rank hears every other, so that every rank
    // learns the same (see prepare()).
    const algo::AlgoInfo* ran = algo::algorithmAt(c.plan->algoId);
    if (ran && algo::everyRankHearsEveryRank(*ran)) {
      const int seen = executor_.segmentsSeen();
      if (seen >= 0) segments_[static_cast<size_t>(a.coll)] = static_cast<int8_t>(seen);
    }
  }
  if (a.userOp == kOpAvg) {
    const bool hasOutput = a.coll != sched::Coll::kReduce || a.root == rank_;
    if (hasOutput && a.count > 0)
      kernels::divide(a.recv, a.recv, a.count, a.dtype, static_cast<uint64_t>(nranks_));
  }
  return Status();
}

Status Communicator::runNow(const CollArgs& a) {
  Call& c = head_;
  CHORUS_RETURN_IF_ERROR(prepare(a, &c));
  Status st = runPlan(*c.plan, bindings_, a.dtype, c.op, c.id);
  if (!st.ok()) return fail(st);
  return finish(a, c);
}

bool Communicator::advanceCollective(const CollArgs& a, bool* started, Status* out) {
  Call& c = head_;
  if (!*started) {
    // Large calls wake the progress thread instead (op_queue.h); message plans wait in their
    // transports, so only host-window calls are worth starting here.
    if (!window_ || urgent(a)) return false;
    *started = true;
    Status st = prepare(a, &c);
    if (!st.ok()) {
      *out = st;
      return true;
    }
  }
  if (!c.plan->sequential) return false;
  bool done = false;
  Status st = executor_.runInParts(*c.plan, bindings_, a.dtype, c.op, c.id, env_, c.inParts,
                                   false, &done);
  c.inParts = true;
  if (!st.ok()) {
    *out = fail(st);
    return true;
  }
  if (!done) return false;
  *out = finish(a, c);
  return true;
}

Status Communicator::resumeCollective(const CollArgs& a) {
  Call& c = head_;
  CHORUS_RETURN_IF_ERROR(checkUsable());
  Status st;
  if (c.inParts) {
    bool done = false;
    st = executor_.runInParts(*c.plan, bindings_, a.dtype, c.op, c.id, env_, true, true, &done);
  } else {
    st = runPlan(*c.plan, bindings_, a.dtype, c.op, c.id);
  }
  if (!st.ok()) return fail(st);
  return finish(a, c);
}

Status Communicator::runP2PNow(std::span<const P2POp> ops) {
  CHORUS_RETURN_IF_ERROR(checkUsable());
  exec::OpIdentity id;
  id.coll = sched::Coll::kSendRecv;
  id.seq = 0;  // point-to-point does not advance the collective counter
  id.dtype = ops.empty() ? DataType::kUint8 : ops.front().dtype;
  if (!p2pCounter_) p2pCounter_ = &algoCounts_["sendrecv:p2p"];  // map nodes do not move
  if (ops.size() == 1 && ops[0].peer != rank_) {
    // A lone send or receive (chorusSend / chorusRecv or their nonblocking forms, outside a
    // group): the one message a plan of it would hold (Plan::single), without building,
    // finding or binding that plan.
    const P2POp& op = ops[0];
    Status st = peers_->connect(op.peer);  // lazy connections: the peer now
    if (!st.ok()) return fail(st.withContext(exec::describeCall(id, "p2p")));
    st = executor_.runMessage(op.isSend, op.peer, const_cast<void*>(op.buf),
                              op.count * dataTypeSize(op.dtype), id, "p2p", env_);
    if (!st.ok()) return fail(st);
    ++*p2pCounter_;
    return Status();
  }
  CHORUS_ASSIGN_OR_RETURN(auto plan, p2pPlan(ops));
  exec::Bindings& bind = bindings_;
  const size_t nb = sched::kFirstUserBuf + ops.size();
  bind.buf.resize(nb);
  bind.bytes.resize(nb);
  std::fill_n(bind.buf.begin(), sched::kFirstUserBuf, nullptr);
  std::fill_n(bind.bytes.begin(), sched::kFirstUserBuf, 0);
  for (size_t i = 0; i < ops.size(); ++i) {
    bind.buf[sched::kFirstUserBuf + i] = static_cast<std::byte*>(const_cast<void*>(ops[i].buf));
    bind.bytes[sched::kFirstUserBuf + i] = ops[i].count * dataTypeSize(ops[i].dtype);
  }
  Status st = runPlan(*plan, bind, id.dtype, ReduceOp::kSum, id);
  if (!st.ok()) return fail(st);
  ++*p2pCounter_;
  return Status();
}

bool Communicator::urgent(const CollArgs& a) {
  return a.count * dataTypeSize(a.dtype) >= kUrgentBytes;
}

Status Communicator::collective(const CollArgs& args) {
  return queue_.runOrdered([this, &args] { return runNow(args); });
}

namespace {

// Nonblocking calls: the operation travels in its request.
struct CollRequest final : Request {
  CollRequest(Communicator* c, CollArgs a) : comm(c), args(std::move(a)) {}
  Status run() override {
    return started ? comm->resumeCollective(args) : comm->runCollective(args);
  }
  bool advance(Status* out) override { return comm->advanceCollective(args, &started, out); }
  Communicator* comm;
  CollArgs args;
  bool started = false;  // prepared by advance(): the communicator holds the call
};

// The operation is held in the request itself: posting and freeing a send or receive allocate
// nothing but the request's pool block.
struct P2PRequest final : Request {
  P2PRequest(Communicator* c, const P2POp& o) : comm(c), op(o) {}
  Status run() override { return comm->runPointToPoint({&op, 1}); }
  Communicator* comm;
  P2POp op;
};

}  // namespace

StatusOr<std::unique_ptr<Request>> Communicator::collectiveAsync(CollArgs args,
                                                                 void* owner) {
  const bool now = urgent(args);
  // From the block pool (Request's operator new): a deep queue of posted calls costs no fresh
  // page faults, and the steady state no malloc.
  auto req = std::make_unique<CollRequest>(this, std::move(args));
  req->owner = owner;
  queue_.enqueue(req.get(), now);
  // A small call on a host window that nothing is queued ahead of publishes its data now if it
  // can: its peers need not wait for this rank's wait or its progress thread's tick. Behind
  // other calls it could not start anyway, and advancing those at every post costs a deep
  // queue of posted calls more than it saves (they complete when waited for).
  if (!now && window_ && queue_.queued() == 1) queue_.poke();
  return std::unique_ptr<Request>(std::move(req));
}

Status Communicator::sendRecv(std::span<const P2POp> ops) {
  return queue_.runOrdered([this, ops] { return runP2PNow(ops); });
}

StatusOr<std::unique_ptr<Request>> Communicator::sendRecvAsync(const P2POp& op, void* owner) {
  auto req = std::make_unique<P2PRequest>(this, op);
  req->owner = owner;
  queue_.enqueue(req.get(), op.count * dataTypeSize(op.dtype) >= kUrgentBytes);
  return std::unique_ptr<Request>(std::move(req));
}

// ---- Failure -----------------------------------------------------------------------------

Status Communicator::fail(const Status& why) {
  if (failed_.ok()) {
    failed_ = why;
    CHORUS_LOG(WARN, COLL) << "rank " << rank_ << ": " << why.toString()
                           << "; the communicator is now unusable";
    peers_->cancelAll(why);
    peers_->announceFailure(why);
    if (window_) window_->markFailed(why);
  }
  return why;
}

void Communicator::abort(const std::string& why) {
  Status s = remoteError("rank " + std::to_string(rank_) + " aborted the communicator: " + why);
  // May be called from another thread while an operation runs: the flag makes the executor
  // give up within ~100 ms; only then, holding the execution lock, are connections touched.
  aborting_.store(true);
  queue_.failQueued(s);
  std::lock_guard<FutexMutex> exec(queue_.execMutex());
  queue_.failQueued(s);  // a head a poke was advancing meanwhile (op_queue.h)
  if (failed_.ok()) failed_ = s;
  peers_->cancelAll(s);
  peers_->announceFailure(s);
  if (window_) window_->markFailed(s);
}

// ---- Stats, ops, errors ------------------------------------------------------------------

CommStats Communicator::stats() {
  std::lock_guard<FutexMutex> exec(queue_.execMutex());
  CommStats s;
  s.transports = peers_->stats();
  s.algos = algoCounts_;
  return s;
}

StatusOr<int> Communicator::createPreMulSum(const void* scalar, DataType dtype) {
  PreMul p{dtype, {}};
  std::memcpy(p.scalar.data(), scalar, dataTypeSize(dtype));
  const int op = nextOp_++;
  preMulOps_[op] = p;
  return op;
}

Status Communicator::destroyRedOp(int op) {
  if (op < kNumBuiltinOps)
    return invalidArgument("built-in reduction op " + std::to_string(op) + " cannot be destroyed");
  if (!preMulOps_.erase(op))
    return invalidArgument("reduction op " + std::to_string(op) +
                           " was not created on this communicator (or was destroyed)");
  return Status();
}

bool Communicator::isValidOp(int op, DataType dtype, std::string* why) const {
  if (op >= 0 && op < kNumBuiltinOps) return true;
  auto it = preMulOps_.find(op);
  if (it == preMulOps_.end()) {
    *why = "op " + std::to_string(op) +
           " is neither a built-in op nor a PreMulSum op of this communicator";
    return false;
  }
  if (it->second.dtype != dtype) {
    *why = std::string("PreMulSum op ") + std::to_string(op) + " was created for " +
           dataTypeName(it->second.dtype) + ", not " + dataTypeName(dtype);
    return false;
  }
  return true;
}

void Communicator::setLastError(const std::string& msg) {
  std::lock_guard<std::mutex> lock(errMu_);
  lastError_ = msg;
}

const char* Communicator::lastError() {
  std::lock_guard<std::mutex> lock(errMu_);
  return lastError_.c_str();
}

}  // namespace chorus
