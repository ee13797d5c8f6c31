// The C entry points: argument checks, group recording, Status -> chorusResult_t, last error.
//
// Nothing here moves data. Every function validates what it can see locally (null buffers with a
// non-zero count, type, op, root, peer, a destroyed communicator) and returns
// chorusInvalidArgument with a message that names the argument; what only the peers can see
// (counts or roots that disagree) is the executor's header check.
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "chorus/chorus.h"
#include "src/api/comm_handle.h"
#include "src/base/block_pool.h"
#include "src/bootstrap/bootstrap.h"
#include "src/bootstrap/env.h"
#include "src/bootstrap/store.h"
#include "src/bootstrap/unique_id.h"
#include "algorithms/kernels/quantize.h"
#include "algorithms/registry.h"
#include "src/base/strings.h"
#include "src/core/communicator.h"
#include "transports/transport.h"
#include "src/base/config.h"
#include "src/base/shared_alloc.h"
#include "src/base/logging.h"

using chorus::CollArgs;
using chorus::Communicator;
using chorus::DataType;
using chorus::P2POp;
using chorus::Status;
namespace sched = chorus::sched;

// A communicator handle. Destroy and abort release the communicator but keep the handle (a few
// bytes, never reused) with its magic cleared, so a call on a destroyed communicator fails
// with a clear error instead of reading freed memory — and the per-call check can be a load.
struct chorusComm {
  std::atomic<uint64_t> magic{kMagic};
  std::unique_ptr<Communicator> impl;
  static constexpr uint64_t kMagic = 0x6368727363306d6dull;
  static constexpr uint64_t kDead = 0x6465616463306d6dull;
};

