// The redis sink type as sluice registers it (connectors/builtin_sink_types.cc):
// its options (RedisSinkOptions), the keys a redis sink accepts in the config
// file, how each is read and checked, which are secret, how `config check
// --print` shows them, and the factory. To add a redis sink option: a field
// in RedisSinkOptions below (with its default), a row in RedisKeys::Keys()
// and a line in PrintRedisSink (redis_options.cc), the key in
// docs/configuration.md, and tests in redis_options_test.cc.
//
// The grammars the keys follow have one parser each, shared with the sink:
// the URL (redis_url.h) and the key template (key_template.h).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/tls_options.h"
#include "connectors/builtin_sink_types.h"

namespace sluice::connectors::redis {

// A redis sink's options, as sink.Options<RedisSinkOptions>() of a loaded
// config::SinkConfig (the defaults when the file leaves them out).
struct RedisSinkOptions {
  std::string url = "redis://127.0.0.1:6379/0";  // redis[s]://[[user]:password@]host[:port][/db]; secret-capable
  std::string key = "{type}:{id}";                // template: {id} and {type} are replaced
  enum class Format { kJson, kHash } format = Format::kJson;
  std::vector<config::FieldMapping> fields;       // hash format: the fields; empty: every top-level member
  std::chrono::milliseconds ttl{0};               // 0: keys do not expire
  std::chrono::milliseconds tombstone_ttl{24 * 3600 * 1000};  // how long a delete is remembered
  config::TlsClientOptions tls;                   // with a rediss:// url only
  std::string sentinel_password;                  // secret: AUTH to the sentinels (a sentinel url only)
  // After each batch, WAIT until this many replicas have it (0: do not
  // wait): a failover then loses no write whose offset was saved.
  uint32_t wait_replicas = 0;
};

BuiltinSinkType RedisSinkType();

}  // namespace sluice::connectors::redis
