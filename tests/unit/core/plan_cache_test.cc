// The plan cache (src/core/plan_cache.h): hits and misses by the whole call signature, least
// recently used eviction, and both bounds (plan count, plan bytes). Plans here are bare
// exec::Plan values with a chosen footprint: the cache reads nothing else of them.
#include "src/core/plan_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace chorus {
namespace {

std::shared_ptr<const exec::Plan> plan(const std::string& name, size_t footprint) {
  auto p = std::make_shared<exec::Plan>();
  p->name = name;
  p->footprint = footprint;
  return p;
}

// An all-to-allv signature; `i` lands in its displacements, as a call whose counts change.
PlanKey alltoallvKey(uint64_t i) {
  PlanKey k;
  k.coll = sched::Coll::kAllToAllv;
  k.elemSize = 4;
  k.extra = {1, 2, 3, 0, i, i + 1, 2, 1, 3, 0, 7, i};
  return k;
}

PlanKey allreduceKey(uint64_t count) {
  PlanKey k;
  k.coll = sched::Coll::kAllReduce;
  k.elemSize = 4;
  k.count = count;
  return k;
}

TEST(PlanCache, MissesThenHitsTheSamePlan) {
  PlanCache cache;
  const PlanKey key = allreduceKey(100);
  EXPECT_EQ(cache.find(key), nullptr) << "an empty cache hit";
  auto p = plan("allreduce:ring", 1000);
  cache.insert(key, p);
  EXPECT_EQ(cache.find(key), p);
  EXPECT_EQ(cache.find(key), p) << "a hit must not consume the entry";
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.bytes(), 1000u);
  EXPECT_EQ(cache.evictions(), 0u);
}

// Every field of the signature tells calls apart: a key differing in any one of them misses.
TEST(PlanCache, EveryFieldOfTheKeyTellsCallsApart) {
  PlanCache cache;
  PlanKey base = alltoallvKey(5);
  base.root = 2;
  base.count = 77;
  cache.insert(base, plan("base", 10));
  std::vector<std::pair<std::string, PlanKey>> others;
  auto variant = [&](const std::string& what, auto change) {
    PlanKey k = base;
    change(k);
    others.push_back({what, k});
  };
  variant("collective", [](PlanKey& k) { k.coll = sched::Coll::kAllToAll; });
  variant("in place", [](PlanKey& k) { k.inPlace = true; });
  variant("element size", [](PlanKey& k) { k.elemSize = 8; });
  variant("root", [](PlanKey& k) { k.root = 1; });
  variant("count", [](PlanKey& k) { k.count = 78; });
  variant("one count or displacement", [](PlanKey& k) { k.extra[7] += 1; });
  variant("counts' length", [](PlanKey& k) { k.extra.push_back(0); });
  variant("counts' order", [](PlanKey& k) { std::swap(k.extra[0], k.extra[1]); });
  for (const auto& [what, k] : others) {
    EXPECT_EQ(cache.find(k), nullptr) << "a key differing in its " << what << " hit";
    cache.insert(k, plan(what, 10));
  }
  // Each is an entry of its own, and the original is still there.
  EXPECT_EQ(cache.size(), others.size() + 1);
  ASSERT_NE(cache.find(base), nullptr);
  EXPECT_EQ(cache.find(base)->name, "base");
  for (const auto& [what, k] : others) {
    auto p = cache.find(k);
    ASSERT_NE(p, nullptr) << what;
    EXPECT_EQ(p->name, what);
  }
}

TEST(PlanCache, InsertingAKeyAgainReplacesItsPlan) {
  PlanCache cache;
  const PlanKey key = allreduceKey(1);
  cache.insert(key, plan("first", 300));
  cache.insert(key, plan("second", 500));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.bytes(), 500u);
  EXPECT_EQ(cache.find(key)->name, "second");
  EXPECT_EQ(cache.evictions(), 0u) << "a replacement is not an eviction";
}

TEST(PlanCache, CountBoundEvictsTheLeastRecentlyUsed) {
  PlanCache cache(/*maxEntries=*/4, /*maxBytes=*/1u << 30);
  for (uint64_t i = 0; i < 4; ++i) cache.insert(allreduceKey(i), plan(std::to_string(i), 10));
  // Use 0 and 2: 1 is now the least recently used, then 3.
  ASSERT_NE(cache.find(allreduceKey(0)), nullptr);
  ASSERT_NE(cache.find(allreduceKey(2)), nullptr);
  cache.insert(allreduceKey(4), plan("4", 10));
  EXPECT_EQ(cache.size(), 4u);
  EXPECT_EQ(cache.evictions(), 1u);
  EXPECT_EQ(cache.find(allreduceKey(1)), nullptr) << "the least recently used plan stayed";
  cache.insert(allreduceKey(5), plan("5", 10));
  EXPECT_EQ(cache.find(allreduceKey(3)), nullptr) << "the next least recently used plan stayed";
  for (uint64_t i : {0, 2, 4, 5}) EXPECT_NE(cache.find(allreduceKey(i)), nullptr) << i;
  EXPECT_EQ(cache.size(), 4u);
  EXPECT_EQ(cache.bytes(), 40u);
  EXPECT_EQ(cache.evictions(), 2u);
}

