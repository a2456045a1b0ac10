// The elasticsearch sink type as sluice registers it
// (connectors/builtin_sink_types.cc): its options (ElasticsearchSinkOptions),
// the keys an elasticsearch sink accepts in the config file, how each is read
// and checked, which are secret, how `config check --print` shows them, and
// the factory. To add an option: a field in ElasticsearchSinkOptions below
// (with its default), a row in ElasticsearchKeys::Keys() and a line in
// PrintElasticsearchSink (elasticsearch_options.cc), the key in
// docs/configuration.md, and tests in elasticsearch_options_test.cc.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "config/tls_options.h"
#include "connectors/builtin_sink_types.h"

namespace sluice::connectors::elasticsearch {

// An Elasticsearch 7/8 or OpenSearch 1/2 index with one document per entity
// (docs/sinks/elasticsearch.md): an elasticsearch sink's options, as
// sink.Options<ElasticsearchSinkOptions>() of a loaded config::SinkConfig
// (the defaults when the file leaves them out).
struct ElasticsearchSinkOptions {
  std::string url;               // http(s)://host[:port][/path prefix]; secret-capable
  std::string index = "{type}";  // template: {type} is replaced by the entity type
  // Optional JSON bodies, read from the files named in the YAML: `mapping`
  // is the create-index body ({"settings": ..., "mappings": ...}) used when
  // the sink creates the index; `template` is a composable index template
  // put under the sink's name before that.
  std::string mapping_path;
  std::string mapping_json;
  std::string template_path;
  std::string template_json;
  bool auto_create = true;  // create the index when missing
  // Basic auth (username + password) or an API key; password and api_key
  // are secret-capable and never printed.
  std::string username;
  std::string password;
  std::string api_key;
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds request_timeout{30000};  // one _bulk request, end to end
  // _bulk requests of one batch sent at once, each on its own connection,
  // the batch split by entity id (each connection gets its own ids, in
  // batch order).
  uint32_t connections = 1;  // 1..16
  // tls_ca, tls_cert, tls_key, tls_verify: only with an https:// url
  // (docs/security.md).
  config::TlsClientOptions tls;
};

BuiltinSinkType ElasticsearchSinkType();

}  // namespace sluice::connectors::elasticsearch
