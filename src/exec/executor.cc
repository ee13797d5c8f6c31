#include "src/exec/executor.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cstring>

#include "algorithms/kernels/quantize.h"
#include "algorithms/kernels/reduce.h"
#include "algorithms/registry.h"
#include "src/base/futex.h"
#include "src/base/logging.h"

namespace chorus::exec {
namespace {

using sched::StepKind;

// Posted operations per peer and direction. Enough to keep a link busy while bounding the
// staging memory of recvReduce (kMaxInflight chunks per peer).
constexpr int kMaxInflight = 8;
// One-sided reads that feed a reduction go through a buffer this big: it stays in L2 while the
// bytes are reduced.
constexpr size_t kBouncePiece = 256 << 10;
// The buffers a peer may read one-sidedly, whose handles follow the header.
constexpr int kExposed = 3;  // input, output, scratch

bool isSendLike(StepKind k) { return k == StepKind::kSend || k == StepKind::kNotify; }
bool isRecvLike(StepKind k) {
  return k == StepKind::kRecv || k == StepKind::kRecvReduce || k == StepKind::kWait;
}

// Data and header frames of the same operation carry different tags, so a stray frame of
// another operation is caught by the transport's tag check.
Tag dataTag(uint64_t seq) { return seq << 1; }
Tag headerTag(uint64_t seq) { return (seq << 1) | 1; }

std::string describeStep(const sched::Step& s, size_t index) {
  std::string out = "step " + std::to_string(index) + " (" + sched::stepKindName(s.kind);
  switch (s.kind) {
    case StepKind::kSend:
      out += " to rank " + std::to_string(s.peer) + ", " + std::to_string(s.a.bytes) + " bytes";
      break;
    case StepKind::kRecv:
    case StepKind::kRecvReduce:
    case StepKind::kGet:
    case StepKind::kGetReduce:
      out += " from rank " + std::to_string(s.peer) + ", " + std::to_string(s.dst.bytes) + " bytes";
      break;
    case StepKind::kNotify: out += " to rank " + std::to_string(s.peer); break;
    case StepKind::kWait: out += " from rank " + std::to_string(s.peer); break;
    case StepKind::kAwait:
      out += " of rank " + std::to_string(s.peer) + "'s signal " + std::to_string(s.target);
      break;
    case StepKind::kQuantize:
    case StepKind::kDequantize:
    case StepKind::kRequantize:
      out += ", " + std::to_string(s.quant.count) + " elements";
      if (s.kind != StepKind::kQuantize) out += " x " + std::to_string(s.quant.sources);
      break;
    default: break;
  }
  return out + ")";
}

// Runs a quantization step (schedule.h) on its bound buffers with the call's config. The
// sizes were fixed when the plan was built; they are checked against this call's config before
// anything is written. `sources` is reused from call to call.
Status runQuantStep(const sched::Step& s, const std::byte* a, std::byte* dst, DataType dtype,
                    const kernels::QuantConfig* config, std::vector<const void*>& sources) {
  if (config == nullptr) {
    return internalError("a quantization step in a call that is not quantized");
  }
  const uint64_t count = s.quant.count;
  const uint64_t block = kernels::quantizedSize(count, *config);
  const uint64_t elements = count * dataTypeSize(dtype);
  const uint64_t quantized = s.kind == StepKind::kQuantize ? block : block * s.quant.sources;
  const uint64_t out = s.kind == StepKind::kDequantize ? elements : block;
  const uint64_t in = s.kind == StepKind::kQuantize ? elements : quantized;
  if (s.a.bytes != in || s.dst.bytes != out) {
    return internalError(std::string(sched::stepKindName(s.kind)) + " of " +
                         std::to_string(count) + " elements reads " + std::to_string(s.a.bytes) +
                         " and writes " + std::to_string(s.dst.bytes) + " bytes; this call's " +
                         "quantization config needs " + std::to_string(in) + " and " +
                         std::to_string(out));
  }
  if (s.kind == StepKind::kQuantize) {
    kernels::quantize(dst, a, count, dtype, *config, s.quant.index);
    return Status();
  }
  sources.resize(s.quant.sources);
  for (uint32_t k = 0; k < s.quant.sources; ++k) sources[k] = a + k * block;
  if (s.kind == StepKind::kDequantize) {
    kernels::dequantizeReduce(dst, dtype, sources.data(), sources.size(), count, *config);
  } else {
    kernels::dequantizeReduceQuantize(dst, sources.data(), sources.size(), count, *config,
                                      s.quant.index);
  }
  return Status();
}

// ---- Waiting (executor.h, last paragraph) -----------------------------------------------------
//
// What runSingle and runDataflow do after a pass that moved nothing. Inline, allocation-free and
// without a clock read of its own: runSingle's 8-byte ping-pong spins through it on every pass.

struct IdleClock {
  std::chrono::steady_clock::time_point lastProgress, lastLiveness, deadline, lastYield;
};

enum class Idle {
  kRetry,     // test again at once: spinning, yielded, or a peer was just marked gone
  kTimedOut,  // the deadline has passed
  kBlock,     // block (Executor::block) for *waitMs
};

// One idle pass at `now` (read by the caller): past the deadline, kTimedOut. Every 100 ms it
// calls checkPeers(), which returns true when it told a connection its peer is gone (kRetry).
// Then it spins for wait.spinUs after the last progress (yielding once every
// WaitPolicy::kSpinYieldUs of it), yields for wait.yieldUs more, and then says to block for at most
// 100 ms and never past the deadline.
template <class CheckPeers>
inline Idle idlePass(IdleClock& clock, std::chrono::steady_clock::time_point now,
                     const WaitPolicy& wait, CheckPeers&& checkPeers, int* waitMs) {
  if (now >= clock.deadline) return Idle::kTimedOut;
  if (now - clock.lastLiveness > std::chrono::milliseconds(100)) {
    clock.lastLiveness = now;
    if (checkPeers()) return Idle::kRetry;
  }
  const auto idleUs =
      std::chrono::duration_cast<std::chrono::microseconds>(now - clock.lastProgress).count();
  if (idleUs < wait.spinUs) {
    clock.lastYield = std::max(clock.lastYield, clock.lastProgress);
    WaitPolicy::yieldWhileSpinning(now, &clock.lastYield);
    return Idle::kRetry;
  }
  if (idleUs < wait.spinUs + wait.yieldUs) {
    sched_yield();
    return Idle::kRetry;
  }
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(clock.deadline - now).count();
  *waitMs = static_cast<int>(std::clamp<long long>(left, 0, 100));
  return Idle::kBlock;
}

}  // namespace

struct Executor::PeerRun {
  int peer = -1;
  Connection* conn = nullptr;
  size_t nextSend = 0, nextRecv = 0;
  int inflightSend = 0, inflightRecv = 0;
  WireHeader mine, theirs;
  Op headerSendOp, headerRecvOp;
  bool headerSent = false, headerRecvd = false;
  MemHandle myHandles[kExposed], theirHandles[kExposed];
  Op handleSendOp, handleRecvOp;
  bool handlesSent = true, handlesRecvd = true;
  bool goneMarked = false;
};

Executor::Executor() = default;
Executor::~Executor() = default;

std::byte* Executor::stagingFor(size_t slot, uint64_t bytes) {
  if (slot >= staging_.size()) {
    staging_.resize(slot + 1);
    stagingSize_.resize(slot + 1, 0);
  }
  if (stagingSize_[slot] < bytes) {
    staging_[slot].reset(new std::byte[bytes]);
    stagingSize_[slot] = bytes;
  }
  return staging_[slot].get();
}

std::byte* Executor::scratch(uint64_t bytes) {
  if (scratchSize_ < bytes) {
    scratch_.reset(new std::byte[bytes]);
    scratchSize_ = bytes;
  }
  return scratch_.get();
}

WindowHeader Executor::windowHeader(const Plan& plan, const OpIdentity& id) const {
  WindowHeader h;
  h.seq = static_cast<uint32_t>(id.seq);
  h.setCount(id.count);
  h.root = id.root;
  h.coll = static_cast<uint8_t>(id.coll);
  h.dtype = static_cast<uint8_t>(id.dtype);
  h.op = wireOp(id.userOp);
  h.algo = plan.algoId;
  h.flags = id.segments > 0 ? kHeaderInSegments : 0;
  return h;
}

void Executor::noteSegments(int peer, uint8_t flags) {
  if (!segmentsAsked_) return;
  uint64_t& seen = segmentsSeenAt_[static_cast<size_t>(peer)];
  if (seen == segmentsEpoch_) return;  // its window header and its wire header say the same
  seen = segmentsEpoch_;
  --segmentsPending_;
  segmentsAll_ = segmentsAll_ && (flags & kHeaderInSegments) != 0;
}

int Executor::segmentsSeen() const {
  if (!segmentsAsked_ || segmentsPending_ > 0) return -1;
  return segmentsAll_ ? 1 : 0;
}

Status Executor::checkWindowHeader(int peer, const Plan& plan, const OpIdentity& id,
                                   const ExecEnv& env) {
  const WindowHeader& mine = myHeader_;
  const WindowHeader theirs = env.window->header(peer, id.seq);
  if (theirs.sameCall(mine)) {
    noteSegments(peer, theirs.flags);
    return Status();
  }
  OpIdentity other;
  other.coll = static_cast<sched::Coll>(theirs.coll);
  other.seq = id.seq - static_cast<uint32_t>(static_cast<uint32_t>(id.seq) - theirs.seq);
  other.count = theirs.count();
  other.dtype = static_cast<DataType>(theirs.dtype);
  other.userOp = theirs.op == 0xff ? -1 : theirs.op;
  other.root = theirs.root;
  const algo::AlgoInfo* a = algo::algorithmAt(theirs.algo);
  return invalidUsage("rank " + std::to_string(env.rank) + " called " +
                      describeCall(id, plan.schedule.algo.c_str()) + " but rank " +
                      std::to_string(peer) + " called " +
                      describeCall(other, a ? a->name : "an unknown algorithm"));
}

Status Executor::enterWindow(const Plan& plan, const OpIdentity& id, const ExecEnv& env) {
  HostWindow& w = *env.window;
  if (id.seq > 1) {
    for (int q = 0; q < env.nranks; ++q) {
      if (q == env.rank) continue;
      // await() returns at once when q is there (and has not failed): one load.
      Status st = w.await(q, id.seq - 1, 1, env.wait);
      if (!st.ok())
        return st.withContext(describeCall(id, plan.schedule.algo.c_str()) +
                              ": waiting for rank " + std::to_string(q) +
                              " to enter the previous call");
    }
  }
  signalled_ = 0;
  if (headerCheckedAt_.size() != static_cast<size_t>(env.nranks))
    headerCheckedAt_.assign(static_cast<size_t>(env.nranks), 0);
  ++runEpoch_;
  myHeader_ = windowHeader(plan, id);
  if (!plan.window) w.enter(id.seq, myHeader_);
  return Status();
}

Status Executor::awaitWindow(const sched::Step& s, size_t index, const Plan& plan,
                             const OpIdentity& id, const ExecEnv& env) {
  HostWindow& w = *env.window;
  // await() returns at once when the signal is there and its maker has not failed (a peer
  // that marked itself failed is never read from, even when its word is already there).
  Status st = w.await(s.peer, id.seq, s.target, env.wait);
  if (!st.ok())
    return st.withContext(describeCall(id, plan.schedule.algo.c_str()) + " " +
                          describeStep(s, index));
  uint64_t& checked = headerCheckedAt_[static_cast<size_t>(s.peer)];
  if (checked == runEpoch_) return Status();
  checked = runEpoch_;
  return checkWindowHeader(s.peer, plan, id, env);
}

Status Executor::bind(const Plan& plan, Bindings& bind, const OpIdentity& id,
                      const ExecEnv& env) {
  if (plan.window && !env.window)
    return invalidUsage(describeCall(id, plan.schedule.algo.c_str()) +
                        " runs through the host window, which this communicator does not have");
  if (bind.buf.size() < sched::kFirstUserBuf) bind.buf.resize(sched::kFirstUserBuf, nullptr);
  if (bind.bytes.size() < bind.buf.size()) bind.bytes.resize(bind.buf.size(), 0);
  segmentsAsked_ = id.segments >= 0;
  if (segmentsAsked_) {
    if (segmentsSeenAt_.size() != static_cast<size_t>(env.nranks))
      segmentsSeenAt_.assign(static_cast<size_t>(env.nranks), 0);
    ++segmentsEpoch_;
    segmentsPending_ = env.nranks - 1;
    segmentsAll_ = id.segments > 0;
  }
  buf_ = bind.buf.data();
  bytes_ = bind.bytes.data();
  bytes_[sched::kScratch] = plan.schedule.scratchBytes;
  if (plan.schedule.scratchBytes > 0 && buf_[sched::kScratch] == nullptr)
    buf_[sched::kScratch] = scratch(plan.schedule.scratchBytes);
  if (plan.window)
    buf_[sched::kWindow] = env.window->region(env.rank, static_cast<int>(id.seq & 1));
  return Status();
}

Status Executor::run(const Plan& plan, Bindings& bind, DataType dtype, ReduceOp op,
                     const OpIdentity& id, const ExecEnv& env) {
  CHORUS_RETURN_IF_ERROR(this->bind(plan, bind, id, env));
  if (env.window && id.seq > 0) CHORUS_RETURN_IF_ERROR(enterWindow(plan, id, env));
  if (plan.sequential) {
    bool done = false;
    partNext_ = 0;
    return runSequential(plan, id, dtype, op, env, true, &done);
  }
  if (plan.single && id.seq == 0) return runSingle(plan, id, env);
  return runDataflow(plan, id, dtype, op, env);
}

Status Executor::runInParts(const Plan& plan, Bindings& bind, DataType dtype, ReduceOp op,
                            const OpIdentity& id, const ExecEnv& env, bool resume,
                            bool mayBlock, bool* done) {
  *done = false;
  if (!plan.sequential)
    return internalError(describeCall(id, plan.schedule.algo.c_str()) +
                         ": only a plan without message steps runs in parts");
  if (!resume) {
    CHORUS_RETURN_IF_ERROR(this->bind(plan, bind, id, env));
    partEntered_ = false;
    partNext_ = 0;
  }
  if (!partEntered_) {
    if (env.window && id.seq > 0) {
      // Entering rewrites this rank's region of parity seq mod 2, which peers may read until
      // they have entered call seq - 1 (enterWindow waits for that; here it is only looked at).
      if (!mayBlock && id.seq > 1) {
        for (int q = 0; q < env.nranks; ++q)
          if (q != env.rank && !env.window->reached(q, id.seq - 1, 1)) return Status();
      }
      CHORUS_RETURN_IF_ERROR(enterWindow(plan, id, env));
    }
    partEntered_ = true;
  }
  return runSequential(plan, id, dtype, op, env, mayBlock, done);
}

// One point-to-point send or receive: no header, no dependencies. The same waiting as the
// dataflow (spin, yield, block; deadline, abort, the peer's liveness every 100 ms).
Status Executor::runSingle(const Plan& plan, const OpIdentity& id, const ExecEnv& env) {
  const sched::Step& s = plan.schedule.steps[0];
  const bool send = s.kind == StepKind::kSend;
  return runMessage(send, plan.peers[0].rank, send ? ptr(s.a) : ptr(s.dst),
                    send ? s.a.bytes : s.dst.bytes, id, plan.schedule.algo.c_str(), env);
}

Status Executor::runMessage(bool send, int peer, void* buf, uint64_t bytes, const OpIdentity& id,
                            const char* algo, const ExecEnv& env) {
  Connection* conn = env.peers->connection(peer);
  if (!conn)
    return internalError(describeCall(id, algo) + ": no connection to rank " +
                         std::to_string(peer));
  // The step as a plan would hold it, for the error messages only.
  const auto step = [&] {
    sched::Step s;
    s.kind = send ? StepKind::kSend : StepKind::kRecv;
    s.peer = peer;
    (send ? s.a : s.dst).bytes = bytes;
    return s;
  };
  StatusOr<Op> posted =
      send ? conn->postSend(buf, bytes, dataTag(0)) : conn->postRecv(buf, bytes, dataTag(0));
  if (!posted.ok()) return posted.status();
  Op o = *posted;
  // The deadline counts from the first time the op is not done (the caller set none).
  IdleClock clock{};
  bool goneMarked = false;
  for (;;) {
    // test() is progress() then check(), in one call (one lock for a transport that takes one).
    bool done = false;
    Status st = conn->test(o, &done);
    if (!st.ok())
      return st.withContext(describeCall(id, algo) + " " + describeStep(step(), 0));
    if (done) return Status();
    if (env.wait.abortFlag && env.wait.abortFlag->load(std::memory_order_relaxed))
      return remoteError(describeCall(id, algo) + ": the communicator was aborted on rank " +
                         std::to_string(env.rank) + " (chorusCommAbort)");
    const auto now = std::chrono::steady_clock::now();
    if (clock.lastProgress.time_since_epoch().count() == 0) {
      clock.lastProgress = clock.lastLiveness = now;
      clock.deadline = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(env.wait.timeoutSeconds));
    }
    int waitMs = 0;
    const Idle next = idlePass(clock, now, env.wait, [&] {
      if (goneMarked) return false;
      Status alive = env.peers->alive(peer);
      if (alive.ok()) return false;
      goneMarked = true;
      conn->peerGone(alive);  // the failing op adds the call to the message
      return true;
    }, &waitMs);
    if (next == Idle::kRetry) continue;
    if (next == Idle::kTimedOut)
      return timeoutError(describeCall(id, algo) + ": timed out after " +
                          std::to_string(env.wait.timeoutSeconds) + " s on rank " +
                          std::to_string(env.rank) + " waiting for " + describeStep(step(), 0));
    CHORUS_RETURN_IF_ERROR(block(std::span<Connection* const>(&conn, 1), waitMs, false, id, algo));
  }
}

