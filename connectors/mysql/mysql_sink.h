// The built-in mysql sink (see connectors/sink.h for the contract).
#pragma once

#include <memory>

#include "connectors/sink.h"

namespace sluice::connectors::mysql {

// Builds a mysql sink for a validated config (not yet opened).
Result<std::unique_ptr<Sink>> MakeMysqlSink(const config::SinkConfig& sink, const config::Config& global);

}  // namespace sluice::connectors::mysql