namespace {

// A request handle is the core's request itself (struct chorusRequest is never defined): one
// block per nonblocking call, the communicator handle kept in its owner word.
chorus::Request* requestOf(chorusRequest_t h) { return reinterpret_cast<chorus::Request*>(h); }
chorusRequest_t handleOf(std::unique_ptr<chorus::Request> r) {
  return reinterpret_cast<chorusRequest_t>(r.release());
}
chorusComm_t commOf(const chorus::Request* r) { return static_cast<chorusComm_t>(r->owner); }

thread_local std::string tlsLastError;

// Live communicators, so a destroyed one is refused instead of being dereferenced.
std::mutex& liveMu() {
  static std::mutex* mu = new std::mutex();  // never destroyed: threads may outlive exit()'s
  return *mu;                                 // static destructors
}
std::set<chorusComm_t>& live() {
  static std::set<chorusComm_t>* s = new std::set<chorusComm_t>();
  return *s;
}

chorusResult_t toResult(const Status& s) { return static_cast<chorusResult_t>(s.code()); }

chorusResult_t report(chorusComm_t comm, const Status& s) {
  if (s.ok()) return chorusSuccess;
  tlsLastError = s.toString();
  if (comm) {
    // Under liveMu: chorusCommAbort from another thread may be freeing it.
    std::lock_guard<std::mutex> lock(liveMu());
    if (live().count(comm) && comm->impl) comm->impl->setLastError(tlsLastError);
  }
  CHORUS_LOG(INFO, COLL) << "returning " << chorus::codeName(s.code()) << ": " << tlsLastError;
  return toResult(s);
}

// The last handle this thread validated: a pointer chorus never handed out is looked up in the
// live set before its memory is read; after that, a load of its magic suffices.
thread_local chorusComm_t tlsCheckedComm = nullptr;

Status checkComm(chorusComm_t comm) {
  if (!comm) return chorus::invalidArgument("comm is NULL");
  if (comm == tlsCheckedComm && comm->magic.load(std::memory_order_acquire) == chorusComm::kMagic)
    return Status();
  std::lock_guard<std::mutex> lock(liveMu());
  if (!live().count(comm) || comm->magic.load() != chorusComm::kMagic || !comm->impl)
    return chorus::invalidArgument("comm is not a live communicator (destroyed, or never created)");
  tlsCheckedComm = comm;
  return Status();
}

Status checkType(chorusDataType_t t) {
  if (!chorus::isValidDataType(static_cast<int>(t)))
    return chorus::invalidArgument("datatype " + std::to_string(static_cast<int>(t)) +
                                   " is not a chorusDataType_t");
  return Status();
}

Status checkOp(chorusComm_t comm, chorusRedOp_t op, chorusDataType_t t) {
  if (op >= chorusSum && op < chorusNumOps) return Status();  // built-in: valid for every type
  std::string why;
  if (!comm->impl->isValidOp(static_cast<int>(op), static_cast<DataType>(t), &why))
    return chorus::invalidArgument("op: " + why);
  return Status();
}

Status checkRank(chorusComm_t comm, int r, const char* what) {
  int n = comm->impl->size();
  if (r < 0 || r >= n)
    return chorus::invalidArgument(std::string(what) + " " + std::to_string(r) +
                                   " is out of range for a communicator of " + std::to_string(n) +
                                   " ranks");
  return Status();
}

Status checkBuf(const void* p, uint64_t count, const char* name) {
  if (!p && count > 0)
    return chorus::invalidArgument(std::string(name) + " is NULL but count is " +
                                   std::to_string(count));
  return Status();
}

Status checkSize(uint64_t count, chorusDataType_t t, uint64_t factor) {
  uint64_t elem = chorus::dataTypeSize(static_cast<DataType>(t));
  if (count > 0 && (count > UINT64_MAX / elem / (factor ? factor : 1)))
    return chorus::invalidArgument("count " + std::to_string(count) + " overflows the byte size");
  return Status();
}

// The common case of a call, tested as plain conditions before any Status is built: the handle
// this thread validated last, a known type, buffers where there are elements, and a count whose
// bytes cannot overflow (2^56 elements of at most 8 bytes). A call that fails any of them takes
// the checks above, which say what is wrong.
bool plainCall(chorusComm_t comm, chorusDataType_t t, size_t count, const void* a,
               const void* b) {
  return comm && comm == tlsCheckedComm &&
         comm->magic.load(std::memory_order_acquire) == chorusComm::kMagic &&
         chorus::isValidDataType(static_cast<int>(t)) && count <= (uint64_t{1} << 56) &&
         ((a && b) || count == 0);
}

// ---- Quantization --------------------------------------------------------------------------

// Every field up to the seed: the first chorusQuantConfig_t. A caller built against a later
// header passes a longer struct; the fields this library does not know must then be 0 (their
// "off" value), or the call is refused rather than ignoring what it asks for.
constexpr size_t kQuantConfigFirstSize = offsetof(chorusQuantConfig_t, seed) + sizeof(uint64_t);
static_assert(sizeof(chorusQuantConfig_t) == kQuantConfigFirstSize,
              "chorusQuantConfig_t grew: keep kQuantConfigFirstSize at the first version's size");

chorus::StatusOr<chorus::kernels::QuantConfig> quantConfigFrom(const chorusQuantConfig_t* config) {
  using chorus::invalidArgument;
  if (!config) return invalidArgument("config is NULL");
  const size_t size = config->structSize;
  if (size < kQuantConfigFirstSize) {
    return invalidArgument("config->structSize is " + std::to_string(size) + ", smaller than " +
                           "any chorusQuantConfig_t (" + std::to_string(kQuantConfigFirstSize) +
                           " bytes): initialize the config with CHORUS_QUANT_CONFIG_INIT");
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(config);
  for (size_t i = sizeof(chorusQuantConfig_t); i < size; ++i) {
    if (bytes[i] != 0) {
      return invalidArgument("config->structSize is " + std::to_string(size) + " and byte " +
                             std::to_string(i) + " is not 0: the config sets a field this " +
                             "chorus (" + std::to_string(sizeof(chorusQuantConfig_t)) +
                             "-byte config) does not know");
    }
  }
  if (config->bits != 4 && config->bits != 8) {
    return invalidArgument("config->bits is " + std::to_string(config->bits) +
                           ": quantization supports 4 or 8 bits");
  }
  if (config->mode != chorusQuantSymmetric && config->mode != chorusQuantAsymmetric) {
    return invalidArgument("config->mode is " + std::to_string(config->mode) +
                           ": use chorusQuantSymmetric or chorusQuantAsymmetric");
  }
  if (config->rounding != chorusRoundNearest && config->rounding != chorusRoundStochastic) {
    return invalidArgument("config->rounding is " + std::to_string(config->rounding) +
                           ": use chorusRoundNearest or chorusRoundStochastic");
  }
  if (config->reserved != 0) {
    return invalidArgument("config->reserved is " + std::to_string(config->reserved) +
                           ": it must be 0");
  }
  chorus::kernels::QuantConfig c;
  c.bits = uint32_t(config->bits);
  c.groupSize = config->groupSize;
  c.asymmetric = config->mode == chorusQuantAsymmetric;
  c.stochastic = config->rounding == chorusRoundStochastic;
  c.seed = config->seed;
  Status valid = chorus::kernels::validateQuantConfig(c, "config->");
  if (!valid.ok()) return valid;
  return c;
}

// Largest count whose quantized size and input size fit a size_t (8-byte elements would
// overflow later than this; records add at most 8 bytes per element).
constexpr uint64_t kMaxQuantCount = SIZE_MAX / 16;

// What chorusQuantize and chorusDequantize check: the config, the type, the buffers and their
// sizes, the stream. Returns the kernel config.
chorus::StatusOr<chorus::kernels::QuantConfig> checkQuantCall(
    const void* data, const char* dataName, const void* quantized, const char* quantizedName,
    size_t count, chorusDataType_t t, const chorusQuantConfig_t* config, chorusStream_t stream) {
  auto c = quantConfigFrom(config);
  if (!c.ok()) return c;
  Status s = checkType(t);
  if (!s.ok()) return s;
  if (!chorus::kernels::isQuantizableType(static_cast<DataType>(t))) {
    return chorus::invalidArgument("datatype " +
                                   std::string(chorus::dataTypeName(static_cast<DataType>(t))) +
                                   " cannot be quantized: it must be float32, bfloat16 or "
                                   "float16");
  }
  if (stream != nullptr) {
    return chorus::invalidArgument("stream is not NULL: quantization runs on host buffers only "
                                   "(device buffers are not supported yet)");
  }
  if (count > kMaxQuantCount) {
    return chorus::invalidArgument("count " + std::to_string(count) + " is too large");
  }
  for (Status b : {checkBuf(data, count, dataName), checkBuf(quantized, count, quantizedName)}) {
    if (!b.ok()) return b;
  }
  // Overlapping buffers would be read after being written.
  const auto* d = static_cast<const unsigned char*>(data);
  const auto* q = static_cast<const unsigned char*>(quantized);
  const size_t dataBytes = count * chorus::dataTypeSize(static_cast<DataType>(t));
  const size_t quantBytes = chorus::kernels::quantizedSize(count, c.value());
  if (count > 0 && d < q + quantBytes && q < d + dataBytes) {
    return chorus::invalidArgument(std::string(quantizedName) + " overlaps " + dataName);
  }
  return c;
}

// ---- Groups ------------------------------------------------------------------------------

struct GroupedColl {
  chorusComm_t comm;
  CollArgs args;
};
struct GroupedP2P {
  chorusComm_t comm;
  P2POp op;
};
struct GroupState {
  int depth = 0;
  std::vector<std::variant<GroupedColl, GroupedP2P>> ops;
};
thread_local GroupState tlsGroup;

chorusResult_t runColl(chorusComm_t comm, CollArgs&& args) {
  if (tlsGroup.depth > 0) {
    tlsGroup.ops.emplace_back(GroupedColl{comm, std::move(args)});
    return chorusSuccess;
  }
  return report(comm, comm->impl->collective(args));
}

chorusResult_t startColl(chorusComm_t comm, CollArgs&& args, chorusRequest_t* request) {
  if (!request) return report(comm, chorus::invalidArgument("request is NULL"));
  *request = nullptr;
  if (tlsGroup.depth > 0)
    return report(comm, chorus::invalidUsage("nonblocking calls cannot be made inside "
                                             "chorusGroupStart/chorusGroupEnd"));
  auto r = comm->impl->collectiveAsync(std::move(args), comm);
  if (!r.ok()) return report(comm, r.status());
  *request = handleOf(std::move(r).value());
  return chorusSuccess;
}

#define CHORUS_CHECK(comm, expr)                               \
  do {                                                         \
    Status chorus_check_ = (expr);                             \
    if (!chorus_check_.ok()) return report(comm, chorus_check_); \
  } while (0)

// Shared validation + argument packing of each collective; `request` null = blocking.
chorusResult_t doCollective(chorusComm_t comm, CollArgs&& a, chorusRequest_t* request) {
  return request ? startColl(comm, std::move(a), request) : runColl(comm, std::move(a));
}

chorusResult_t allReduceImpl(const void* s, void* r, size_t count, chorusDataType_t t,
                             chorusRedOp_t op, chorusComm_t comm, chorusRequest_t* req) {
  if (!plainCall(comm, t, count, s, r) || op < chorusSum || op >= chorusNumOps) {
    CHORUS_CHECK(nullptr, checkComm(comm));
    CHORUS_CHECK(comm, checkType(t));
    CHORUS_CHECK(comm, checkOp(comm, op, t));
    CHORUS_CHECK(comm, checkBuf(s, count, "sendbuff"));
    CHORUS_CHECK(comm, checkBuf(r, count, "recvbuff"));
    CHORUS_CHECK(comm, checkSize(count, t, 1));
  }
  CollArgs a;
  a.coll = sched::Coll::kAllReduce;
  a.send = s, a.recv = r, a.count = count, a.dtype = static_cast<DataType>(t);
  a.userOp = static_cast<int>(op);
  return doCollective(comm, std::move(a), req);
}

chorusResult_t broadcastImpl(const void* s, void* r, size_t count, chorusDataType_t t, int root,
                             chorusComm_t comm, chorusRequest_t* req) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  CHORUS_CHECK(comm, checkType(t));
  CHORUS_CHECK(comm, checkRank(comm, root, "root"));
  if (comm->impl->rank() == root) CHORUS_CHECK(comm, checkBuf(s, count, "sendbuff (at root)"));
  CHORUS_CHECK(comm, checkBuf(r, count, "recvbuff"));
  CHORUS_CHECK(comm, checkSize(count, t, 1));
  CollArgs a;
  a.coll = sched::Coll::kBroadcast;
  a.send = s, a.recv = r, a.count = count, a.dtype = static_cast<DataType>(t), a.root = root;
  return doCollective(comm, std::move(a), req);
}

chorusResult_t reduceImpl(const void* s, void* r, size_t count, chorusDataType_t t,
                          chorusRedOp_t op, int root, chorusComm_t comm, chorusRequest_t* req) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  CHORUS_CHECK(comm, checkType(t));
  CHORUS_CHECK(comm, checkOp(comm, op, t));
  CHORUS_CHECK(comm, checkRank(comm, root, "root"));
  CHORUS_CHECK(comm, checkBuf(s, count, "sendbuff"));
  if (comm->impl->rank() == root) CHORUS_CHECK(comm, checkBuf(r, count, "recvbuff (at root)"));
  CHORUS_CHECK(comm, checkSize(count, t, 1));
  CollArgs a;
  a.coll = sched::Coll::kReduce;
  a.send = s, a.recv = r, a.count = count, a.dtype = static_cast<DataType>(t), a.root = root;
  a.userOp = static_cast<int>(op);
  return doCollective(comm, std::move(a), req);
}

