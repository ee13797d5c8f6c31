// Every collective x type x op x size x rank count, in place and out of place, through real
// processes, the real bootstrap and the real transports, against a reference computed here.
//
// One test per (collective, rank count): its ranks run the whole type/op/size sweep in one job,
// so a process launch is paid once. Inputs are fresh per case (seeded by the case), outputs are
// poisoned before every call, and the first wrong element is reported with its index and values.
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <iterator>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "tests/multiproc/harness.h"
#include "tests/multiproc/values.h"

namespace chorus::test {
namespace {

enum class C { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll, kAllToAllv,
               kGather, kScatter };
const char* cName(C c) {
  static const char* n[] = {"AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter",
                            "AllToAll", "AllToAllv", "Gather", "Scatter"};
  return n[static_cast<int>(c)];
}
bool reduces(C c) { return c == C::kAllReduce || c == C::kReduce || c == C::kReduceScatter; }
bool rooted(C c) { return c == C::kBroadcast || c == C::kReduce || c == C::kGather || c == C::kScatter; }
bool hasInPlace(C c) { return c != C::kAllToAllv && c != C::kGather && c != C::kScatter; }

constexpr uint8_t kPoison = 0xA5;
const uint64_t kSizes[] = {0, 1, 7, 1023, 4096, (1u << 20) + 3};
const chorusDataType_t kTypes[] = {chorusInt8,    chorusUint8,   chorusInt32,     chorusUint32,
                                   chorusInt64,   chorusUint64,  chorusFloat16,   chorusBfloat16,
                                   chorusFloat32, chorusFloat64, chorusFloat8e4m3, chorusFloat8e5m2};

struct Case {
  C coll;
  chorusDataType_t type;
  int op;
  uint64_t count;
  bool inPlace;
  int root;
  uint32_t seed;
};

std::string describe(const Case& c) {
  return std::string(cName(c.coll)) + "(" + typeName(c.type) + ", op " + std::to_string(c.op) +
         ", count " + std::to_string(c.count) + (c.inPlace ? ", in place" : "") +
         (rooted(c.coll) ? ", root " + std::to_string(c.root) : "") + ")";
}

// Per-pair element counts for AllToAllv: uneven, some zero.
uint64_t vcount(const Case& c, int from, int to) {
  if (c.count == 0) return 0;
  uint64_t h = (static_cast<uint64_t>(from) * 31 + static_cast<uint64_t>(to) * 17 + c.seed) % 7;
  return h == 3 ? 0 : (c.count * (h + 1)) / 4;
}

std::string checkRange(const Case& c, const char* what, const std::vector<uint8_t>& buf,
                       uint64_t first, uint64_t n, const std::function<double(uint64_t)>& want) {
  for (uint64_t i = 0; i < n; ++i) {
    double got = load(c.type, buf.data(), first + i);
    double w = want(i);
    if (!matches(c.type, c.op, got, w))
      return describe(c) + ": " + what + " element " + std::to_string(first + i) + " is " +
             std::to_string(got) + ", expected " + std::to_string(roundTo(c.type, w));
  }
  return "";
}

std::string runCase(chorusComm_t comm, int rank, int n, const Case& c) {
  const size_t es = typeSize(c.type);
  const uint64_t N = static_cast<uint64_t>(n);
  auto x = [&](int r, uint64_t j) { return inputValue(c.type, c.op, r, j, c.seed); };
  auto reduced = [&](uint64_t j) {
    double acc = x(0, j);
    for (int r = 1; r < n; ++r) acc = combine(c.op, acc, x(r, j));
    return finish(c.type, c.op, acc, n);
  };
  auto fill = [&](std::vector<uint8_t>& b, uint64_t first, uint64_t cnt, int r, uint64_t j0) {
    for (uint64_t i = 0; i < cnt; ++i) store(c.type, b.data(), first + i, x(r, j0 + i));
  };
  chorusRedOp_t op = static_cast<chorusRedOp_t>(c.op);
  std::vector<uint8_t> in, out;
  chorusResult_t res = chorusSuccess;
  std::string err;

  switch (c.coll) {
    case C::kAllReduce: {
      out.assign(c.count * es, kPoison);
      if (c.inPlace) {
        fill(out, 0, c.count, rank, 0);
        res = chorusAllReduce(out.data(), out.data(), c.count, c.type, op, comm, nullptr);
      } else {
        in.resize(c.count * es);
        fill(in, 0, c.count, rank, 0);
        res = chorusAllReduce(in.data(), out.data(), c.count, c.type, op, comm, nullptr);
      }
      if (res == chorusSuccess) err = checkRange(c, "output", out, 0, c.count, reduced);
      break;
    }
    case C::kBroadcast: {
      out.assign(c.count * es, kPoison);
      if (rank == c.root) {
        if (c.inPlace) {
          fill(out, 0, c.count, rank, 0);
        } else {
          in.resize(c.count * es);
          fill(in, 0, c.count, rank, 0);
        }
      }
      const void* src = c.inPlace ? out.data() : (rank == c.root ? in.data() : nullptr);
      res = chorusBroadcast(src, out.data(), c.count, c.type, c.root, comm, nullptr);
      if (res == chorusSuccess)
        err = checkRange(c, "output", out, 0, c.count, [&](uint64_t j) { return x(c.root, j); });
      break;
    }
    case C::kReduce: {
      out.assign(c.count * es, kPoison);
      in.resize(c.count * es);
      fill(in, 0, c.count, rank, 0);
      if (c.inPlace) {
        out = in;
        res = chorusReduce(out.data(), out.data(), c.count, c.type, op, c.root, comm, nullptr);
      } else {
        res = chorusReduce(in.data(), rank == c.root ? out.data() : nullptr, c.count, c.type, op,
                           c.root, comm, nullptr);
      }
      if (res == chorusSuccess && rank == c.root)
        err = checkRange(c, "root output", out, 0, c.count, reduced);
      break;
    }
    case C::kAllGather: {
      out.assign(N * c.count * es, kPoison);
      if (c.inPlace) {
        fill(out, static_cast<uint64_t>(rank) * c.count, c.count, rank, 0);
        res = chorusAllGather(out.data() + static_cast<uint64_t>(rank) * c.count * es, out.data(),
                              c.count, c.type, comm, nullptr);
      } else {
        in.resize(c.count * es);
        fill(in, 0, c.count, rank, 0);
        res = chorusAllGather(in.data(), out.data(), c.count, c.type, comm, nullptr);
      }
      for (int r = 0; r < n && res == chorusSuccess && err.empty(); ++r)
        err = checkRange(c, "output", out, static_cast<uint64_t>(r) * c.count, c.count,
                         [&](uint64_t j) { return x(r, j); });
      break;
    }
    case C::kReduceScatter: {
      in.resize(N * c.count * es);
      fill(in, 0, N * c.count, rank, 0);
      uint64_t off = static_cast<uint64_t>(rank) * c.count;
      auto want = [&](uint64_t j) { return reduced(off + j); };
      if (c.inPlace) {
        res = chorusReduceScatter(in.data(), in.data() + off * es, c.count, c.type, op, comm,
                                  nullptr);
        if (res == chorusSuccess) err = checkRange(c, "in-place output", in, off, c.count, want);
      } else {
        out.assign(c.count * es, kPoison);
        res = chorusReduceScatter(in.data(), out.data(), c.count, c.type, op, comm, nullptr);
        if (res == chorusSuccess) err = checkRange(c, "output", out, 0, c.count, want);
      }
      break;
    }
    case C::kAllToAll: {
      in.resize(N * c.count * es);
      fill(in, 0, N * c.count, rank, 0);
      if (c.inPlace) {
        out = in;
        res = chorusAllToAll(out.data(), out.data(), c.count, c.type, comm, nullptr);
      } else {
        out.assign(N * c.count * es, kPoison);
        res = chorusAllToAll(in.data(), out.data(), c.count, c.type, comm, nullptr);
      }
      for (int s = 0; s < n && res == chorusSuccess && err.empty(); ++s)
        err = checkRange(c, "output", out, static_cast<uint64_t>(s) * c.count, c.count,
                         [&](uint64_t j) { return x(s, static_cast<uint64_t>(rank) * c.count + j); });
      break;
    }
    case C::kAllToAllv: {
      std::vector<size_t> sc(N), sd(N), rc(N), rd(N);
      uint64_t sTotal = 0, rTotal = 0;
      for (int p = 0; p < n; ++p) {
        sc[p] = vcount(c, rank, p);
        sd[p] = sTotal + 1;  // gaps between blocks catch writes past a block
        sTotal += sc[p] + 1;
        rc[p] = vcount(c, p, rank);
        rd[p] = rTotal + 2;
        rTotal += rc[p] + 2;
      }
      in.assign(sTotal * es, 0);
      for (int p = 0; p < n; ++p) fill(in, sd[p], sc[p], rank, static_cast<uint64_t>(p) << 32);
      out.assign(rTotal * es, kPoison);
      res = chorusAllToAllv(in.data(), sc.data(), sd.data(), out.data(), rc.data(), rd.data(),
                            c.type, comm, nullptr);
      for (int p = 0; p < n && res == chorusSuccess && err.empty(); ++p) {
        err = checkRange(c, "output", out, rd[p], rc[p], [&](uint64_t j) {
          return x(p, (static_cast<uint64_t>(rank) << 32) + j);
        });
        // The gap before each block must still hold the poison.
        if (err.empty() && rTotal > 0 && out[(rd[p] - 1) * es] != kPoison)
          err = describe(c) + ": a write landed in the gap before the block from rank " +
                std::to_string(p);
      }
      break;
    }
    case C::kGather: {
      in.resize(c.count * es);
      fill(in, 0, c.count, rank, 0);
      if (rank == c.root) out.assign(N * c.count * es, kPoison);
      res = chorusGather(in.data(), rank == c.root ? out.data() : nullptr, c.count, c.type, c.root,
                         comm, nullptr);
      for (int r = 0; r < n && res == chorusSuccess && rank == c.root && err.empty(); ++r)
        err = checkRange(c, "root output", out, static_cast<uint64_t>(r) * c.count, c.count,
                         [&](uint64_t j) { return x(r, j); });
      break;
    }
    case C::kScatter: {
      if (rank == c.root) {
        in.resize(N * c.count * es);
        fill(in, 0, N * c.count, rank, 0);
      }
      out.assign(c.count * es, kPoison);
      res = chorusScatter(rank == c.root ? in.data() : nullptr, out.data(), c.count, c.type,
                          c.root, comm, nullptr);
      if (res == chorusSuccess)
        err = checkRange(c, "output", out, 0, c.count, [&](uint64_t j) {
          return x(c.root, static_cast<uint64_t>(rank) * c.count + j);
        });
      break;
    }
  }
  if (res != chorusSuccess)
    return describe(c) + " returned " + chorusGetErrorString(res) + ": " + chorusGetLastError(comm);
  return err;
}

// The same sweep runs under several configurations: the default (shared memory between these
// ranks: staging segment, direct and ring algorithms chosen by size), TCP only, shared memory
// without cross-memory attach, every algorithm of the collective forced, and for all-reduce the
// two exposures of two-shot (staging rounds, cross-memory attach).
struct Variant {
  std::string name;  // "" for the default
  std::map<std::string, std::string> env;
};

struct Param {
  C coll;
  int nranks;
  Variant variant;
};

// Test names say it all; keep gtest from dumping the parameter's bytes.
void PrintTo(const Param& p, std::ostream* os) {
  *os << cName(p.coll) << ", " << p.nranks << " ranks"
      << (p.variant.name.empty() ? "" : ", " + p.variant.name);
}

class Collectives : public ::testing::TestWithParam<Param> {};

TEST_P(Collectives, MatchesReference) {
  const Param p = GetParam();
  auto outcomes = runRanks(p.nranks, [&](chorusComm_t comm, int rank, int n) -> std::string {
    uint32_t seed = 1;
    std::vector<int> ops = {-1};
    if (reduces(p.coll)) ops = {chorusSum, chorusProd, chorusMax, chorusMin, chorusAvg};
    // The extra configurations exercise transports and algorithms, not the kernels: element
    // sizes 1, 2 and 8 cover every alignment and slicing path at a quarter of the time.
    std::vector<chorusDataType_t> types(std::begin(kTypes), std::end(kTypes));
    if (!p.variant.name.empty()) types = {chorusInt8, chorusBfloat16, chorusFloat64};
    for (chorusDataType_t t : types) {
      for (int op : ops) {
        for (uint64_t count : kSizes) {
          for (int inPlace = 0; inPlace < (hasInPlace(p.coll) ? 2 : 1); ++inPlace) {
            Case c{p.coll, t, op < 0 ? chorusSum : op, count, inPlace != 0,
                   rooted(p.coll) ? static_cast<int>(seed % static_cast<uint32_t>(n)) : -1, seed};
            ++seed;
            std::string err = runCase(comm, rank, n, c);
            if (!err.empty()) return "rank " + std::to_string(rank) + ": " + err;
          }
        }
      }
    }
    return "";
  }, RunOptions{.deadlineSeconds = 600, .env = p.variant.env});
  EXPECT_EQ(summarize(outcomes), "");
}

// Every registered algorithm of each collective (the registry's names).
std::vector<std::string> algorithmsOf(C c) {
  switch (c) {
    case C::kAllReduce: return {"ring", "oneshot", "twoshot"};
    case C::kBroadcast: return {"chain", "direct"};
    case C::kReduce: return {"chain", "direct"};
    case C::kAllGather: return {"ring", "direct"};
    case C::kReduceScatter: return {"ring", "direct"};
    case C::kAllToAll: return {"pairwise", "direct"};
    case C::kAllToAllv: return {"pairwise"};
    case C::kGather: return {"linear", "direct"};
    case C::kScatter: return {"linear", "direct"};
  }
  return {};
}

std::vector<Param> allParams() {
  std::vector<Param> v;
  for (C c : {C::kAllReduce, C::kBroadcast, C::kReduce, C::kAllGather, C::kReduceScatter,
              C::kAllToAll, C::kAllToAllv, C::kGather, C::kScatter}) {
    std::vector<Variant> variants = {{"", {}},
                                     {"tcp", {{"CHORUS_TRANSPORT", "tcp"}}},
                                     {"nocma", {{"CHORUS_SHM_CMA", "0"}}}};
    std::string coll = cName(c);  // CHORUS_ALGO spells collectives in lower case
    for (char& ch : coll) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    for (const std::string& a : algorithmsOf(c))
      variants.push_back({a, {{"CHORUS_ALGO", coll + ":" + a}}});
    if (c == C::kAllReduce || c == C::kAllGather) {
      // Through the staging segment in many small rounds (uneven last round, slices of a
      // round smaller than a cache line), and the same algorithm over cross-memory attach.
      const std::string a = c == C::kAllReduce ? "twoshot" : "direct";
      variants.push_back({"rounds4k", {{"CHORUS_SHM_STAGING_ROUND", "4K"}}});
      variants.push_back({a + "_cma", {{"CHORUS_ALGO", coll + ":" + a},
                                       {"CHORUS_SHM_STAGING_ROUND", "0"}}});
    }
    // The default runs every rank count; the other configurations the counts that exercise
    // both parities of slicing and the oversubscribed case (5 ranks on 2 cores), to bound time.
    for (const Variant& var : variants) {
      const std::vector<int> counts =
          var.name.empty() ? std::vector<int>{1, 2, 3, 4, 5, 8} : std::vector<int>{2, 3, 5};
      for (int n : counts) v.push_back({c, n, var});
    }
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(All, Collectives, ::testing::ValuesIn(allParams()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           std::string name = std::string(cName(info.param.coll)) + "_" +
                                              std::to_string(info.param.nranks) + "ranks";
                           if (!info.param.variant.name.empty())
                             name += "_" + info.param.variant.name;
                           return name;
                         });

}  // namespace
}  // namespace chorus::test
