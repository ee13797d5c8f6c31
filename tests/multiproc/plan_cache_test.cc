// The plan cache's bound in real ranks: an all-to-allv whose counts and displacements change on
// every call — each call a new signature, so a new plan — runs many times the cache's entry
// bound, and the cache must stay within its bounds while every result stays right. A signature
// seen before (evicted long ago, or recent) still runs correctly and, when recent, adds nothing.
//
// The cache is read inside each rank through src/api/comm_handle.h, so this binary links the
// internal archive instead of libchorus.so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "src/api/comm_handle.h"
#include "src/core/communicator.h"
#include "tests/multiproc/harness.h"

namespace chorus::test {
namespace {

constexpr int kRanks = 3;
// Eight times the entry bound: the cache fills and turns over many times.
constexpr int kCalls = 8 * static_cast<int>(PlanCache::kDefaultEntries);
constexpr int32_t kPoison = -0x5a5a5a5b;

// Elements rank `from` sends rank `to` in call `call`: changes from call to call, sometimes 0.
size_t countOf(int call, int from, int to) {
  return static_cast<size_t>((call * 7 + from * 5 + to * 3) % 13);
}

int32_t valueOf(int call, int from, int to, size_t j) {
  uint64_t h = (static_cast<uint64_t>(call) << 40) ^ (static_cast<uint64_t>(from) << 32) ^
               (static_cast<uint64_t>(to) << 24) ^ j;
  h *= 0x9e3779b97f4a7c15ull;
  return static_cast<int32_t>(h >> 33);
}

// One all-to-allv of call number `call`, checked. The receive side leaves `call % 4096`
// elements before the first block, so no two calls share a signature on any rank.
std::string runCall(chorusComm_t comm, int rank, int n, int call) {
  std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
  size_t sTotal = 0, rTotal = static_cast<size_t>(call % 4096);
  for (int p = 0; p < n; ++p) {
    sc[p] = countOf(call, rank, p);
    sd[p] = sTotal;
    sTotal += sc[p];
    rc[p] = countOf(call, p, rank);
    rd[p] = rTotal;
    rTotal += rc[p] + 1;  // a gap after each block catches writes past it
  }
  std::vector<int32_t> in(std::max<size_t>(sTotal, 1)), out(rTotal + 1, kPoison);
  for (int p = 0; p < n; ++p)
    for (size_t j = 0; j < sc[p]; ++j) in[sd[p] + j] = valueOf(call, rank, p, j);
  chorusResult_t r = chorusAllToAllv(in.data(), sc.data(), sd.data(), out.data(), rc.data(),
                                     rd.data(), chorusInt32, comm, nullptr);
  if (r != chorusSuccess)
    return "call " + std::to_string(call) + ": " + chorusGetErrorString(r) + ": " +
           chorusGetLastError(comm);
  for (int p = 0; p < n; ++p) {
    for (size_t j = 0; j < rc[p]; ++j)
      if (out[rd[p] + j] != valueOf(call, p, rank, j))
        return "call " + std::to_string(call) + ": element " + std::to_string(j) +
               " from rank " + std::to_string(p) + " is wrong";
    if (out[rd[p] + rc[p]] != kPoison)
      return "call " + std::to_string(call) + ": a write past the block from rank " +
             std::to_string(p);
  }
  if (rd[0] > 0 && out[rd[0] - 1] != kPoison)
    return "call " + std::to_string(call) + ": a write before the first block";
  return "";
}

TEST(PlanCacheBound, AllToAllvWithNewCountsOnEveryCall) {
  auto outcomes = runRanks(kRanks, [](chorusComm_t comm, int rank, int n) -> std::string {
    const Communicator* c = api::communicatorOf(comm);
    RANK_CHECK(c != nullptr, "no communicator behind the handle");
    const PlanCache& cache = c->planCache();
    size_t largest = 0, largestBytes = 0;
    for (int call = 0; call < kCalls; ++call) {
      std::string err = runCall(comm, rank, n, call);
      RANK_CHECK(err.empty(), err);
      largest = std::max(largest, cache.size());
      largestBytes = std::max(largestBytes, cache.bytes());
      RANK_CHECK(cache.size() <= PlanCache::kDefaultEntries,
                 "the plan cache holds " + std::to_string(cache.size()) + " plans after call " +
                     std::to_string(call));
      RANK_CHECK(cache.bytes() <= PlanCache::kDefaultBytes,
                 "the plan cache holds " + std::to_string(cache.bytes()) + " bytes");
    }
    // It filled up and turned over: every new signature past the bound replaced an old one.
    RANK_CHECK(largest == PlanCache::kDefaultEntries,
               "the cache never filled (" + std::to_string(largest) + " plans at most)");
    RANK_CHECK(cache.evictions() >= static_cast<uint64_t>(kCalls) - PlanCache::kDefaultEntries,
               "only " + std::to_string(cache.evictions()) + " evictions");
    RANK_CHECK(largestBytes > 0, "plans without a footprint");
    // An early signature, evicted long ago, is rebuilt and still right; the most recent ones
    // are hits and add nothing.
    std::string err = runCall(comm, rank, n, 0);
    RANK_CHECK(err.empty(), "call 0 again: " + err);
    const uint64_t evicted = cache.evictions();
    for (int call = kCalls - 10; call < kCalls; ++call) {
      err = runCall(comm, rank, n, call);
      RANK_CHECK(err.empty(), "again: " + err);
    }
    RANK_CHECK(cache.evictions() == evicted, "re-running recent calls evicted plans (misses)");
    RANK_CHECK(cache.size() == PlanCache::kDefaultEntries, "the cache shrank or grew");
    return "";
  }, RunOptions{.deadlineSeconds = 300});
  EXPECT_EQ(summarize(outcomes), "");
}

// CHORUS_PLAN_CACHE sets the entry bound: 8 plans, 40 new signatures, the cache turns over.
TEST(PlanCacheBound, SetByTheEnvironment) {
  auto outcomes = runRanks(kRanks, [](chorusComm_t comm, int rank, int n) -> std::string {
    const PlanCache& cache = api::communicatorOf(comm)->planCache();
    for (int call = 0; call < 40; ++call) {
      std::string err = runCall(comm, rank, n, call);
      RANK_CHECK(err.empty(), err);
      RANK_CHECK(cache.size() <= 8, "the plan cache holds " + std::to_string(cache.size()) +
                                        " plans after call " + std::to_string(call));
    }
    RANK_CHECK(cache.size() == 8, "the cache holds " + std::to_string(cache.size()) + " plans");
    RANK_CHECK(cache.evictions() >= 32, "only " + std::to_string(cache.evictions()) +
                                            " evictions");
    return "";
  }, RunOptions{.deadlineSeconds = 120, .env = {{"CHORUS_PLAN_CACHE", "8"}}});
  EXPECT_EQ(summarize(outcomes), "");
}

TEST(PlanCacheBound, ZeroPlansIsRefusedByName) {
  auto outcomes = runRanks(1, [](chorusComm_t, int, int) -> std::string { return ""; },
                           RunOptions{.deadlineSeconds = 30, .env = {{"CHORUS_PLAN_CACHE", "0"}}});
  const std::string s = summarize(outcomes);
  EXPECT_NE(s.find("CHORUS_PLAN_CACHE must be at least 1 plan, got 0"), std::string::npos) << s;
}

}  // namespace
}  // namespace chorus::test
