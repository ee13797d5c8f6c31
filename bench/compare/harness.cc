#include "bench/compare/harness.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string_view>
#include <vector>

namespace chorus::compare {
namespace {

constexpr size_t kBufferAlign = 4096;

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float, FreeDeleter>;

Buffer allocate(uint64_t bytes) {
  size_t rounded = (bytes + kBufferAlign - 1) / kBufferAlign * kBufferAlign;
  if (rounded == 0) rounded = kBufferAlign;
  void* p = std::aligned_alloc(kBufferAlign, rounded);
  if (p == nullptr) {
    std::fprintf(stderr, "cannot allocate %zu bytes\n", rounded);
    std::exit(EXIT_FAILURE);
  }
  // Touch every page now, as chorus-perf does, so no size pays for page faults.
  std::memset(p, 0, rounded);
  return Buffer(static_cast<float*>(p));
}

std::optional<uint64_t> parseSize(std::string_view text) {
  if (text.empty()) return std::nullopt;
  double mult = 1;
  switch (text.back()) {
    case 'k': case 'K': mult = 1024.0; break;
    case 'm': case 'M': mult = 1024.0 * 1024; break;
    case 'g': case 'G': mult = 1024.0 * 1024 * 1024; break;
    default: break;
  }
  if (mult != 1) text.remove_suffix(1);
  if (text.empty() || text.find_first_not_of("0123456789.") != std::string_view::npos) {
    return std::nullopt;
  }
  std::string s(text);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end) * mult;
  if (*end != '\0' || v != std::floor(v) || v > 1e15) return std::nullopt;
  return static_cast<uint64_t>(v);
}

std::optional<int> parseInt(std::string_view text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  return std::atoi(std::string(text).c_str());
}

std::optional<Coll> parseColl(std::string_view name) {
  for (Coll c : {Coll::kAllReduce, Coll::kAllGather, Coll::kReduceScatter, Coll::kBroadcast,
                 Coll::kPingPong}) {
    if (name == collName(c)) return c;
  }
  return std::nullopt;
}

void printUsage(const char* tool) {
  std::printf(
      "usage: %s [--coll allreduce|allgather|reducescatter|broadcast|pingpong] [-b MIN]\n"
      "       [-e MAX]"
      " [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1] [-z 0|1] [-a ALGO]\n"
      "Same flags, sizes, timing, check and table as chorus-perf (float sum, out-of-place).\n"
      "pingpong: 2 ranks, blocking send/receive, one-way time (half the round trip).\n",
      tool);
}

// The per-rank block of allgather/reducescatter, rounded down to 16 bytes (chorus-perf's rule).
size_t alignedBlock(uint64_t totalElems, int nranks) {
  size_t perRank = static_cast<size_t>(totalElems / static_cast<uint64_t>(nranks));
  constexpr size_t kUnit = 16 / sizeof(float);
  return perRank / kUnit * kUnit;
}

struct Geometry {
  size_t count = 0;
  size_t sendCount = 0;
  size_t recvCount = 0;
  size_t bytes() const { return std::max(sendCount, recvCount) * sizeof(float); }
};

Geometry geometry(Coll c, uint64_t bytes, int nranks) {
  uint64_t elems = bytes / sizeof(float);
  size_t n = static_cast<size_t>(nranks);
  Geometry g;
  switch (c) {
    case Coll::kAllReduce:
    case Coll::kBroadcast:
    case Coll::kPingPong:
      g.count = g.sendCount = g.recvCount = static_cast<size_t>(elems);
      break;
    case Coll::kAllGather:
      g.count = g.sendCount = alignedBlock(elems, nranks);
      g.recvCount = g.count * n;
      break;
    case Coll::kReduceScatter:
      g.count = g.recvCount = alignedBlock(elems, nranks);
      g.sendCount = g.count * n;
      break;
  }
  return g;
}

double busBwFactor(Coll c, int nranks) {
  double n = nranks;
  switch (c) {
    case Coll::kAllReduce: return 2.0 * (n - 1) / n;
    case Coll::kAllGather:
    case Coll::kReduceScatter: return (n - 1) / n;
    case Coll::kBroadcast:
    case Coll::kPingPong: return 1.0;
  }
  return 1.0;
}

// A pingpong call is a round trip, and the table reports one way (chorus-perf's legsPerCall).
int legsPerCall(Coll c) { return c == Coll::kPingPong ? 2 : 1; }

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Check inputs: integers in [-2^(bits-1), 2^(bits-1)) with n * 2^(bits-1) <= 2^24, so every
// partial sum of every summation order is exact in float and a result either matches exactly
// or is wrong. A mask instead of a modulo keeps the check cheap at 256 MiB.
class Values {
 public:
  Values(uint64_t seed, int nranks) : seed_(seed), nranks_(nranks) {
    int log2n = 0;
    while ((1 << log2n) < nranks) ++log2n;
    bits_ = std::clamp(24 - log2n, 2, 21);
  }
  float input(int rank, size_t index) const {
    uint64_t h = mix(seed_ ^ (static_cast<uint64_t>(rank) << 48) ^ index);
    int64_t half = int64_t{1} << (bits_ - 1);
    return static_cast<float>(static_cast<int64_t>(h & ((uint64_t{1} << bits_) - 1)) - half);
  }
  float sum(size_t index) const {
    float acc = 0;
    for (int r = 0; r < nranks_; ++r) acc += input(r, index);
    return acc;
  }

