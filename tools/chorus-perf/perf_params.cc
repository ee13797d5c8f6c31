#include "tools/chorus-perf/perf_params.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace chorus::perf {
namespace {

struct CollEntry {
  Coll coll;
  const char* name;
  bool reduces;
  bool rooted;
  bool inPlace;
  int legs;
  int exactRanks;  // 0: any number of ranks
};
constexpr CollEntry kColls[] = {
    {Coll::kAllReduce, "allreduce", true, false, true, 1, 0},
    {Coll::kAllGather, "allgather", false, false, true, 1, 0},
    {Coll::kReduceScatter, "reducescatter", true, false, true, 1, 0},
    {Coll::kBroadcast, "broadcast", false, true, true, 1, 0},
    {Coll::kReduce, "reduce", true, true, true, 1, 0},
    {Coll::kAllToAll, "alltoall", false, false, false, 1, 0},
    {Coll::kSendRecv, "sendrecv", false, false, false, 1, 0},
    {Coll::kPingPong, "pingpong", false, false, false, 2, 2},
    {Coll::kStream, "stream", false, false, false, kStreamWindow, 2},
};

const CollEntry& entry(Coll c) {
  for (const CollEntry& e : kColls) {
    if (e.coll == c) return e;
  }
  std::abort();  // every enumerator has an entry
}

struct TypeEntry {
  chorusDataType_t type;
  const char* name;
  size_t size;
};
constexpr TypeEntry kTypes[] = {
    {chorusInt8, "int8", 1},         {chorusUint8, "uint8", 1},
    {chorusInt32, "int32", 4},       {chorusUint32, "uint32", 4},
    {chorusInt64, "int64", 8},       {chorusUint64, "uint64", 8},
    {chorusFloat16, "half", 2},      {chorusFloat32, "float", 4},
    {chorusFloat64, "double", 8},    {chorusBfloat16, "bfloat16", 2},
    {chorusFloat8e4m3, "f8e4m3", 1}, {chorusFloat8e5m2, "f8e5m2", 1},
};

struct OpEntry {
  Op op;
  const char* name;
};
constexpr OpEntry kOps[] = {
    {Op::kNone, "none"}, {Op::kSum, "sum"}, {Op::kProd, "prod"},          {Op::kMax, "max"},
    {Op::kMin, "min"},   {Op::kAvg, "avg"}, {Op::kPreMulSum, "premulsum"},
};

// nccl-tests keeps every rank's block a multiple of 16 bytes, which keeps vectorized reduction
// paths honest and makes our sizes line up with theirs.
size_t alignedBlock(uint64_t totalElems, size_t typeBytes, int nranks) {
  size_t perRank = static_cast<size_t>(totalElems / static_cast<uint64_t>(nranks));
  size_t unit = typeBytes >= 16 ? 1 : 16 / typeBytes;
  return perRank / unit * unit;
}

}  // namespace

const char* collName(Coll c) { return entry(c).name; }

std::optional<Coll> parseColl(std::string_view name) {
  for (const CollEntry& e : kColls) {
    if (name == e.name) return e.coll;
  }
  return std::nullopt;
}

bool collReduces(Coll c) { return entry(c).reduces; }
bool collRooted(Coll c) { return entry(c).rooted; }
bool collHasInPlace(Coll c) { return entry(c).inPlace; }
int legsPerCall(Coll c) { return entry(c).legs; }

std::string rankCountError(Coll c, int nranks) {
  const CollEntry& e = entry(c);
  if (e.exactRanks == 0 || e.exactRanks == nranks) return {};
  return std::string(e.name) + " needs exactly " + std::to_string(e.exactRanks) + " ranks, not " +
         std::to_string(nranks) + " (it measures the link between ranks 0 and 1: start 2 ranks, " +
         "e.g. chorus-run -n 2, or mpirun -np 2 -H a,b for two hosts)";
}

const char* opName(Op op) {
  for (const OpEntry& e : kOps) {
    if (e.op == op) return e.name;
  }
  return "?";
}

