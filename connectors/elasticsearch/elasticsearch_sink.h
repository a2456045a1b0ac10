// The built-in elasticsearch sink (see connectors/sink.h for the contract):
// one document per entity in an Elasticsearch 7.x/8.x or OpenSearch 1.x/2.x
// index, written with _bulk over libcurl (keep-alive).
//
// Document: _id = entity id, _source = the entity state, _version = the
// entity version (version_type=external, so the server itself refuses stale
// writes with 409). A delete leaves a tombstone document
// {"_sluice_deleted": true} at the delete's version (see bulk.h for why not
// a real delete); queries should filter it out, for example through a
// filtered alias (docs/sinks/elasticsearch.md).
//
// Open() makes sure the index exists: it puts the optional index template,
// then creates the index with the optional mapping file (plus a boolean
// mapping for _sluice_deleted) when auto_create is on, else reports the
// missing index as misconfiguration.
//
// Threads: like every Sink, one thread at a time.
#pragma once

#include <memory>

#include "connectors/elasticsearch/rest_client.h"
#include "connectors/sink.h"

namespace sluice::connectors::elasticsearch {

// Builds an elasticsearch sink for a validated config (not yet opened).
Result<std::unique_ptr<Sink>> MakeElasticsearchSink(const config::SinkConfig& sink, const config::Config& global);

// The index name of a sink: its template with {type} replaced.
std::string IndexName(const config::SinkConfig& sink);

// The REST client settings of a sink: url, credentials, timeouts, TLS.
RestClientOptions ClientOptions(const config::SinkConfig& sink);

}  // namespace sluice::connectors::elasticsearch