chorusResult_t allGatherImpl(const void* s, void* r, size_t count, chorusDataType_t t,
                             chorusComm_t comm, chorusRequest_t* req) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  CHORUS_CHECK(comm, checkType(t));
  CHORUS_CHECK(comm, checkBuf(s, count, "sendbuff"));
  CHORUS_CHECK(comm, checkBuf(r, count, "recvbuff"));
  CHORUS_CHECK(comm, checkSize(count, t, static_cast<uint64_t>(comm->impl->size())));
  CollArgs a;
  a.coll = sched::Coll::kAllGather;
  a.send = s, a.recv = r, a.count = count, a.dtype = static_cast<DataType>(t);
  return doCollective(comm, std::move(a), req);
}

chorusResult_t reduceScatterImpl(const void* s, void* r, size_t count, chorusDataType_t t,
                                 chorusRedOp_t op, chorusComm_t comm, chorusRequest_t* req) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  CHORUS_CHECK(comm, checkType(t));
  CHORUS_CHECK(comm, checkOp(comm, op, t));
  CHORUS_CHECK(comm, checkBuf(s, count, "sendbuff"));
  CHORUS_CHECK(comm, checkBuf(r, count, "recvbuff"));
  CHORUS_CHECK(comm, checkSize(count, t, static_cast<uint64_t>(comm->impl->size())));
  CollArgs a;
  a.coll = sched::Coll::kReduceScatter;
  a.send = s, a.recv = r, a.count = count, a.dtype = static_cast<DataType>(t);
  a.userOp = static_cast<int>(op);
  return doCollective(comm, std::move(a), req);
}

// The quantized reduce-scatter, all-gather and all-reduce: the checks every collective makes,
// then those of quantization — a float type, sum or avg, a usable config whose groups fit the
// count — so a config that cannot apply is refused, never run unquantized. `countName` is the
// count's name in the call ("recvcount"); `blocks` how many counts a buffer holds.
chorusResult_t quantizedImpl(sched::Coll coll, const void* s, void* r, size_t count,
                             chorusDataType_t t, chorusRedOp_t op, const chorusQuantConfig_t* config,
                             chorusComm_t comm, chorusRequest_t* req) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  CHORUS_CHECK(comm, checkType(t));
  const DataType dt = static_cast<DataType>(t);
  if (!chorus::kernels::isQuantizableType(dt))
    CHORUS_CHECK(comm, chorus::invalidArgument(
                           "datatype " + std::string(chorus::dataTypeName(dt)) +
                           " cannot be quantized: quantized collectives take float32, bfloat16 "
                           "or float16"));
  const bool reduces = coll != sched::Coll::kAllGather;
  if (reduces && op != chorusSum && op != chorusAvg)
    CHORUS_CHECK(comm, chorus::invalidArgument(
                           "op " + std::to_string(static_cast<int>(op)) +
                           ": quantized collectives reduce with chorusSum or chorusAvg only"));
  auto c = quantConfigFrom(config);
  CHORUS_CHECK(comm, c.status());
  const char* countName = coll == sched::Coll::kReduceScatter ? "recvcount"
                          : coll == sched::Coll::kAllGather   ? "sendcount"
                                                              : "count";
  if (count > 0 && c->groupSize > count)
    CHORUS_CHECK(comm, chorus::invalidArgument(
                           "config->groupSize is " + std::to_string(c->groupSize) +
                           ", larger than " + countName + " " + std::to_string(count) +
                           ": a group must fit in the data each rank owns"));
  CHORUS_CHECK(comm, checkBuf(s, count, "sendbuff"));
  CHORUS_CHECK(comm, checkBuf(r, count, "recvbuff"));
  const uint64_t n = static_cast<uint64_t>(comm->impl->size());
  CHORUS_CHECK(comm, checkSize(count, t, coll == sched::Coll::kAllReduce ? 1 : n));
  if (count > kMaxQuantCount / (coll == sched::Coll::kAllReduce ? 1 : n))
    CHORUS_CHECK(comm, chorus::invalidArgument(std::string(countName) + " " +
                                               std::to_string(count) + " is too large"));
  CollArgs a;
  a.coll = coll;
  a.send = s, a.recv = r, a.count = count, a.dtype = dt;
  a.userOp = reduces ? static_cast<int>(op) : -1;
  a.quant = std::make_shared<const chorus::kernels::QuantConfig>(c.value());
  return doCollective(comm, std::move(a), req);
}

chorusResult_t allToAllImpl(const void* s, void* r, size_t count, chorusDataType_t t,
                            chorusComm_t comm, chorusRequest_t* req) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  CHORUS_CHECK(comm, checkType(t));
  CHORUS_CHECK(comm, checkBuf(s, count, "sendbuff"));
  CHORUS_CHECK(comm, checkBuf(r, count, "recvbuff"));
  CHORUS_CHECK(comm, checkSize(count, t, static_cast<uint64_t>(comm->impl->size())));
  CollArgs a;
  a.coll = sched::Coll::kAllToAll;
  a.send = s, a.recv = r, a.count = count, a.dtype = static_cast<DataType>(t);
  return doCollective(comm, std::move(a), req);
}

chorusResult_t allToAllvImpl(const void* s, const size_t sc[], const size_t sd[], void* r,
                             const size_t rc[], const size_t rd[], chorusDataType_t t,
                             chorusComm_t comm, chorusRequest_t* req) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  CHORUS_CHECK(comm, checkType(t));
  if (!sc || !sd || !rc || !rd)
    CHORUS_CHECK(comm, chorus::invalidArgument(
                           std::string(!sc ? "sendcounts" : !sd ? "sdispls" : !rc ? "recvcounts" : "rdispls") +
                           " is NULL"));
  int n = comm->impl->size();
  CollArgs a;
  a.coll = sched::Coll::kAllToAllv;
  auto v = std::make_shared<CollArgs::Counts>();
  uint64_t totalSend = 0, totalRecv = 0;
  for (int i = 0; i < n; ++i) {
    v->sendCounts.push_back(sc[i]);
    v->sendDispls.push_back(sd[i]);
    v->recvCounts.push_back(rc[i]);
    v->recvDispls.push_back(rd[i]);
    totalSend += sc[i];
    totalRecv += rc[i];
  }
  a.v = std::move(v);
  CHORUS_CHECK(comm, checkBuf(s, totalSend, "sendbuff"));
  CHORUS_CHECK(comm, checkBuf(r, totalRecv, "recvbuff"));
  if (s && s == r && (totalSend > 0 || totalRecv > 0))
    CHORUS_CHECK(comm, chorus::invalidArgument(
                           "AllToAllv cannot run in place (sendbuff == recvbuff); use separate buffers"));
  a.send = s, a.recv = r, a.dtype = static_cast<DataType>(t);
  return doCollective(comm, std::move(a), req);
}