 private:
  uint64_t seed_;
  int nranks_;
  int bits_ = 21;
};

// chorus-perf's number formatting: two decimals while they fit in the column.
std::string fit(double value, int width) {
  char buf[64];
  for (int decimals = 2; decimals >= 0; --decimals) {
    int n = std::snprintf(buf, sizeof(buf), "%*.*f", width, decimals, value);
    if (n <= width) return buf;
  }
  std::snprintf(buf, sizeof(buf), "%*.1e", width, value);
  return buf;
}

class Runner {
 public:
  Runner(const Options& opts, const Backend& b) : opts_(opts), b_(b) {}
  int run();

 private:
  void print(const char* fmt, ...) __attribute__((format(printf, 2, 3)));
  double timeCalls(const Geometry& g);
  // `times` calls of geometry g: one after another (-z 1), or all posted, then completed.
  void calls(const Geometry& g, int times);
  int64_t checkedRun(const Geometry& g);

  const Options& opts_;
  const Backend& b_;
  Buffer send_;
  Buffer recv_;
  uint64_t checkRuns_ = 0;
};

void Runner::print(const char* fmt, ...) {
  if (b_.rank != 0) return;
  va_list ap;
  va_start(ap, fmt);
  std::vprintf(fmt, ap);
  va_end(ap);
  std::fflush(stdout);
}

void Runner::calls(const Geometry& g, int times) {
  if (opts_.blocking) {
    for (int i = 0; i < times; ++i) b_.run(send_.get(), recv_.get(), g.count);
    return;
  }
  for (int i = 0; i < times; ++i) b_.post(send_.get(), recv_.get(), g.count);
  b_.complete();
}

double Runner::timeCalls(const Geometry& g) {
  b_.barrier();
  auto t0 = std::chrono::steady_clock::now();
  calls(g, opts_.iters);
  auto t1 = std::chrono::steady_clock::now();
  double sec = std::chrono::duration<double>(t1 - t0).count() / opts_.iters;
  return b_.sumDouble(sec) / b_.nranks;
}

int64_t Runner::checkedRun(const Geometry& g) {
  // The same counter on every rank, so all ranks derive the same fresh inputs.
  Values v(mix(++checkRuns_), b_.nranks);
  float* in = send_.get();
  float* out = recv_.get();
  std::fill(out, out + g.recvCount, std::numeric_limits<float>::quiet_NaN());
  for (size_t j = 0; j < g.sendCount; ++j) in[j] = v.input(b_.rank, j);
  if (opts_.blocking) {
    b_.run(in, out, g.count);
  } else {  // the path that was timed
    b_.post(in, out, g.count);
    b_.complete();
  }

  int64_t wrong = 0;
  switch (opts_.coll) {
    case Coll::kAllReduce:
      for (size_t i = 0; i < g.recvCount; ++i) wrong += out[i] != v.sum(i);
      break;
    case Coll::kAllGather:
      for (size_t i = 0; i < g.recvCount; ++i) {
        wrong += out[i] != v.input(static_cast<int>(i / g.count), i % g.count);
      }
      break;
    case Coll::kReduceScatter: {
      size_t offset = static_cast<size_t>(b_.rank) * g.count;
      for (size_t i = 0; i < g.recvCount; ++i) wrong += out[i] != v.sum(offset + i);
      break;
    }
    case Coll::kBroadcast:  // from rank 0
      for (size_t i = 0; i < g.recvCount; ++i) wrong += out[i] != v.input(0, i);
      break;
    case Coll::kPingPong:
      for (size_t i = 0; i < g.recvCount; ++i) wrong += out[i] != v.input(1 - b_.rank, i);
      break;
  }
  return b_.sumInt64(wrong);
}

int Runner::run() {
  if (opts_.coll == Coll::kPingPong && b_.nranks != 2) {
    // Every rank sees the same job size, so every rank stops here.
    if (b_.rank == 0) {
      std::fprintf(stderr, "pingpong needs exactly 2 ranks, not %d (it measures the link between "
                   "ranks 0 and 1)\n", b_.nranks);
      std::fflush(stderr);
    }
    // No rank exits before rank 0 has said why: the launcher tears the job down at the first.
    b_.barrier();
    return 2;
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  print("# %s: %s\n", collName(opts_.coll), b_.description.c_str());
  print("# Collective test starting: %s\n", opts_.commandLine.c_str());
  print("# nranks %d minBytes %" PRIu64 " maxBytes %" PRIu64 " step: %" PRIu64
        "(factor) warmup iters: %d iters: %d validation: %d blocking: %d\n",
        b_.nranks, opts_.minBytes, opts_.maxBytes, opts_.stepFactor, opts_.warmupIters,
        opts_.iters, opts_.check ? 1 : 0, opts_.blocking ? 1 : 0);
  print("# host %s\n#\n", host);
  print("# %10s  %12s  %8s  %6s  %6s           out-of-place\n", "", "", "", "", "");
  print("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s\n", "size", "count", "type", "redop",
        "root", "time", "algbw", "busbw", "#wrong");
  print("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s\n", "(B)", "(elements)", "", "", "",
        "(us)", "(GB/s)", "(GB/s)", "");

  // Every layout fits in maxBytes: the size column is the largest buffer of a rank.
  send_ = allocate(opts_.maxBytes);
  recv_ = allocate(opts_.maxBytes);

  // Warm-up over the whole range, doubling, as chorus-perf does.
  for (uint64_t s = opts_.minBytes; s <= opts_.maxBytes && s > 0; s *= 2) {
    Geometry g = geometry(opts_.coll, s, b_.nranks);
    calls(g, opts_.warmupIters);
  }

  bool reduces = opts_.coll == Coll::kAllReduce || opts_.coll == Coll::kReduceScatter;
  const char* redop = reduces ? "sum" : "none";
  const int root = opts_.coll == Coll::kBroadcast ? 0 : -1;
  int failed = 0;
  int rows = 0;
  double busSum = 0;
  for (uint64_t s = opts_.minBytes; s <= opts_.maxBytes && s > 0; s *= opts_.stepFactor) {
    Geometry g = geometry(opts_.coll, s, b_.nranks);
    size_t bytes = g.bytes();
    std::memset(send_.get(), 0, g.sendCount * sizeof(float));
    std::memset(recv_.get(), 0, g.recvCount * sizeof(float));
    double sec = timeCalls(g) / legsPerCall(opts_.coll);
    double algBw = sec > 0 ? static_cast<double>(bytes) / 1e9 / sec : 0;
    double busBw = algBw * busBwFactor(opts_.coll, b_.nranks);
    std::string tail = "    N/A";
    if (opts_.check) {
      int64_t wrong = checkedRun(g);
      failed += wrong != 0;
      char buf[32];
      std::snprintf(buf, sizeof(buf), "  %5" PRId64, wrong);
      tail = buf;
    }
    print("%12zu  %12zu  %8s  %6s  %6d  %s  %s  %s%s\n", bytes, g.count, "float", redop, root,
          fit(sec * 1e6, 7).c_str(), fit(algBw, 6).c_str(), fit(busBw, 6).c_str(), tail.c_str());
    busSum += busBw;
    ++rows;
  }
  print("# %-20s : %d %s\n", "Out of bounds values", failed, failed ? "FAILED" : "OK");
  print("# %-20s : %g \n#\n", "Avg bus bandwidth", rows ? busSum / rows : 0.0);
  // Nobody exits before rank 0 has printed: a launcher tears the job down at the first exit.
  b_.barrier();
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

}  // namespace

const char* collName(Coll c) {
  switch (c) {
    case Coll::kAllReduce: return "allreduce";
    case Coll::kAllGather: return "allgather";
    case Coll::kReduceScatter: return "reducescatter";
    case Coll::kBroadcast: return "broadcast";
    case Coll::kPingPong: return "pingpong";
  }
  return "?";
}

std::optional<Options> parseOptions(int argc, char** argv, const char* tool, std::string* error) {
  Options o;
  error->clear();
  for (int i = 0; i < argc; ++i) {
    if (i > 0) o.commandLine += ' ';
    o.commandLine += argv[i];
  }
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      printUsage(tool);
      return std::nullopt;
    }
    if (i + 1 >= argc) {
      *error = "missing value after " + std::string(flag);
      return std::nullopt;
    }
    std::string_view value = argv[++i];
    auto bad = [&] {
      *error = "bad value for " + std::string(flag) + ": " + std::string(value);
      return std::nullopt;
    };
    if (flag == "-b" || flag == "-e") {
      auto v = parseSize(value);
      if (!v) return bad();
      (flag == "-b" ? o.minBytes : o.maxBytes) = *v;
    } else if (flag == "-f") {
      // Only factors (no -i byte steps): the comparison sweeps sizes geometrically.
      auto v = parseInt(value);
      if (!v || *v < 2) return bad();
      o.stepFactor = static_cast<uint64_t>(*v);
    } else if (flag == "-n" || flag == "-w") {
      auto v = parseInt(value);
      if (!v || (flag == "-n" && *v < 1)) return bad();
      (flag == "-n" ? o.iters : o.warmupIters) = *v;
    } else if (flag == "-c") {
      // "-c allreduce" was this driver's collective flag before it took chorus-perf's flags;
      // still accepted so old command lines keep working.
      if (value == "0" || value == "1") {
        o.check = value == "1";
      } else if (auto c = parseColl(value)) {
        o.coll = *c;
      } else {
        return bad();
      }
    } else if (flag == "-z") {
      if (value != "0" && value != "1") return bad();
      o.blocking = value == "1";
    } else if (flag == "--coll") {
      auto c = parseColl(value);
      if (!c) return bad();
      o.coll = *c;
    } else if (flag == "-a") {
      o.algo = value;
    } else {
      *error = "unknown flag " + std::string(flag);
      return std::nullopt;
    }
  }
  if (o.minBytes == 0 || o.minBytes > o.maxBytes) {
    *error = "need 0 < -b <= -e";
    return std::nullopt;
  }
  return o;
}

int runBenchmark(const Options& opts, const Backend& backend) {
  if (!opts.blocking && (!backend.post || !backend.complete || opts.coll == Coll::kPingPong)) {
    if (backend.rank == 0)
      std::fprintf(stderr, "-z 0: this driver has no nonblocking %s\n", collName(opts.coll));
    return 2;
  }
  Runner r(opts, backend);
  return r.run();
}

}  // namespace chorus::compare
