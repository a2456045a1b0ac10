// The mysql sink type as sluice registers it (connectors/builtin_sink_types.cc):
// its options (MysqlSinkOptions), the keys a mysql sink accepts in the config
// file, how each is read and checked (also across sinks: no two write one
// table), how `config check --print` shows them, and the factory. To add a
// mysql sink option: a field in MysqlSinkOptions below (with its default), a
// row in MysqlKeys::Keys() and a line in PrintMysqlSink (mysql_options.cc),
// the key in docs/configuration.md, and tests in mysql_options_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "connectors/builtin_sink_types.h"

namespace sluice::connectors::mysql {

// A mysql sink's options, as sink.Options<MysqlSinkOptions>() of a loaded
// config::SinkConfig (the defaults when the file leaves them out).
struct MysqlSinkOptions {
  std::string table;                         // [A-Za-z_][A-Za-z0-9_]{0,63}
  std::string database;                      // empty: the main storage database
  std::vector<config::FieldMapping> columns; // at least one
  bool auto_create = true;                   // create the table when missing
  // Connections a batch is applied over in parallel, each with its own ids.
  uint32_t connections = 1;  // 1..64
  // Entities whose row version the sink remembers (0..10,000,000; 0: none).
  // A remembered version lets an event that is newer skip the locking read
  // of its row; the write's affected-row count confirms the guess.
  uint32_t version_cache = 262144;
};

BuiltinSinkType MysqlSinkType();

}  // namespace sluice::connectors::mysql
