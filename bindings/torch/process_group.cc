#include "process_group.h"

#include <ATen/core/ivalue.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace chorus_torch {
namespace {

using Clock = std::chrono::steady_clock;

// The progress thread runs a queued operation once it has waited this long, unless it is
// large (kUrgentBytes or more: it runs at once, to overlap the caller's compute). A caller that
// waits right after posting (synchronous calls) takes it well before.
constexpr auto kGrace = std::chrono::microseconds(500);
constexpr size_t kUrgentBytes = 64 * 1024;
// After this long without a new operation the progress thread sleeps until woken; before, it
// ticks, so posting an operation needs no wake-up.
constexpr auto kIdle = std::chrono::milliseconds(200);
// The tick starts at kGrace and doubles, up to kMaxTick, each time the thread wakes to find
// that callers took every operation themselves (synchronous use): its wake-ups preempt the
// ranks, which on a busy host cost a synchronous 1 MiB all-reduce a third of its speed. The
// first operation it has to run itself brings the tick back to kGrace, and only then are large
// operations woken for at once again (DDP's buckets, posted without a wait).
constexpr auto kMaxTick = std::chrono::microseconds(4000);

std::string lastError(chorusComm_t comm, chorusResult_t r) {
  const char* text = comm ? chorusGetLastError(comm) : nullptr;
  if (!text || !*text) text = chorusGetLastError(nullptr);
  std::string s = chorusGetErrorString(r);
  if (text && *text) s += std::string(": ") + text;
  return s;
}

void checkTensor(const at::Tensor& t, const char* op, const char* what) {
  TORCH_CHECK(t.defined(), "chorus ", op, ": ", what, " is undefined");
  TORCH_CHECK(t.device().is_cpu(), "chorus ", op, ": ", what, " is on ", t.device(),
              "; the chorus backend takes CPU tensors only (CUDA tensors are not supported yet)");
  TORCH_CHECK(t.layout() == at::kStrided, "chorus ", op, ": ", what, " has layout ", t.layout(),
              "; the chorus backend takes dense (strided) tensors only");
}

at::Tensor& single(std::vector<at::Tensor>& v, const char* op) {
  TORCH_CHECK(v.size() == 1, "chorus ", op, ": expected one tensor (one device per process), got ",
              v.size());
  checkTensor(v[0], op, "the tensor");
  return v[0];
}

// A contiguous tensor with t's values: t itself, or a copy (then `after` copies it back).
at::Tensor staged(const at::Tensor& t, std::function<void()>* after) {
  if (t.is_contiguous()) return t;
  at::Tensor s = t.contiguous();
  if (after) {
    auto prev = std::move(*after);
    *after = [t, s, prev]() mutable {
      t.copy_(s);
      if (prev) prev();
    };
  }
  return s;
}

size_t nbytes(const at::Tensor& t) { return t.numel() * t.element_size(); }

// A contiguous tensor seen as a 1-D byte tensor (for concatenation and splitting).
at::Tensor asBytes(const at::Tensor& contiguous) {
  return contiguous.reshape({-1}).view(at::kByte);
}

// A reduction's element type and count over a contiguous tensor. Complex tensors reduce as
// their real and imaginary parts (valid for sum, avg and a real pre-multiplier only).
struct Typed {
  void* data;
  size_t count;
  chorusDataType_t type;
};

// The dtype as Python spells it (torch.int16, not Short).
std::string dtypeName(at::ScalarType s) {
  switch (s) {
    case at::kByte: return "torch.uint8";
    case at::kChar: return "torch.int8";
    case at::kShort: return "torch.int16";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kBool: return "torch.bool";
    case at::kComplexHalf: return "torch.complex32";
    case at::kComplexFloat: return "torch.complex64";
    case at::kComplexDouble: return "torch.complex128";
    default: return c10::toString(s);
  }
}

chorusDataType_t reductionType(at::ScalarType s, const char* op) {
  switch (s) {
    case at::kByte: return chorusUint8;
    case at::kBool: return chorusUint8;
    case at::kChar: return chorusInt8;
    case at::kInt: return chorusInt32;
    case at::kLong: return chorusInt64;
    case at::kHalf: return chorusFloat16;
    case at::kBFloat16: return chorusBfloat16;
    case at::kFloat: return chorusFloat32;
    case at::kDouble: return chorusFloat64;
    case at::kComplexFloat: return chorusFloat32;
    case at::kComplexDouble: return chorusFloat64;
    default:
      TORCH_CHECK(false, "chorus ", op, ": dtype ", dtypeName(s),
                  " cannot be reduced (chorus reduces uint8, int8, int32, int64, float16, "
                  "bfloat16, float32, float64, and complex with sum/avg)");
  }
}

Typed typed(const at::Tensor& contiguous, const char* op) {
  const chorusDataType_t dt = reductionType(contiguous.scalar_type(), op);
  size_t count = contiguous.numel();
  if (contiguous.is_complex()) count *= 2;
  return Typed{contiguous.data_ptr(), count, dt};
}

// A torch ReduceOp checked against the tensor, and how to make the chorus operator.
struct RedOp {
  chorusRedOp_t base = chorusSum;
  bool premul = false;
  double factor = 1.0;
};

RedOp redOp(const c10d::ReduceOp& op, const at::Tensor& t, const char* name) {
  RedOp r;
  const bool isBool = t.scalar_type() == at::kBool;
  const bool isComplex = t.is_complex();
  switch (op.op_) {
    case c10d::ReduceOp::SUM: r.base = chorusSum; break;
    case c10d::ReduceOp::AVG: r.base = chorusAvg; break;
    case c10d::ReduceOp::PRODUCT: r.base = chorusProd; break;
    case c10d::ReduceOp::MIN: r.base = chorusMin; break;
    case c10d::ReduceOp::MAX: r.base = chorusMax; break;
    case c10d::ReduceOp::PREMUL_SUM: {
      r.premul = true;
      auto* sup = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(sup, "chorus ", name, ": PREMUL_SUM without its factor");
      if (!sup->tensor_factors.empty()) {
        const at::Tensor& f = sup->tensor_factors[0];
        checkTensor(f, name, "the PREMUL_SUM factor");
        TORCH_CHECK(f.numel() == 1, "chorus ", name, ": the PREMUL_SUM factor has ", f.numel(),
                    " elements, expected 1");
        r.factor = f.item<double>();
      } else {
        r.factor = sup->double_factor;
      }
      break;
    }
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      TORCH_CHECK(false, "chorus ", name,
                  ": the bitwise reductions (BAND, BOR, BXOR) are not supported by chorus "
                  "(it offers SUM, AVG, PRODUCT, MIN, MAX, PREMUL_SUM)");
    default:
      TORCH_CHECK(false, "chorus ", name, ": unknown ReduceOp ", static_cast<int>(op.op_));
  }
  TORCH_CHECK(!isBool || r.base == chorusMin || r.base == chorusMax || r.base == chorusProd,
              "chorus ", name, ": bool tensors reduce with MIN, MAX or PRODUCT only");
  TORCH_CHECK(!isComplex || r.base == chorusSum || r.base == chorusAvg, "chorus ", name,
              ": complex tensors reduce with SUM, AVG or PREMUL_SUM only");
  return r;
}

// The PreMulSum scalar in the reduction's element type (what chorusRedOpCreatePreMulSum reads).
void scalarOf(chorusDataType_t dt, double v, unsigned char out[8]) {
  std::memset(out, 0, 8);
  auto put = [&](auto x) { std::memcpy(out, &x, sizeof(x)); };
  switch (dt) {
    case chorusInt8: put(static_cast<int8_t>(v)); break;
    case chorusUint8: put(static_cast<uint8_t>(v)); break;
    case chorusInt32: put(static_cast<int32_t>(v)); break;
    case chorusInt64: put(static_cast<int64_t>(v)); break;
    case chorusFloat16: put(c10::Half(static_cast<float>(v)).x); break;
    case chorusBfloat16: put(c10::BFloat16(static_cast<float>(v)).x); break;
    case chorusFloat32: put(static_cast<float>(v)); break;
    default: put(v); break;
  }
}

// Runs `call` with the chorus operator for `r` (a PreMulSum made and freed around it).
template <class F>
chorusResult_t withOp(const RedOp& r, chorusDataType_t dt, chorusComm_t comm, F&& call) {
  if (!r.premul) return call(r.base);
  unsigned char scalar[8];
  scalarOf(dt, r.factor, scalar);
  chorusRedOp_t op;
  chorusResult_t res = chorusRedOpCreatePreMulSum(&op, scalar, dt, chorusScalarHostImmediate, comm);
  if (res != chorusSuccess) return res;
  res = call(op);
  chorusResult_t d = chorusRedOpDestroy(op, comm);
  return res != chorusSuccess ? res : d;
}

void checkRoot(int64_t root, int size, const char* op) {
  TORCH_CHECK(root >= 0 && root < size, "chorus ", op, ": root rank ", root,
              " is out of range for a group of ", size);
}

void checkPeer(int peer, int rank, int size, const char* op) {
  TORCH_CHECK(peer >= 0 && peer < size, "chorus ", op, ": peer rank ", peer,
              " is out of range for a group of ", size);
  TORCH_CHECK(peer != rank, "chorus ", op, ": peer rank ", peer, " is this rank");
}

void checkLike(const at::Tensor& t, const at::Tensor& ref, const char* op, const char* what) {
  checkTensor(t, op, what);
  TORCH_CHECK(t.scalar_type() == ref.scalar_type(), "chorus ", op, ": ", what, " has dtype ",
              dtypeName(t.scalar_type()), " but the input has ", dtypeName(ref.scalar_type()));
  TORCH_CHECK(t.numel() == ref.numel(), "chorus ", op, ": ", what, " has ", t.numel(),
              " elements but the input has ", ref.numel());
}

void checkQuantType(const at::Tensor& t, const char* name) {
  const auto s = t.scalar_type();
  TORCH_CHECK(s == at::kFloat || s == at::kHalf || s == at::kBFloat16, "chorus ", name, ": dtype ",
              dtypeName(s), " cannot be quantized (torch.float32, torch.float16 and "
              "torch.bfloat16 can)");
}

chorusRedOp_t quantOp(const std::string& op, const char* name) {
  if (op == "sum") return chorusSum;
  if (op == "avg") return chorusAvg;
  TORCH_CHECK(false, "chorus ", name, ": op must be \"sum\" or \"avg\", got \"", op, "\"");
}

}  // namespace