TEST(PlanCache, ByteBoundEvictsTheLeastRecentlyUsed) {
  PlanCache cache(/*maxEntries=*/100, /*maxBytes=*/1000);
  cache.insert(allreduceKey(0), plan("0", 300));
  cache.insert(allreduceKey(1), plan("1", 300));
  cache.insert(allreduceKey(2), plan("2", 300));
  ASSERT_NE(cache.find(allreduceKey(0)), nullptr);  // 1 is now the oldest
  cache.insert(allreduceKey(3), plan("3", 300));    // 1200 > 1000
  EXPECT_EQ(cache.find(allreduceKey(1)), nullptr);
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.bytes(), 900u);
  // One large plan pushes out as many old ones as it takes.
  cache.insert(allreduceKey(4), plan("4", 650));
  EXPECT_EQ(cache.bytes(), 950u);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(cache.find(allreduceKey(3)), nullptr);
  EXPECT_NE(cache.find(allreduceKey(4)), nullptr);
  EXPECT_EQ(cache.evictions(), 3u);
}

TEST(PlanCache, APlanOverTheByteBoundAloneStaysUntilTheNextInsert) {
  PlanCache cache(/*maxEntries=*/100, /*maxBytes=*/1000);
  cache.insert(allreduceKey(0), plan("small", 100));
  auto huge = plan("huge", 5000);
  cache.insert(allreduceKey(1), huge);
  // It is about to run: it stays, everything older goes.
  EXPECT_EQ(cache.find(allreduceKey(1)), huge);
  EXPECT_EQ(cache.find(allreduceKey(0)), nullptr);
  EXPECT_EQ(cache.size(), 1u);
  cache.insert(allreduceKey(2), plan("next", 100));
  EXPECT_EQ(cache.find(allreduceKey(1)), nullptr);
  EXPECT_EQ(cache.bytes(), 100u);
}

TEST(PlanCache, AnEvictedPlanStaysValidForWhoeverHoldsIt) {
  PlanCache cache(/*maxEntries=*/1, /*maxBytes=*/1u << 30);
  cache.insert(allreduceKey(0), plan("held", 10));
  std::shared_ptr<const exec::Plan> held = cache.find(allreduceKey(0));
  cache.insert(allreduceKey(1), plan("other", 10));
  ASSERT_EQ(cache.find(allreduceKey(0)), nullptr);
  EXPECT_EQ(held->name, "held");
  EXPECT_EQ(held.use_count(), 1) << "the cache still holds an evicted plan";
}

// The communicator's bounds (512 plans, 64 MiB): an all-to-allv whose counts change on every
// call replaces old plans instead of growing the cache.
TEST(PlanCache, DefaultBoundsHoldForCallsThatNeverRepeat) {
  PlanCache cache;
  EXPECT_EQ(PlanCache::kDefaultEntries, 512u);
  EXPECT_EQ(PlanCache::kDefaultBytes, 64u << 20);
  for (uint64_t i = 0; i < 5000; ++i) {
    cache.insert(alltoallvKey(i), plan("alltoallv:pairwise", 2000));
    ASSERT_LE(cache.size(), PlanCache::kDefaultEntries) << "after call " << i;
  }
  EXPECT_EQ(cache.size(), 512u);
  EXPECT_EQ(cache.bytes(), 512u * 2000);
  EXPECT_EQ(cache.evictions(), 5000u - 512);
  // The most recent calls are the ones kept.
  EXPECT_NE(cache.find(alltoallvKey(4999)), nullptr);
  EXPECT_NE(cache.find(alltoallvKey(5000 - 512)), nullptr);
  EXPECT_EQ(cache.find(alltoallvKey(5000 - 513)), nullptr);
  // Large plans: the byte bound binds first.
  for (uint64_t i = 0; i < 200; ++i) {
    cache.insert(alltoallvKey(100000 + i), plan("large", 1u << 20));
    ASSERT_LE(cache.bytes(), PlanCache::kDefaultBytes) << "after large plan " << i;
  }
  EXPECT_EQ(cache.size(), 64u);
}

TEST(PlanCache, ClearEmptiesIt) {
  PlanCache cache;
  for (uint64_t i = 0; i < 10; ++i) cache.insert(allreduceKey(i), plan("p", 100));
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
  EXPECT_EQ(cache.find(allreduceKey(3)), nullptr);
  cache.insert(allreduceKey(3), plan("again", 100));
  EXPECT_EQ(cache.find(allreduceKey(3))->name, "again");
}

}  // namespace
}  // namespace chorus
