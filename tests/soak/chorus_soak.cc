// chorus-soak: a randomized, long-running check of every collective through the public API.
//
//   chorus-run -n 4 chorus-soak [--seconds S] [--ops N] [--seed X] [--max-bytes B]
//                               [--sample-seconds T] [--split-every K] [--rss-slack-mib M]
//
// Every rank joins with chorusCommInitFromEnv (chorus-run, mpirun, srun or torchrun-style
// variables) and draws the same sequence of batches from one seed (rank 0's, broadcast first):
// each batch is one to four operations of a random kind (all-reduce, broadcast, reduce,
// all-gather, reduce-scatter, all-to-all, all-to-allv, gather, scatter, barrier, a
// send/receive shift), type (all twelve), operator (sum, prod, max, min, avg, premulsum with a
// scalar made for the call and destroyed after it), root, size (0 to --max-bytes on the largest
// buffer of a rank, most of them small) and in place or not, issued blocking, nonblocking
// (waited in a random order, or polled with chorusTest) or inside a group. Inputs are small
// integers (tests/multiproc/values.h) whose reductions are exact in every type, so each result
// element is compared for equality with a reference computed here; outputs are poisoned first.
// Every --split-every operations the ranks also split the communicator in two, all-reduce on the
// halves and destroy them.
//
// Warm-up: first every kind once at --max-bytes (whatever the library sizes by the
// largest call it has seen reaches its largest; not counted in --seconds), then the first
// quarter of the run (the plan
// cache fills towards its bound). After every batch the ranks agree whether to stop (rank 0
// decides: --seconds or --ops reached; a --seconds run goes on until it has six samples after
// warm-up, however slow the machine); every --sample-seconds (0.5) they take a sample: the
// largest resident set
// (after malloc_trim, so freed heap does not count; private and shared apart), open descriptors
// and threads of any rank, which rank 0 prints. The samples after warm-up must be flat: their
// later half may not hold more descriptors or threads than their earlier half, and its median
// resident private memory (the heap: where a leak shows; the transports' shared segments are
// sized by their configuration and are reported, not judged) may exceed the earlier half's by
// at most --rss-slack-mib (default 8); the plan cache is held to 16 plans (CHORUS_PLAN_CACHE,
// unless set) so that it is full by then. Ends with "PASS ..." and exit 0,
// or "FAIL rank r: ..." and exit 1 (the failing rank aborts the communicator, so its peers fail
// at once instead of waiting). --trace prints every batch before it runs; a failure names the
// operation and the seed, and --seed replays the run. --inject-leak and --inject-fd-leak leak on
// purpose, so a test can show that the usage check fails when it should.
#include <chorus/chorus.h>
#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/multiproc/values.h"

namespace chorus::test {
namespace {

// Under AddressSanitizer a freed block waits in the quarantine (256 MiB by default) before it is
// reused, so the resident set grows until the quarantine is full whatever the library does: the
// private memory is reported but not judged there (descriptors and threads still are).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kJudgeMemory = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kJudgeMemory = false;
#else
constexpr bool kJudgeMemory = true;
#endif
#else
constexpr bool kJudgeMemory = true;
#endif

// Samples after warm-up the usage check compares (two halves of at least three).
constexpr size_t kMinSamples = 6;

constexpr int kUsage = 2;
constexpr uint8_t kPoison = 0xA5;
constexpr uint64_t kPeriod = 1021;

// ---- options -------------------------------------------------------------------------------

struct Options {
  double seconds = 30;
  uint64_t ops = 0;            // 0: no limit but the time
  uint64_t seed = 0;           // 0: from the clock (rank 0's is used)
  uint64_t maxBytes = 16u << 20;
  double sampleSeconds = 0.5;
  uint64_t splitEvery = 2000;  // 0: never
  uint64_t rssSlackMiB = 8;
  bool trace = false;          // print every batch before it runs (stderr)
  uint64_t injectLeak = 0;     // self-test: bytes leaked per operation
  bool injectFdLeak = false;   // self-test: a descriptor leaked per sample
};

const char* kUsageText =
    "usage: chorus-soak [--seconds S] [--ops N] [--seed X] [--max-bytes B] [--sample-seconds T]\n"
    "                   [--split-every K] [--rss-slack-mib M] [--trace]\n"
    "       self-test of the usage check: [--inject-leak BYTES_PER_OP] [--inject-fd-leak]\n";

bool parseOptions(int argc, char** argv, Options* o, std::string* err) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--trace" || a == "--inject-fd-leak") {
      (a == "--trace" ? o->trace : o->injectFdLeak) = true;
      continue;
    }
    if (a == "-h" || a == "--help") {
      *err = "";
      return false;
    }
    if (i + 1 >= argc) {
      *err = "option " + a + " needs a value";
      return false;
    }
    const std::string v = argv[++i];
    char* end = nullptr;
    errno = 0;
    const double d = std::strtod(v.c_str(), &end);
    if (end == v.c_str() || *end != '\0' || errno != 0 || d < 0) {
      *err = "option " + a + ": '" + v + "' is not a non-negative number";
      return false;
    }
    // Integers exactly (a 64-bit seed does not fit a double's mantissa).
    const uint64_t u = v.find_first_not_of("0123456789") == std::string::npos
                           ? std::strtoull(v.c_str(), nullptr, 10)
                           : static_cast<uint64_t>(d);
    if (a == "--seconds") o->seconds = d;
    else if (a == "--ops") o->ops = u;
    else if (a == "--seed") o->seed = u;
    else if (a == "--max-bytes") o->maxBytes = u;
    else if (a == "--sample-seconds") o->sampleSeconds = d;
    else if (a == "--split-every") o->splitEvery = u;
    else if (a == "--rss-slack-mib") o->rssSlackMiB = u;
    else if (a == "--inject-leak") o->injectLeak = u;
    else {
      *err = "unknown option " + a;
      return false;
    }
  }
  if (o->seconds == 0 && o->ops == 0) {
    *err = "--seconds 0 needs --ops (the run would never end)";
    return false;
  }
  return true;
}