chorusResult_t gatherImpl(const void* s, void* r, size_t count, chorusDataType_t t, int root,
                          chorusComm_t comm, chorusRequest_t* req) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  CHORUS_CHECK(comm, checkType(t));
  CHORUS_CHECK(comm, checkRank(comm, root, "root"));
  CHORUS_CHECK(comm, checkBuf(s, count, "sendbuff"));
  if (comm->impl->rank() == root) CHORUS_CHECK(comm, checkBuf(r, count, "recvbuff (at root)"));
  CHORUS_CHECK(comm, checkSize(count, t, static_cast<uint64_t>(comm->impl->size())));
  CollArgs a;
  a.coll = sched::Coll::kGather;
  a.send = s, a.recv = r, a.count = count, a.dtype = static_cast<DataType>(t), a.root = root;
  return doCollective(comm, std::move(a), req);
}

chorusResult_t scatterImpl(const void* s, void* r, size_t count, chorusDataType_t t, int root,
                           chorusComm_t comm, chorusRequest_t* req) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  CHORUS_CHECK(comm, checkType(t));
  CHORUS_CHECK(comm, checkRank(comm, root, "root"));
  if (comm->impl->rank() == root) CHORUS_CHECK(comm, checkBuf(s, count, "sendbuff (at root)"));
  CHORUS_CHECK(comm, checkBuf(r, count, "recvbuff"));
  CHORUS_CHECK(comm, checkSize(count, t, static_cast<uint64_t>(comm->impl->size())));
  CollArgs a;
  a.coll = sched::Coll::kScatter;
  a.send = s, a.recv = r, a.count = count, a.dtype = static_cast<DataType>(t), a.root = root;
  return doCollective(comm, std::move(a), req);
}

chorusResult_t barrierImpl(chorusComm_t comm, chorusRequest_t* req) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  CollArgs a;
  a.coll = sched::Coll::kBarrier;
  a.dtype = DataType::kUint8;
  return doCollective(comm, std::move(a), req);
}

chorusResult_t p2pImpl(bool isSend, const void* buf, size_t count, chorusDataType_t t, int peer,
                       chorusComm_t comm, chorusRequest_t* req) {
  if (!plainCall(comm, t, count, buf, buf) || peer < 0 || peer >= comm->impl->size()) {
    CHORUS_CHECK(nullptr, checkComm(comm));
    CHORUS_CHECK(comm, checkType(t));
    CHORUS_CHECK(comm, checkRank(comm, peer, "peer"));
    CHORUS_CHECK(comm, checkBuf(buf, count, isSend ? "sendbuff" : "recvbuff"));
    CHORUS_CHECK(comm, checkSize(count, t, 1));
  }
  P2POp op{isSend, buf, count, static_cast<DataType>(t), peer};
  if (req) {
    *req = nullptr;
    if (tlsGroup.depth > 0)
      return report(comm, chorus::invalidUsage("nonblocking calls cannot be made inside "
                                               "chorusGroupStart/chorusGroupEnd"));
    auto r = comm->impl->sendRecvAsync(op, comm);
    if (!r.ok()) return report(comm, r.status());
    *req = handleOf(std::move(r).value());
    return chorusSuccess;
  }
  if (tlsGroup.depth > 0) {
    tlsGroup.ops.emplace_back(GroupedP2P{comm, op});
    return chorusSuccess;
  }
  if (peer == comm->impl->rank())
    return report(comm, chorus::invalidUsage(std::string("a blocking ") +
                                             (isSend ? "send to" : "receive from") +
                                             " oneself would never complete; pair it with its "
                                             "counterpart inside chorusGroupStart/End"));
  return report(comm, comm->impl->sendRecv({&op, 1}));
}

// A communicator made by a split, as a live handle (nullptr for a rank outside every group).
chorusComm_t adoptChild(std::unique_ptr<Communicator> child) {
  if (!child) return nullptr;
  auto* h = new chorusComm();
  h->impl = std::move(child);
  std::lock_guard<std::mutex> lock(liveMu());
  live().insert(h);
  return h;
}

// Registrations (chorusCommRegister). A handle is a number, never an address: tag bits over a
// sequence number that is never reused, so a handle is looked up, not dereferenced, and one
// deregistered before is told apart from one never handed out.
struct Registration {
  chorusComm_t comm;
  uintptr_t base;
  size_t bytes;
  uintptr_t segment;  // the chorusMemAlloc segment's base holding it, or 0
};
constexpr uintptr_t kRegTag = uintptr_t{0xc4} << 48;
constexpr uintptr_t kRegTagMask = uintptr_t{0xffff} << 48;

struct Registrations {
  std::mutex mu;
  std::map<uintptr_t, Registration> live;  // by handle
  uintptr_t nextSeq = 1;
};
Registrations& registrations() {
  static Registrations* r = new Registrations();  // never destroyed (see liveMu)
  return *r;
}

std::string handleText(const void* h) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", h);
  return b;
}

// chorusCommDestroy/Abort: the communicator's handles go, and with them their hold on segments.
void releaseRegistrations(chorusComm_t comm) {
  Registrations& r = registrations();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto it = r.live.begin(); it != r.live.end();) {
    if (it->second.comm != comm) {
      ++it;
      continue;
    }
    if (it->second.segment) chorus::mem::removeRegistration(it->second.segment);
    it = r.live.erase(it);
  }
}

}  // namespace