Status Executor::block(std::span<Connection* const> conns, int waitMs, bool windowPending,
                       const OpIdentity& id, const char* algo) {
  fds_.clear();
  words_.clear();
  bool sleepOk = true;
  for (Connection* c : conns) {
    int fd = -1;
    short events = 0;
    c->pollInfo(&fd, &events);
    if (fd >= 0) {
      if (events) fds_.push_back({fd, events, 0});
      if (const int slice = c->pollSliceMs(); slice >= 0) waitMs = std::min(waitMs, slice);
    } else if (!c->prepareWait(words_)) {
      sleepOk = false;  // that connection can progress right now
    }
  }
  if (windowPending) waitMs = std::min(waitMs, 1);
  Status st;
  if (!sleepOk) {
    // A connection can progress now, or keeps its caller progressing (UCX during a transfer):
    // no sleep, but the core goes to whoever else waits for it (ranks may outnumber cores).
    sched_yield();
  } else if (!words_.empty() && fds_.empty()) {
    futex::waitAny(words_, waitMs);
  } else if (!fds_.empty()) {
    // Sockets and shared memory at once: poll the sockets in short slices so the shared
    // memory words are looked at every millisecond.
    if (!words_.empty()) waitMs = std::min(waitMs, 1);
    if (::poll(fds_.data(), fds_.size(), waitMs) < 0 && errno != EINTR)
      st = errnoStatus("poll", describeCall(id, algo));
  } else {
    sched_yield();
  }
  for (Connection* c : conns) c->endWait();
  return st;
}

