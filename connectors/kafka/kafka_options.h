// The kafka sink type as sluice registers it (connectors/builtin_sink_types.cc):
// its keys, their checks and their redaction, and its factory.
#pragma once

#include "connectors/builtin_sink_types.h"

namespace sluice::connectors::kafka {

// Its keys are still read and printed in config/config.cc
// (config::KafkaSinkType()); the redis type shows where they are headed
// (connectors/redis/redis_options.cc).
BuiltinSinkType KafkaSinkType();

}  // namespace sluice::connectors::kafka
