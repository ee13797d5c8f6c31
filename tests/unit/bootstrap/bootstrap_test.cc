#include "src/bootstrap/bootstrap.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <thread>

#include "src/bootstrap/peer_info.h"
#include "tests/unit/bootstrap/test_util.h"

namespace chorus::bootstrap {
namespace {

using testing::loopback;
using testing::runForked;
using Bytes = std::vector<uint8_t>;

// What rank r contributes to call c: random bytes of a length that differs per rank and call
// (including empty), so a rank receiving another rank's or another call's data is caught.
Bytes contribution(int rank, int call) {
  std::mt19937 rng(static_cast<uint32_t>(rank * 7919 + call * 104729 + 1));
  Bytes b((rank * 37 + call * 11) % 200);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

JobId newJobOnPort(uint16_t port) {
  auto secret = randomSecret();
  EXPECT_TRUE(secret.ok());
  return JobId{loopback(port), secret.ok() ? *secret : Secret{}};
}

// One rank's life: create, three all-gathers checked against every rank's contribution, a
// barrier. Returns 0 or a code saying which step failed (the message goes to stderr).
int runRank(const JobId& job, int rank, int nranks, bool serve) {
  auto b = Bootstrap::create(job, rank, nranks, 10.0, serve);
  if (!b.ok()) {
    std::fprintf(stderr, "rank %d create: %s\n", rank, b.status().toString().c_str());
    return 10;
  }
  for (int call = 0; call < 3; ++call) {
    auto all = (*b)->allGather(contribution(rank, call));
    if (!all.ok()) {
      std::fprintf(stderr, "rank %d allGather: %s\n", rank, all.status().toString().c_str());
      return 11;
    }
    if (static_cast<int>(all->size()) != nranks) return 12;
    for (int r = 0; r < nranks; ++r)
      if ((*all)[r] != contribution(r, call)) return 13;
  }
  Status s = (*b)->barrier();
  if (!s.ok()) {
    std::fprintf(stderr, "rank %d barrier: %s\n", rank, s.toString().c_str());
    return 14;
  }
  return 0;
}

TEST(Bootstrap, SingleRankNeedsNoStore) {
  // Nothing listens on this address: a one-rank job must not try to reach it.
  JobId job = newJobOnPort(testing::freePort());
  auto b = Bootstrap::create(job, 0, 1, 1.0, /*serveStore=*/false);
  ASSERT_TRUE(b.ok()) << b.status().toString();
  for (int call = 0; call < 3; ++call) {
    auto all = (*b)->allGather(contribution(0, call));
    ASSERT_TRUE(all.ok());
    ASSERT_EQ(all->size(), 1u);
    EXPECT_EQ((*all)[0], contribution(0, call));
  }
  EXPECT_TRUE((*b)->barrier().ok());
}

class BootstrapRanks : public ::testing::TestWithParam<int> {};

TEST_P(BootstrapRanks, EnvPathRankZeroServes) {
  int nranks = GetParam();
  JobId job = newJobOnPort(testing::freePort());
  auto codes = runForked(nranks, [&](int r) { return runRank(job, r, nranks, true); });
  for (int r = 0; r < nranks; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST_P(BootstrapRanks, UniqueIdPathWithRegisteredStore) {
  int nranks = GetParam();
  testing::StoreProcess store;  // the process that made the id
  ASSERT_TRUE(store.ok());
  const chorusUniqueId id = store.id();
  auto codes = runForked(nranks, [&](int r) {
    auto job = decodeUniqueId(id);  // what each rank does with the broadcast id
    if (!job.ok()) return 20;
    return runRank(*job, r, nranks, false);
  });
  for (int r = 0; r < nranks; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
  EXPECT_TRUE(store.stop());
}

INSTANTIATE_TEST_SUITE_P(Ranks, BootstrapRanks, ::testing::Values(1, 2, 5));

TEST(Bootstrap, RankZeroInTheProcessThatMadeTheIdHoldsTheStore) {
  auto started = startJobStore(loopback(0));
  ASSERT_TRUE(started.ok()) << started.status().toString();
  JobId job = *started;
  std::unique_ptr<Bootstrap> rank0;
  std::thread t([&] {
    auto b = Bootstrap::create(job, 0, 2, 5.0, false);
    EXPECT_TRUE(b.ok()) << b.status().toString();
    if (b.ok()) rank0 = std::move(*b);
  });
  auto rank1 = Bootstrap::create(job, 1, 2, 5.0, false);
  t.join();
  ASSERT_TRUE(rank1.ok()) << rank1.status().toString();
  ASSERT_NE(rank0, nullptr);
  // The API may let go of the registry's reference right after init: rank 0 still holds it.
  EXPECT_TRUE(releaseServer(job.root));
  std::thread t0([&] { EXPECT_TRUE(rank0->barrier().ok()); });
  EXPECT_TRUE((*rank1)->barrier().ok());
  t0.join();
}

TEST(Bootstrap, PeerInfoAllGather) {
  constexpr int kRanks = 3;
  JobId job = newJobOnPort(testing::freePort());
  auto codes = runForked(kRanks, [&](int r) {
    auto b = Bootstrap::create(job, r, kRanks, 10.0, true);
    if (!b.ok()) return 10;
    PeerInfo me;
    me.rank = r;
    me.hostId = localHostId();
    me.pid = static_cast<int32_t>(::getpid());
    me.hostname = localHostname();
    me.endpoints["tcp"] = contribution(r, 9);
    auto all = (*b)->allGather(serializePeerInfo(me));
    if (!all.ok()) return 11;
    for (int p = 0; p < kRanks; ++p) {
      auto info = deserializePeerInfo((*all)[p]);
      if (!info.ok() || info->rank != p || info->hostId != me.hostId ||
          info->endpoints.at("tcp") != contribution(p, 9))
        return 12;
    }
    return (*b)->barrier().ok() ? 0 : 13;
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// Rank 0 serves the store and stops it as soon as its barrier returns: the others must still
// get their answers (regression: a barrier made of set + multiGet stranded the last rank).
TEST(Bootstrap, RankZeroMayLeaveRightAfterTheBarrier) {
  constexpr int kRanks = 4;
  for (int round = 0; round < 5; ++round) {
    JobId job = newJobOnPort(testing::freePort());
    auto codes = runForked(kRanks, [&](int r) {
      auto b = Bootstrap::create(job, r, kRanks, 5.0, true);
      if (!b.ok()) return 10;
      if (r != 0) ::usleep(static_cast<useconds_t>(r * 2000));  // vary who arrives last
      Status s = (*b)->barrier();
      if (!s.ok()) {
        std::fprintf(stderr, "rank %d barrier: %s\n", r, s.toString().c_str());
        return 11;
      }
      return 0;
    });
    for (int r = 0; r < kRanks; ++r) EXPECT_EQ(codes[r], 0) << "round " << round << " rank " << r;
  }
}

TEST(Bootstrap, AllGatherTimesOutNamingTheMissingRank) {
  constexpr int kRanks = 4;
  JobId job = newJobOnPort(testing::freePort());
  // Ranks 0, 1 and 3 come; rank 2 never does.
  const int present[] = {0, 1, 3};
  auto codes = runForked(3, [&](int i) {
    int r = present[i];
    auto b = Bootstrap::create(job, r, kRanks, 0.5, true);
    if (!b.ok()) {
      std::fprintf(stderr, "rank %d create: %s\n", r, b.status().toString().c_str());
      return 10;
    }
    auto all = (*b)->allGather(contribution(r, 0));
    if (all.ok()) return 11;
    const Status& s = all.status();
    if (s.code() != Code::kTimeout) return 12;
    if (s.message().find("rank 2 (of 4) never arrived") == std::string::npos) {
      std::fprintf(stderr, "rank %d: unexpected message: %s\n", r, s.message().c_str());
      return 13;
    }
    // Rank 0 serves the store: it stays until the others have asked it who is missing.
    if (r == 0) ::usleep(1500 * 1000);
    return 0;
  }, 8.0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(codes[i], 0) << "rank " << present[i];
}

TEST(Bootstrap, MissingRankZeroTimesOut) {
  JobId job = newJobOnPort(testing::freePort());
  auto start = std::chrono::steady_clock::now();
  auto b = Bootstrap::create(job, 1, 2, 0.4, true);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Code::kTimeout) << b.status().toString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

TEST(Bootstrap, NranksMismatchIsInvalidUsage) {
  auto started = startJobStore(loopback(0));
  ASSERT_TRUE(started.ok());
  JobId job = *started;
  auto rank0 = Bootstrap::create(job, 0, 2, 2.0, false);
  ASSERT_TRUE(rank0.ok()) << rank0.status().toString();
  auto rank1 = Bootstrap::create(job, 1, 3, 2.0, false);
  ASSERT_FALSE(rank1.ok());
  EXPECT_EQ(rank1.status().code(), Code::kInvalidUsage);
  EXPECT_NE(rank1.status().message().find("nranks=3, rank 0 with nranks=2"), std::string::npos)
      << rank1.status().message();
  EXPECT_TRUE(releaseServer(job.root));
}

TEST(Bootstrap, DuplicateRankIsInvalidUsage) {
  auto started = startJobStore(loopback(0));
  ASSERT_TRUE(started.ok());
  JobId job = *started;
  // Rank 0 publishes the size that the other ranks wait for when joining.
  auto rank0 = Bootstrap::create(job, 0, 3, 2.0, false);
  ASSERT_TRUE(rank0.ok()) << rank0.status().toString();
  auto first = Bootstrap::create(job, 1, 3, 2.0, false);
  ASSERT_TRUE(first.ok()) << first.status().toString();
  auto second = Bootstrap::create(job, 1, 3, 2.0, false);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kInvalidUsage);
  EXPECT_NE(second.status().message().find("rank 1 joined the job twice"), std::string::npos)
      << second.status().message();
  EXPECT_TRUE(releaseServer(job.root));
}

TEST(Bootstrap, WrongSecretIsRefused) {
  auto started = startJobStore(loopback(0));
  ASSERT_TRUE(started.ok());
  JobId job = *started;
  job.secret[0] ^= 1;
  auto b = Bootstrap::create(job, 1, 2, 2.0, false);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Code::kInvalidUsage);
  EXPECT_NE(b.status().message().find("refused the job secret"), std::string::npos)
      << b.status().message();
  EXPECT_TRUE(releaseServer(started->root));
}

TEST(Bootstrap, BadArguments) {
  JobId job = newJobOnPort(1);
  EXPECT_EQ(Bootstrap::create(job, 2, 2, 1.0, false).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Bootstrap::create(job, -1, 2, 1.0, false).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Bootstrap::create(job, 0, 0, 1.0, false).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Bootstrap::create(job, 0, 2, 0.0, false).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace chorus::bootstrap
