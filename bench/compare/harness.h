// The measuring loop shared by the reference drivers (mpi_perf, gloo_perf): the same flags,
// sizes, warm-up, timing, correctness check and table as chorus-perf, so that a row of one tool
// can be put next to the same row of another. Only the calls differ, and a driver supplies them
// as a Backend.
//
// What is the same as chorus-perf (tools/chorus-perf/, see its README):
//   - flags -b -e -f -n -w -c (check 0/1) -z (blocking 0/1; 0 where the driver can post calls)
//     --coll, sizes with binary K/M/G suffixes;
//   - one warm-up pass over the whole range (doubling, -w calls per size) before the table;
//   - a size's time is each rank's mean over -n calls started after a barrier, averaged over
//     ranks; timed calls run on zero-filled buffers;
//   - size/count conventions and busbw = algbw x 2(n-1)/n (allreduce), (n-1)/n (allgather,
//     reducescatter) or 1 (broadcast, from rank 0, out of place: the root's output is its
//     input too), per-rank blocks rounded down to 16 bytes;
//   - the check: after timing, fresh inputs that are a pure function of (seed, rank, index),
//     outputs poisoned with NaN, one call, every element compared with what each rank computes
//     locally, wrong elements summed over ranks; inputs are integers small enough that every
//     summation order is exact in float;
//   - the table columns (out-of-place only: the references have no in-place form here), the
//     "# Out of bounds values" footer and exit status 1 when a check failed;
//   - pingpong (chorus-perf --coll pingpong): exactly 2 ranks, rank 0 sends then receives, rank
//     1 receives then sends, each leg completed before the next; the time column is one way,
//     half the round trip, algbw = busbw = size / that time; the check compares each rank's
//     received buffer with the other rank's input.
// Only float sum is measured: it is what the comparison needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace chorus::compare {

enum class Coll { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kPingPong };

const char* collName(Coll c);

struct Options {
  Coll coll = Coll::kAllReduce;
  uint64_t minBytes = 32 << 20;
  uint64_t maxBytes = 32 << 20;
  uint64_t stepFactor = 2;
  int iters = 20;
  int warmupIters = 5;
  bool check = true;
  /// -z 0: nonblocking calls, as chorus-perf -z 0 — every call of a size posted first, then
  /// completed in order (Backend::post, Backend::complete); -z 1 (the default): blocking calls.
  bool blocking = true;
  std::string algo;  // -a: driver-specific algorithm choice, empty for the default
  std::string commandLine;
};

// Parses argv. On error returns nullopt with a message in *error; "-h" returns nullopt with an
// empty *error after printing the usage.
std::optional<Options> parseOptions(int argc, char** argv, const char* tool, std::string* error);

// The calls of one system. All of them are collective: every rank makes them in the same order.
struct Backend {
  std::string description;  // printed in the header, e.g. "Open MPI v4.1.4"
  int rank = 0;
  int nranks = 1;
  std::function<void()> barrier;
  // One call of the collective chosen in Options; `count` is the call's count argument (per
  // rank for allgather and reducescatter, as in chorus.h). For pingpong, one round trip between
  // ranks 0 and 1: `send` goes to the other rank, `recv` receives from it.
  std::function<void(const float* send, float* recv, size_t count)> run;
  // -z 0 (optional; a driver without them refuses the flag): start one call without waiting,
  // and complete every call started since the last complete(), in the order they were started.
  std::function<void(const float* send, float* recv, size_t count)> post;
  std::function<void()> complete;
  std::function<double(double)> sumDouble;
  std::function<int64_t(int64_t)> sumInt64;
};

// Runs the whole table and prints it on rank 0. Returns the process exit status: 0, or 1 when a
// check found wrong elements.
int runBenchmark(const Options& opts, const Backend& backend);

}  // namespace chorus::compare
