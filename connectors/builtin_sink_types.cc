#include "connectors/builtin_sink_types.h"

#include "connectors/elasticsearch/elasticsearch_options.h"
#include "connectors/kafka/kafka_options.h"
#include "connectors/mysql/mysql_options.h"
#include "connectors/redis/redis_options.h"

namespace sluice::connectors {

const std::vector<BuiltinSinkType>& BuiltinSinkTypeList() {
  // One line per built-in sink type; its folder provides the rest.
  static const std::vector<BuiltinSinkType> kTypes = {
      redis::RedisSinkType(),
      mysql::MysqlSinkType(),
      elasticsearch::ElasticsearchSinkType(),
      kafka::KafkaSinkType(),
  };
  return kTypes;
}

const config::SinkTypes& BuiltinSinkTypes() {
  static const config::SinkTypes kTypes = [] {
    std::vector<config::SinkType> types;
    for (const BuiltinSinkType& t : BuiltinSinkTypeList()) types.push_back(t.config);
    return config::SinkTypes(std::move(types));
  }();
  return kTypes;
}

bool IsBuiltinSinkType(std::string_view type) { return BuiltinSinkTypes().Find(type) != nullptr; }

}  // namespace sluice::connectors
