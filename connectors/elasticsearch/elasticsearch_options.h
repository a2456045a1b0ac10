// The elasticsearch sink type as sluice registers it (connectors/builtin_sink_types.cc):
// its keys, their checks and their redaction, and its factory.
#pragma once

#include "connectors/builtin_sink_types.h"

namespace sluice::connectors::elasticsearch {

// Its keys are still read and printed in config/config.cc
// (config::ElasticsearchSinkType()); the redis type shows where they are headed
// (connectors/redis/redis_options.cc).
BuiltinSinkType ElasticsearchSinkType();

}  // namespace sluice::connectors::elasticsearch
