// The kafka sink type as sluice registers it (connectors/builtin_sink_types.cc):
// the keys a kafka sink accepts in the config file, how each is read and
// checked (properties by librdkafka itself), which are secret, how `config
// check --print` shows them, and the factory. To add a kafka sink option: a
// field in config::KafkaSinkConfig (config/config.h, with its default), a row
// in KafkaKeys::Keys() and a line in PrintKafkaSink (kafka_options.cc), and
// the key in docs/configuration.md; tests in kafka_config_test.cc.
#pragma once

#include "connectors/builtin_sink_types.h"

namespace sluice::connectors::kafka {

BuiltinSinkType KafkaSinkType();

}  // namespace sluice::connectors::kafka