// ---- the process's resources ------------------------------------------------------------------

struct Usage {
  uint64_t rssBytes = 0, fds = 0, threads = 0;
  uint64_t anonBytes = 0;   // resident private memory: the heap, where a leak shows
  uint64_t shmemBytes = 0;  // resident shared memory: the transports' segments, bounded by them
};

Usage measureUsage() {
  malloc_trim(0);
  Usage u;
  {
    std::ifstream statm("/proc/self/statm");
    uint64_t size = 0, resident = 0;
    statm >> size >> resident;
    u.rssBytes = resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  }
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') ++u.fds;
    }
    closedir(d);
    --u.fds;  // the directory's own descriptor
  }
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Threads:", 0) == 0) u.threads = std::strtoull(line.c_str() + 8, nullptr, 10);
    if (line.rfind("RssAnon:", 0) == 0) u.anonBytes = std::strtoull(line.c_str() + 8, nullptr, 10) << 10;
    if (line.rfind("RssShmem:", 0) == 0) u.shmemBytes = std::strtoull(line.c_str() + 9, nullptr, 10) << 10;
  }
  return u;
}

// ---- operations ------------------------------------------------------------------------------

enum class Kind { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll,
                  kAllToAllv, kGather, kScatter, kBarrier, kSendRecv, kCount };
const char* kindName(Kind k) {
  static const char* n[] = {"allreduce", "broadcast", "reduce", "allgather", "reducescatter",
                            "alltoall", "alltoallv", "gather", "scatter", "barrier", "sendrecv"};
  return n[static_cast<int>(k)];
}
bool reducing(Kind k) {
  return k == Kind::kAllReduce || k == Kind::kReduce || k == Kind::kReduceScatter;
}
bool rootedKind(Kind k) {
  return k == Kind::kBroadcast || k == Kind::kReduce || k == Kind::kGather || k == Kind::kScatter;
}
bool inPlaceKind(Kind k) {
  return k == Kind::kAllReduce || k == Kind::kBroadcast || k == Kind::kReduce ||
         k == Kind::kAllGather || k == Kind::kReduceScatter || k == Kind::kAllToAll;
}
// How many count-sized blocks the largest buffer of a rank holds.
uint64_t blocksOf(Kind k, int n) {
  switch (k) {
    case Kind::kAllGather: case Kind::kReduceScatter: case Kind::kAllToAll: case Kind::kGather:
    case Kind::kScatter: case Kind::kAllToAllv:
      return static_cast<uint64_t>(n);
    default:
      return 1;
  }
}

const chorusDataType_t kTypes[] = {chorusInt8,    chorusUint8,   chorusInt32,     chorusUint32,
                                   chorusInt64,   chorusUint64,  chorusFloat16,   chorusBfloat16,
                                   chorusFloat32, chorusFloat64, chorusFloat8e4m3, chorusFloat8e5m2};
constexpr int kPreMulSum = -1;  // Op::op for a premulsum (the handle is made per call)

enum class Mode { kBlocking, kNonblockingWait, kNonblockingTest, kGrouped };
const char* modeName(Mode m) {
  static const char* n[] = {"blocking", "nonblocking (wait)", "nonblocking (test)", "grouped"};
  return n[static_cast<int>(m)];
}

struct Op {
  uint64_t index = 0;  // in the whole run
  Kind kind = Kind::kAllReduce;
  chorusDataType_t type = chorusFloat32;
  int op = chorusSum;   // chorusSum..chorusAvg, or kPreMulSum
  double scalar = 1;    // premulsum
  uint64_t count = 0;
  bool inPlace = false;
  int root = 0;
  int shift = 1;        // sendrecv: to rank + shift, from rank - shift
  uint32_t seed = 0;

  // Per rank, filled by prepare().
  chorusRedOp_t redop = chorusSum;
  bool madeOp = false;
  std::vector<uint8_t> in, out;
  std::vector<size_t> sc, sd, rc, rd;  // all-to-allv
  chorusRequest_t req[2] = {nullptr, nullptr};
  std::vector<double> inputs, reduced;  // one period: every rank's inputs, the reduction

  std::string describe() const {
    std::string s = "op " + std::to_string(index) + " " + kindName(kind) + "(" +
                    typeName(type) + ", count " + std::to_string(count);
    if (reducing(kind)) {
      static const char* ops[] = {"sum", "prod", "max", "min", "avg"};
      s += std::string(", ") + (op == kPreMulSum ? "premulsum x" + std::to_string(int(scalar))
                                                  : std::string(ops[op]));
    }
    if (rootedKind(kind)) s += ", root " + std::to_string(root);
    if (kind == Kind::kSendRecv) s += ", shift " + std::to_string(shift);
    if (inPlace) s += ", in place";
    return s + ", seed " + std::to_string(seed) + ")";
  }
};

