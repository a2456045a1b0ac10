// The built-in redis sink (see connectors/sink.h for the contract).
#pragma once

#include <memory>

#include "connectors/sink.h"

namespace sluice::connectors::redis {

// Builds a redis sink for a validated config (not yet opened).
Result<std::unique_ptr<Sink>> MakeRedisSink(const config::SinkConfig& sink, const config::Config& global);

}  // namespace sluice::connectors::redis
