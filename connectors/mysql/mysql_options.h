// The mysql sink type as sluice registers it (connectors/builtin_sink_types.cc):
// the keys a mysql sink accepts in the config file, how each is read and
// checked (also across sinks: no two write one table), how `config check
// --print` shows them, and the factory. To add a mysql sink option: a field
// in config::MysqlSinkConfig (config/config.h, with its default), a row in
// MysqlKeys::Keys() and a line in PrintMysqlSink (mysql_options.cc), and the
// key in docs/configuration.md; tests in config/config_test.cc.
#pragma once

#include "connectors/builtin_sink_types.h"

namespace sluice::connectors::mysql {

BuiltinSinkType MysqlSinkType();

}  // namespace sluice::connectors::mysql
