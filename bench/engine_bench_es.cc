#include "bench/engine_bench_es.h"

#include <algorithm>
#include <atomic>

#include "bench/bench_common.h"
#include "bench/engine_bench_util.h"
#include "connectors/elasticsearch/bulk.h"
#include "connectors/elasticsearch/elasticsearch_sink.h"
#include "core/json.h"

namespace sluice::bench {

namespace es = connectors::elasticsearch;

Result<std::unique_ptr<es::RestClient>> EsClient(const config::SinkConfig& sink) {
  if (sink.type != "elasticsearch") return InvalidArgument("sink " + sink.name + " is not an elasticsearch sink");
  es::RestClientOptions o = es::ClientOptions(sink);
  o.request_timeout = std::max<std::chrono::milliseconds>(o.request_timeout, std::chrono::seconds(120));
  return es::RestClient::Make(std::move(o));
}

Status DropEsIndex(const config::SinkConfig& sink) {
  ASSIGN_OR_RETURN(auto client, EsClient(sink));
  ASSIGN_OR_RETURN(auto r, client->Send("DELETE", es::PathTo("/", es::IndexName(sink))));
  if (r.status != 200 && r.status != 404) {
    return Unavailable("deleting index " + es::IndexName(sink) + ": HTTP " + std::to_string(r.status) + ": " +
                       es::ErrorText(r.body));
  }
  return Status::Ok();
}

Result<std::vector<uint64_t>> EsVersions(es::RestClient& client, const std::string& index,
                                         const std::vector<std::string>& ids) {
  std::vector<uint64_t> out(ids.size(), 0);
  std::string body = R"({"ids":[)";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) body += ',';
    AppendJsonString(body, ids[i]);
  }
  body += "]}";
  ASSIGN_OR_RETURN(auto r, client.Send("POST", es::PathTo("/", index) +
                                                   "/_mget?realtime=false&filter_path=docs.found,docs._version,docs.error.type",
                                       body));
  // The sink creates the index when it opens: until then, nothing is visible.
  if (r.status == 404) return out;
  if (r.status != 200) return Unavailable("_mget: HTTP " + std::to_string(r.status) + ": " + es::ErrorText(r.body));
  const Json doc = Json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("docs") || doc["docs"].size() != ids.size()) {
    return Internal("_mget: unexpected response");
  }
  // A document of a missing index comes back as an error: not visible yet.
  for (size_t i = 0; i < ids.size(); ++i) {
    const Json& d = doc["docs"][i];
    out[i] = d.contains("error") ? 0 : d.value("_version", uint64_t{0});
  }
  return out;
}

Result<WriteResult> RawEsBulk(const config::Config& config, const config::SinkConfig& sink, const Backlog& backlog) {
  RETURN_IF_ERROR(DropEsIndex(sink));
  {
    // The index as the sink creates it (same mapping and settings).
    ASSIGN_OR_RETURN(auto creator, es::MakeElasticsearchSink(sink, config));
    RETURN_IF_ERROR(creator->Open());
    creator->Close();
  }
  ASSIGN_OR_RETURN(auto client, EsClient(sink));
  const std::string path = es::PathTo("/", es::IndexName(sink)) + "/_bulk?filter_path=errors,items.*.error";
  const uint32_t batch = std::max<uint32_t>(1, sink.batch_max);
  const BacklogSpec& spec = backlog.spec();

  WriteResult r;
  std::atomic<uint64_t> done{0};
  std::string body;
  const auto start = Clock::now();
  {
    uint64_t last_done = 0;
    double last_t = 0;
    Progress progress("raw _bulk", [&](double t) {
      return RateText(done.load(), backlog.total_events(), t, last_done, last_t, "documents");
    });
    for (uint32_t p = 0; p < spec.partitions; ++p) {
      const uint64_t n = backlog.PartitionEvents(p);
      for (uint64_t first = 1; first <= n; first += batch) {
        const uint64_t last = std::min<uint64_t>(n, first + batch - 1);
        body.clear();
        for (uint64_t id = first; id <= last; ++id) {
          const Backlog::Event e = backlog.At(p, id);
          body += R"({"index":{"_id":)";
          AppendJsonString(body, backlog.EntityId(e.entity));
          body += "}}\n";
          body += backlog.State(e.entity, e.version);
          body += '\n';
        }
        ASSIGN_OR_RETURN(auto reply, client->Send("POST", path, body, "application/x-ndjson"));
        if (reply.status != 200) {
          return Unavailable("_bulk: HTTP " + std::to_string(reply.status) + ": " + es::ErrorText(reply.body));
        }
        if (reply.body.find("\"errors\":false") == std::string::npos) {
          r.problems.push_back("_bulk reported item errors: " + reply.body.substr(0, 300));
          if (r.problems.size() > 8) return Internal("the server refuses the documents: " + r.problems.front());
        }
        done.fetch_add(last - first + 1);
      }
    }
  }
  r.seconds = SecondsSince(start);
  r.events = done.load();
  r.applied = r.events;
  return r;
}

}  // namespace sluice::bench