chorusQuantConfig_t QuantOptions::config() const {
  chorusQuantConfig_t c = CHORUS_QUANT_CONFIG_INIT;
  TORCH_CHECK(bits == 4 || bits == 8, "chorus quantization: bits must be 4 or 8, got ", bits);
  c.bits = bits;
  if (mode == "symmetric") {
    c.mode = chorusQuantSymmetric;
  } else if (mode == "asymmetric") {
    c.mode = chorusQuantAsymmetric;
  } else {
    TORCH_CHECK(false, "chorus quantization: mode must be \"symmetric\" or \"asymmetric\", got \"",
                mode, "\"");
  }
  if (rounding == "nearest") {
    c.rounding = chorusRoundNearest;
  } else if (rounding == "stochastic") {
    c.rounding = chorusRoundStochastic;
  } else {
    TORCH_CHECK(false,
                "chorus quantization: rounding must be \"nearest\" or \"stochastic\", got \"",
                rounding, "\"");
  }
  TORCH_CHECK(groupSize > 0, "chorus quantization: group_size must be positive, got ", groupSize);
  c.groupSize = static_cast<size_t>(groupSize);
  c.seed = seed;
  return c;
}

// ---- Work -----------------------------------------------------------------------------------

ChorusWork::ChorusWork(ProcessGroupChorus* pg, int rank, c10d::OpType type,
                       std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type),
      pg_(pg),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()))) {}

