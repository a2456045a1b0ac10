// The Elasticsearch/OpenSearch parts of the engine benchmark: reading the
// view's versions while a drain runs, and the same-run baseline, a raw
// _bulk of the same documents.
//
// Threads: each function runs on the calling thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/engine_bench_backlog.h"
#include "bench/engine_bench_util.h"
#include "config/config.h"
#include "core/status.h"

namespace sluice::bench {

// One keep-alive HTTP/1.1 connection to the search server (Boost.Beast,
// synchronous), reconnected once when the server closed it. Used by one
// thread at a time.
class HttpConnection {
 public:
  struct Reply {
    int status = 0;
    std::string body;
  };
  explicit HttpConnection(Endpoint server);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  Result<Reply> Send(const std::string& method, const std::string& target, const std::string& body = "",
                     const std::string& content_type = "application/json");

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Deletes the sink's index (absent is fine), so that a run starts empty.
Status DropEsIndex(const config::SinkConfig& sink, const Endpoint& server);

// The _version of each id's document (0 when absent), with one _mget of
// realtime=false: what a search sees, after the index's periodic refresh (1 s
// by default). A real-time get would make the shard refresh whenever a
// probed document is newer than its last refresh: the probe polls every 50
// ms, so the drain would pay for about 20 refreshes a second, a load no
// reader of the view puts on it.
Result<std::vector<uint64_t>> EsVersions(HttpConnection& client, const std::string& index,
                                         const std::vector<std::string>& ids);

// Baseline: the backlog's documents as plain index actions (no version
// check; `versioned`: each with its version, version_type external, the
// check the sink asks for), up to sink.batch_max per _bulk request, in
// `order` (Backlog::Chunks), over the sink's `connections` at once (each
// connection with the partitions p % connections == k, streaming its
// requests on its own; in the engine's order its share of each chunk), into
// the sink's index (dropped, then created by the sink itself,
// opened through MakeSink, with its mapping).
Result<WriteResult> RawEsBulk(const config::Config& config, const config::SinkConfig& sink, const Endpoint& server,
                              const Backlog& backlog, bool versioned, Backlog::Order order);

}  // namespace sluice::bench