extern "C" {

chorusResult_t chorusGetVersion(int* version) {
  if (!version) return report(nullptr, chorus::invalidArgument("version is NULL"));
  *version = CHORUS_VERSION_CODE;
  return chorusSuccess;
}

const char* chorusGetErrorString(chorusResult_t result) {
  switch (result) {
    case chorusSuccess: return "no error";
    case chorusInvalidArgument: return "invalid argument";
    case chorusInvalidUsage: return "invalid usage (ranks disagree or API misuse)";
    case chorusSystemError: return "system error";
    case chorusRemoteError: return "remote error (a peer failed or died)";
    case chorusTimeout: return "timeout";
    case chorusInternalError: return "internal error";
    case chorusInProgress: return "operation in progress";
    default: return "unknown result code";
  }
}

const char* chorusGetLastError(chorusComm_t comm) {
  if (comm) {
    std::lock_guard<std::mutex> lock(liveMu());
    if (live().count(comm) && comm->impl) return comm->impl->lastError();
  }
  return tlsLastError.c_str();
}

const char* chorusGetBuildFeatures(void) {
  // The registered transports, then the compiled-in components.
  static const std::string features = [] {
    std::string f;
    for (const chorus::TransportFactory* t : chorus::allTransports())
      chorus::appendItem(f, t->name, " ");
    const std::string built = CHORUS_FEATURES_STRING;
    if (!built.empty()) chorus::appendItem(f, built, " ");
    return f;
  }();
  return features.c_str();
}

chorusResult_t chorusGetAlgorithmInfo(int index, const char** collective, const char** name,
                                      const char** description) {
  const auto all = chorus::algo::allAlgorithms();
  if (index < 0 || static_cast<size_t>(index) >= all.size()) return chorusInvalidArgument;
  const chorus::algo::AlgoInfo* a = all[static_cast<size_t>(index)];
  if (collective) *collective = chorus::sched::collName(a->coll);
  if (name) *name = a->name;
  if (description) *description = a->description;
  return chorusSuccess;
}

chorusResult_t chorusGetTransportInfo(int index, const char** name, const char** description,
                                      const char** unavailable) {
  const auto all = chorus::allTransports();
  if (index < 0 || static_cast<size_t>(index) >= all.size()) return chorusInvalidArgument;
  const chorus::TransportFactory* t = all[static_cast<size_t>(index)];
  if (name) *name = t->name;
  if (description) *description = t->description;
  if (unavailable) *unavailable = t->unavailable ? t->unavailable() : nullptr;
  return chorusSuccess;
}

chorusResult_t chorusGetEnvInfo(int index, const char** name, const char** defaultValue,
                                const char** doc) {
  const chorus::config::EnvVar* v = chorus::config::envVarAt(index);
  if (!v) return chorusInvalidArgument;
  if (name) *name = v->name;
  if (defaultValue) *defaultValue = v->defaultValue;
  if (doc) *doc = v->doc;
  return chorusSuccess;
}

chorusResult_t chorusGetUniqueId(chorusUniqueId* uniqueId) {
  if (!uniqueId) return report(nullptr, chorus::invalidArgument("uniqueId is NULL"));
  // The store serves from this process for as long as it lives (registered in store.h).
  auto job = chorus::bootstrap::startJobStore();
  if (!job.ok()) return report(nullptr, job.status().withContext("chorusGetUniqueId"));
  chorus::bootstrap::encodeUniqueId(job.value(), uniqueId);
  return chorusSuccess;
}

static chorusResult_t finishInit(chorusComm_t* comm,
                                 chorus::StatusOr<std::unique_ptr<Communicator>> c) {
  if (!c.ok()) return report(nullptr, c.status().withContext("communicator init"));
  auto* h = new chorusComm();
  h->impl = std::move(c).value();
  {
    std::lock_guard<std::mutex> lock(liveMu());
    live().insert(h);
  }
  *comm = h;
  return chorusSuccess;
}

chorusResult_t chorusCommInitRank(chorusComm_t* comm, int nranks, chorusUniqueId commId, int rank) {
  if (!comm) return report(nullptr, chorus::invalidArgument("comm is NULL"));
  *comm = nullptr;
  if (nranks < 1)
    return report(nullptr, chorus::invalidArgument("nranks " + std::to_string(nranks) + " < 1"));
  if (rank < 0 || rank >= nranks)
    return report(nullptr, chorus::invalidArgument("rank " + std::to_string(rank) +
                                                   " is out of range for nranks " +
                                                   std::to_string(nranks)));
  auto job = chorus::bootstrap::decodeUniqueId(commId);
  if (!job.ok()) return report(nullptr, job.status());
  auto timeout = chorus::config::getDouble("CHORUS_TIMEOUT");
  if (!timeout.ok()) return report(nullptr, timeout.status());
  auto boot = chorus::bootstrap::Bootstrap::create(job.value(), rank, nranks, timeout.value(),
                                                   /*serveStore=*/false);
  if (!boot.ok()) return report(nullptr, boot.status().withContext("bootstrap"));
  return finishInit(comm, Communicator::create(std::move(boot).value(), job.value(), rank, nranks));
}

chorusResult_t chorusCommInitFromEnv(chorusComm_t* comm) {
  if (!comm) return report(nullptr, chorus::invalidArgument("comm is NULL"));
  *comm = nullptr;
  auto env = chorus::bootstrap::parseEnv();
  if (!env.ok()) return report(nullptr, env.status());
  const auto& e = env.value();
  chorus::bootstrap::JobId job;
  job.root = e.root;
  job.secret = e.secret;
  auto timeout = chorus::config::getDouble("CHORUS_TIMEOUT");
  if (!timeout.ok()) return report(nullptr, timeout.status());
  CHORUS_LOG(INFO, INIT) << "rank " << e.rank << "/" << e.nranks << " from " << e.source
                         << ", root " << e.root.toString();
  auto boot = chorus::bootstrap::Bootstrap::create(job, e.rank, e.nranks, timeout.value(),
                                                   /*serveStore=*/e.rank == 0);
  if (!boot.ok()) return report(nullptr, boot.status().withContext("bootstrap"));
  return finishInit(comm, Communicator::create(std::move(boot).value(), job, e.rank, e.nranks));
}

chorusResult_t chorusCommSplitType(chorusComm_t comm, int type, int key, chorusComm_t* newcomm) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  if (!newcomm) return report(comm, chorus::invalidArgument("newcomm is NULL"));
  *newcomm = nullptr;
  chorus::topo::GroupKind kind;
  if (type == CHORUS_SPLIT_HOST) {
    kind = chorus::topo::GroupKind::kHost;
  } else if (type == CHORUS_SPLIT_NUMA) {
    kind = chorus::topo::GroupKind::kNuma;
  } else {
    return report(comm, chorus::invalidArgument("split type " + std::to_string(type) +
                                                " is neither CHORUS_SPLIT_HOST (1) nor "
                                                "CHORUS_SPLIT_NUMA (2)"));
  }
  std::unique_ptr<Communicator> child;
  Status s = comm->impl->splitType(kind, key, &child);
  if (!s.ok()) return report(comm, s.withContext("chorusCommSplitType"));
  *newcomm = adoptChild(std::move(child));
  return chorusSuccess;
}

chorusResult_t chorusCommSplit(chorusComm_t comm, int color, int key, chorusComm_t* newcomm) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  if (!newcomm) return report(comm, chorus::invalidArgument("newcomm is NULL"));
  *newcomm = nullptr;
  if (color < CHORUS_SPLIT_NOCOLOR)
    return report(comm, chorus::invalidArgument("color " + std::to_string(color) +
                                                " is negative (use CHORUS_SPLIT_NOCOLOR)"));
  std::unique_ptr<Communicator> child;
  Status s = comm->impl->split(color, key, &child);
  if (!s.ok()) return report(comm, s.withContext("chorusCommSplit"));
  *newcomm = adoptChild(std::move(child));
  return chorusSuccess;
}

chorusResult_t chorusCommShrink(chorusComm_t comm, const int* excludeRanks, int excludeCount,
                                chorusComm_t* newcomm) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  if (!newcomm) return report(comm, chorus::invalidArgument("chorusCommShrink: newcomm is NULL"));
  *newcomm = nullptr;
  if (excludeCount < 0)
    return report(comm, chorus::invalidArgument("chorusCommShrink: excludeCount " +
                                                std::to_string(excludeCount) + " is negative"));
  if (excludeCount > 0 && !excludeRanks)
    return report(comm, chorus::invalidArgument("chorusCommShrink: excludeRanks is NULL with "
                                                "excludeCount " + std::to_string(excludeCount)));
  std::unique_ptr<Communicator> child;
  Status s = comm->impl->shrink(
      std::span<const int>(excludeRanks, static_cast<size_t>(excludeCount)), &child);
  if (!s.ok()) return report(comm, s.withContext("chorusCommShrink"));
  *newcomm = adoptChild(std::move(child));
  return chorusSuccess;
}

