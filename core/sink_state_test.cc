#include "core/sink_state.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(SinkState, EveryStateRoundTripsThroughItsName) {
  for (size_t i = 0; i < kSinkStates; ++i) {
    const auto s = static_cast<SinkState>(i);
    EXPECT_EQ(SinkStateFromName(SinkStateName(s)), s);
  }
  EXPECT_EQ(SinkStateName(SinkState::kBackoff), "backoff");
}

TEST(SinkState, UnknownTextIsNoState) {
  EXPECT_FALSE(SinkStateFromName("").has_value());
  EXPECT_FALSE(SinkStateFromName("Running").has_value());
  EXPECT_FALSE(SinkStateFromName("running ").has_value());
}

}  // namespace
}  // namespace sluice