// Window plans and local-only plans: every step in program order.
Status Executor::runSequential(const Plan& plan, const OpIdentity& id, DataType dtype,
                               ReduceOp op, const ExecEnv& env, bool mayBlock, bool* done) {
  const size_t elem = dataTypeSize(dtype);
  const std::vector<sched::Step>& steps = plan.schedule.steps;
  for (size_t i = partNext_; i < steps.size(); ++i) {
    const sched::Step& s = steps[i];
    if (!mayBlock && s.kind == StepKind::kAwait &&
        !(env.window && env.window->reached(s.peer, id.seq, s.target))) {
      partNext_ = i;  // continue here
      return Status();
    }
    switch (s.kind) {
      case StepKind::kCopy:
        if (ptr(s.a) != ptr(s.dst)) kernels::copy(ptr(s.dst), ptr(s.a), s.dst.bytes);
        break;
      case StepKind::kReduce:
        kernels::reduce(ptr(s.dst), ptr(s.a), ptr(s.b), s.dst.bytes / elem, dtype, op);
        break;
      case StepKind::kGet:
        kernels::copy(ptr(s.dst), peerWindow(s.peer, s.a, id, env), s.dst.bytes);
        break;
      case StepKind::kGetReduce:
        kernels::reduce(ptr(s.dst), ptr(s.b), peerWindow(s.peer, s.a, id, env),
                        s.dst.bytes / elem, dtype, op);
        break;
      case StepKind::kSignal:
        if (++signalled_ == 1)
          env.window->enter(id.seq, myHeader_);
        else
          env.window->signal(id.seq, signalled_);
        break;
      case StepKind::kAwait: CHORUS_RETURN_IF_ERROR(awaitWindow(s, i, plan, id, env)); break;
      case StepKind::kQuantize:
      case StepKind::kDequantize:
      case StepKind::kRequantize: {
        Status st = runQuantStep(s, ptr(s.a), ptr(s.dst), dtype, id.quant, quantSources_);
        if (!st.ok()) return st.withContext(describeCall(id, plan.schedule.algo.c_str()) + " " +
                                            describeStep(s, i));
        break;
      }
      default:
        return internalError(describeCall(id, plan.schedule.algo.c_str()) + ": " +
                             describeStep(s, i) + " in a plan without message peers");
    }
  }
  partNext_ = steps.size();
  *done = true;
  return Status();
}

