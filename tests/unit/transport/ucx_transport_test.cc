// What the UCX transport adds to the contract the conformance suite checks (run over UCX by the
// ctest entries transport_conformance.ucx_*): the tag layout, the error-mode setting, when the
// kind is eligible, and that destroying transports and connections leaves no UCX worker,
// endpoint or context behind. Skipped, saying why, in a build without UCX.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/scoped_env.h"
#include "tests/unit/transport/conformance.h"
#include "transports/transport.h"

#if CHORUS_HAVE_UCX
#include "transports/ucx/ucx_transport.h"
#include "transports/ucx/ucx_worker.h"
#endif

namespace chorus::conformance {
namespace {

#if CHORUS_HAVE_UCX

using chorus::testing::ScopedEnv;

const TransportFactory& ucxKind() {
  const TransportFactory* f = findTransport("ucx");
  EXPECT_NE(f, nullptr);
  return *f;
}

TEST(UcxTags, FieldsDoNotOverlapAndMatchingIgnoresOnlyTheMessageTag) {
  for (uint64_t comm : {uint64_t{0}, ~uint64_t{0}, uint64_t{0x0123456789abcdef}, randomU64()}) {
    const uint64_t c = ucx::commBits(comm);
    EXPECT_EQ(c & ucx::kControlBit, 0u);
    EXPECT_EQ(c & ((uint64_t{1} << 48) - 1), 0u) << "communicator bits below bit 48";
    const int rank = ucx::kMaxRanks - 1;
    const ucp_tag_t t = ucx::dataTag(c, rank, 0xfffffffffull);
    EXPECT_EQ(t & ucx::kMessageTagMask, 0xfffffffull);
    EXPECT_EQ((t >> ucx::kMessageTagBits) & (ucx::kMaxRanks - 1), static_cast<uint64_t>(rank));
    EXPECT_EQ(t & ~((uint64_t{1} << 48) - 1), c);
    // Two message tags from one sender match the same receive; another sender, a control
    // message or another communicator's bits do not.
    EXPECT_EQ(ucx::dataTag(c, 3, 1) & ucx::kMatchMask, ucx::dataTag(c, 3, 99) & ucx::kMatchMask);
    EXPECT_NE(ucx::dataTag(c, 3, 1) & ucx::kMatchMask, ucx::dataTag(c, 4, 1) & ucx::kMatchMask);
    EXPECT_NE(ucx::controlTag(c, 3) & ucx::kMatchMask, ucx::dataTag(c, 3, 0) & ucx::kMatchMask);
  }
  EXPECT_NE(ucx::commBits(1), ucx::commBits(2));
}

TEST(UcxEligibility, NamedInChorusTransportItIsAvailable) {
  const TransportFactory& f = ucxKind();
  ASSERT_NE(f.unavailable, nullptr);
  {
    ScopedEnv env("CHORUS_TRANSPORT", "tcp,ucx");
    EXPECT_EQ(f.unavailable(), nullptr);
  }
  ScopedEnv env("CHORUS_TRANSPORT", "tcp");
  // Not named: available only with an RDMA-class device, and then it says nothing.
  if (const char* why = f.unavailable()) {
    EXPECT_NE(std::string(why).find("RDMA"), std::string::npos) << why;
  }
}

TEST(UcxEligibility, BadErrorModeIsRefusedNamingTheVariable) {
  ScopedEnv env("CHORUS_UCX_ERR_MODE", "sometimes");
  auto t = ucxKind().create(contextFor(0, 2, 1));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
  EXPECT_NE(t.status().message().find("CHORUS_UCX_ERR_MODE='sometimes'"), std::string::npos)
      << t.status().message();
}

TEST(UcxEligibility, WithoutAnRdmaDeviceItScoresBelowTcp) {
  auto t = ucxKind().create(contextFor(0, 2, 7));
  ASSERT_TRUE(t.ok()) << t.status().toString();
  EndpointBlob blob;
  ASSERT_TRUE((*t)->listen(&blob).ok());
  const Reach r = (*t)->canConnect(identity(0), identity(1), blob);
  ASSERT_TRUE(r.ok);
  if (!ucx::hasRdmaDevice()) {
    EXPECT_LT(r.score, 10) << "above chorus's own tcp transport";
  }
  EXPECT_FALSE((*t)->canConnect(identity(0), identity(1), {}).ok);
  EXPECT_FALSE((*t)->canConnect(identity(0), identity(1), EndpointBlob(40, 7)).ok);
}

TEST(UcxEligibility, ForeignEndpointsAreRefusedNamingTheRank) {
  auto a = ucxKind().create(contextFor(0, 3, 11));
  auto b = ucxKind().create(contextFor(1, 3, 12));  // another communicator
  ASSERT_TRUE(a.ok() && b.ok());
  EndpointBlob ba, bb;
  ASSERT_TRUE((*a)->listen(&ba).ok() && (*b)->listen(&bb).ok());
  auto c = (*a)->connect(1, bb, 1);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("another communicator"), std::string::npos)
      << c.status().message();
  auto d = (*a)->connect(2, bb, 1);  // rank 1's endpoint given for rank 2
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("rank 2"), std::string::npos) << d.status().message();
}

// Everything made — context, workers (one per transport, splits included), endpoints (one per
// connection) — is gone once the transports and connections are, on the healthy path and after
// a cancel.
TEST(UcxLeaks, DestroyLeavesNoWorkerEndpointOrContext) {
  ASSERT_EQ(ucx::census().workers, 0) << "an earlier test leaked";
  for (const bool cancelFirst : {false, true}) {
    SCOPED_TRACE(cancelFirst ? "after a cancel" : "healthy");
    {
      const uint64_t comm = randomU64();
      std::vector<std::shared_ptr<Transport>> t;
      std::vector<EndpointBlob> blob(2);
      for (int r = 0; r < 2; ++r) {
        auto made = ucxKind().create(contextFor(r, 2, comm));
        ASSERT_TRUE(made.ok()) << made.status().toString();
        t.push_back(std::move(made).value());
        ASSERT_TRUE(t.back()->listen(&blob[static_cast<size_t>(r)]).ok());
      }
      auto split = t[0]->forSplit(contextFor(0, 1, comm + 1));
      ASSERT_TRUE(split.ok());
      EndpointBlob splitBlob;
      ASSERT_TRUE((*split)->listen(&splitBlob).ok());
      EXPECT_EQ(ucx::census().contexts, 1) << "one context per process";
      EXPECT_EQ(ucx::census().workers, 3) << "one worker per transport";
      auto c0 = t[0]->connect(1, blob[1], kConnectSeconds);
      auto c1 = t[1]->connect(0, blob[0], kConnectSeconds);
      ASSERT_TRUE(c0.ok() && c1.ok());
      EXPECT_EQ(ucx::census().endpoints, 2);
      expectTransfer(**c0, **c1, randomBytes(100000), 5);
      if (cancelFirst) {
        ASSERT_TRUE((*c0)->cancel(remoteError("test abort")).ok());
      }
    }
    const ucx::Census left = ucx::census();
    EXPECT_EQ(left.endpoints, 0);
    EXPECT_EQ(left.workers, 0);
    EXPECT_EQ(left.contexts, 0) << "the context goes with the last worker";
  }
}

#else

TEST(Ucx, NotBuilt) { GTEST_SKIP() << "this build has no UCX transport (CHORUS_WITH_UCX=OFF)"; }

#endif

}  // namespace
}  // namespace chorus::conformance