static void unregister(chorusComm_t comm) {
  comm->magic.store(chorusComm::kDead, std::memory_order_release);
  releaseRegistrations(comm);
  std::lock_guard<std::mutex> lock(liveMu());
  live().erase(comm);
  // Kept reachable for the life of the process (see chorusComm).
  static std::vector<std::unique_ptr<chorusComm>>* retired =
      new std::vector<std::unique_ptr<chorusComm>>();
  retired->emplace_back(comm);
}

chorusResult_t chorusCommDestroy(chorusComm_t comm) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  unregister(comm);
  comm->impl.reset();  // drains queued nonblocking operations (each bounded); the handle stays
  return chorusSuccess;
}

chorusResult_t chorusCommAbort(chorusComm_t comm) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  unregister(comm);
  comm->impl->abort("chorusCommAbort");
  comm->impl.reset();  // the handle stays (see chorusComm)
  return chorusSuccess;
}

chorusResult_t chorusCommCount(const chorusComm_t comm, int* count) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  if (!count) return report(comm, chorus::invalidArgument("count is NULL"));
  *count = comm->impl->size();
  return chorusSuccess;
}

chorusResult_t chorusCommUserRank(const chorusComm_t comm, int* rank) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  if (!rank) return report(comm, chorus::invalidArgument("rank is NULL"));
  *rank = comm->impl->rank();
  return chorusSuccess;
}

chorusResult_t chorusCommSetTimeout(chorusComm_t comm, double seconds) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  if (!(seconds > 0))
    return report(comm, chorus::invalidArgument("timeout " + std::to_string(seconds) +
                                                " s is not positive"));
  comm->impl->setTimeout(seconds);
  return chorusSuccess;
}

chorusResult_t chorusCommGetStats(const chorusComm_t comm, chorusStats_t* stats) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  if (!stats) return report(comm, chorus::invalidArgument("stats is NULL"));
  if (stats->structSize != sizeof(chorusStats_t))
    return report(comm, chorus::invalidArgument(
                            "stats->structSize is " + std::to_string(stats->structSize) +
                            ", expected sizeof(chorusStats_t) = " +
                            std::to_string(sizeof(chorusStats_t))));
  chorus::CommStats s = comm->impl->stats();
  *stats = chorusStats_t{};
  stats->structSize = sizeof(chorusStats_t);
  for (const auto& t : s.transports) {
    if (stats->numTransports >= CHORUS_STATS_MAX_TRANSPORTS) break;
    chorusTransportStats_t& o = stats->transports[stats->numTransports++];
    std::snprintf(o.name, sizeof(o.name), "%s", t.name.c_str());
    o.bytesSentIntraHost = t.sentIntra;
    o.bytesRecvIntraHost = t.recvIntra;
    o.bytesSentInterHost = t.sentInter;
    o.bytesRecvInterHost = t.recvInter;
  }
  for (const auto& [name, count] : s.algos) {
    if (stats->numAlgos >= CHORUS_STATS_MAX_ALGOS) break;
    chorusAlgoStats_t& o = stats->algos[stats->numAlgos++];
    std::snprintf(o.name, sizeof(o.name), "%s", name.c_str());
    o.count = count;
  }
  return chorusSuccess;
}

chorusResult_t chorusMemAlloc(void** ptr, size_t size) {
  if (!ptr) return report(nullptr, chorus::invalidArgument("chorusMemAlloc: ptr is NULL"));
  *ptr = nullptr;
  auto p = chorus::mem::allocate(size);
  if (!p.ok()) return report(nullptr, p.status().withContext("chorusMemAlloc"));
  *ptr = *p;
  return chorusSuccess;
}

chorusResult_t chorusMemFree(void* ptr) {
  Status s = chorus::mem::release(ptr);
  if (!s.ok()) return report(nullptr, s.withContext("chorusMemFree"));
  return chorusSuccess;
}

chorusResult_t chorusCommRegister(const chorusComm_t comm, void* buff, size_t size,
                                  void** handle) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  if (!handle) return report(comm, chorus::invalidArgument("chorusCommRegister: handle is NULL"));
  *handle = nullptr;
  if (!buff) return report(comm, chorus::invalidArgument("chorusCommRegister: buff is NULL"));
  if (size == 0) return report(comm, chorus::invalidArgument("chorusCommRegister: size is 0"));
  const auto base = reinterpret_cast<uintptr_t>(buff);
  if (size > UINTPTR_MAX - base)
    return report(comm, chorus::invalidArgument("chorusCommRegister: buff + size overflows"));
  uintptr_t segment = 0;
  chorus::mem::SegmentRef ref;
  if (chorus::mem::find(buff, 0, &ref)) {
    // Starts in a chorusMemAlloc segment: it must end there too (a range straddling a
    // segment's end is a bug in the caller, not memory to reach two ways).
    if (ref.offset + size > ref.bytes)
      return report(comm, chorus::invalidArgument(
                              "chorusCommRegister: [buff, buff + " + std::to_string(size) +
                              ") starts " + std::to_string(ref.offset) +
                              " bytes into a chorusMemAlloc allocation of " +
                              std::to_string(ref.bytes) + " bytes and runs past its end"));
    segment = ref.base;
  }
  Registrations& r = registrations();
  std::lock_guard<std::mutex> lock(r.mu);
  if (segment && !chorus::mem::addRegistration(segment))
    return report(comm, chorus::invalidUsage("chorusCommRegister: buff's chorusMemAlloc "
                                             "allocation was freed while being registered"));
  const uintptr_t h = kRegTag | r.nextSeq++;
  r.live.emplace(h, Registration{comm, base, size, segment});
  *handle = reinterpret_cast<void*>(h);
  return chorusSuccess;
}

chorusResult_t chorusCommDeregister(const chorusComm_t comm, void* handle) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  if (!handle) return report(comm, chorus::invalidArgument("chorusCommDeregister: handle is NULL"));
  const auto h = reinterpret_cast<uintptr_t>(handle);
  Registrations& r = registrations();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.live.find(h);
  if (it == r.live.end()) {
    const bool ours = (h & kRegTagMask) == kRegTag && (h & ~kRegTagMask) < r.nextSeq;
    if (ours)
      return report(comm, chorus::invalidUsage(
                              "chorusCommDeregister: handle " + handleText(handle) +
                              " was already deregistered (or its communicator destroyed)"));
    return report(comm, chorus::invalidArgument("chorusCommDeregister: handle " +
                                                handleText(handle) +
                                                " was not returned by chorusCommRegister"));
  }
  if (it->second.comm != comm)
    return report(comm, chorus::invalidUsage("chorusCommDeregister: handle " +
                                             handleText(handle) +
                                             " was registered with another communicator"));
  if (it->second.segment) chorus::mem::removeRegistration(it->second.segment);
  r.live.erase(it);
  return chorusSuccess;
}

chorusResult_t chorusRedOpCreatePreMulSum(chorusRedOp_t* op, void* scalar, chorusDataType_t datatype,
                                          chorusScalarResidence_t residence, chorusComm_t comm) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  if (!op) return report(comm, chorus::invalidArgument("op is NULL"));
  if (!scalar) return report(comm, chorus::invalidArgument("scalar is NULL"));
  CHORUS_CHECK(comm, checkType(datatype));
  if (residence != chorusScalarHostImmediate)
    return report(comm, chorus::invalidArgument(
                            "residence chorusScalarDevice needs a device build; host buffers take "
                            "chorusScalarHostImmediate"));
  auto r = comm->impl->createPreMulSum(scalar, static_cast<DataType>(datatype));
  if (!r.ok()) return report(comm, r.status());
  *op = static_cast<chorusRedOp_t>(r.value());
  return chorusSuccess;
}

