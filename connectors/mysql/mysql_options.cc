#include "connectors/mysql/mysql_options.h"

#include "connectors/mysql/mysql_sink.h"

namespace sluice::connectors::mysql {

BuiltinSinkType MysqlSinkType() {
  return {config::MysqlSinkType(),
          [](const config::SinkConfig& sink, const config::Config& global) { return MakeMysqlSink(sink, global); }};
}

}  // namespace sluice::connectors::mysql
