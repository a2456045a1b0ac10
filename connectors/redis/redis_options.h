// The redis sink type as sluice registers it (connectors/builtin_sink_types.cc):
// the keys a redis sink accepts in the config file, how each is read and
// checked, which are secret, how `config check --print` shows them, and the
// factory. To add a redis sink option: a field in config::RedisSinkConfig
// (config/config.h, with its default), a row in RedisKeys::Keys() and a line
// in PrintRedisSink (redis_options.cc), and the key in
// docs/configuration.md; tests in redis_config_test.cc.
//
// The grammars the keys follow have one parser each, shared with the sink:
// the URL (redis_url.h) and the key template (key_template.h).
#pragma once

#include "connectors/builtin_sink_types.h"

namespace sluice::connectors::redis {

BuiltinSinkType RedisSinkType();

}  // namespace sluice::connectors::redis