bool ChorusWork::wait(std::chrono::milliseconds timeout) {
  const auto deadline = timeout == kNoTimeout ? Clock::time_point::max() : Clock::now() + timeout;
  if (!pg_->runUntil(this, deadline)) {
    std::string msg = "chorus: wait timed out after " + std::to_string(timeout.count()) +
                      " ms on " + c10d::opTypeToString(opType_) +
                      "; the process group is unusable from now on";
    pg_->failure(msg);
    throw std::runtime_error(msg);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

void ChorusWork::abort() {
  pg_->failure("chorus: work aborted by the caller (Work.abort)");
}

void ChorusWork::complete(std::exception_ptr error) {
  finish(error);
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

// ---- The process group ----------------------------------------------------------------------

std::string ProcessGroupChorus::makeUniqueId() {
  chorusUniqueId id;
  chorusResult_t r = chorusGetUniqueId(&id);
  TORCH_CHECK(r == chorusSuccess, "chorus: chorusGetUniqueId failed: ", lastError(nullptr, r));
  return std::string(id.internal, sizeof(id.internal));
}

ProcessGroupChorus::ProcessGroupChorus(const std::string& uniqueId, int rank, int size,
                                       std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size), timeout_(timeout) {
  TORCH_CHECK(uniqueId.size() == CHORUS_UNIQUE_ID_BYTES, "chorus: the unique id has ",
              uniqueId.size(), " bytes, expected ", CHORUS_UNIQUE_ID_BYTES);
  TORCH_CHECK(timeout.count() > 0, "chorus: the timeout must be positive, got ", timeout.count(),
              " ms");
  chorusUniqueId id;
  std::memcpy(id.internal, uniqueId.data(), sizeof(id.internal));
  chorusResult_t r = chorusCommInitRank(&comm_, size, id, rank);
  TORCH_CHECK(r == chorusSuccess, "chorus: joining a group of ", size, " as rank ", rank,
              " failed: ", lastError(nullptr, r));
  r = chorusCommSetTimeout(comm_, timeout.count() / 1000.0);
  if (r != chorusSuccess) {
    std::string msg = lastError(comm_, r);
    chorusCommDestroy(comm_);
    TORCH_CHECK(false, "chorus: setting the timeout failed: ", msg);
  }
  commTimeout_ = timeout;
  lastPost_ = Clock::now();
  progress_ = std::thread([this] { progressLoop(); });
  init();
}

ProcessGroupChorus::~ProcessGroupChorus() {
  {
    std::lock_guard<std::mutex> lock(queueMu_);
    stopping_ = true;
  }
  queueCv_.notify_all();
  if (progress_.joinable()) progress_.join();  // it drains the queue first
  bool failed;
  {
    std::lock_guard<std::mutex> lock(errorMu_);
    failed = !error_.empty();
  }
  if (failed) {
    chorusCommAbort(comm_);
  } else {
    chorusCommDestroy(comm_);
  }
}

std::exception_ptr ProcessGroupChorus::failure(const std::string& what) {
  {
    std::lock_guard<std::mutex> lock(errorMu_);
    if (error_.empty()) error_ = what;
  }
  return std::make_exception_ptr(std::runtime_error(what));
}

void ProcessGroupChorus::checkUsable() {
  std::lock_guard<std::mutex> lock(errorMu_);
  TORCH_CHECK(error_.empty(), "chorus: the process group failed earlier and is unusable: ",
              error_);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::enqueue(
    c10d::OpType type, std::vector<at::Tensor> outputs, size_t bytes,
    std::chrono::milliseconds timeout, std::function<chorusResult_t(chorusComm_t)> run,
    std::function<void()> after, bool p2p) {
  checkUsable();
  if (!p2p) ++seq_;
  auto work = c10::make_intrusive<ChorusWork>(this, rank_, type, std::move(outputs));
  Op op{work, std::move(run), std::move(after), Clock::now(), timeout, p2p,
        !p2p && bytes >= kUrgentBytes};
  bool wake;
  {
    std::lock_guard<std::mutex> lock(queueMu_);
    wake = (op.urgent && tick_ == kGrace) || idle_;
    lastPost_ = op.posted;
    queue_.push_back(std::move(op));
  }
  if (wake) queueCv_.notify_one();
  return work;
}

bool ProcessGroupChorus::runUntil(ChorusWork* until, Clock::time_point deadline) {
  while (!until->isCompleted()) {
    std::unique_lock<std::timed_mutex> exec(execMu_, std::defer_lock);
    if (deadline == Clock::time_point::max()) {
      exec.lock();
    } else if (!exec.try_lock_until(deadline)) {
      return until->isCompleted();
    }
    if (until->isCompleted()) break;
    if (!runNext()) break;  // nothing queued: it has completed
  }
  return true;
}

bool ProcessGroupChorus::runNext() {
  std::vector<Op> batch;
  {
    std::lock_guard<std::mutex> lock(queueMu_);
    if (queue_.empty()) return false;
    batch.push_back(std::move(queue_.front()));
    queue_.pop_front();
    // Consecutive sends and receives run as one group: posted together, none waits for another.
    while (batch.front().p2p && !queue_.empty() && queue_.front().p2p) {
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
  }
  std::string earlier;
  {
    std::lock_guard<std::mutex> lock(errorMu_);
    earlier = error_;
  }
  if (!earlier.empty()) {
    auto e = std::make_exception_ptr(std::runtime_error(
        "chorus: not run, the process group failed earlier: " + earlier));
    for (auto& op : batch) op.work->complete(e);
    return true;
  }
  chorusResult_t r = chorusSuccess;
  if (batch.front().timeout != commTimeout_) {
    r = chorusCommSetTimeout(comm_, batch.front().timeout.count() / 1000.0);
    if (r == chorusSuccess) commTimeout_ = batch.front().timeout;
  }
  if (r == chorusSuccess) {
    if (batch.size() == 1) {
      r = batch.front().run(comm_);
    } else {
      r = chorusGroupStart();
      for (auto& op : batch) {
        if (r != chorusSuccess) break;
        r = op.run(comm_);
      }
      chorusResult_t end = chorusGroupEnd();
      if (r == chorusSuccess) r = end;
    }
  }
  if (r != chorusSuccess) {
    std::string what = "chorus " + c10d::opTypeToString(batch.front().work->retrieveOpType()) +
                       " failed on rank " + std::to_string(rank_) + ": " + lastError(comm_, r);
    // chorus checks arguments before it communicates and its communicator stays usable after
    // chorusInvalidArgument; any other failure leaves it (and so this group) unusable.
    auto e = r == chorusInvalidArgument ? std::make_exception_ptr(std::runtime_error(what))
                                        : failure(what);
    for (auto& op : batch) op.work->complete(e);
    return true;
  }
  for (auto& op : batch) {
    std::exception_ptr e;
    try {
      if (op.after) op.after();
    } catch (...) {
      e = std::current_exception();
    }
    op.work->complete(e);
  }
  return true;
}

void ProcessGroupChorus::progressLoop() {
  std::unique_lock<std::mutex> lock(queueMu_);
  while (true) {
    if (queue_.empty()) {
      if (stopping_) return;
      if (Clock::now() - lastPost_ < kIdle) {
        queueCv_.wait_for(lock, tick_);
        if (queue_.empty()) tick_ = std::min(2 * tick_, kMaxTick);
      } else {
        idle_ = true;
        queueCv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        idle_ = false;
      }
      continue;
    }
    const Op& front = queue_.front();
    const auto age = Clock::now() - front.posted;
    if (stopping_ || (front.urgent && tick_ == kGrace) || age >= kGrace) {
      tick_ = kGrace;  // nobody waited for this one: asynchronous use
      lock.unlock();
      {
        std::lock_guard<std::timed_mutex> exec(execMu_);
        runNext();
      }
      lock.lock();
      continue;
    }
    queueCv_.wait_for(lock, std::max<Clock::duration>(kGrace - age, tick_));
  }
}

std::string ProcessGroupChorus::stats() {
  chorusStats_t s;
  std::memset(&s, 0, sizeof(s));
  s.structSize = sizeof(s);
  chorusResult_t r;
  {
    std::lock_guard<std::timed_mutex> exec(execMu_);
    r = chorusCommGetStats(comm_, &s);
  }
  TORCH_CHECK(r == chorusSuccess, "chorus: chorusCommGetStats failed: ", lastError(comm_, r));
  std::ostringstream o;
  for (int i = 0; i < s.numTransports; ++i) {
    const auto& t = s.transports[i];
    o << "transport " << t.name << " sent " << (t.bytesSentIntraHost + t.bytesSentInterHost)
      << " recv " << (t.bytesRecvIntraHost + t.bytesRecvInterHost) << "\n";
  }
  for (int i = 0; i < s.numAlgos; ++i) o << "algorithm " << s.algos[i].name << " " << s.algos[i].count << "\n";
  return o.str();
}

// ---- Collectives ----------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  at::Tensor& t = single(tensors, "broadcast");
  checkRoot(opts.rootRank, size_, "broadcast");
  std::function<void()> after;
  at::Tensor buf = staged(t, &after);
  const int root = static_cast<int>(opts.rootRank);
  void* p = buf.data_ptr();
  const size_t n = nbytes(buf);
  return enqueue(
      c10d::OpType::BROADCAST, tensors, n, opTimeout(opts.timeout),
      [buf, p, n, root](chorusComm_t c) {
        return chorusBroadcast(p, p, n, chorusUint8, root, c, nullptr);
      },
      after);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  at::Tensor& t = single(tensors, "allreduce");
  RedOp rop = redOp(opts.reduceOp, t, "allreduce");
  std::function<void()> after;
  at::Tensor buf = staged(t, &after);
  Typed v = typed(buf, "allreduce");
  return enqueue(
      c10d::OpType::ALLREDUCE, tensors, nbytes(buf), opTimeout(opts.timeout),
      [buf, v, rop](chorusComm_t c) {
        return withOp(rop, v.type, c, [&](chorusRedOp_t op) {
          return chorusAllReduce(v.data, v.data, v.count, v.type, op, c, nullptr);
        });
      },
      after);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "chorus allreduce_coalesced: no tensors");
  for (auto& t : tensors) {
    checkTensor(t, "allreduce_coalesced", "a tensor");
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                "chorus allreduce_coalesced: tensors must share one dtype, got ",
                dtypeName(tensors[0].scalar_type()), " and ", dtypeName(t.scalar_type()));
  }
  RedOp rop = redOp(opts.reduceOp, tensors[0], "allreduce_coalesced");
  std::vector<at::Tensor> flat;
  for (auto& t : tensors) flat.push_back(t.reshape({-1}));
  at::Tensor buf = at::cat(flat);
  Typed v = typed(buf, "allreduce_coalesced");
  std::vector<at::Tensor> outs = tensors;
  auto after = [buf, outs]() mutable {
    int64_t off = 0;
    for (auto& o : outs) {
      o.copy_(buf.narrow(0, off, o.numel()).view(o.sizes()));
      off += o.numel();
    }
  };
  return enqueue(
      c10d::OpType::ALLREDUCE_COALESCED, tensors, nbytes(buf), opTimeout(opts.timeout),
      [buf, v, rop](chorusComm_t c) {
        return withOp(rop, v.type, c, [&](chorusRedOp_t op) {
          return chorusAllReduce(v.data, v.data, v.count, v.type, op, c, nullptr);
        });
      },
      after);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  at::Tensor& t = single(tensors, "reduce");
  checkRoot(opts.rootRank, size_, "reduce");
  RedOp rop = redOp(opts.reduceOp, t, "reduce");
  std::function<void()> after;
  at::Tensor buf = staged(t, &after);
  Typed v = typed(buf, "reduce");
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(
      c10d::OpType::REDUCE, tensors, nbytes(buf), opTimeout(opts.timeout),
      [buf, v, rop, root](chorusComm_t c) {
        return withOp(rop, v.type, c, [&](chorusRedOp_t op) {
          return chorusReduce(v.data, v.data, v.count, v.type, op, root, c, nullptr);
        });
      },
      after);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  at::Tensor& in = single(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1, "chorus allgather: expected one output list, got ",
              outputs.size());
  auto& outs = outputs[0];
  TORCH_CHECK(static_cast<int>(outs.size()) == size_, "chorus allgather: the output list has ",
              outs.size(), " tensors, expected the group size ", size_);
  for (auto& o : outs) checkLike(o, in, "allgather", "an output tensor");
  at::Tensor src = in.contiguous();
  const size_t n = nbytes(src);
  at::Tensor flat = at::empty({static_cast<int64_t>(n) * size_}, src.options().dtype(at::kByte));
  auto after = [flat, outs, n]() mutable {
    for (size_t r = 0; r < outs.size(); ++r) {
      outs[r].copy_(flat.narrow(0, r * n, n).view(outs[r].scalar_type()).view(outs[r].sizes()));
    }
  };
  return enqueue(
      c10d::OpType::ALLGATHER, outs, n * size_, opTimeout(opts.timeout),
      [src, flat, n](chorusComm_t c) {
        return chorusAllGather(src.data_ptr(), flat.data_ptr(), n, chorusUint8, c, nullptr);
      },
      after);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  checkTensor(input, "_allgather_base", "the input");
  checkTensor(output, "_allgather_base", "the output");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chorus _allgather_base: output dtype ",
              dtypeName(output.scalar_type()), " differs from input dtype ",
              dtypeName(input.scalar_type()));
  TORCH_CHECK(output.numel() == input.numel() * size_, "chorus _allgather_base: the output has ",
              output.numel(), " elements, expected ", input.numel(), " x ", size_);
  std::function<void()> after;
  at::Tensor out = staged(output, &after);
  at::Tensor src = input.contiguous();
  const size_t n = nbytes(src);
  return enqueue(
      c10d::OpType::_ALLGATHER_BASE, {output}, n * size_, opTimeout(opts.timeout),
      [src, out, n](chorusComm_t c) {
        return chorusAllGather(src.data_ptr(), out.data_ptr(), n, chorusUint8, c, nullptr);
      },
      after);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(static_cast<int>(outputLists.size()) == size_,
              "chorus allgather_coalesced: expected one output list per rank (", size_, "), got ",
              outputLists.size());
  std::vector<at::Tensor> parts;
  for (auto& in : inputs) {
    checkTensor(in, "allgather_coalesced", "an input");
    parts.push_back(asBytes(in.contiguous()));
  }
  for (auto& list : outputLists) {
    TORCH_CHECK(list.size() == inputs.size(), "chorus allgather_coalesced: an output list has ",
                list.size(), " tensors, expected ", inputs.size());
    for (size_t j = 0; j < list.size(); ++j) {
      checkLike(list[j], inputs[j], "allgather_coalesced", "an output tensor");
    }
  }
  at::Tensor src = parts.empty() ? at::empty({0}, at::kByte) : at::cat(parts);
  const size_t n = src.numel();
  at::Tensor flat = at::empty({static_cast<int64_t>(n) * size_}, at::kByte);
  auto lists = outputLists;
  auto after = [flat, lists, n]() mutable {
    for (size_t r = 0; r < lists.size(); ++r) {
      size_t off = r * n;
      for (auto& o : lists[r]) {
        const size_t b = nbytes(o);
        o.copy_(flat.narrow(0, off, b).view(o.scalar_type()).view(o.sizes()));
        off += b;
      }
    }
  };
  std::vector<at::Tensor> outs;
  for (auto& l : outputLists) outs.insert(outs.end(), l.begin(), l.end());
  return enqueue(
      c10d::OpType::ALLGATHER_COALESCED, outs, n * size_, opTimeout(opts.timeout),
      [src, flat, n](chorusComm_t c) {
        return chorusAllGather(src.data_ptr(), flat.data_ptr(), n, chorusUint8, c, nullptr);
      },
      after);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  at::Tensor& in = single(inputs, "gather");
  checkRoot(opts.rootRank, size_, "gather");
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor src = in.contiguous();
  const size_t n = nbytes(src);
  at::Tensor flat;
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1, "chorus gather: the root expects one output list, got ",
                outputs.size());
    outs = outputs[0];
    TORCH_CHECK(static_cast<int>(outs.size()) == size_, "chorus gather: the output list has ",
                outs.size(), " tensors, expected the group size ", size_);
    for (auto& o : outs) checkLike(o, in, "gather", "an output tensor");
    flat = at::empty({static_cast<int64_t>(n) * size_}, at::kByte);
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "chorus gather: only the root (rank ", root, ") takes output tensors");
  }
  std::function<void()> after;
  if (rank_ == root) {
    after = [flat, outs, n]() mutable {
      for (size_t r = 0; r < outs.size(); ++r) {
        outs[r].copy_(flat.narrow(0, r * n, n).view(outs[r].scalar_type()).view(outs[r].sizes()));
      }
    };
  }
  return enqueue(
      c10d::OpType::GATHER, outs, n * size_, opTimeout(opts.timeout),
      [src, flat, n, root](chorusComm_t c) {
        return chorusGather(src.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr, n,
                            chorusUint8, root, c, nullptr);
      },
      after);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  at::Tensor& out = single(outputs, "scatter");
  checkRoot(opts.rootRank, size_, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor flat;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1, "chorus scatter: the root expects one input list, got ",
                inputs.size());
    TORCH_CHECK(static_cast<int>(inputs[0].size()) == size_, "chorus scatter: the input list has ",
                inputs[0].size(), " tensors, expected the group size ", size_);
    std::vector<at::Tensor> parts;
    for (auto& i : inputs[0]) {
      checkLike(i, out, "scatter", "an input tensor");
      parts.push_back(asBytes(i.contiguous()));
    }
    flat = at::cat(parts);
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                "chorus scatter: only the root (rank ", root, ") takes input tensors");
  }
  std::function<void()> after;
  at::Tensor dst = staged(out, &after);
  const size_t n = nbytes(dst);
  return enqueue(
      c10d::OpType::SCATTER, outputs, n * size_, opTimeout(opts.timeout),
      [flat, dst, n, root](chorusComm_t c) {
        return chorusScatter(flat.defined() ? flat.data_ptr() : nullptr, dst.data_ptr(), n,
                             chorusUint8, root, c, nullptr);
      },
      after);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  at::Tensor& out = single(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1, "chorus reduce_scatter: expected one input list, got ",
              inputs.size());
  TORCH_CHECK(static_cast<int>(inputs[0].size()) == size_,
              "chorus reduce_scatter: the input list has ", inputs[0].size(),
              " tensors, expected the group size ", size_);
  RedOp rop = redOp(opts.reduceOp, out, "reduce_scatter");
  std::vector<at::Tensor> parts;
  for (auto& i : inputs[0]) {
    checkLike(i, out, "reduce_scatter", "an input tensor");
    parts.push_back(i.reshape({-1}));
  }
  at::Tensor src = at::cat(parts);
  std::function<void()> after;
  at::Tensor dst = staged(out, &after);
  Typed o = typed(dst, "reduce_scatter");
  return enqueue(
      c10d::OpType::REDUCE_SCATTER, outputs, nbytes(src), opTimeout(opts.timeout),
      [src, dst, o, rop](chorusComm_t c) {
        return withOp(rop, o.type, c, [&](chorusRedOp_t op) {
          return chorusReduceScatter(src.data_ptr(), o.data, o.count, o.type, op, c, nullptr);
        });
      },
      after);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  checkTensor(input, "_reduce_scatter_base", "the input");
  checkTensor(output, "_reduce_scatter_base", "the output");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "chorus _reduce_scatter_base: output dtype ", dtypeName(output.scalar_type()),
              " differs from input dtype ", dtypeName(input.scalar_type()));
  TORCH_CHECK(input.numel() == output.numel() * size_, "chorus _reduce_scatter_base: the input has ",
              input.numel(), " elements, expected ", output.numel(), " x ", size_);
  RedOp rop = redOp(opts.reduceOp, input, "_reduce_scatter_base");
  at::Tensor src = input.contiguous();
  std::function<void()> after;
  at::Tensor dst = staged(output, &after);
  Typed o = typed(dst, "_reduce_scatter_base");
  return enqueue(
      c10d::OpType::_REDUCE_SCATTER_BASE, {output}, nbytes(src), opTimeout(opts.timeout),
      [src, dst, o, rop](chorusComm_t c) {
        return withOp(rop, o.type, c, [&](chorusRedOp_t op) {
          return chorusReduceScatter(src.data_ptr(), o.data, o.count, o.type, op, c, nullptr);
        });
      },
      after);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
    std::vector<int64_t>& inputSplits, const c10d::AllToAllOptions& opts) {
  checkTensor(input, "alltoall_base", "the input");
  checkTensor(output, "alltoall_base", "the output");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chorus alltoall_base: output dtype ",
              dtypeName(output.scalar_type()), " differs from input dtype ",
              dtypeName(input.scalar_type()));
  std::function<void()> after;
  at::Tensor dst = staged(output, &after);
  at::Tensor src = input.contiguous();
  if (src.data_ptr() == dst.data_ptr() && src.numel() > 0) src = src.clone();
  const size_t total = nbytes(src);
  if (outputSplits.empty() && inputSplits.empty()) {
    TORCH_CHECK(input.numel() % size_ == 0 && output.numel() == input.numel(),
                "chorus alltoall_base: without split sizes the input (", input.numel(),
                " elements) and output (", output.numel(),
                ") must be equal and divisible by the group size ", size_);
    const size_t n = total / size_;
    return enqueue(
        c10d::OpType::ALLTOALL_BASE, {output}, total, opTimeout(opts.timeout),
        [src, dst, n](chorusComm_t c) {
          return chorusAllToAll(src.data_ptr(), dst.data_ptr(), n, chorusUint8, c, nullptr);
        },
        after);
  }
  // Split sizes count rows (dimension 0); chorus counts bytes here.
  auto counts = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* which) {
    TORCH_CHECK(t.dim() >= 1, "chorus alltoall_base: the ", which, " needs a dimension 0");
    const int64_t rows = t.size(0);
    const size_t rowBytes = rows ? nbytes(t) / rows : 0;
    std::vector<size_t> c(size_), d(size_);
    if (splits.empty()) {
      TORCH_CHECK(rows % size_ == 0, "chorus alltoall_base: the ", which, "'s ", rows,
                  " rows do not split evenly over ", size_, " ranks");
      for (int i = 0; i < size_; ++i) c[i] = rows / size_ * rowBytes;
    } else {
      TORCH_CHECK(static_cast<int>(splits.size()) == size_, "chorus alltoall_base: ", which,
                  " split sizes have ", splits.size(), " entries, expected ", size_);
      int64_t sum = 0;
      for (int i = 0; i < size_; ++i) {
        TORCH_CHECK(splits[i] >= 0, "chorus alltoall_base: negative ", which, " split size");
        sum += splits[i];
        c[i] = splits[i] * rowBytes;
      }
      TORCH_CHECK(sum == rows, "chorus alltoall_base: ", which, " split sizes sum to ", sum,
                  " but dimension 0 has ", rows);
    }
    size_t off = 0;
    for (int i = 0; i < size_; ++i) {
      d[i] = off;
      off += c[i];
    }
    return std::make_pair(c, d);
  };
  auto [sc, sd] = counts(src, inputSplits, "input");
  auto [rc, rd] = counts(dst, outputSplits, "output");
  return enqueue(
      c10d::OpType::ALLTOALL_BASE, {output}, total, opTimeout(opts.timeout),
      [src, dst, sc = sc, sd = sd, rc = rc, rd = rd](chorusComm_t c) {
        return chorusAllToAllv(src.data_ptr(), sc.data(), sd.data(), dst.data_ptr(), rc.data(),
                               rd.data(), chorusUint8, c, nullptr);
      },
      after);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ &&
                  static_cast<int>(outputs.size()) == size_,
              "chorus alltoall: expected ", size_, " input and output tensors, got ",
              inputs.size(), " and ", outputs.size());
  std::vector<at::Tensor> parts;
  std::vector<size_t> sc(size_), sd(size_), rc(size_), rd(size_);
  size_t off = 0, roff = 0;
  for (int i = 0; i < size_; ++i) {
    checkTensor(inputs[i], "alltoall", "an input");
    checkTensor(outputs[i], "alltoall", "an output");
    TORCH_CHECK(inputs[i].scalar_type() == outputs[i].scalar_type(),
                "chorus alltoall: input and output dtypes differ");
    parts.push_back(asBytes(inputs[i].contiguous()));
    sc[i] = nbytes(inputs[i]);
    sd[i] = off;
    off += sc[i];
    rc[i] = nbytes(outputs[i]);
    rd[i] = roff;
    roff += rc[i];
  }
  at::Tensor src = at::cat(parts);
  at::Tensor flat = at::empty({static_cast<int64_t>(roff)}, at::kByte);
  std::vector<at::Tensor> outs = outputs;
  auto after = [flat, outs, rd, rc]() mutable {
    for (size_t i = 0; i < outs.size(); ++i) {
      outs[i].copy_(flat.narrow(0, rd[i], rc[i]).view(outs[i].scalar_type()).view(outs[i].sizes()));
    }
  };
  return enqueue(
      c10d::OpType::ALLTOALL, outputs, off, opTimeout(opts.timeout),
      [src, flat, sc, sd, rc, rd](chorusComm_t c) {
        return chorusAllToAllv(src.data_ptr(), sc.data(), sd.data(), flat.data_ptr(), rc.data(),
                               rd.data(), chorusUint8, c, nullptr);
      },
      after);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::send(std::vector<at::Tensor>& tensors,
                                                        int dstRank, int /*tag*/) {
  at::Tensor& t = single(tensors, "send");
  checkPeer(dstRank, rank_, size_, "send");
  at::Tensor src = t.contiguous();
  const size_t n = nbytes(src);
  return enqueue(
      c10d::OpType::SEND, tensors, n, timeout_,
      [src, n, dstRank](chorusComm_t c) {
        return chorusSend(src.data_ptr(), n, chorusUint8, dstRank, c, nullptr);
      },
      nullptr, /*p2p=*/true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recv(std::vector<at::Tensor>& tensors,
                                                        int srcRank, int /*tag*/) {
  at::Tensor& t = single(tensors, "recv");
  checkPeer(srcRank, rank_, size_, "recv");
  std::function<void()> after;
  at::Tensor dst = staged(t, &after);
  const size_t n = nbytes(dst);
  return enqueue(
      c10d::OpType::RECV, tensors, n, timeout_,
      [dst, n, srcRank](chorusComm_t c) {
        return chorusRecv(dst.data_ptr(), n, chorusUint8, srcRank, c, nullptr);
      },
      after, /*p2p=*/true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::barrier(const c10d::BarrierOptions& opts) {
  return enqueue(c10d::OpType::BARRIER, {}, 0, opTimeout(opts.timeout),
                 [](chorusComm_t c) { return chorusBarrier(c, nullptr); });
}

// ---- Quantized collectives ------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduceQuantized(at::Tensor& tensor,
                                                                      const std::string& op,
                                                                      const QuantOptions& q) {
  checkTensor(tensor, "all_reduce_quantized", "the tensor");
  checkQuantType(tensor, "all_reduce_quantized");
  const chorusRedOp_t rop = quantOp(op, "all_reduce_quantized");
  const chorusQuantConfig_t cfg = q.config();
  std::function<void()> after;
  at::Tensor buf = staged(tensor, &after);
  Typed v = typed(buf, "all_reduce_quantized");
  return enqueue(
      c10d::OpType::ALLREDUCE, {tensor}, nbytes(buf), timeout_,
      [buf, v, rop, cfg](chorusComm_t c) {
        return chorusAllReduceQuantized(v.data, v.data, v.count, v.type, rop, &cfg, c, nullptr);
      },
      after);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduceScatterQuantized(at::Tensor& output,
                                                                          at::Tensor& input,
                                                                          const std::string& op,
                                                                          const QuantOptions& q) {
  checkTensor(input, "reduce_scatter_quantized", "the input");
  checkTensor(output, "reduce_scatter_quantized", "the output");
  checkQuantType(input, "reduce_scatter_quantized");
  TORCH_CHECK(output.scalar_type() == input.scalar_type() &&
                  input.numel() == output.numel() * size_,
              "chorus reduce_scatter_quantized: the input must hold group size (", size_,
              ") x the output's elements, in the output's dtype");
  const chorusRedOp_t rop = quantOp(op, "reduce_scatter_quantized");
  const chorusQuantConfig_t cfg = q.config();
  at::Tensor src = input.contiguous();
  std::function<void()> after;
  at::Tensor dst = staged(output, &after);
  Typed o = typed(dst, "reduce_scatter_quantized");
  return enqueue(
      c10d::OpType::_REDUCE_SCATTER_BASE, {output}, nbytes(src), timeout_,
      [src, dst, o, rop, cfg](chorusComm_t c) {
        return chorusReduceScatterQuantized(src.data_ptr(), o.data, o.count, o.type, rop, &cfg, c,
                                            nullptr);
      },
      after);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgatherQuantized(at::Tensor& output,
                                                                      at::Tensor& input,
                                                                      const QuantOptions& q) {
  checkTensor(input, "all_gather_quantized", "the input");
  checkTensor(output, "all_gather_quantized", "the output");
  checkQuantType(input, "all_gather_quantized");
  TORCH_CHECK(output.scalar_type() == input.scalar_type() &&
                  output.numel() == input.numel() * size_,
              "chorus all_gather_quantized: the output must hold group size (", size_,
              ") x the input's elements, in the input's dtype");
  const chorusQuantConfig_t cfg = q.config();
  at::Tensor src = input.contiguous();
  std::function<void()> after;
  at::Tensor dst = staged(output, &after);
  Typed i = typed(src, "all_gather_quantized");
  return enqueue(
      c10d::OpType::_ALLGATHER_BASE, {output}, nbytes(dst), timeout_,
      [src, dst, i, cfg](chorusComm_t c) {
        return chorusAllGatherQuantized(i.data, dst.data_ptr(), i.count, i.type, &cfg, c, nullptr);
      },
      after);
}

}  // namespace chorus_torch
