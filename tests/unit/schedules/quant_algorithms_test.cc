// The quantized algorithms (algorithms/quant) through the symbolic checker: every one, on 1-12
// ranks, flat and in host groups (equal hosts of 2, 3 and 4 ranks, and unequal ones, where the
// host-aware ones build their one-hop form), for counts around the group size (a short last
// group, fewer groups than ranks for the all-reduce, zero), 4 and 8 bits, 2- and 4-byte types,
// in and out of place, chunks of one group and of many. The checker proves the data flow (every
// output is the sum of exactly the right inputs, through whole blocks of the right size); the
// numbers are tested by tests/multiproc/quantized_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/registry.h"
#include "src/exec/plan.h"
#include "tests/support/checker.h"

namespace chorus::algo {
namespace {

using sched::Coll;
using sched::CollDesc;

// Hosts of `perHost` ranks in interleaved order (rank r on host r % hosts) — the builders must
// not assume a host's ranks are contiguous — or, with perHost 0, unequal hosts {0}, {1, 2}, ...
std::vector<int> hostsOf(int n, int perHost) {
  std::vector<int> h(static_cast<size_t>(n));
  if (perHost == 0) {
    for (int r = 0; r < n; ++r) h[static_cast<size_t>(r)] = r == 0 ? 0 : 1 + (r - 1) / 2;
    return h;
  }
  const int hosts = n / perHost;
  for (int r = 0; r < n; ++r) h[static_cast<size_t>(r)] = r % hosts;
  return h;
}

void checkCase(const AlgoInfo& a, int n, const CollDesc& d) {
  std::vector<sched::Schedule> plans;
  for (int r = 0; r < n; ++r) {
    auto plan = exec::planAlgorithm(a, d, r, n, {});
    ASSERT_TRUE(plan.ok()) << plan.status().toString();
    plans.push_back((*plan)->schedule);
  }
  const std::vector<CollDesc> all(static_cast<size_t>(n), d);
  sched::CheckOptions opts;
  opts.seed = d.count * 31 + static_cast<uint64_t>(n);
  Status st = sched::checkSchedules(a.coll, n, all, plans, opts);
  ASSERT_TRUE(st.ok()) << collName(a.coll) << ":" << a.name << " n=" << n << " count=" << d.count
                       << " elemSize=" << d.elemSize << " bits=" << d.quant->bits
                       << " group=" << d.quant->groupSize << " inPlace=" << d.inPlace
                       << " chunkBytes=" << d.chunkBytes << " hosts=" << d.hostOf.size() << "\n"
                       << st.toString();
  for (const sched::Schedule& s : plans) {
    const AlgoInfo* built = findAlgorithm(a.coll, s.algo);
    ASSERT_NE(built, nullptr) << s.algo;
    EXPECT_TRUE(built->quantized) << s.algo;
    if (n > 1) {
      EXPECT_FALSE(s.peers.empty());
    }
  }
}

class QuantSweep : public testing::TestWithParam<std::string> {};

TEST_P(QuantSweep, SymbolicChecker) {
  const std::string q = GetParam();
  const size_t colon = q.find(':');
  const AlgoInfo* a = nullptr;
  for (const AlgoInfo* x : allAlgorithms())
    if (x->quantized && q.substr(0, colon) == collName(x->coll) && q.substr(colon + 1) == x->name)
      a = x;
  ASSERT_NE(a, nullptr) << q;
  for (int n = 1; n <= 12; ++n) {
    std::vector<std::vector<int>> layouts = {{}};
    for (int per : {2, 3, 4})
      if (n % per == 0 && n > per) layouts.push_back(hostsOf(n, per));
    if (n >= 4) layouts.push_back(hostsOf(n, 0));
    for (const std::vector<int>& hosts : layouts)
      for (uint32_t bits : {4u, 8u})
        for (uint64_t group : {2u, 4u}) {
          for (uint64_t count : {uint64_t{0}, group, 3 * group + 1, 5 * group + 2}) {
            for (size_t es : {2u, 4u})
              for (bool inPlace : {false, true})
                for (uint64_t chunk : {es, uint64_t{1} << 20}) {
                  // Keep the larger rank counts quick: one type and chunking per case.
                  if (n > 6 && (es != 4 || chunk != es) && count != group) continue;
                  CollDesc d;
                  d.coll = a->coll;
                  d.count = count;
                  d.elemSize = es;
                  d.inPlace = inPlace;
                  d.chunkBytes = chunk;
                  d.hostOf = hosts;
                  d.quant = kernels::QuantConfig{.bits = bits, .groupSize = group};
                  checkCase(*a, n, d);
                  if (testing::Test::HasFatalFailure()) return;
                }
          }
        }
  }
}

std::vector<std::string> quantizedNames() {
  std::vector<std::string> out;
  for (const AlgoInfo* a : allAlgorithms())
    if (a->quantized) out.push_back(std::string(collName(a->coll)) + ":" + a->name);
  return out;
}

std::string paramName(const testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& c : s)
    if (c == ':') c = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Quantized, QuantSweep, testing::ValuesIn(quantizedNames()), paramName);

TEST(QuantRegistry, EachQuantizedCollectiveHasItsAlgorithms) {
  const struct {
    Coll coll;
    const char* name;
  } want[] = {{Coll::kReduceScatter, "quant_direct"}, {Coll::kReduceScatter, "quant_two_hop"},
              {Coll::kReduceScatter, "quant_ring"},   {Coll::kAllGather, "quant_direct"},
              {Coll::kAllGather, "quant_hier"},       {Coll::kAllReduce, "quant_direct"},
              {Coll::kAllReduce, "quant_two_hop"}};
  size_t quantized = 0;
  for (const AlgoInfo* a : allAlgorithms()) quantized += a->quantized ? 1 : 0;
  EXPECT_EQ(quantized, std::size(want));
  for (const auto& w : want) {
    const AlgoInfo* a = findAlgorithm(w.coll, w.name);
    ASSERT_NE(a, nullptr) << w.name;
    EXPECT_TRUE(a->quantized);
    EXPECT_EQ(a->needs, Needs::kMessages);
  }
}

// Which algorithm runs where: 2-hop only where it is really 2-hop, and the name says so.
TEST(QuantRegistry, TwoHopBuildsItsOneHopFormWhereHostsAreNotEqual) {
  const AlgoInfo* a = findAlgorithm(Coll::kReduceScatter, "quant_two_hop");
  ASSERT_NE(a, nullptr);
  CollDesc d;
  d.coll = Coll::kReduceScatter;
  d.count = 64;
  d.quant = kernels::QuantConfig{.bits = 4, .groupSize = 16};
  d.hostOf = {0, 1, 1, 2, 2, 2};  // (1, 2, 3)
  EXPECT_EQ(makeSchedule(*a, d, 0, 6).algo, "quant_direct");
  d.hostOf = {0, 0, 1, 1, 2, 2};
  EXPECT_EQ(makeSchedule(*a, d, 0, 6).algo, "quant_two_hop");
  d.hostOf = {0, 1, 2, 3};  // one rank per host
  EXPECT_EQ(makeSchedule(*a, d, 0, 4).algo, "quant_direct");
}

// Stochastic rounding keys each element's random number by its stream index: no two encoding
// steps of one call, on any ranks, may use the same index (else their rounding errors are
// correlated and stop averaging out).
TEST(QuantRegistry, StreamIndicesNeverRepeatWithinACall) {
  for (const AlgoInfo* a : allAlgorithms()) {
    if (!a->quantized) continue;
    for (const std::vector<int>& hosts :
         {std::vector<int>{}, std::vector<int>{0, 0, 1, 1, 2, 2}, std::vector<int>{0, 1, 0, 1, 0, 1}}) {
      CollDesc d;
      d.coll = a->coll;
      d.count = 40;
      d.chunkBytes = 16 * 4;  // several chunks
      d.hostOf = hosts;
      d.quant = kernels::QuantConfig{.bits = 4, .groupSize = 8, .stochastic = true};
      std::vector<std::pair<uint64_t, uint64_t>> used;  // [index, index + count)
      for (int r = 0; r < 6; ++r)
        for (const sched::Step& s : makeSchedule(*a, d, r, 6).steps)
          if (s.kind == sched::StepKind::kQuantize || s.kind == sched::StepKind::kRequantize)
            used.push_back({s.quant.index, s.quant.index + s.quant.count});
      std::sort(used.begin(), used.end());
      ASSERT_FALSE(used.empty()) << a->name;
      for (size_t k = 1; k < used.size(); ++k)
        ASSERT_LE(used[k - 1].second, used[k].first)
            << collName(a->coll) << ":" << a->name << " hosts " << hosts.size()
            << ": two encodings share stream indices from " << used[k].first;
    }
  }
}

// Inter-host bytes per rank: what the 2-hop schedule sends across hosts is H-1 blocks, a
// 1/L share of the one-hop schedule's.
TEST(QuantRegistry, TwoHopSendsHMinusOneBlocksAcrossHosts) {
  CollDesc d;
  d.coll = Coll::kReduceScatter;
  d.count = 1024;
  d.elemSize = 4;
  d.quant = kernels::QuantConfig{.bits = 4, .groupSize = 256};
  d.hostOf = {0, 0, 0, 1, 1, 1};  // 2 hosts x 3
  const uint64_t block = kernels::quant::packedBytes(*d.quant, d.count);
  for (const char* name : {"quant_two_hop", "quant_direct"}) {
    const sched::Schedule s = makeSchedule(*findAlgorithm(Coll::kReduceScatter, name), d, 1, 6);
    uint64_t across = 0, inside = 0;
    for (int p = 0; p < 6; ++p) (d.hostOf[static_cast<size_t>(p)] == 0 ? inside : across) += s.bytesTo(p);
    if (std::string(name) == "quant_two_hop") {
      EXPECT_EQ(across, 1 * block);
      EXPECT_EQ(inside, 2 * 2 * block);  // (L-1) mates x H blocks
    } else {
      EXPECT_EQ(across, 3 * block);
      EXPECT_EQ(inside, 2 * block);
    }
  }
}

}  // namespace
}  // namespace chorus::algo
