// CHORUS_CONNECT: which communicators connect every pair at creation.
#include <gtest/gtest.h>

#include "src/core/peers.h"

namespace chorus {
namespace {

TEST(ConnectMode, AutoIsEagerUpToTheLimitAndLazyAbove) {
  for (const int n : {1, 2, 8, Peers::kEagerMaxRanks}) {
    auto e = Peers::eagerFor("auto", n);
    ASSERT_TRUE(e.ok()) << e.status().message();
    EXPECT_TRUE(*e) << n << " ranks";
  }
  for (const int n : {Peers::kEagerMaxRanks + 1, 16384}) {
    auto e = Peers::eagerFor("auto", n);
    ASSERT_TRUE(e.ok()) << e.status().message();
    EXPECT_FALSE(*e) << n << " ranks";
  }
}

TEST(ConnectMode, EagerAndLazyAreWhatTheySayAtAnySize) {
  for (const int n : {2, Peers::kEagerMaxRanks + 1}) {
    EXPECT_TRUE(Peers::eagerFor("eager", n).value());
    EXPECT_FALSE(Peers::eagerFor("lazy", n).value());
  }
}

TEST(ConnectMode, AnUnknownModeIsNamed) {
  auto e = Peers::eagerFor("sometimes", 4);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("CHORUS_CONNECT='sometimes'"), std::string::npos)
      << e.status().message();
}

}  // namespace
}  // namespace chorus