namespace {

bool parseUnsigned(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

std::optional<chorusQuantConfig_t> parseQuant(std::string_view spec, std::string* err) {
  chorusQuantConfig_t c = CHORUS_QUANT_CONFIG_INIT;
  std::vector<std::string_view> parts;
  for (size_t pos = 0;;) {
    const size_t colon = spec.find(':', pos);
    parts.push_back(spec.substr(pos, colon == std::string_view::npos ? colon : colon - pos));
    if (colon == std::string_view::npos) break;
    pos = colon + 1;
  }
  if (parts[0] == "int4") {
    c.bits = 4;
  } else if (parts[0] != "int8") {
    *err = "--quant '" + std::string(spec) + "': starts with int4 or int8";
    return std::nullopt;
  }
  for (size_t k = 1; k < parts.size(); ++k) {
    const std::string_view p = parts[k];
    uint64_t v = 0;
    if (p == "asym") {
      c.mode = chorusQuantAsymmetric;
    } else if (p.starts_with("stochastic=") && parseUnsigned(p.substr(11), &v)) {
      c.rounding = chorusRoundStochastic;
      c.seed = v;
    } else if (k == 1 && parseUnsigned(p, &v) && v > 0) {
      c.groupSize = v;
    } else {
      *err = "--quant '" + std::string(spec) + "': '" + std::string(p) +
             "' is not a group size, asym or stochastic=SEED";
      return std::nullopt;
    }
  }
  return c;
}

bool collQuantizes(Coll c) {
  return c == Coll::kReduceScatter || c == Coll::kAllGather || c == Coll::kAllReduce;
}

std::optional<std::vector<Op>> parseOps(std::string_view name) {
  if (name == "all") return std::vector<Op>(std::begin(kAllReduceOps), std::end(kAllReduceOps));
  if (name == "mulsum") return std::vector<Op>{Op::kPreMulSum};
  for (const OpEntry& e : kOps) {
    if (e.op != Op::kNone && name == e.name) return std::vector<Op>{e.op};
  }
  return std::nullopt;
}

chorusRedOp_t builtinOp(Op op) {
  switch (op) {
    case Op::kSum: return chorusSum;
    case Op::kProd: return chorusProd;
    case Op::kMax: return chorusMax;
    case Op::kMin: return chorusMin;
    case Op::kAvg: return chorusAvg;
    case Op::kNone:
    case Op::kPreMulSum: break;
  }
  return chorusSum;  // unused by the collectives that take no operator
}

const char* typeName(chorusDataType_t t) {
  for (const TypeEntry& e : kTypes) {
    if (e.type == t) return e.name;
  }
  return "?";
}

std::optional<std::vector<chorusDataType_t>> parseTypes(std::string_view name) {
  if (name == "all") return std::vector<chorusDataType_t>(std::begin(kAllTypes), std::end(kAllTypes));
  for (const TypeEntry& e : kTypes) {
    if (name == e.name) return std::vector<chorusDataType_t>{e.type};
  }
  return std::nullopt;
}

size_t typeSize(chorusDataType_t t) {
  for (const TypeEntry& e : kTypes) {
    if (e.type == t) return e.size;
  }
  return 0;
}

std::optional<uint64_t> parseSize(std::string_view text) {
  if (text.empty()) return std::nullopt;
  long double mult = 1;
  switch (text.back()) {
    case 'k': case 'K': mult = 1024.0L; break;
    case 'm': case 'M': mult = 1024.0L * 1024; break;
    case 'g': case 'G': mult = 1024.0L * 1024 * 1024; break;
    case 't': case 'T': mult = 1024.0L * 1024 * 1024 * 1024; break;
    default: break;
  }
  if (mult != 1) text.remove_suffix(1);
  // Digits with at most one decimal point; no sign, exponent or spaces.
  bool sawDigit = false;
  bool sawPoint = false;
  for (char ch : text) {
    if (ch >= '0' && ch <= '9') {
      sawDigit = true;
    } else if (ch == '.' && !sawPoint) {
      sawPoint = true;
    } else {
      return std::nullopt;
    }
  }
  if (!sawDigit) return std::nullopt;
  std::string s(text);
  long double value = std::strtold(s.c_str(), nullptr) * mult;
  if (value > static_cast<long double>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  long double whole = std::floor(value);
  if (value != whole) return std::nullopt;  // a fraction of a byte
  return static_cast<uint64_t>(whole);
}

std::vector<uint64_t> sizeSeries(uint64_t minBytes, uint64_t maxBytes, uint64_t stepFactor,
                                 uint64_t stepBytes) {
  std::vector<uint64_t> out;
  for (uint64_t s = minBytes; s <= maxBytes;) {
    out.push_back(s);
    uint64_t next = stepFactor > 1 ? s * stepFactor : s + stepBytes;
    bool overflow = stepFactor > 1 ? (s != 0 && next / stepFactor != s) : next < s;
    if (overflow || next <= s) break;
    s = next;
  }
  return out;
}

CollGeometry collGeometry(Coll c, uint64_t bytes, size_t typeBytes, int nranks) {
  CollGeometry g;
  if (typeBytes == 0 || nranks < 1) return g;
  uint64_t elems = bytes / typeBytes;
  switch (c) {
    case Coll::kAllReduce:
    case Coll::kBroadcast:
    case Coll::kReduce:
    case Coll::kSendRecv:
    case Coll::kPingPong:
    case Coll::kStream:
      g.count = g.sendCount = g.recvCount = static_cast<size_t>(elems);
      break;
    case Coll::kAllGather:
      g.count = g.sendCount = alignedBlock(elems, typeBytes, nranks);
      g.recvCount = g.count * static_cast<size_t>(nranks);
      g.sendInPlaceOffset = g.count;  // sendbuff == recvbuff + rank*sendcount
      break;
    case Coll::kReduceScatter:
      g.count = g.recvCount = alignedBlock(elems, typeBytes, nranks);
      g.sendCount = g.count * static_cast<size_t>(nranks);
      g.recvInPlaceOffset = g.count;  // recvbuff == sendbuff + rank*recvcount
      break;
    case Coll::kAllToAll:
      g.count = alignedBlock(elems, typeBytes, nranks);
      g.sendCount = g.recvCount = g.count * static_cast<size_t>(nranks);
      break;
  }
  return g;
}

double busBwFactor(Coll c, int nranks) {
  double n = nranks;
  switch (c) {
    case Coll::kAllReduce: return 2.0 * (n - 1) / n;
    case Coll::kAllGather:
    case Coll::kReduceScatter:
    case Coll::kAllToAll: return (n - 1) / n;
    case Coll::kBroadcast:
    case Coll::kReduce:
    case Coll::kSendRecv:
    case Coll::kPingPong:
    case Coll::kStream: return 1.0;
  }
  return 1.0;
}

Bandwidth bandwidth(Coll c, size_t bytes, double seconds, int nranks) {
  Bandwidth bw;
  if (seconds <= 0) return bw;
  bw.algBw = static_cast<double>(bytes) / 1.0e9 / seconds;
  bw.busBw = bw.algBw * busBwFactor(c, nranks);
  return bw;
}

}  // namespace chorus::perf