// Draws the next operation from the shared generator: the same on every rank.
// forceKind/forceBytes (warm-up): that kind with its largest buffer at forceBytes.
Op drawOp(std::mt19937_64& rng, uint64_t index, int n, const Options& o, int forceKind = -1,
          uint64_t forceBytes = 0) {
  auto below = [&](uint64_t m) { return m == 0 ? 0 : rng() % m; };
  Op p;
  p.index = index;
  for (;;) {
    p.kind = static_cast<Kind>(below(static_cast<uint64_t>(Kind::kCount)));
    if (forceKind >= 0) p.kind = static_cast<Kind>(forceKind);
    if (!(p.kind == Kind::kSendRecv && n == 1)) break;
  }
  p.type = kTypes[below(std::size(kTypes))];
  p.seed = static_cast<uint32_t>(rng());
  if (reducing(p.kind)) {
    const int pick = static_cast<int>(below(6));
    p.op = pick == 5 ? kPreMulSum : pick;
    if (p.op == kPreMulSum) {
      // Exact in every type: a sign flip (8-bit floats hold few integers), else 2 (unsigned) or
      // -2 (signed).
      const bool fp8 = p.type == chorusFloat8e4m3 || p.type == chorusFloat8e5m2;
      p.scalar = fp8 ? -1 : isUnsigned(p.type) ? 2 : -2;
    }
  }
  p.root = static_cast<int>(below(static_cast<uint64_t>(n)));
  p.shift = n > 1 ? 1 + static_cast<int>(below(static_cast<uint64_t>(n - 1))) : 0;
  p.inPlace = inPlaceKind(p.kind) && below(2) == 1;
  // Bytes of the largest buffer: 5% empty, most up to 4 KiB, a quarter up to 1 MiB, a tenth up
  // to the maximum (log-uniform within each band).
  const uint64_t band = below(100);
  double bytes = 0;
  auto logUniform = [&](double lo, double hi) {
    if (hi <= lo) return lo;
    std::uniform_real_distribution<double> u(std::log(lo), std::log(hi));
    return std::exp(u(rng));
  };
  const double maxB = static_cast<double>(std::max<uint64_t>(o.maxBytes, 1));
  if (band < 5) bytes = 0;
  else if (band < 65) bytes = logUniform(1, std::min(4096.0, maxB));
  else if (band < 90) bytes = logUniform(std::min(4096.0, maxB), std::min(1048576.0, maxB));
  else bytes = logUniform(std::min(1048576.0, maxB), maxB);
  if (forceKind >= 0) {
    bytes = static_cast<double>(forceBytes);
    p.type = chorusFloat64;  // the fewest elements for the bytes: the quickest check
  }
  const uint64_t denom = blocksOf(p.kind, n) * typeSize(p.type);
  p.count = p.kind == Kind::kBarrier ? 0 : static_cast<uint64_t>(bytes) / denom;
  return p;
}

// All-to-allv: uneven per-pair counts, some zero.
uint64_t vcount(const Op& p, int from, int to) {
  if (p.count == 0) return 0;
  const uint64_t h = (static_cast<uint64_t>(from) * 31 + static_cast<uint64_t>(to) * 17 + p.seed) % 7;
  return h == 3 ? 0 : (p.count * (h + 1)) / 4;
}

class Rank {
 public:
  Rank(chorusComm_t comm, int rank, int n, bool trace)
      : comm_(comm), rank_(rank), n_(n), trace_(trace) {}

  // Input element j of rank r, and the reduction of element j: tables of one period made by
  // tables() (the inputs repeat every kPeriod elements, so a 16 MiB case costs its fill and its
  // comparison, not a reference reduction per element; kPeriod is prime, so no power-of-two
  // offset error, the kind chunking and slicing would make, lands on the same values).
  double x(const Op& p, int r, uint64_t j) const {
    return p.inputs[static_cast<size_t>(r) * kPeriod + j % kPeriod];
  }
  double reduced(const Op& p, uint64_t j) const { return p.reduced[j % kPeriod]; }
  void tables(Op& p) const {
    const int valueOp = p.op == kPreMulSum ? chorusSum : p.op;
    p.inputs.resize(static_cast<size_t>(n_) * kPeriod);
    for (int r = 0; r < n_; ++r)
      for (uint64_t k = 0; k < kPeriod; ++k)
        p.inputs[static_cast<size_t>(r) * kPeriod + k] = inputValue(p.type, valueOp, r, k, p.seed);
    p.reduced.resize(kPeriod);
    for (uint64_t k = 0; k < kPeriod; ++k) {
      double acc = 0;
      if (p.op == kPreMulSum) {
        for (int r = 0; r < n_; ++r) acc += p.scalar * x(p, r, k);
      } else {
        acc = x(p, 0, k);
        for (int r = 1; r < n_; ++r) acc = combine(p.op, acc, x(p, r, k));
        acc = finish(p.type, p.op, acc, n_);
      }
      p.reduced[k] = acc;
    }
  }
  void fill(const Op& p, std::vector<uint8_t>& b, uint64_t first, uint64_t cnt, int r,
            uint64_t j0) const {
    for (uint64_t i = 0; i < cnt; ++i) store(p.type, b.data(), first + i, x(p, r, j0 + i));
  }

