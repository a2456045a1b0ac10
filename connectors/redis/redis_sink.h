// The built-in redis sink (see connectors/sink.h for the contract).
//
// One key per entity, named by the sink's key template, holding either the
// state as a JSON string with "_version" spliced in first (format json) or a
// hash of mapped fields plus "_version" (format hash). A delete removes the
// key and leaves a tombstone key (value key + ":_tomb") holding the deleted
// version for tombstone_ttl. Every write goes through one Lua script, loaded
// with SCRIPT LOAD and called with EVALSHA, that compares the incoming
// version with max(stored version, tombstone version) and writes atomically.
// Apply pipelines a whole batch on one synchronous hiredis connection.
//
// Threads: like every Sink, one thread at a time; the connection is owned by
// the instance and re-opened lazily by Apply/Health/Verify after a loss.
#pragma once

#include <chrono>
#include <memory>

#include "connectors/sink.h"

namespace sluice::connectors::redis {

// Connection limits; the defaults suit the engine.
struct RedisConnectionLimits {
  // Longest wait for the TCP connection to be established.
  std::chrono::milliseconds connect_timeout{2000};
  // Longest a send or a receive may block (per socket operation, not per
  // batch) before the connection is treated as lost (kUnavailable).
  std::chrono::milliseconds io_timeout{5000};
};

// Builds a redis sink for a validated config (not yet opened).
Result<std::unique_ptr<Sink>> MakeRedisSink(const config::SinkConfig& sink, const config::Config& global);

// The same with explicit connection limits (tests use short ones).
Result<std::unique_ptr<Sink>> MakeRedisSink(const config::SinkConfig& sink, const config::Config& global,
                                            const RedisConnectionLimits& limits);

}  // namespace sluice::connectors::redis