Status Executor::runDataflow(const Plan& plan, const OpIdentity& id, DataType dtype, ReduceOp op,
                             const ExecEnv& env) {
  const std::vector<sched::Step>& steps = plan.schedule.steps;
  const size_t n = steps.size();
  const size_t elem = dataTypeSize(dtype);
  const bool collective = id.seq > 0;
  // Formatted only when an error needs it: run() is on every call's hot path.
  auto call = [&] { return describeCall(id, plan.schedule.algo.c_str()); };

  // ---- Per-peer state --------------------------------------------------------------------
  const size_t np = plan.peers.size();
  while (peerRuns_.size() < np) peerRuns_.push_back(std::make_unique<PeerRun>());
  conns_.resize(np);
  for (size_t k = 0; k < np; ++k) {
    PeerRun& p = *peerRuns_[k];
    p = PeerRun{};
    p.peer = plan.peers[k].rank;
    p.conn = env.peers->connection(p.peer);
    if (!p.conn)
      return internalError(call() + ": no connection to rank " + std::to_string(p.peer));
    conns_[k] = p.conn;
  }
  remaining_.assign(plan.depCount.begin(), plan.depCount.end());
  readyLocal_.assign(plan.ready.begin(), plan.ready.end());
  size_t doneCount = 0;
  auto complete = [&](uint32_t i) {
    ++doneCount;
    for (uint32_t k = plan.depStart[i]; k < plan.depStart[i + 1]; ++k) {
      const uint32_t j = plan.dependents[k];
      if (--remaining_[j] == 0 && !isSendLike(steps[j].kind) && !isRecvLike(steps[j].kind))
        readyLocal_.push_back(j);
    }
  };

  // ---- Consistency headers (and memory handles): posted before any data -----------------
  size_t headersPending = 0;
  if (collective) {
    for (size_t k = 0; k < np; ++k) {
      PeerRun& p = *peerRuns_[k];
      const Plan::Peer& pp = plan.peers[k];
      p.mine = makeConsistencyHeader(id, plan.schedule.algo.c_str(), pp.bytesTo, pp.bytesFrom,
                                     pp.msgsTo, pp.msgsFrom);
      CHORUS_ASSIGN_OR_RETURN(p.headerRecvOp,
                              p.conn->postRecv(&p.theirs, sizeof(WireHeader), headerTag(id.seq)));
      CHORUS_ASSIGN_OR_RETURN(p.headerSendOp,
                              p.conn->postSend(&p.mine, sizeof(WireHeader), headerTag(id.seq)));
      headersPending += 2;
      if (plan.exchangeHandles) {
        for (int b = 0; b < kExposed; ++b) {
          p.myHandles[b] = MemHandle{};
          if (buf_[b] && bytes_[b] > 0) {
            CHORUS_ASSIGN_OR_RETURN(p.myHandles[b], p.conn->expose(buf_[b], bytes_[b]));
          }
        }
        CHORUS_ASSIGN_OR_RETURN(p.handleRecvOp, p.conn->postRecv(p.theirHandles,
                                                                 sizeof(p.theirHandles),
                                                                 headerTag(id.seq)));
        CHORUS_ASSIGN_OR_RETURN(p.handleSendOp, p.conn->postSend(p.myHandles,
                                                                 sizeof(p.myHandles),
                                                                 headerTag(id.seq)));
        p.handlesSent = p.handlesRecvd = false;
        headersPending += 2;
      }
    }
  } else {
    for (size_t k = 0; k < np; ++k) peerRuns_[k]->headerSent = peerRuns_[k]->headerRecvd = true;
  }
  auto checkHeader = [&](const PeerRun& p) -> Status {
    CHORUS_RETURN_IF_ERROR(checkConsistencyHeader(p.mine, p.theirs, env.rank, p.peer, id,
                                                  plan.schedule.algo.c_str()));
    noteSegments(p.peer, p.theirs.flags);
    return Status();
  };

  // ---- The dataflow loop ----------------------------------------------------------------
  posted_.clear();
  freeSlots_.clear();
  int nextSlot = 0;
  const Tag tag = dataTag(id.seq);
  IdleClock clock;
  clock.lastProgress = clock.lastLiveness = std::chrono::steady_clock::now();
  clock.deadline = env.wait.deadlineFrom(clock.lastProgress);
  bool windowPending = false;

  while (doneCount < n || headersPending > 0) {
    bool progressed = false;
    windowPending = false;
    if (env.wait.abortFlag && env.wait.abortFlag->load(std::memory_order_relaxed))
      return remoteError(call() + ": the communicator was aborted on rank " +
                         std::to_string(env.rank) + " (chorusCommAbort)");

    // Post every send/recv that is at the head of its peer's queue and whose deps are done.
    // First, so that what is posted now leaves with the headers (one write per connection).
    for (size_t pi = 0; pi < np; ++pi) {
      PeerRun& p = *peerRuns_[pi];
      const Plan::Peer& pp = plan.peers[pi];
      while (p.nextRecv < pp.recvs.size() && p.inflightRecv < kMaxInflight &&
             remaining_[pp.recvs[p.nextRecv]] == 0) {
        const uint32_t i = pp.recvs[p.nextRecv++];
        const sched::Step& s = steps[i];
        int slot = -1;
        std::byte* dst = ptr(s.dst);
        if (s.kind == StepKind::kRecvReduce) {
          if (freeSlots_.empty()) {
            slot = nextSlot++;
          } else {
            slot = freeSlots_.back();
            freeSlots_.pop_back();
          }
          dst = stagingFor(static_cast<size_t>(slot), s.dst.bytes);
        }
        const uint64_t bytes = s.kind == StepKind::kWait ? 0 : s.dst.bytes;
        if (bytes == 0) dst = nullptr;
        CHORUS_ASSIGN_OR_RETURN(Op o, p.conn->postRecv(dst, bytes, tag));
        posted_.push_back({o, i, static_cast<int>(pi), slot});
        ++p.inflightRecv;
        progressed = true;
      }
      while (p.nextSend < pp.sends.size() && p.inflightSend < kMaxInflight &&
             remaining_[pp.sends[p.nextSend]] == 0) {
        const uint32_t i = pp.sends[p.nextSend++];
        const sched::Step& s = steps[i];
        const bool note = s.kind == StepKind::kNotify;
        CHORUS_ASSIGN_OR_RETURN(Op o, p.conn->postSend(note ? nullptr : ptr(s.a),
                                                       note ? 0 : s.a.bytes, tag));
        posted_.push_back({o, i, static_cast<int>(pi), -1});
        ++p.inflightSend;
        progressed = true;
      }
    }

    // One pass over each connection (its sends, its receives); the ops are then checked.
    for (size_t k = 0; k < np; ++k) peerRuns_[k]->conn->progress().ignore();

    // Headers first: a mismatch must be reported before any data op can fail on sizes.
    // A transport error seen here waits for the end of the round: if another peer's header
    // shows the calls disagree, that is the root cause and the error to report.
    if (headersPending > 0) {
      Status transportError;
      auto testOne = [&](PeerRun& p, Op& op, bool& flag, bool check) -> Status {
        if (flag) return Status();
        bool done = false;
        Status st = p.conn->check(op, &done);
        if (!st.ok()) {
          if (transportError.ok()) transportError = st.withContext(call());
          return Status();
        }
        if (!done) return Status();
        flag = true;
        --headersPending;
        progressed = true;
        return check ? checkHeader(p) : Status();
      };
      for (size_t k = 0; k < np; ++k) {
        PeerRun& p = *peerRuns_[k];
        CHORUS_RETURN_IF_ERROR(testOne(p, p.headerRecvOp, p.headerRecvd, true));
        CHORUS_RETURN_IF_ERROR(testOne(p, p.headerSendOp, p.headerSent, false));
        if (p.headerRecvd) CHORUS_RETURN_IF_ERROR(testOne(p, p.handleRecvOp, p.handlesRecvd, false));
        CHORUS_RETURN_IF_ERROR(testOne(p, p.handleSendOp, p.handlesSent, false));
      }
      if (!transportError.ok()) return transportError;
    }

    // Local, one-sided and window steps inline. A one-sided step waits for its peer's header
    // and handles; an await waits for its signal; the others go first.
    for (size_t k = 0; k < readyLocal_.size();) {
      const uint32_t i = readyLocal_[k];
      const sched::Step& s = steps[i];
      if (sched::isOneSided(s.kind) && s.a.buf != sched::kWindow) {
        const PeerRun& p = *peerRuns_[static_cast<size_t>(plan.peerSlot[i])];
        if (!p.headerRecvd || !p.handlesRecvd) {
          ++k;
          continue;
        }
        const MemHandle& h = p.theirHandles[s.a.buf];
        Status st;
        if (s.kind == StepKind::kGet) {
          st = p.conn->read(ptr(s.dst), h, s.a.offset, s.dst.bytes);
        } else {
          if (!bounce_) bounce_.reset(new std::byte[kBouncePiece]);
          const size_t piece = kBouncePiece / elem * elem;
          for (uint64_t off = 0; off < s.dst.bytes && st.ok(); off += piece) {
            const size_t len = static_cast<size_t>(std::min<uint64_t>(piece, s.dst.bytes - off));
            st = p.conn->read(bounce_.get(), h, s.a.offset + off, len);
            if (st.ok())
              kernels::reduce(ptr(s.dst) + off, ptr(s.b) + off, bounce_.get(), len / elem,
                              dtype, op);
          }
        }
        if (!st.ok()) return st.withContext(call() + " " + describeStep(s, i));
      } else if (s.kind == StepKind::kAwait) {
        if (!env.window->reached(s.peer, id.seq, s.target)) {
          windowPending = true;
          ++k;
          continue;
        }
        CHORUS_RETURN_IF_ERROR(awaitWindow(s, i, plan, id, env));
      } else if (s.kind == StepKind::kSignal) {
        if (++signalled_ == 1)
          env.window->enter(id.seq, myHeader_);
        else
          env.window->signal(id.seq, signalled_);
      } else if (s.kind == StepKind::kGet) {
        kernels::copy(ptr(s.dst), peerWindow(s.peer, s.a, id, env), s.dst.bytes);
      } else if (s.kind == StepKind::kGetReduce) {
        kernels::reduce(ptr(s.dst), ptr(s.b), peerWindow(s.peer, s.a, id, env),
                        s.dst.bytes / elem, dtype, op);
      } else if (s.kind == StepKind::kCopy) {
        if (ptr(s.a) != ptr(s.dst)) kernels::copy(ptr(s.dst), ptr(s.a), s.dst.bytes);
      } else if (sched::isQuantStep(s.kind)) {
        Status st = runQuantStep(s, ptr(s.a), ptr(s.dst), dtype, id.quant, quantSources_);
        if (!st.ok()) return st.withContext(call() + " " + describeStep(s, i));
      } else {
        kernels::reduce(ptr(s.dst), ptr(s.a), ptr(s.b), s.dst.bytes / elem, dtype, op);
      }
      readyLocal_[k] = readyLocal_.back();
      readyLocal_.pop_back();
      complete(i);
      progressed = true;
    }

    // Test posted ops; completed ones unlock their dependents.
    for (size_t k = 0; k < posted_.size();) {
      Posted& po = posted_[k];
      PeerRun& p = *peerRuns_[static_cast<size_t>(po.peerIdx)];
      bool done = false;
      Status st = p.conn->check(po.op, &done);
      if (!st.ok()) return st.withContext(call() + " " + describeStep(steps[po.step], po.step));
      if (!done) {
        ++k;
        continue;
      }
      const sched::Step& s = steps[po.step];
      if (isSendLike(s.kind)) {
        --p.inflightSend;
      } else {
        --p.inflightRecv;
        if (s.kind == StepKind::kRecvReduce) {
          std::byte* staged = stagingFor(static_cast<size_t>(po.stagingSlot), s.dst.bytes);
          kernels::reduce(ptr(s.dst), ptr(s.a), staged, s.dst.bytes / elem, dtype, op);
          freeSlots_.push_back(po.stagingSlot);
        }
      }
      const uint32_t stepIndex = po.step;
      posted_[k] = posted_.back();
      posted_.pop_back();
      complete(stepIndex);
      progressed = true;
    }

    if (progressed) {
      clock.lastProgress = std::chrono::steady_clock::now();
      continue;
    }

    // Nothing posted, nothing ready, headers done, steps left: the schedule itself is broken
    // (a dependency that can never be met). Say so now rather than at the timeout.
    if (posted_.empty() && headersPending == 0 && readyLocal_.empty() && doneCount < n)
      return internalError(call() + ": schedule cannot make progress (" +
                           std::to_string(n - doneCount) + " steps blocked on dependencies)");

    // ---- Nothing moved: spin, then yield, then block -------------------------------------
    const auto now = std::chrono::steady_clock::now();
    int waitMs = 0;
    const Idle next = idlePass(clock, now, env.wait, [&] {
      // A peer whose process is gone: its connection completes what it delivered before it
      // went and fails the rest. Only peers we still need are asked.
      for (size_t k = 0; k < np; ++k) {
        PeerRun& p = *peerRuns_[k];
        const Plan::Peer& pp = plan.peers[k];
        const bool waiting = !p.headerRecvd || !p.headerSent || !p.handlesRecvd ||
                             !p.handlesSent || p.nextSend < pp.sends.size() ||
                             p.nextRecv < pp.recvs.size() || p.inflightSend > 0 ||
                             p.inflightRecv > 0;
        if (!waiting || p.goneMarked) continue;
        Status alive = env.peers->alive(p.peer);
        if (alive.ok()) continue;
        p.goneMarked = true;
        p.conn->peerGone(alive);  // the failing op adds the call
        clock.lastProgress = now;  // test again at once
      }
      return clock.lastProgress == now;
    }, &waitMs);
    if (next == Idle::kRetry) continue;
    if (next == Idle::kTimedOut) {
      std::string what = "nothing posted";
      if (!posted_.empty()) what = describeStep(steps[posted_.front().step], posted_.front().step);
      else if (headersPending > 0) what = "the operation headers of its peers";
      return timeoutError(call() + ": timed out after " + std::to_string(env.wait.timeoutSeconds) +
                          " s on rank " + std::to_string(env.rank) + " waiting for " + what +
                          "; " + std::to_string(n - doneCount) + " of " + std::to_string(n) +
                          " steps outstanding");
    }
    CHORUS_RETURN_IF_ERROR(
        block(conns_, waitMs, windowPending, id, plan.schedule.algo.c_str()));
  }
  return Status();
}

}  // namespace chorus::exec
