#include "connectors/redis/redis_sink.h"

namespace sluice::connectors::redis {

Result<std::unique_ptr<Sink>> MakeRedisSink(const config::SinkConfig& sink, const config::Config&) {
  return FailedPrecondition("sink '" + sink.name + "': the redis sink is being written");
}

}  // namespace sluice::connectors::redis
