#include "connectors/elasticsearch/elasticsearch_options.h"

#include "connectors/elasticsearch/elasticsearch_sink.h"

namespace sluice::connectors::elasticsearch {

BuiltinSinkType ElasticsearchSinkType() {
  return {config::ElasticsearchSinkType(),
          [](const config::SinkConfig& sink, const config::Config& global) { return MakeElasticsearchSink(sink, global); }};
}

}  // namespace sluice::connectors::elasticsearch