  // Buffers, poison and inputs; the premulsum handle.
  std::string prepare(Op& p) {
    const size_t es = typeSize(p.type);
    const uint64_t N = static_cast<uint64_t>(n_), c = p.count;
    p.in.clear();
    p.out.clear();
    tables(p);
    if (p.op == kPreMulSum) {
      uint64_t scalar = 0;
      store(p.type, &scalar, 0, p.scalar);
      if (chorusRedOpCreatePreMulSum(&p.redop, &scalar, p.type, chorusScalarHostImmediate,
                                     comm_) != chorusSuccess)
        return "chorusRedOpCreatePreMulSum: " + std::string(chorusGetLastError(comm_));
      p.madeOp = true;
    } else {
      p.redop = static_cast<chorusRedOp_t>(p.op);
    }
    switch (p.kind) {
      case Kind::kAllReduce:
      case Kind::kBroadcast:
        // Poisoned output; this rank's input in it (in place) or beside it — for a broadcast
        // only on the root.
        p.out.assign(c * es, kPoison);
        if (p.kind == Kind::kAllReduce || rank_ == p.root) {
          std::vector<uint8_t>& input = p.inPlace ? p.out : p.in;
          input.resize(c * es);
          fill(p, input, 0, c, rank_, 0);
        }
        break;
      case Kind::kReduce:
        p.in.resize(c * es);
        fill(p, p.in, 0, c, rank_, 0);
        if (p.inPlace) p.out = p.in;
        else p.out.assign(c * es, kPoison);
        break;
      case Kind::kAllGather:
        p.out.assign(N * c * es, kPoison);
        if (p.inPlace) {
          fill(p, p.out, static_cast<uint64_t>(rank_) * c, c, rank_, 0);
        } else {
          p.in.resize(c * es);
          fill(p, p.in, 0, c, rank_, 0);
        }
        break;
      case Kind::kReduceScatter:
        p.in.resize(N * c * es);
        fill(p, p.in, 0, N * c, rank_, 0);
        if (!p.inPlace) p.out.assign(c * es, kPoison);
        break;
      case Kind::kAllToAll:
        p.in.resize(N * c * es);
        fill(p, p.in, 0, N * c, rank_, 0);
        if (p.inPlace) p.out = p.in;
        else p.out.assign(N * c * es, kPoison);
        break;
      case Kind::kAllToAllv: {
        p.sc.assign(N, 0), p.sd.assign(N, 0), p.rc.assign(N, 0), p.rd.assign(N, 0);
        uint64_t sTotal = 0, rTotal = 0;
        for (int q = 0; q < n_; ++q) {
          p.sc[q] = vcount(p, rank_, q);
          p.sd[q] = sTotal + 1;  // gaps between blocks catch writes past a block
          sTotal += p.sc[q] + 1;
          p.rc[q] = vcount(p, q, rank_);
          p.rd[q] = rTotal + 2;
          rTotal += p.rc[q] + 2;
        }
        p.in.assign(sTotal * es, 0);
        for (int q = 0; q < n_; ++q)
          fill(p, p.in, p.sd[q], p.sc[q], rank_, static_cast<uint64_t>(q) << 32);
        p.out.assign(rTotal * es, kPoison);
        break;
      }
      case Kind::kGather:
        p.in.resize(c * es);
        fill(p, p.in, 0, c, rank_, 0);
        if (rank_ == p.root) p.out.assign(N * c * es, kPoison);
        break;
      case Kind::kScatter:
        if (rank_ == p.root) {
          p.in.resize(N * c * es);
          fill(p, p.in, 0, N * c, rank_, 0);
        }
        p.out.assign(c * es, kPoison);
        break;
      case Kind::kBarrier:
        break;
      case Kind::kSendRecv:
        p.in.resize(c * es);
        fill(p, p.in, 0, c, rank_, 0);
        p.out.assign(c * es, kPoison);
        break;
      case Kind::kCount:
        break;
    }
    return "";
  }