chorusResult_t chorusRedOpDestroy(chorusRedOp_t op, chorusComm_t comm) {
  CHORUS_CHECK(nullptr, checkComm(comm));
  return report(comm, comm->impl->destroyRedOp(static_cast<int>(op)));
}

chorusResult_t chorusAllReduce(const void* s, void* r, size_t count, chorusDataType_t t,
                               chorusRedOp_t op, chorusComm_t comm, chorusStream_t) {
  return allReduceImpl(s, r, count, t, op, comm, nullptr);
}
chorusResult_t chorusBroadcast(const void* s, void* r, size_t count, chorusDataType_t t, int root,
                               chorusComm_t comm, chorusStream_t) {
  return broadcastImpl(s, r, count, t, root, comm, nullptr);
}
chorusResult_t chorusReduce(const void* s, void* r, size_t count, chorusDataType_t t,
                            chorusRedOp_t op, int root, chorusComm_t comm, chorusStream_t) {
  return reduceImpl(s, r, count, t, op, root, comm, nullptr);
}
chorusResult_t chorusAllGather(const void* s, void* r, size_t count, chorusDataType_t t,
                               chorusComm_t comm, chorusStream_t) {
  return allGatherImpl(s, r, count, t, comm, nullptr);
}
chorusResult_t chorusReduceScatter(const void* s, void* r, size_t count, chorusDataType_t t,
                                   chorusRedOp_t op, chorusComm_t comm, chorusStream_t) {
  return reduceScatterImpl(s, r, count, t, op, comm, nullptr);
}
chorusResult_t chorusAllToAll(const void* s, void* r, size_t count, chorusDataType_t t,
                              chorusComm_t comm, chorusStream_t) {
  return allToAllImpl(s, r, count, t, comm, nullptr);
}
chorusResult_t chorusAllToAllv(const void* s, const size_t sc[], const size_t sd[], void* r,
                               const size_t rc[], const size_t rd[], chorusDataType_t t,
                               chorusComm_t comm, chorusStream_t) {
  return allToAllvImpl(s, sc, sd, r, rc, rd, t, comm, nullptr);
}
chorusResult_t chorusGather(const void* s, void* r, size_t count, chorusDataType_t t, int root,
                            chorusComm_t comm, chorusStream_t) {
  return gatherImpl(s, r, count, t, root, comm, nullptr);
}
chorusResult_t chorusScatter(const void* s, void* r, size_t count, chorusDataType_t t, int root,
                             chorusComm_t comm, chorusStream_t) {
  return scatterImpl(s, r, count, t, root, comm, nullptr);
}
chorusResult_t chorusBarrier(chorusComm_t comm, chorusStream_t) {
  return barrierImpl(comm, nullptr);
}
chorusResult_t chorusSend(const void* s, size_t count, chorusDataType_t t, int peer,
                          chorusComm_t comm, chorusStream_t) {
  return p2pImpl(true, s, count, t, peer, comm, nullptr);
}
chorusResult_t chorusRecv(void* r, size_t count, chorusDataType_t t, int peer, chorusComm_t comm,
                          chorusStream_t) {
  return p2pImpl(false, r, count, t, peer, comm, nullptr);
}

chorusResult_t chorusGroupStart(void) {
  ++tlsGroup.depth;
  return chorusSuccess;
}

chorusResult_t chorusGroupEnd(void) {
  if (tlsGroup.depth == 0)
    return report(nullptr, chorus::invalidUsage("chorusGroupEnd without chorusGroupStart"));
  if (--tlsGroup.depth > 0) return chorusSuccess;
  auto ops = std::move(tlsGroup.ops);
  tlsGroup.ops.clear();
  // Collectives run in call order; then each communicator's point-to-point operations run as
  // one schedule, so sends and receives between the same ranks are posted together.
  for (auto& item : ops) {
    if (auto* c = std::get_if<GroupedColl>(&item)) {
      Status s = c->comm->impl->collective(c->args);
      if (!s.ok()) return report(c->comm, s);
    }
  }
  std::vector<chorusComm_t> comms;
  for (auto& item : ops)
    if (auto* p = std::get_if<GroupedP2P>(&item))
      if (std::find(comms.begin(), comms.end(), p->comm) == comms.end()) comms.push_back(p->comm);
  for (chorusComm_t comm : comms) {
    std::vector<P2POp> p2p;
    for (auto& item : ops)
      if (auto* p = std::get_if<GroupedP2P>(&item))
        if (p->comm == comm) p2p.push_back(p->op);
    Status s = comm->impl->sendRecv(p2p);
    if (!s.ok()) return report(comm, s);
  }
  return chorusSuccess;
}

chorusResult_t chorusIAllReduce(const void* s, void* r, size_t count, chorusDataType_t t,
                                chorusRedOp_t op, chorusComm_t comm, chorusStream_t,
                                chorusRequest_t* req) {
  if (!req) return report(comm, chorus::invalidArgument("request is NULL"));
  return allReduceImpl(s, r, count, t, op, comm, req);
}
chorusResult_t chorusIBroadcast(const void* s, void* r, size_t count, chorusDataType_t t, int root,
                                chorusComm_t comm, chorusStream_t, chorusRequest_t* req) {
  if (!req) return report(comm, chorus::invalidArgument("request is NULL"));
  return broadcastImpl(s, r, count, t, root, comm, req);
}
chorusResult_t chorusIReduce(const void* s, void* r, size_t count, chorusDataType_t t,
                             chorusRedOp_t op, int root, chorusComm_t comm, chorusStream_t,
                             chorusRequest_t* req) {
  if (!req) return report(comm, chorus::invalidArgument("request is NULL"));
  return reduceImpl(s, r, count, t, op, root, comm, req);
}
chorusResult_t chorusIAllGather(const void* s, void* r, size_t count, chorusDataType_t t,
                                chorusComm_t comm, chorusStream_t, chorusRequest_t* req) {
  if (!req) return report(comm, chorus::invalidArgument("request is NULL"));
  return allGatherImpl(s, r, count, t, comm, req);
}
chorusResult_t chorusIReduceScatter(const void* s, void* r, size_t count, chorusDataType_t t,
                                    chorusRedOp_t op, chorusComm_t comm, chorusStream_t,
                                    chorusRequest_t* req) {
  if (!req) return report(comm, chorus::invalidArgument("request is NULL"));
  return reduceScatterImpl(s, r, count, t, op, comm, req);
}
chorusResult_t chorusIAllToAll(const void* s, void* r, size_t count, chorusDataType_t t,
                               chorusComm_t comm, chorusStream_t, chorusRequest_t* req) {
  if (!req) return report(comm, chorus::invalidArgument("request is NULL"));
  return allToAllImpl(s, r, count, t, comm, req);
}
chorusResult_t chorusIAllToAllv(const void* s, const size_t sc[], const size_t sd[], void* r,
                                const size_t rc[], const size_t rd[], chorusDataType_t t,
                                chorusComm_t comm, chorusStream_t, chorusRequest_t* req) {
  if (!req) return report(comm, chorus::invalidArgument("request is NULL"));
  return allToAllvImpl(s, sc, sd, r, rc, rd, t, comm, req);
}
chorusResult_t chorusIGather(const void* s, void* r, size_t count, chorusDataType_t t, int root,
                             chorusComm_t comm, chorusStream_t, chorusRequest_t* req) {
  if (!req) return report(comm, chorus::invalidArgument("request is NULL"));
  return gatherImpl(s, r, count, t, root, comm, req);
}
chorusResult_t chorusIScatter(const void* s, void* r, size_t count, chorusDataType_t t, int root,
                              chorusComm_t comm, chorusStream_t, chorusRequest_t* req) {
  if (!req) return report(comm, chorus::invalidArgument("request is NULL"));
  return scatterImpl(s, r, count, t, root, comm, req);
}
chorusResult_t chorusIBarrier(chorusComm_t comm, chorusStream_t, chorusRequest_t* req) {
  if (!req) return report(comm, chorus::invalidArgument("request is NULL"));
  return barrierImpl(comm, req);
}
chorusResult_t chorusISend(const void* s, size_t count, chorusDataType_t t, int peer,
                           chorusComm_t comm, chorusStream_t, chorusRequest_t* req) {
  if (!req) return report(comm, chorus::invalidArgument("request is NULL"));
  return p2pImpl(true, s, count, t, peer, comm, req);
}
chorusResult_t chorusIRecv(void* r, size_t count, chorusDataType_t t, int peer, chorusComm_t comm,
                           chorusStream_t, chorusRequest_t* req) {
  if (!req) return report(comm, chorus::invalidArgument("request is NULL"));
  return p2pImpl(false, r, count, t, peer, comm, req);
}

