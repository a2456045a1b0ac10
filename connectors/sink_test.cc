#include "connectors/sink.h"

#include <gtest/gtest.h>

namespace sluice::connectors {
namespace {

TEST(FieldText, RendersScalarsRawAndStructuresAsJson) {
  auto state = nlohmann::json::parse(R"({"owner":{"name":"ann"},"balance":12.5,"ok":true,"tags":["a"],"none":null})");
  EXPECT_EQ(FieldText(state, "/owner/name"), "ann");
  EXPECT_EQ(FieldText(state, "/balance"), "12.5");
  EXPECT_EQ(FieldText(state, "/ok"), "true");
  EXPECT_EQ(FieldText(state, "/tags"), R"(["a"])");
  EXPECT_EQ(FieldText(state, "/owner"), R"({"name":"ann"})");
  EXPECT_EQ(FieldText(state, "/none"), std::nullopt);
  EXPECT_EQ(FieldText(state, "/missing/deeper"), std::nullopt);
  EXPECT_EQ(FieldText(state, "/tags/5"), std::nullopt);
}

}  // namespace
}  // namespace sluice::connectors
