// chorus-perf's pure arithmetic: flag values, the element counts each collective moves for a
// given size, and the bandwidth formulas. Nothing here talks to a communicator, so all of it is
// unit-tested (tests/unit/tools/perf_params_test.cc).
//
// The conventions are nccl-tests', so tables from the two tools can be compared row by row:
//   size  = bytes in the largest buffer of one rank: count*typesize for allreduce, broadcast,
//           reduce, sendrecv, pingpong and stream; nranks*count*typesize for allgather (received),
//           reducescatter (sent) and alltoall (sent);
//   count = the count argument of the call (per rank for allgather/reducescatter, per peer for
//           alltoall), rounded down so that each rank's block stays 16-byte aligned;
//   algbw = size / time;  busbw = algbw * busBwFactor, the fraction of the data each rank must
//           move over its links in an optimal algorithm, so busbw is comparable across
//           collectives and rank counts.
// pingpong is chorus-perf's own (nccl-tests has none): ranks 0 and 1 bounce one message, and
// its time is one way, half the measured round trip (see legsPerCall), as MPI latency
// benchmarks report it. stream is too: rank 0 sends rank 1 a window of kStreamWindow messages
// back to back, and its time is per message (osu_bw's and ucx_perftest tag_bw's pattern).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/chorus.h"

namespace chorus::perf {

enum class Coll {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kAllToAll,
  kSendRecv,
  kPingPong,
  kStream,
};
inline constexpr Coll kAllColls[] = {Coll::kAllReduce, Coll::kAllGather, Coll::kReduceScatter,
                                     Coll::kBroadcast, Coll::kReduce,    Coll::kAllToAll,
                                     Coll::kSendRecv,  Coll::kPingPong,  Coll::kStream};
// Messages one stream call sends back to back (osu_bw's window).
inline constexpr int kStreamWindow = 64;

const char* collName(Coll c);
std::optional<Coll> parseColl(std::string_view name);
bool collReduces(Coll c);   // takes a reduction operator
bool collRooted(Coll c);    // takes a root
// Whether chorus.h defines an in-place form. For the others nccl-tests still runs the in-place
// column with sendbuff == recvbuff but reports #wrong as N/A; chorus-perf does the same.
bool collHasInPlace(Coll c);
// Messages a call's time is divided by: 2 for pingpong (there and back, each waiting for the
// previous one), kStreamWindow for stream (a window of messages in flight), 1 otherwise. So
// pingpong reports the one-way latency, stream the time per message of a stream, and
// algbw = size / that time.
int legsPerCall(Coll c);
// Why `nranks` cannot run `c`, or "" when it can. pingpong and stream need exactly 2 ranks: they
// measure one link, and idle ranks would only add noise (and time) to the barriers around it.
std::string rankCountError(Coll c, int nranks);

// Reduction operator as chorus-perf names it. kNone is the "operator" of the collectives that
// only move data; kPreMulSum is created per communicator with chorusRedOpCreatePreMulSum.
enum class Op { kNone, kSum, kProd, kMax, kMin, kAvg, kPreMulSum };
inline constexpr Op kAllReduceOps[] = {Op::kSum, Op::kProd, Op::kMax,
                                       Op::kMin, Op::kAvg,  Op::kPreMulSum};
const char* opName(Op op);
// nccl-tests names (sum prod max min avg premulsum; "mulsum" accepted as nccl-tests spells it)
// and "all".
std::optional<std::vector<Op>> parseOps(std::string_view name);
// The built-in chorus operator; only for ops other than kNone and kPreMulSum.
chorusRedOp_t builtinOp(Op op);

inline constexpr chorusDataType_t kAllTypes[] = {
    chorusInt8,    chorusUint8,   chorusInt32,   chorusUint32,   chorusInt64,       chorusUint64,
    chorusFloat16, chorusFloat32, chorusFloat64, chorusBfloat16, chorusFloat8e4m3, chorusFloat8e5m2};
// nccl-tests names: int8 uint8 int32 uint32 int64 uint64 half float double bfloat16 f8e4m3
// f8e5m2, and "all".
const char* typeName(chorusDataType_t t);
std::optional<std::vector<chorusDataType_t>> parseTypes(std::string_view name);
size_t typeSize(chorusDataType_t t);

// --quant: "int4" or "int8", then optionally ":GROUP" (elements per scale, default 256),
// ":asym" (scale and offset per group) and ":stochastic=SEED", e.g. "int4:256",
// "int8:128:asym:stochastic=7". nullopt when malformed; *err says why.
std::optional<chorusQuantConfig_t> parseQuant(std::string_view spec, std::string* err);
// Whether --quant applies to the collective (reducescatter, allgather, allreduce).
bool collQuantizes(Coll c);

// "8", "128K", "1.5M", "2G" (binary multiples, as nccl-tests). nullopt when malformed, negative,
// not a whole number of bytes, or too large.
std::optional<uint64_t> parseSize(std::string_view text);

// The sizes of one table: from minBytes up to maxBytes, multiplying by stepFactor when it is
// > 1, else adding stepBytes. Stops instead of looping forever when the step makes no progress.
std::vector<uint64_t> sizeSeries(uint64_t minBytes, uint64_t maxBytes, uint64_t stepFactor,
                                 uint64_t stepBytes);

// Element counts of one run of `coll` for a requested size (nccl-tests' getCollByteCount).
struct CollGeometry {
  size_t count = 0;      // the collective's count argument
  size_t sendCount = 0;  // elements in one rank's send buffer
  size_t recvCount = 0;  // elements in one rank's receive buffer
  // In-place layouts, in elements, multiplied by the rank: the send buffer starts at
  // recvbuff + rank*sendInPlaceOffset and the receive buffer at recvbuff + rank*recvInPlaceOffset.
  size_t sendInPlaceOffset = 0;
  size_t recvInPlaceOffset = 0;
  // The "size" column.
  size_t bytes(size_t typeBytes) const {
    return (sendCount > recvCount ? sendCount : recvCount) * typeBytes;
  }
};
CollGeometry collGeometry(Coll c, uint64_t bytes, size_t typeBytes, int nranks);

double busBwFactor(Coll c, int nranks);

struct Bandwidth {
  double algBw = 0;  // GB/s, 1 GB = 1e9 bytes
  double busBw = 0;
};
Bandwidth bandwidth(Coll c, size_t bytes, double seconds, int nranks);

}  // namespace chorus::perf