chorusResult_t chorusWait(chorusRequest_t* request) {
  if (!request || !*request) return report(nullptr, chorus::invalidArgument("request is NULL"));
  chorus::Request* r = requestOf(*request);
  chorusComm_t comm = commOf(r);
  Status s;
  // A finished request needs no communicator (it may have been destroyed since: destroy
  // completes every queued operation first). Otherwise this thread runs the queue up to it.
  if (!r->test(&s)) {
    // Pending, so its communicator is alive: destroy and abort finish every queued call first.
    // The handle's memory is never freed, so its magic can be read; a clear error, not a
    // crash, when another thread destroys the communicator meanwhile.
    s = comm->magic.load(std::memory_order_acquire) == chorusComm::kMagic
            ? comm->impl->waitFor(r)
            : chorus::invalidArgument("the request's communicator was destroyed while the "
                                      "request was pending");
  }
  delete r;
  *request = nullptr;
  return report(comm, s);  // which looks the communicator up before touching it
}

chorusResult_t chorusTest(chorusRequest_t* request, int* done) {
  if (!request || !*request) return report(nullptr, chorus::invalidArgument("request is NULL"));
  if (!done) return report(nullptr, chorus::invalidArgument("done is NULL"));
  chorus::Request* r = requestOf(*request);
  chorusComm_t comm = commOf(r);
  Status s;
  if (!r->test(&s)) {
    // Testing progresses the communicator's queue as far as it goes without waiting.
    if (checkComm(comm).ok()) comm->impl->poke();
    if (!r->test(&s)) {
      *done = 0;
      return chorusSuccess;
    }
  }
  *done = 1;
  delete r;
  *request = nullptr;
  return report(comm, s);
}

chorusResult_t chorusReduceScatterQuantized(const void* s, void* r, size_t count,
                                            chorusDataType_t t, chorusRedOp_t op,
                                            const chorusQuantConfig_t* config, chorusComm_t comm,
                                            chorusStream_t) {
  return quantizedImpl(sched::Coll::kReduceScatter, s, r, count, t, op, config, comm, nullptr);
}
chorusResult_t chorusAllGatherQuantized(const void* s, void* r, size_t count, chorusDataType_t t,
                                        const chorusQuantConfig_t* config, chorusComm_t comm,
                                        chorusStream_t) {
  return quantizedImpl(sched::Coll::kAllGather, s, r, count, t, chorusSum, config, comm, nullptr);
}
chorusResult_t chorusAllReduceQuantized(const void* s, void* r, size_t count, chorusDataType_t t,
                                        chorusRedOp_t op, const chorusQuantConfig_t* config,
                                        chorusComm_t comm, chorusStream_t) {
  return quantizedImpl(sched::Coll::kAllReduce, s, r, count, t, op, config, comm, nullptr);
}
chorusResult_t chorusIReduceScatterQuantized(const void* s, void* r, size_t count,
                                             chorusDataType_t t, chorusRedOp_t op,
                                             const chorusQuantConfig_t* config, chorusComm_t comm,
                                             chorusStream_t, chorusRequest_t* req) {
  if (!req) return report(comm, chorus::invalidArgument("request is NULL"));
  return quantizedImpl(sched::Coll::kReduceScatter, s, r, count, t, op, config, comm, req);
}
chorusResult_t chorusIAllGatherQuantized(const void* s, void* r, size_t count, chorusDataType_t t,
                                         const chorusQuantConfig_t* config, chorusComm_t comm,
                                         chorusStream_t, chorusRequest_t* req) {
  if (!req) return report(comm, chorus::invalidArgument("request is NULL"));
  return quantizedImpl(sched::Coll::kAllGather, s, r, count, t, chorusSum, config, comm, req);
}
chorusResult_t chorusIAllReduceQuantized(const void* s, void* r, size_t count, chorusDataType_t t,
                                         chorusRedOp_t op, const chorusQuantConfig_t* config,
                                         chorusComm_t comm, chorusStream_t, chorusRequest_t* req) {
  if (!req) return report(comm, chorus::invalidArgument("request is NULL"));
  return quantizedImpl(sched::Coll::kAllReduce, s, r, count, t, op, config, comm, req);
}

chorusResult_t chorusQuantizedSize(size_t count, const chorusQuantConfig_t* config,
                                   size_t* bytes) {
  auto c = quantConfigFrom(config);
  if (!c.ok()) return report(nullptr, c.status());
  if (!bytes) return report(nullptr, chorus::invalidArgument("bytes is NULL"));
  if (count > kMaxQuantCount)
    return report(nullptr, chorus::invalidArgument("count " + std::to_string(count) +
                                                   " is too large"));
  *bytes = chorus::kernels::quantizedSize(count, c.value());
  return chorusSuccess;
}

chorusResult_t chorusQuantize(const void* input, void* quantized, size_t count,
                              chorusDataType_t datatype, const chorusQuantConfig_t* config,
                              chorusStream_t stream) {
  auto c = checkQuantCall(input, "input", quantized, "quantized", count, datatype, config, stream);
  if (!c.ok()) return report(nullptr, c.status());
  chorus::kernels::quantize(quantized, input, count, static_cast<DataType>(datatype), c.value());
  return chorusSuccess;
}

chorusResult_t chorusDequantize(const void* quantized, void* output, size_t count,
                                chorusDataType_t datatype, const chorusQuantConfig_t* config,
                                chorusStream_t stream) {
  auto c = checkQuantCall(output, "output", quantized, "quantized", count, datatype, config,
                          stream);
  if (!c.ok()) return report(nullptr, c.status());
  chorus::kernels::dequantize(output, quantized, count, static_cast<DataType>(datatype), c.value());
  return chorusSuccess;
}

}  // extern "C"

chorus::Communicator* chorus::api::communicatorOf(chorusComm_t comm) {
  return checkComm(comm).ok() ? comm->impl.get() : nullptr;
}
