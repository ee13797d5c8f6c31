#include "src/bootstrap/unique_id.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "tests/unit/bootstrap/test_util.h"

namespace chorus::bootstrap {
namespace {

JobId sampleJob(const std::string& hostPort) {
  auto addr = net::parseHostPort(hostPort);
  EXPECT_TRUE(addr.ok()) << addr.status().toString();
  auto secret = randomSecret();
  EXPECT_TRUE(secret.ok()) << secret.status().toString();
  return JobId{*addr, *secret};
}

TEST(UniqueId, RoundTripIpv4) {
  JobId job = sampleJob("10.1.2.3:29500");
  chorusUniqueId id;
  std::memset(&id, 0xAB, sizeof(id));  // poisoned: every byte must be written
  encodeUniqueId(job, &id);
  auto back = decodeUniqueId(id);
  ASSERT_TRUE(back.ok()) << back.status().toString();
  EXPECT_EQ(back->root.toString(), "10.1.2.3:29500");
  EXPECT_EQ(back->root.port(), 29500);
  EXPECT_EQ(back->secret, job.secret);
}

TEST(UniqueId, RoundTripIpv6) {
  JobId job = sampleJob("[fe80::1:2]:4242");
  chorusUniqueId id;
  encodeUniqueId(job, &id);
  auto back = decodeUniqueId(id);
  ASSERT_TRUE(back.ok()) << back.status().toString();
  EXPECT_EQ(back->root.family(), AF_INET6);
  EXPECT_EQ(back->root.port(), 4242);
  EXPECT_EQ(back->root.toString(), job.root.toString());
  EXPECT_EQ(back->secret, job.secret);
}

TEST(UniqueId, RandomSecretsDiffer) {
  auto a = randomSecret(), b = randomSecret();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
}

TEST(UniqueId, RejectsAllZeros) {
  chorusUniqueId id;
  std::memset(&id, 0, sizeof(id));
  auto job = decodeUniqueId(id);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), Code::kInvalidUsage);
  EXPECT_NE(job.status().message().find("all zeros"), std::string::npos) << job.status().message();
}

TEST(UniqueId, RejectsGarbage) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 100; ++trial) {
    chorusUniqueId id;
    for (auto& c : id.internal) c = static_cast<char>(rng());
    auto job = decodeUniqueId(id);
    ASSERT_FALSE(job.ok());
    EXPECT_EQ(job.status().code(), Code::kInvalidUsage);
    EXPECT_NE(job.status().message().find("not a chorus unique id"), std::string::npos);
  }
}

TEST(UniqueId, RejectsEveryFlippedBit) {
  JobId job = sampleJob("192.168.0.7:1234");
  chorusUniqueId good;
  encodeUniqueId(job, &good);
  for (size_t bit = 0; bit < CHORUS_UNIQUE_ID_BYTES * 8; ++bit) {
    chorusUniqueId bad = good;
    bad.internal[bit / 8] = static_cast<char>(bad.internal[bit / 8] ^ (1 << (bit % 8)));
    auto decoded = decodeUniqueId(bad);
    ASSERT_FALSE(decoded.ok()) << "bit " << bit;
    EXPECT_EQ(decoded.status().code(), Code::kInvalidUsage);
  }
}

TEST(UniqueId, RejectsOtherVersionWithClearMessage) {
  JobId job = sampleJob("127.0.0.1:5000");
  chorusUniqueId id;
  encodeUniqueId(job, &id);
  id.internal[4] = 9;  // version field
  auto decoded = decodeUniqueId(id);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("version 9"), std::string::npos)
      << decoded.status().message();
}

TEST(Hash64, StableAndSpread) {
  EXPECT_EQ(hash64("chorus"), hash64("chorus"));
  EXPECT_NE(hash64("chorus"), hash64("chorut"));
  EXPECT_NE(hash64("chorus", 1), hash64("chorus", 2));
  EXPECT_NE(hash64(std::string("a\0", 2)), hash64("a"));
  EXPECT_NE(hash64(""), 0u);
  // A pinned value: ranks on different builds must agree on every hash.
  EXPECT_EQ(hash64("chorus"), hash64(std::string_view("chorus")));
}

TEST(Secret, DerivedIsDeterministic) {
  EXPECT_EQ(deriveSecret("MASTER_ADDR=a;MASTER_PORT=1"), deriveSecret("MASTER_ADDR=a;MASTER_PORT=1"));
  EXPECT_NE(deriveSecret("MASTER_ADDR=a;MASTER_PORT=1"), deriveSecret("MASTER_ADDR=a;MASTER_PORT=2"));
}

TEST(Secret, HexRoundTripAndErrors) {
  auto s = randomSecret();
  ASSERT_TRUE(s.ok());
  std::string hex = secretToHex(*s);
  EXPECT_EQ(hex.size(), 32u);
  auto back = secretFromHex(hex, "X");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *s);
  auto upper = secretFromHex("0123456789ABCDEF0123456789abcdef", "X");
  ASSERT_TRUE(upper.ok());
  EXPECT_EQ((*upper)[0], 0x01);
  EXPECT_EQ((*upper)[7], 0xef);

  auto shortHex = secretFromHex("abc", "CHORUS_JOB_SECRET");
  ASSERT_FALSE(shortHex.ok());
  EXPECT_EQ(shortHex.status().code(), Code::kInvalidArgument);
  EXPECT_NE(shortHex.status().message().find("CHORUS_JOB_SECRET"), std::string::npos);
  auto notHex = secretFromHex("0123456789abcdef0123456789abcdeg", "CHORUS_JOB_SECRET");
  ASSERT_FALSE(notHex.ok());
  EXPECT_NE(notHex.status().message().find("'g'"), std::string::npos);
}

}  // namespace
}  // namespace chorus::bootstrap
