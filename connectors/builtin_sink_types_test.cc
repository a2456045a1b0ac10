#include "connectors/builtin_sink_types.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "connectors/kafka/kafka_options.h"

namespace sluice::connectors {
namespace {

TEST(BuiltinSinkTypes, OneListForTheLoaderAndTheFactories) {
  std::vector<std::string> names;
  for (const BuiltinSinkType& t : BuiltinSinkTypeList()) {
    names.emplace_back(t.config.name);
    EXPECT_TRUE(t.config.read) << t.config.name;
    EXPECT_TRUE(t.config.print) << t.config.name;
    EXPECT_TRUE(t.make) << t.config.name;
    EXPECT_EQ(BuiltinSinkTypes().Find(t.config.name), &BuiltinSinkTypes().all()[names.size() - 1]);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"redis", "mysql", "elasticsearch", "kafka", "aggregate"}));
  EXPECT_TRUE(IsBuiltinSinkType("kafka"));
  EXPECT_FALSE(IsBuiltinSinkType("jsonl"));  // a plugin's
  EXPECT_FALSE(IsBuiltinSinkType(""));
}

TEST(BuiltinSinkTypes, PointViewsCanBePushedTo) {
  EXPECT_TRUE(BuiltinSinkTypes().Find("redis")->can_push);
  EXPECT_TRUE(BuiltinSinkTypes().Find("mysql")->can_push);
  EXPECT_FALSE(BuiltinSinkTypes().Find("elasticsearch")->can_push);
  EXPECT_FALSE(BuiltinSinkTypes().Find("kafka")->can_push);
  EXPECT_EQ(BuiltinSinkTypes().Find("kafka")->default_batch_max, kafka::kBatchMaxDefault);
}

}  // namespace
}  // namespace sluice::connectors
