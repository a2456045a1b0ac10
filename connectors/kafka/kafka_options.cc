#include "connectors/kafka/kafka_options.h"

#include "connectors/kafka/kafka_sink.h"

namespace sluice::connectors::kafka {

BuiltinSinkType KafkaSinkType() {
  return {config::KafkaSinkType(),
          [](const config::SinkConfig& sink, const config::Config& global) { return MakeKafkaSink(sink, global); }};
}

}  // namespace sluice::connectors::kafka
