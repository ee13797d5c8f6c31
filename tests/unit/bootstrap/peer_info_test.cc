#include "src/bootstrap/peer_info.h"

#include <gtest/gtest.h>

#include <random>

#include "src/bootstrap/unique_id.h"
#include "tests/unit/bootstrap/test_util.h"

namespace chorus::bootstrap {
namespace {

PeerInfo samplePeer() {
  std::mt19937 rng(777);
  PeerInfo p;
  p.rank = 5;
  p.hostId = 0x0123456789abcdefull;
  p.pid = 43210;
  p.pidNamespace = 4026531836ull;
  p.hostname = "node-17.cluster";
  p.numa = 3;
  p.gpu = 7;
  p.nic = 1;
  std::vector<uint8_t> tcp(37), shm(5);
  for (auto& b : tcp) b = static_cast<uint8_t>(rng());
  for (auto& b : shm) b = static_cast<uint8_t>(rng());
  p.endpoints["tcp"] = tcp;
  p.endpoints["shm"] = shm;
  p.endpoints["empty"] = {};
  p.heartbeat = {4, 0x1f, 0x90, 127, 0, 0, 1};
  return p;
}

TEST(PeerInfo, RoundTrip) {
  PeerInfo p = samplePeer();
  auto bytes = serializePeerInfo(p);
  auto back = deserializePeerInfo(bytes);
  ASSERT_TRUE(back.ok()) << back.status().toString();
  EXPECT_EQ(back->rank, p.rank);
  EXPECT_EQ(back->hostId, p.hostId);
  EXPECT_EQ(back->pid, p.pid);
  EXPECT_EQ(back->pidNamespace, p.pidNamespace);
  EXPECT_EQ(back->hostname, p.hostname);
  EXPECT_EQ(back->numa, 3);
  EXPECT_EQ(back->gpu, 7);
  EXPECT_EQ(back->nic, 1);
  EXPECT_EQ(back->endpoints, p.endpoints);
  EXPECT_EQ(back->heartbeat, p.heartbeat);
}

TEST(PeerInfo, RoundTripEmpty) {
  PeerInfo p;
  auto back = deserializePeerInfo(serializePeerInfo(p));
  ASSERT_TRUE(back.ok()) << back.status().toString();
  EXPECT_EQ(back->rank, -1);
  EXPECT_TRUE(back->endpoints.empty());
}

TEST(PeerInfo, RejectsEveryTruncation) {
  auto bytes = serializePeerInfo(samplePeer());
  for (size_t len = 0; len < bytes.size(); ++len) {
    auto r = deserializePeerInfo(bytes.data(), len);
    ASSERT_FALSE(r.ok()) << "accepted " << len << " of " << bytes.size() << " bytes";
    EXPECT_EQ(r.status().code(), Code::kInvalidUsage);
  }
}

TEST(PeerInfo, RejectsTrailingBytesAndOtherVersions) {
  auto bytes = serializePeerInfo(samplePeer());
  auto longer = bytes;
  longer.push_back(0);
  auto r = deserializePeerInfo(longer);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("after its end"), std::string::npos);

  auto otherVersion = bytes;
  otherVersion[4] = 1;  // the format before ranks carried their place (numa, gpu, nic)
  r = deserializePeerInfo(otherVersion);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidUsage);
  EXPECT_NE(r.status().message().find("version 1"), std::string::npos);
}

TEST(PeerInfo, RejectsGarbage) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<uint8_t> junk(rng() % 300);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    auto r = deserializePeerInfo(junk);
    EXPECT_FALSE(r.ok());
  }
  // A valid header followed by a huge hostname length must fail without allocating it.
  auto bytes = serializePeerInfo(samplePeer());
  bytes[30] = 0xff;  // after magic, version, rank, host id, pid, pid namespace
  bytes[31] = 0xff;
  bytes[32] = 0xff;
  bytes[33] = 0x7f;
  auto r = deserializePeerInfo(bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("hostname"), std::string::npos) << r.status().message();
}

TEST(HostId, StableAndOverridable) {
  testing::ScopedEnv env;
  env.unset("CHORUS_HOST_ID");
  uint64_t natural = localHostId();
  EXPECT_EQ(natural, localHostId());
  EXPECT_FALSE(localHostname().empty());

  env.set("CHORUS_HOST_ID", "fake-host-a");
  uint64_t a = localHostId();
  EXPECT_EQ(a, hash64("fake-host-a"));
  EXPECT_NE(a, natural);
  env.set("CHORUS_HOST_ID", "fake-host-b");
  EXPECT_NE(localHostId(), a);
}

}  // namespace
}  // namespace chorus::bootstrap
