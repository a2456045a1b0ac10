#include "connectors/mysql/mysql_sink.h"

namespace sluice::connectors::mysql {

Result<std::unique_ptr<Sink>> MakeMysqlSink(const config::SinkConfig& sink, const config::Config&) {
  return FailedPrecondition("sink '" + sink.name + "': the mysql sink is being written");
}

}  // namespace sluice::connectors::mysql
