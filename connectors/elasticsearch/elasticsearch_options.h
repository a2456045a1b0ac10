// The elasticsearch sink type as sluice registers it
// (connectors/builtin_sink_types.cc): the keys an elasticsearch sink accepts
// in the config file, how each is read and checked, which are secret, how
// `config check --print` shows them, and the factory. To add an option: a
// field in config::ElasticsearchSinkConfig (config/config.h, with its
// default), a row in ElasticsearchKeys::Keys() and a line in
// PrintElasticsearchSink (elasticsearch_options.cc), and the key in
// docs/configuration.md; tests in elasticsearch_config_test.cc.
#pragma once

#include "connectors/builtin_sink_types.h"

namespace sluice::connectors::elasticsearch {

BuiltinSinkType ElasticsearchSinkType();

}  // namespace sluice::connectors::elasticsearch
