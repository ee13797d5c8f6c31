#include "tools/chorus-perf/harness.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tools/chorus-perf/coll.h"
#include "tools/chorus-perf/element_codec.h"
#include "tools/chorus-perf/report.h"
#include "tools/chorus-perf/value_model.h"

namespace chorus::perf {
namespace {

constexpr size_t kBufferAlign = 4096;
constexpr size_t kHostNameChars = 64;

// What each rank tells rank 0 for the "Using devices" block; fixed size so one allgather of
// bytes moves it.
struct RankRecord {
  int32_t rank;
  int32_t pid;
  char host[kHostNameChars];
};

// A buffer from aligned_alloc, or (-R 1) from chorusMemAlloc, freed the same way.
struct BufferDeleter {
  bool shared = false;
  void operator()(std::byte* p) const {
    if (shared)
      chorusMemFree(p);
    else
      std::free(p);
  }
};
using Buffer = std::unique_ptr<std::byte, BufferDeleter>;

Buffer allocate(size_t bytes, bool shared) {
  size_t rounded = (bytes + kBufferAlign - 1) / kBufferAlign * kBufferAlign;
  if (rounded == 0) rounded = kBufferAlign;
  void* p = nullptr;
  if (shared) {
    chorusResult_t r = chorusMemAlloc(&p, rounded);
    if (r != chorusSuccess) {
      std::fprintf(stderr, "chorus-perf: chorusMemAlloc of %zu bytes failed: %s: %s\n", rounded,
                   chorusGetErrorString(r), chorusGetLastError(nullptr));
      std::exit(EXIT_FAILURE);
    }
  } else {
    p = std::aligned_alloc(kBufferAlign, rounded);
  }
  if (p == nullptr) {
    std::fprintf(stderr, "chorus-perf: cannot allocate %zu bytes\n", rounded);
    std::exit(EXIT_FAILURE);
  }
  std::memset(p, 0, rounded);  // zero is a valid value of every type, and touches the pages
  return Buffer(static_cast<std::byte*>(p), BufferDeleter{shared});
}

std::string shortHostName() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string h(host);
  return h.substr(0, h.find('.'));
}

std::string versionText(int code) {
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
         std::to_string(code % 100);
}

uint64_t mixSeed(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

class Harness {
 public:
  explicit Harness(const PerfOptions& opts) : opts_(opts), impl_(collImpl(opts.coll)) {}
  int run();

 private:
  void ok(chorusResult_t r, const char* what);
  int refuse(const std::string& why);
  void print(const std::string& s);
  void printHeader();
  void runTable(chorusDataType_t type, Op op);
  CollArgs layout(const CollGeometry& g, chorusDataType_t type, chorusRedOp_t op, bool inPlace);
  void startAndComplete(const CollArgs& a, int times);
  double timeCalls(const CollArgs& a);
  std::optional<int64_t> checkedRun(const CollArgs& a, const CollGeometry& g, Op op, bool inPlace);
  std::optional<double> quantError(const CollArgs& a, const CollGeometry& g, Op op);

  const PerfOptions& opts_;
  const CollImpl& impl_;
  chorusComm_t comm_ = nullptr;
  int rank_ = 0;
  int nranks_ = 1;
  Buffer send_;
  Buffer recv_;
  std::vector<void*> registrations_;  // -R 1: chorusCommRegister handles of send_ and recv_
  uint64_t checkRuns_ = 0;
  std::vector<Record> records_;
  std::vector<chorusRequest_t> reqs_;
};

void Harness::ok(chorusResult_t r, const char* what) {
  if (r == chorusSuccess) return;
  std::fprintf(stderr, "chorus-perf: rank %d: %s failed: %s: %s\n", rank_, what,
               chorusGetErrorString(r), chorusGetLastError(comm_));
  std::fflush(stderr);
  // Abort rather than destroy: peers learn at once that this rank is gone instead of waiting
  // for the timeout.
  if (comm_ != nullptr) chorusCommAbort(comm_);
  std::exit(EXIT_FAILURE);
}

// A job that cannot run the options: rank 0 says why, and every rank returns 2. The barrier
// keeps the others from exiting first: a launcher that sees one rank exit tears the job down,
// and could kill rank 0 before it has printed the reason.
int Harness::refuse(const std::string& why) {
  if (rank_ == 0) {
    std::fprintf(stderr, "chorus-perf: %s\n", why.c_str());
    std::fflush(stderr);
  }
  ok(chorusBarrier(comm_, nullptr), "chorusBarrier (refusal)");
  chorusCommDestroy(comm_);
  comm_ = nullptr;
  return 2;
}

void Harness::print(const std::string& s) {
  if (rank_ != 0) return;
  std::fputs(s.c_str(), stdout);
  std::fflush(stdout);
}

void Harness::printHeader() {
  RankRecord mine{};
  mine.rank = rank_;
  mine.pid = static_cast<int32_t>(getpid());
  std::string host = shortHostName();
  std::strncpy(mine.host, host.c_str(), sizeof(mine.host) - 1);
  std::vector<RankRecord> all(static_cast<size_t>(nranks_));
  ok(chorusAllGather(&mine, all.data(), sizeof(RankRecord), chorusUint8, comm_, nullptr),
     "chorusAllGather (rank info)");
  if (rank_ != 0) return;

  int version = 0;
  chorusGetVersion(&version);
  char line[512];
  std::string h;
  h += "# chorus-perf " + versionText(CHORUS_VERSION_CODE) + " (libchorus " +
       versionText(version) + "): " + collName(opts_.coll) + "\n";
  h += "# Collective test starting: " + opts_.commandLine + "\n";
  bool byFactor = opts_.stepFactor > 1;
  std::snprintf(line, sizeof(line),
                "# nranks %d minBytes %llu maxBytes %llu step: %llu(%s) warmup iters: %d iters: %d "
                "validation: %d blocking: %d\n",
                nranks_, static_cast<unsigned long long>(opts_.minBytes),
                static_cast<unsigned long long>(opts_.maxBytes),
                static_cast<unsigned long long>(byFactor ? opts_.stepFactor : opts_.stepBytes),
                byFactor ? "factor" : "bytes", opts_.warmupIters, opts_.iters, opts_.check ? 1 : 0,
                opts_.blocking ? 1 : 0);
  h += line;
  if (opts_.registered)
    h += "# buffers: chorusMemAlloc, registered with chorusCommRegister (-R 1)\n";
  h += "#\n# Using devices\n";
  for (const RankRecord& r : all) {
    std::string rh(r.host, strnlen(r.host, sizeof(r.host)));
    std::snprintf(line, sizeof(line), "#  Rank %2d Pid %6d on %10s\n", r.rank, r.pid, rh.c_str());
    h += line;
  }
  h += "#\n";
  if (opts_.quant)
    h += "# quantized " + opts_.quantText +
         ": inputs are Gaussian; #wrong is the relative L2 error against the exact result\n";
  h += tableHeader();
  print(h);
}

CollArgs Harness::layout(const CollGeometry& g, chorusDataType_t type, chorusRedOp_t op,
                         bool inPlace) {
  size_t es = typeSize(type);
  CollArgs a;
  a.count = g.count;
  a.type = type;
  a.op = op;
  a.root = opts_.root;
  a.rank = rank_;
  a.nranks = nranks_;
  a.comm = comm_;
  a.quant = opts_.quant ? &*opts_.quant : nullptr;
  std::byte* r = recv_.get();
  size_t rk = static_cast<size_t>(rank_);
  a.send = inPlace ? r + rk * g.sendInPlaceOffset * es : send_.get();
  a.recv = inPlace ? r + rk * g.recvInPlaceOffset * es : r;
  return a;
}

void Harness::startAndComplete(const CollArgs& a, int times) {
  if (opts_.blocking) {
    for (int i = 0; i < times; ++i) ok(impl_.start(a, nullptr), collName(opts_.coll));
    return;
  }
  // Nonblocking: post every call first, then complete them in order, as nccl-tests enqueues a
  // whole iteration loop on a stream before synchronizing.
  reqs_.clear();
  for (int i = 0; i < times; ++i) ok(impl_.start(a, &reqs_), collName(opts_.coll));
  for (chorusRequest_t& req : reqs_) ok(chorusWait(&req), "chorusWait");
  reqs_.clear();
}

double Harness::timeCalls(const CollArgs& a) {
  ok(chorusBarrier(comm_, nullptr), "chorusBarrier");
  auto t0 = std::chrono::steady_clock::now();
  startAndComplete(a, opts_.iters);
  auto t1 = std::chrono::steady_clock::now();
  double sec = std::chrono::duration<double>(t1 - t0).count() / opts_.iters;
  ok(chorusAllReduce(&sec, &sec, 1, chorusFloat64, chorusSum, comm_, nullptr),
     "chorusAllReduce (time)");
  return sec / nranks_;
}

std::optional<int64_t> Harness::checkedRun(const CollArgs& a, const CollGeometry& g, Op op,
                                           bool inPlace) {
  if (!opts_.check || (inPlace && !collHasInPlace(opts_.coll))) return std::nullopt;
  size_t es = typeSize(a.type);
  // The same counter on every rank, so all ranks derive the same fresh inputs.
  ValueModel model(a.type, op, nranks_, mixSeed(++checkRuns_));
  auto* recv = static_cast<std::byte*>(a.recv);
  // Poison first: in-place inputs live inside the receive buffer and overwrite their part.
  for (size_t i = 0; i < g.recvCount; ++i) writePoison(a.type, recv + i * es);
  if (!impl_.rootInputOnly || rank_ == a.root) {
    auto* send = static_cast<std::byte*>(const_cast<void*>(a.send));
    for (size_t j = 0; j < g.sendCount; ++j) encodeElement(a.type, model.input(rank_, j), send + j * es);
  }
  startAndComplete(a, 1);

  int64_t wrong = 0;
  for (size_t i = 0; i < g.recvCount; ++i) {
    Expect e = impl_.expect(a, i);
    if (e.kind == Expect::Kind::kUnchecked) continue;
    double got = decodeElement(a.type, recv + i * es);
    bool good = e.kind == Expect::Kind::kReduction ? model.reductionMatches(got, e.index)
                                                   : model.copyMatches(got, e.rank, e.index);
    wrong += good ? 0 : 1;
  }
  ok(chorusAllReduce(&wrong, &wrong, 1, chorusInt64, chorusSum, comm_, nullptr),
     "chorusAllReduce (#wrong)");
  return wrong;
}

// Input element j of rank r in a --quant check: standard normal (Box-Muller on two hashed
// uniforms), so every rank computes any rank's element without generating the others.
double gaussianInput(uint64_t seed, int r, size_t j) {
  const uint64_t h1 = mixSeed(seed ^ (static_cast<uint64_t>(r) << 40) ^ (j << 1));
  const uint64_t h2 = mixSeed(h1 ^ 0x5851f42d4c957f2dULL);
  const double u1 = (static_cast<double>(h1 >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
  const double u2 = static_cast<double>(h2 >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// The relative L2 error of one quantized run on Gaussian inputs against the exact result
// (computed in double from every rank's inputs), over all ranks' outputs.
std::optional<double> Harness::quantError(const CollArgs& a, const CollGeometry& g, Op op) {
  if (!opts_.check) return std::nullopt;
  const size_t es = typeSize(a.type);
  const uint64_t seed = mixSeed(++checkRuns_);
  auto* send = static_cast<std::byte*>(const_cast<void*>(a.send));
  for (size_t j = 0; j < g.sendCount; ++j)
    encodeElement(a.type, gaussianInput(seed, rank_, j), send + j * es);
  startAndComplete(a, 1);
  // What the inputs are in the call's type (bfloat16 and half round them).
  auto input = [&](int r, size_t j) {
    alignas(8) std::byte b[8];
    encodeElement(a.type, gaussianInput(seed, r, j), b);
    return decodeElement(a.type, b);
  };
  double sums[2] = {0, 0};  // squared error, squared exact value
  const auto* recv = static_cast<const std::byte*>(a.recv);
  for (size_t i = 0; i < g.recvCount; ++i) {
    const Expect e = impl_.expect(a, i);
    double exact = 0;
    if (e.kind == Expect::Kind::kReduction) {
      for (int r = 0; r < nranks_; ++r) exact += input(r, e.index);
      if (op == Op::kAvg) exact /= nranks_;
    } else if (e.kind == Expect::Kind::kCopy) {
      exact = input(e.rank, e.index);
    } else {
      continue;
    }
    const double d = decodeElement(a.type, recv + i * es) - exact;
    sums[0] += d * d;
    sums[1] += exact * exact;
  }
  ok(chorusAllReduce(sums, sums, 2, chorusFloat64, chorusSum, comm_, nullptr),
     "chorusAllReduce (error)");
  return sums[1] > 0 ? std::sqrt(sums[0] / sums[1]) : 0.0;
}

void Harness::runTable(chorusDataType_t type, Op op) {
  size_t es = typeSize(type);
  chorusRedOp_t redop = chorusSum;
  bool ownOp = op == Op::kPreMulSum;
  if (ownOp) {
    // The scalar is per rank; ValueModel::scalar knows the same values for the expectation.
    ValueModel model(type, op, nranks_, 0);
    alignas(8) std::byte scalar[8] = {};
    encodeElement(type, model.scalar(rank_), scalar);
    ok(chorusRedOpCreatePreMulSum(&redop, scalar, type, chorusScalarHostImmediate, comm_),
       "chorusRedOpCreatePreMulSum");
  } else if (op != Op::kNone) {
    redop = builtinOp(op);
  }

  // Warm-up over the whole range (doubling, as nccl-tests), out of place.
  for (uint64_t bytes : sizeSeries(opts_.minBytes, opts_.maxBytes, 2, 0)) {
    CollGeometry g = collGeometry(opts_.coll, bytes, es, nranks_);
    startAndComplete(layout(g, type, redop, false), opts_.warmupIters);
  }

  int root = collRooted(opts_.coll) ? opts_.root : -1;
  for (uint64_t size : sizeSeries(opts_.minBytes, opts_.maxBytes, opts_.stepFactor, opts_.stepBytes)) {
    CollGeometry g = collGeometry(opts_.coll, size, es, nranks_);
    size_t bytes = g.bytes(es);
    if (opts_.quant && g.count > 0 && g.count < opts_.quant->groupSize) {
      print("# " + std::to_string(bytes) + " B: count " + std::to_string(g.count) +
            " is below the group size, skipped\n");
      continue;
    }
    std::string row = rowPreamble(bytes, g.count, typeName(type), opName(op), root);
    for (bool inPlace : {false, true}) {
      CollArgs a = layout(g, type, redop, inPlace);
      // Timed runs start from zeros: a valid value in every type, so no NaN or denormal left
      // by a previous check skews the arithmetic.
      std::memset(send_.get(), 0, g.sendCount * es);
      std::memset(recv_.get(), 0, std::max(g.sendCount, g.recvCount) * es);
      // One-way time for pingpong (a call is a round trip), per message for stream, the call's
      // time otherwise.
      double sec = timeCalls(a) / legsPerCall(opts_.coll);
      Bandwidth bw = bandwidth(opts_.coll, bytes, sec, nranks_);
      std::optional<int64_t> wrong;
      std::optional<double> error;
      if (opts_.quant) {
        error = quantError(a, g, op);
        row += rowHalfQuant(sec * 1e6, bw.algBw, bw.busBw, error);
      } else {
        wrong = checkedRun(a, g, op, inPlace);
        row += rowHalf(sec * 1e6, bw.algBw, bw.busBw, wrong);
      }
      records_.push_back({collName(opts_.coll), nranks_, bytes, g.count, typeName(type), opName(op),
                          root, inPlace, sec * 1e6, bw.algBw, bw.busBw, wrong, error});
    }
    print(row + "\n");
  }
  if (ownOp) ok(chorusRedOpDestroy(redop, comm_), "chorusRedOpDestroy");
}

int Harness::run() {
  chorusResult_t r = chorusCommInitFromEnv(&comm_);
  if (r != chorusSuccess) {
    std::fprintf(stderr, "chorus-perf: chorusCommInitFromEnv failed: %s: %s\n",
                 chorusGetErrorString(r), chorusGetLastError(nullptr));
    return EXIT_FAILURE;
  }
  ok(chorusCommUserRank(comm_, &rank_), "chorusCommUserRank");
  ok(chorusCommCount(comm_, &nranks_), "chorusCommCount");
  // Every rank sees the same flags and job size, so every rank stops at the same check.
  if (std::string why = rankCountError(opts_.coll, nranks_); !why.empty()) return refuse(why);
  if (collRooted(opts_.coll) && (opts_.root < 0 || opts_.root >= nranks_)) {
    return refuse("root " + std::to_string(opts_.root) + " is not a rank of this job (0.." +
                  std::to_string(nranks_ - 1) + ")");
  }

  printHeader();
  // Every layout fits in maxBytes: the size column is the largest buffer of a rank.
  send_ = allocate(opts_.maxBytes, opts_.registered);
  recv_ = allocate(opts_.maxBytes, opts_.registered);
  if (opts_.registered) {
    for (std::byte* b : {send_.get(), recv_.get()}) {
      void* handle = nullptr;
      ok(chorusCommRegister(comm_, b, opts_.maxBytes == 0 ? 1 : opts_.maxBytes, &handle),
         "chorusCommRegister");
      registrations_.push_back(handle);
    }
  }

  std::vector<Op> ops = collReduces(opts_.coll) ? opts_.ops : std::vector<Op>{Op::kNone};
  for (chorusDataType_t type : opts_.types) {
    for (Op op : ops) runTable(type, op);
  }

  int failed = 0;
  double busSum = 0;
  for (const Record& rec : records_) {
    failed += rec.wrong && *rec.wrong != 0 ? 1 : 0;
    failed += rec.relError && !std::isfinite(*rec.relError) ? 1 : 0;
    busSum += rec.busBw;
  }
  double avgBusBw = records_.empty() ? 0 : busSum / static_cast<double>(records_.size());
  print(footer(failed, avgBusBw));
  print("# Collective test concluded: " + std::string(collName(opts_.coll)) + "\n");

  int status = failed != 0 ? EXIT_FAILURE : EXIT_SUCCESS;
  if (rank_ == 0) {
    RunInfo info{collName(opts_.coll), nranks_,     opts_.minBytes, opts_.maxBytes,
                 opts_.stepFactor,     opts_.stepBytes, opts_.warmupIters, opts_.iters,
                 opts_.check,          opts_.blocking, versionText(CHORUS_VERSION_CODE)};
    if (!opts_.csvPath.empty()) {
      std::string err = writeCsv(opts_.csvPath, records_);
      if (!err.empty()) {
        std::fprintf(stderr, "chorus-perf: %s\n", err.c_str());
        status = EXIT_FAILURE;
      }
    }
    if (!opts_.jsonPath.empty()) {
      std::string err = writeJson(opts_.jsonPath, info, records_, failed, avgBusBw);
      if (!err.empty()) {
        std::fprintf(stderr, "chorus-perf: %s\n", err.c_str());
        status = EXIT_FAILURE;
      }
    }
  }
  // Every rank returns the same status, and a launcher tears the job down as soon as one rank
  // exits non-zero: wait until rank 0 has printed and written everything before anyone exits.
  ok(chorusBarrier(comm_, nullptr), "chorusBarrier (end)");
  for (void* handle : registrations_)
    ok(chorusCommDeregister(comm_, handle), "chorusCommDeregister");
  registrations_.clear();
  ok(chorusCommDestroy(comm_), "chorusCommDestroy");
  comm_ = nullptr;
  return status;
}

}  // namespace

const CollImpl& collImpl(Coll c) {
  switch (c) {
    case Coll::kAllReduce: return kAllReduceImpl;
    case Coll::kAllGather: return kAllGatherImpl;
    case Coll::kReduceScatter: return kReduceScatterImpl;
    case Coll::kBroadcast: return kBroadcastImpl;
    case Coll::kReduce: return kReduceImpl;
    case Coll::kAllToAll: return kAllToAllImpl;
    case Coll::kSendRecv: return kSendRecvImpl;
    case Coll::kPingPong: return kPingPongImpl;
    case Coll::kStream: return kStreamImpl;
  }
  std::abort();
}

int runBenchmark(const PerfOptions& opts) {
  Harness h(opts);
  return h.run();
}

}  // namespace chorus::perf