  // Issues the operation: blocking (req == false) or nonblocking into p.req.
  chorusResult_t issue(Op& p, bool nonblocking) {
    const size_t es = typeSize(p.type);
    const uint64_t c = p.count;
    uint8_t* out = p.out.data();
    const uint8_t* in = p.in.data();
    chorusRequest_t* r = nonblocking ? &p.req[0] : nullptr;
#define SOAK_CALL(name, ...) \
  (nonblocking ? chorusI##name(__VA_ARGS__, r) : chorus##name(__VA_ARGS__))
    switch (p.kind) {
      case Kind::kAllReduce:
        return SOAK_CALL(AllReduce, p.inPlace ? out : in, out, c, p.type, p.redop, comm_, nullptr);
      case Kind::kBroadcast: {
        const void* src = p.inPlace ? out : (rank_ == p.root ? in : nullptr);
        return SOAK_CALL(Broadcast, src, out, c, p.type, p.root, comm_, nullptr);
      }
      case Kind::kReduce:
        if (p.inPlace)
          return SOAK_CALL(Reduce, out, out, c, p.type, p.redop, p.root, comm_, nullptr);
        return SOAK_CALL(Reduce, in, rank_ == p.root ? out : nullptr, c, p.type, p.redop, p.root,
                         comm_, nullptr);
      case Kind::kAllGather:
        return SOAK_CALL(AllGather,
                         p.inPlace ? out + static_cast<uint64_t>(rank_) * c * es : in, out, c,
                         p.type, comm_, nullptr);
      case Kind::kReduceScatter:
        if (p.inPlace)
          return SOAK_CALL(ReduceScatter, p.in.data(),
                           p.in.data() + static_cast<uint64_t>(rank_) * c * es, c, p.type,
                           p.redop, comm_, nullptr);
        return SOAK_CALL(ReduceScatter, in, out, c, p.type, p.redop, comm_, nullptr);
      case Kind::kAllToAll:
        return SOAK_CALL(AllToAll, p.inPlace ? out : in, out, c, p.type, comm_, nullptr);
      case Kind::kAllToAllv:
        return SOAK_CALL(AllToAllv, in, p.sc.data(), p.sd.data(), out, p.rc.data(), p.rd.data(),
                         p.type, comm_, nullptr);
      case Kind::kGather:
        return SOAK_CALL(Gather, in, rank_ == p.root ? out : nullptr, c, p.type, p.root, comm_,
                         nullptr);
      case Kind::kScatter:
        return SOAK_CALL(Scatter, rank_ == p.root ? in : nullptr, out, c, p.type, p.root, comm_,
                         nullptr);
      case Kind::kBarrier:
        return nonblocking ? chorusIBarrier(comm_, nullptr, r) : chorusBarrier(comm_, nullptr);
      case Kind::kSendRecv: {
        const int to = (rank_ + p.shift) % n_, from = (rank_ - p.shift + n_) % n_;
        if (nonblocking) {
          // Operations on a communicator run in the order they were started (as on an NCCL
          // stream), so a shift of large messages posted send-first everywhere would wait for
          // ever. The shift's cycles are the residues modulo g = gcd(n, shift); the smallest
          // rank of each receives first and the others send first, which always completes.
          const bool recvFirst = rank_ < std::gcd(n_, p.shift);
          auto post = [&](bool send, chorusRequest_t* q) {
            return send ? chorusISend(in, c, p.type, to, comm_, nullptr, q)
                        : chorusIRecv(out, c, p.type, from, comm_, nullptr, q);
          };
          chorusResult_t res = post(!recvFirst, &p.req[0]);
          if (res != chorusSuccess) return res;
          return post(recvFirst, &p.req[1]);
        }
        // A blocking shift needs both halves posted together: a group of its own (nested
        // inside the batch's group in grouped mode).
        chorusResult_t res = chorusGroupStart();
        if (res != chorusSuccess) return res;
        chorusResult_t s = chorusSend(in, c, p.type, to, comm_, nullptr);
        chorusResult_t q = chorusRecv(out, c, p.type, from, comm_, nullptr);
        chorusResult_t e = chorusGroupEnd();
        return s != chorusSuccess ? s : q != chorusSuccess ? q : e;
      }
      case Kind::kCount:
        break;
    }
#undef SOAK_CALL
    return chorusInternalError;
  }

  std::string checkRange(const Op& p, const char* what, const std::vector<uint8_t>& buf,
                         uint64_t first, uint64_t cnt,
                         const std::function<double(uint64_t)>& want) const {
    const int cmpOp = p.op == kPreMulSum ? chorusSum : p.op;
    for (uint64_t i = 0; i < cnt; ++i) {
      const double got = load(p.type, buf.data(), first + i), w = want(i);
      if (!matches(p.type, cmpOp, got, w))
        return p.describe() + ": " + what + " element " + std::to_string(first + i) + " is " +
               std::to_string(got) + ", expected " + std::to_string(roundTo(p.type, w));
    }
    return "";
  }

  // Compares the completed operation with the reference; "" when right.
  std::string check(const Op& p) const {
    const uint64_t N = static_cast<uint64_t>(n_), c = p.count;
    auto red = [&](uint64_t j) { return reduced(p, j); };
    std::string err;
    switch (p.kind) {
      case Kind::kAllReduce:
        return checkRange(p, "output", p.out, 0, c, red);
      case Kind::kBroadcast:
        return checkRange(p, "output", p.out, 0, c, [&](uint64_t j) { return x(p, p.root, j); });
      case Kind::kReduce:
        if (rank_ != p.root) return "";
        return checkRange(p, "root output", p.out, 0, c, red);
      case Kind::kAllGather:
        for (int r = 0; r < n_ && err.empty(); ++r)
          err = checkRange(p, "output", p.out, static_cast<uint64_t>(r) * c, c,
                           [&](uint64_t j) { return x(p, r, j); });
        return err;
      case Kind::kReduceScatter: {
        const uint64_t off = static_cast<uint64_t>(rank_) * c;
        auto want = [&](uint64_t j) { return reduced(p, off + j); };
        return p.inPlace ? checkRange(p, "in-place output", p.in, off, c, want)
                         : checkRange(p, "output", p.out, 0, c, want);
      }
      case Kind::kAllToAll:
        for (int s = 0; s < n_ && err.empty(); ++s)
          err = checkRange(p, "output", p.out, static_cast<uint64_t>(s) * c, c, [&](uint64_t j) {
            return x(p, s, static_cast<uint64_t>(rank_) * c + j);
          });
        return err;
      case Kind::kAllToAllv: {
        const size_t es = typeSize(p.type);
        for (int q = 0; q < n_ && err.empty(); ++q) {
          err = checkRange(p, "output", p.out, p.rd[q], p.rc[q], [&](uint64_t j) {
            return x(p, q, (static_cast<uint64_t>(rank_) << 32) + j);
          });
          if (err.empty() && p.out[(p.rd[q] - 1) * es] != kPoison)
            err = p.describe() + ": a write landed in the gap before the block from rank " +
                  std::to_string(q);
        }
        return err;
      }
      case Kind::kGather:
        for (int r = 0; r < n_ && rank_ == p.root && err.empty(); ++r)
          err = checkRange(p, "root output", p.out, static_cast<uint64_t>(r) * c, c,
                           [&](uint64_t j) { return x(p, r, j); });
        return err;
      case Kind::kScatter:
        return checkRange(p, "output", p.out, 0, c, [&](uint64_t j) {
          return x(p, p.root, static_cast<uint64_t>(rank_) * c + j);
        });
      case Kind::kSendRecv: {
        const int from = (rank_ - p.shift + n_) % n_;
        return checkRange(p, "received", p.out, 0, c, [&](uint64_t j) { return x(p, from, j); });
      }
      case Kind::kBarrier:
      case Kind::kCount:
        return "";
    }
    (void)N;
    return "";
  }

  std::string release(Op& p) {
    if (!p.madeOp) return "";
    p.madeOp = false;
    if (chorusRedOpDestroy(p.redop, comm_) != chorusSuccess)
      return p.describe() + ": chorusRedOpDestroy: " + chorusGetLastError(comm_);
    return "";
  }

  // One batch in one mode; "" when every result was right.
  std::string runBatch(std::vector<Op>& batch, Mode mode, std::mt19937_64& rng) {
    if (trace_) {
      std::string line = "rank " + std::to_string(rank_) + " " + modeName(mode) + ":";
      for (const Op& p : batch) line += " " + p.describe();
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    for (Op& p : batch) {
      std::string e = prepare(p);
      if (!e.empty()) return p.describe() + ": " + e;
    }
    auto failed = [&](const Op& p, chorusResult_t r, const char* how) {
      return p.describe() + " (" + how + ") returned " + chorusGetErrorString(r) + ": " +
             chorusGetLastError(comm_);
    };
    switch (mode) {
      case Mode::kBlocking:
        for (Op& p : batch) {
          const chorusResult_t r = issue(p, false);
          if (r != chorusSuccess) return failed(p, r, modeName(mode));
        }
        break;
      case Mode::kGrouped: {
        if (chorusGroupStart() != chorusSuccess) return "chorusGroupStart failed";
        chorusResult_t first = chorusSuccess;
        const Op* firstOp = nullptr;
        for (Op& p : batch) {
          const chorusResult_t r = issue(p, false);
          if (r != chorusSuccess && first == chorusSuccess) first = r, firstOp = &p;
        }
        const chorusResult_t end = chorusGroupEnd();
        if (first != chorusSuccess) return failed(*firstOp, first, modeName(mode));
        if (end != chorusSuccess)
          return std::string("chorusGroupEnd of a batch starting with ") +
                 batch.front().describe() + " returned " + chorusGetErrorString(end) + ": " +
                 chorusGetLastError(comm_);
        break;
      }
      case Mode::kNonblockingWait:
      case Mode::kNonblockingTest: {
        for (Op& p : batch) {
          const chorusResult_t r = issue(p, true);
          if (r != chorusSuccess) return failed(p, r, "posting");
        }
        // Every request, waited in an order drawn from the shared generator (the same on every
        // rank is not needed, but it makes a failure replayable), or polled round-robin.
        std::vector<chorusRequest_t*> reqs;
        std::vector<const Op*> owners;
        for (Op& p : batch)
          for (chorusRequest_t& q : p.req)
            if (q != nullptr) reqs.push_back(&q), owners.push_back(&p);
        if (mode == Mode::kNonblockingWait) {
          std::vector<size_t> order(reqs.size());
          for (size_t i = 0; i < order.size(); ++i) order[i] = i;
          std::shuffle(order.begin(), order.end(), rng);
          for (size_t i : order) {
            const chorusResult_t r = chorusWait(reqs[i]);
            if (r != chorusSuccess) return failed(*owners[i], r, "chorusWait");
          }
        } else {
          size_t left = reqs.size();
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(600);
          while (left > 0) {
            for (size_t i = 0; i < reqs.size(); ++i) {
              if (*reqs[i] == nullptr) continue;
              int done = 0;
              const chorusResult_t r = chorusTest(reqs[i], &done);
              if (r != chorusSuccess) return failed(*owners[i], r, "chorusTest");
              if (done) --left;
            }
            if (std::chrono::steady_clock::now() > deadline)
              return "chorusTest never reported " + std::to_string(left) +
                     " requests of a batch starting with " + batch.front().describe() +
                     " complete (600 s)";
          }
        }
        break;
      }
    }
    for (Op& p : batch) {
      std::string e = check(p);
      if (e.empty()) e = release(p);
      if (!e.empty()) return e + " [" + modeName(mode) + "]";
    }
    return "";
  }

  // Splits the communicator in two halves (by parity), all-reduces on the half, destroys it.
  std::string splitRound(uint64_t index) {
    chorusComm_t half = nullptr;
    chorusResult_t r = chorusCommSplit(comm_, rank_ % 2, rank_, &half);
    if (r != chorusSuccess)
      return "split at op " + std::to_string(index) + ": " + chorusGetErrorString(r) + ": " +
             chorusGetLastError(comm_);
    int hn = 0, hr = 0;
    chorusCommCount(half, &hn);
    chorusCommUserRank(half, &hr);
    int64_t v = rank_, sum = -1;
    r = chorusAllReduce(&v, &sum, 1, chorusInt64, chorusSum, half, nullptr);
    std::string err;
    int64_t want = 0;
    for (int q = rank_ % 2; q < n_; q += 2) want += q;
    if (r != chorusSuccess)
      err = "all-reduce on the split half at op " + std::to_string(index) + ": " +
            chorusGetErrorString(r) + ": " + chorusGetLastError(half);
    else if (sum != want)
      err = "all-reduce on the split half at op " + std::to_string(index) + " gave " +
            std::to_string(sum) + ", expected " + std::to_string(want);
    if (chorusCommDestroy(half) != chorusSuccess && err.empty())
      err = "destroying the split half at op " + std::to_string(index) + " failed";
    return err;
  }

 private:
  chorusComm_t comm_;
  int rank_, n_;
  bool trace_;
};

int fail(chorusComm_t comm, int rank, const std::string& what) {
  std::fprintf(stderr, "FAIL rank %d: %s\n", rank, what.c_str());
  std::fflush(stderr);
  if (comm != nullptr) chorusCommAbort(comm);
  return 1;
}

// Largest value of each field over the ranks.
bool maxOverRanks(chorusComm_t comm, Usage* u) {
  uint64_t v[5] = {u->rssBytes, u->fds, u->threads, u->anonBytes, u->shmemBytes};
  if (chorusAllReduce(v, v, 5, chorusUint64, chorusMax, comm, nullptr) != chorusSuccess)
    return false;
  u->rssBytes = v[0], u->fds = v[1], u->threads = v[2], u->anonBytes = v[3], u->shmemBytes = v[4];
  return true;
}

double mib(uint64_t b) { return static_cast<double>(b) / (1 << 20); }

int run(int argc, char** argv) {
  Options o;
  std::string err;
  if (!parseOptions(argc, argv, &o, &err)) {
    if (!err.empty()) std::fprintf(stderr, "chorus-soak: %s\n", err.c_str());
    std::fputs(kUsageText, stderr);
    return err.empty() ? 0 : kUsage;
  }
  // Fixed malloc thresholds: glibc otherwise raises its mmap threshold after each large free
  // (up to 32 MiB), so later large blocks come from the heaps, and a thread's heap keeps its
  // freed top, which malloc_trim does not return. The resident memory would then step up with
  // the timing of whichever thread freed what, and a sample would measure the allocator instead
  // of the library.
  mallopt(M_MMAP_THRESHOLD, 128 << 10);
  mallopt(M_TRIM_THRESHOLD, 128 << 10);
  // A small plan cache (unless the caller set one): the random sizes give hundreds of call
  // signatures, and the default cache (512 plans) would still be filling long after warm-up,
  // by more the slower the machine (private memory seen rising 6.7 -> 12.6 MiB between the
  // halves of a passing 30 s run; one run under ctest -j2 failed the check). At 16 it is full
  // within warm-up and turns over from then on, so the check sees the library, and eviction
  // and rebuilding run all along.
  setenv("CHORUS_PLAN_CACHE", "16", /*overwrite=*/0);
  chorusComm_t comm = nullptr;
  if (chorusCommInitFromEnv(&comm) != chorusSuccess) {
    std::fprintf(stderr, "FAIL: chorusCommInitFromEnv: %s\n", chorusGetLastError(nullptr));
    return 1;
  }
  int rank = 0, n = 0;
  chorusCommUserRank(comm, &rank);
  chorusCommCount(comm, &n);

  uint64_t seed = o.seed != 0 ? o.seed
                              : static_cast<uint64_t>(
                                    std::chrono::system_clock::now().time_since_epoch().count());
  if (chorusBroadcast(&seed, &seed, 1, chorusUint64, 0, comm, nullptr) != chorusSuccess)
    return fail(comm, rank, std::string("broadcasting the seed: ") + chorusGetLastError(comm));
  if (rank == 0) {
    std::printf("chorus-soak: %d ranks, seed %llu, up to %.0f s%s, largest buffer %llu bytes\n", n,
                static_cast<unsigned long long>(seed), o.seconds,
                o.ops ? (" or " + std::to_string(o.ops) + " operations").c_str() : "",
                static_cast<unsigned long long>(o.maxBytes));
    std::fflush(stdout);
  }

  std::mt19937_64 rng(seed);
  Rank self(comm, rank, n, o.trace);
  auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  uint64_t done = 0, nextSplit = o.splitEvery;
  double nextSample = 0;
  uint64_t byMode[4] = {0, 0, 0, 0}, byKind[static_cast<int>(Kind::kCount)] = {};
  // Samples after warm-up (the deterministic pass below and the first quarter of the run).
  Usage first;
  std::vector<Usage> samples;
  if (!maxOverRanks(comm, &(first = measureUsage())))
    return fail(comm, rank, std::string("usage all-reduce: ") + chorusGetLastError(comm));
  // Warm-up, part one: every kind once at the largest size, so whatever the
  // library sizes by the largest call it has seen is at its largest before the baseline.
  for (int kind = 0; kind < static_cast<int>(Kind::kCount); ++kind) {
    if (static_cast<Kind>(kind) == Kind::kSendRecv && n == 1) continue;
    std::vector<Op> batch{drawOp(rng, done, n, o, kind, o.maxBytes)};
    err = self.runBatch(batch, Mode::kBlocking, rng);
    if (!err.empty()) return fail(comm, rank, err);
    ++byMode[0];
    ++byKind[kind];
    ++done;
  }
  // Part two: every kind that can run in place once more at the largest size, both in place and
  // out of place (part one draws either, and an in-place call can keep more: with part one alone
  // seed 1796310463682051881 stepped up by 5.4 MiB after the baseline, 6.8 -> 13.0 MiB between
  // the halves against a slack of 8; with this, 14.1 -> 14.1). From a generator of its own, so a
  // seed's random part stays what it was.
  std::mt19937_64 warm(seed ^ 0x9e3779b97f4a7c15ull);
  for (int kind = 0; kind < static_cast<int>(Kind::kCount); ++kind) {
    if (!inPlaceKind(static_cast<Kind>(kind))) continue;
    for (const bool inPlace : {false, true}) {
      Op p = drawOp(warm, done, n, o, kind, o.maxBytes);
      p.inPlace = inPlace;
      std::vector<Op> batch{p};
      err = self.runBatch(batch, Mode::kBlocking, warm);
      if (!err.empty()) return fail(comm, rank, err);
      ++byMode[0];
      ++byKind[kind];
      ++done;
    }
  }
  // --seconds is the random part's time: the pass above can take long on a loaded machine and
  // must not eat the samples.
  const double passSeconds = elapsed();
  start = std::chrono::steady_clock::now();
  for (;;) {
    const auto mode = static_cast<Mode>(rng() % 4);
    const size_t k = 1 + rng() % 4;
    std::vector<Op> batch;
    for (size_t i = 0; i < k; ++i) batch.push_back(drawOp(rng, done + i, n, o));
    err = self.runBatch(batch, mode, rng);
    if (!err.empty()) return fail(comm, rank, err);
    for (size_t i = 0; i < k && o.injectLeak > 0; ++i) {
      void* lost = std::malloc(o.injectLeak);
      if (lost != nullptr) std::memset(lost, 1, o.injectLeak);  // resident, never freed
    }
    byMode[static_cast<int>(mode)] += k;
    for (const Op& p : batch) ++byKind[static_cast<int>(p.kind)];
    batch.clear();  // its buffers must not be counted in a sample
    done += k;
    if (o.splitEvery != 0 && done >= nextSplit) {
      nextSplit += o.splitEvery;
      err = self.splitRound(done);
      if (!err.empty()) return fail(comm, rank, err);
    }
    // Rank 0 decides, after every batch, whether to stop, whether to take a sample and whether
    // warm-up is over; everyone follows (each rank's clock would disagree near a boundary).
    int flags = 0;
    if (rank == 0) {
      const double t = elapsed();
      const bool due = (o.seconds > 0 && t >= o.seconds) || (o.ops > 0 && done >= o.ops);
      // The usage check needs kMinSamples after warm-up: on a machine so loaded that a batch
      // takes seconds the run goes on past its time, sampling after every batch, until it has
      // them (the verdict must not depend on the machine's speed).
      // (An --ops run stops at its count: it is the one a seed replays.)
      const bool stopNow = due && (o.ops > 0 || samples.size() >= kMinSamples);
      const bool sampleNow = due || t >= nextSample;
      const bool warmedUp = o.ops > 0 ? done * 4 >= o.ops : t * 4 >= o.seconds;
      if (sampleNow) nextSample = t + o.sampleSeconds;
      flags = (stopNow ? 1 : 0) | (sampleNow ? 2 : 0) | (warmedUp ? 4 : 0);
    }
    if (chorusBroadcast(&flags, &flags, 1, chorusInt32, 0, comm, nullptr) != chorusSuccess)
      return fail(comm, rank, std::string("broadcasting the decision: ") + chorusGetLastError(comm));
    const bool stop = flags & 1, warmedUp = flags & 4;
    if (!(flags & 2)) continue;
    if (o.injectFdLeak && open("/dev/null", O_RDONLY) < 0) return fail(comm, rank, "open /dev/null");
    Usage u = measureUsage();
    if (!maxOverRanks(comm, &u))
      return fail(comm, rank, std::string("usage all-reduce: ") + chorusGetLastError(comm));
    if (warmedUp) samples.push_back(u);
    if (rank == 0) {
      std::printf("ops %llu  %.1f s  rss %.1f MiB (private %.1f, shared %.1f)  fds %llu  "
                  "threads %llu%s\n",
                  static_cast<unsigned long long>(done), elapsed(), mib(u.rssBytes),
                  mib(u.anonBytes), mib(u.shmemBytes),
                  static_cast<unsigned long long>(u.fds),
                  static_cast<unsigned long long>(u.threads), warmedUp ? "" : "  (warm-up)");
      std::fflush(stdout);
    }
    if (stop) break;
  }
  if (!kJudgeMemory && rank == 0)
    std::printf("private memory not judged: built with AddressSanitizer, whose quarantine keeps "
                "freed blocks resident\n");
  // Flat after warm-up: the samples' later half against their earlier half. Descriptors and
  // threads exactly (none may stay open); the resident set by medians, since one sample can
  // catch a large call's buffers in flight, within --rss-slack-mib.
  std::string leak;
  Usage early, late;
  const size_t half = samples.size() / 2;
  if (samples.size() >= kMinSamples) {
    auto medianRss = [](std::vector<Usage> v) {
      std::sort(v.begin(), v.end(),
                [](const Usage& a, const Usage& b) { return a.anonBytes < b.anonBytes; });
      return v[v.size() / 2].anonBytes;
    };
    const std::vector<Usage> a(samples.begin(), samples.begin() + static_cast<long>(half)),
        b(samples.begin() + static_cast<long>(half), samples.end());
    for (const Usage& u : a) early.fds = std::max(early.fds, u.fds), early.threads = std::max(early.threads, u.threads);
    for (const Usage& u : b) late.fds = std::max(late.fds, u.fds), late.threads = std::max(late.threads, u.threads);
    early.anonBytes = medianRss(a);
    late.anonBytes = medianRss(b);
    if (late.fds > early.fds)
      leak += " open descriptors grew from " + std::to_string(early.fds) + " to " +
              std::to_string(late.fds) + ";";
    if (late.threads > early.threads)
      leak += " threads grew from " + std::to_string(early.threads) + " to " +
              std::to_string(late.threads) + ";";
    if (kJudgeMemory && late.anonBytes > early.anonBytes + (o.rssSlackMiB << 20))
      leak += " the median resident private memory grew from " +
              std::to_string(mib(early.anonBytes)) + " to " + std::to_string(mib(late.anonBytes)) +
              " MiB (slack " +
              std::to_string(o.rssSlackMiB) + " MiB);";
  } else if (rank == 0) {
    std::printf("too few samples after warm-up (%zu, %zu needed) to compare usage\n",
                samples.size(), kMinSamples);
  }
  if (rank == 0) {
    std::string kinds;
    for (int i = 0; i < static_cast<int>(Kind::kCount); ++i)
      kinds += std::string(i ? ", " : "") + kindName(static_cast<Kind>(i)) + " " +
               std::to_string(byKind[i]);
    std::printf("operations: %s\nmodes: blocking %llu, nonblocking+wait %llu, nonblocking+test "
                "%llu, grouped %llu\n",
                kinds.c_str(), static_cast<unsigned long long>(byMode[0]),
                static_cast<unsigned long long>(byMode[1]),
                static_cast<unsigned long long>(byMode[2]),
                static_cast<unsigned long long>(byMode[3]));
    std::printf("usage (largest over ranks): start rss %.1f MiB (private %.1f) fds %llu threads "
                "%llu; after warm-up, %zu samples: earlier half median private %.1f MiB, fds %llu, "
                "threads %llu; later half %.1f MiB, %llu, %llu; shared memory at the end %.1f MiB\n",
                mib(first.rssBytes), mib(first.anonBytes),
                static_cast<unsigned long long>(first.fds),
                static_cast<unsigned long long>(first.threads), samples.size(),
                mib(early.anonBytes), static_cast<unsigned long long>(early.fds),
                static_cast<unsigned long long>(early.threads), mib(late.anonBytes),
                static_cast<unsigned long long>(late.fds),
                static_cast<unsigned long long>(late.threads),
                samples.empty() ? 0.0 : mib(samples.back().shmemBytes));
  }
  // Every rank has the same samples, so the same verdict: no abort needed. Every rank prints
  // it before it exits with it: chorus-run stops the others once one rank has failed, and rank 0
  // alone printing lost the line whenever another rank's exit came first (seen once under
  // ctest -j2: soak.reports_an_injected_descriptor_leak without its FAIL line).
  std::fflush(stdout);
  if (!leak.empty()) std::fprintf(stderr, "FAIL: after warm-up:%s\n", leak.c_str());
  if (chorusCommDestroy(comm) != chorusSuccess) {
    std::fprintf(stderr, "FAIL rank %d: chorusCommDestroy failed\n", rank);
    return 1;
  }
  if (!leak.empty()) return 1;
  if (rank == 0) {
    std::printf("PASS %llu operations on %d ranks in %.1f s (+ %.1f s at the largest size "
                "first), seed %llu\n",
                static_cast<unsigned long long>(done), n, elapsed(), passSeconds,
                static_cast<unsigned long long>(seed));
  }
  return 0;
}

}  // namespace
}  // namespace chorus::test

int main(int argc, char** argv) { return chorus::test::run(argc, argv); }
