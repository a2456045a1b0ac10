#include "connectors/kafka/kafka_sink.h"
#include "connectors/elasticsearch/elasticsearch_sink.h"
#include "connectors/mysql/mysql_sink.h"
#include "connectors/plugin/plugin_host.h"
#include "connectors/redis/redis_sink.h"
#include "connectors/sink.h"

namespace sluice::connectors {

Result<std::unique_ptr<Sink>> MakeSink(const config::SinkConfig& sink, const config::Config& global) {
  if (sink.type == "redis") return redis::MakeRedisSink(sink, global);
  if (sink.type == "mysql") return mysql::MakeMysqlSink(sink, global);
  if (sink.type == "elasticsearch") return elasticsearch::MakeElasticsearchSink(sink, global);
  if (sink.type == "kafka") return kafka::MakeKafkaSink(sink, global);
  // Any other type is a plugin's (config accepts it only when plugins are listed).
  if (!config::IsBuiltinSinkType(sink.type)) return plugin::MakePluginSink(sink, global);
  return InvalidArgument("sink '" + sink.name + "': unknown type '" + sink.type + "'");
}

}  // namespace sluice::connectors
