#include "bench/engine_bench_es.h"

#include <algorithm>
#include <atomic>
#include <vector>
#include <thread>
#include <mutex>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "bench/bench_common.h"
#include "core/json.h"
#include "connectors/elasticsearch/elasticsearch_options.h"
#include "connectors/sink.h"

namespace sluice::bench {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;

struct HttpConnection::State {
  Endpoint server;
  boost::asio::io_context io;
  std::unique_ptr<beast::tcp_stream> stream;
  beast::flat_buffer buffer;
};

HttpConnection::HttpConnection(Endpoint server) : state_(std::make_unique<State>()) {
  state_->server = std::move(server);
}

HttpConnection::~HttpConnection() {
  if (state_->stream) {
    beast::error_code ignored;
    state_->stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
  }
}

Result<HttpConnection::Reply> HttpConnection::Send(const std::string& method, const std::string& target,
                                                   const std::string& body, const std::string& content_type) {
  State& s = *state_;
  http::request<http::string_body> req(http::string_to_verb(method), target, 11);
  req.set(http::field::host, s.server.host);
  req.keep_alive(true);
  if (!body.empty() || method == "POST" || method == "PUT") {
    req.set(http::field::content_type, content_type);
    req.body() = body;
    req.prepare_payload();
  }
  // A keep-alive connection the server closed fails on first use: one retry on a new one.
  std::string last_error;
  for (int attempt = 0; attempt < 2; ++attempt) {
    beast::error_code ec;
    if (!s.stream) {
      tcp::resolver resolver(s.io);
      auto addrs = resolver.resolve(s.server.host, std::to_string(s.server.port), ec);
      if (ec) return Unavailable("http " + s.server.Describe() + ": " + ec.message());
      s.stream = std::make_unique<beast::tcp_stream>(s.io);
      s.stream->expires_never();
      s.stream->connect(addrs, ec);
      if (ec) {
        s.stream.reset();
        return Unavailable("http " + s.server.Describe() + ": " + ec.message());
      }
      s.buffer.clear();
    }
    http::write(*s.stream, req, ec);
    http::response_parser<http::string_body> parser;
    parser.body_limit(256 * 1024 * 1024);
    if (!ec) http::read(*s.stream, s.buffer, parser, ec);
    if (!ec) {
      Reply r;
      r.status = static_cast<int>(parser.get().result_int());
      r.body = std::move(parser.get().body());
      if (!parser.get().keep_alive()) s.stream.reset();
      return r;
    }
    last_error = ec.message();
    s.stream.reset();
  }
  return Unavailable("http " + s.server.Describe() + " " + method + " " + target + ": " + last_error);
}

namespace {
std::string Excerpt(const std::string& body) { return body.substr(0, 300); }
}  // namespace

Status DropEsIndex(const config::SinkConfig& sink, const Endpoint& server) {
  ASSIGN_OR_RETURN(const std::string index, BenchIndexName(sink));
  HttpConnection client(server);
  ASSIGN_OR_RETURN(auto r, client.Send("DELETE", "/" + index));
  if (r.status != 200 && r.status != 404) {
    return Unavailable("deleting index " + index + ": HTTP " + std::to_string(r.status) + ": " + Excerpt(r.body));
  }
  return Status::Ok();
}

Result<std::vector<uint64_t>> EsVersions(HttpConnection& client, const std::string& index,
                                         const std::vector<std::string>& ids) {
  std::vector<uint64_t> out(ids.size(), 0);
  std::string body = R"({"ids":[)";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) body += ',';
    AppendJsonString(body, ids[i]);
  }
  body += "]}";
  ASSIGN_OR_RETURN(auto r, client.Send("POST", "/" + index +
                                                   "/_mget?realtime=false&filter_path=docs.found,docs._version,docs.error.type",
                                       body));
  // The sink creates the index when it opens: until then, nothing is visible.
  if (r.status == 404) return out;
  if (r.status != 200) return Unavailable("_mget: HTTP " + std::to_string(r.status) + ": " + Excerpt(r.body));
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

Result<WriteResult> RawEsBulk(const config::Config& config, const config::SinkConfig& sink, const Endpoint& server,
                              const Backlog& backlog, bool versioned, Backlog::Order order) {
  RETURN_IF_ERROR(DropEsIndex(sink, server));
  {
    // The index as the sink creates it (same mapping and settings).
    ASSIGN_OR_RETURN(auto creator, connectors::MakeSink(sink, config));
    RETURN_IF_ERROR(creator->Open());
    creator->Close();
  }
  ASSIGN_OR_RETURN(const std::string index, BenchIndexName(sink));
  const std::string path = "/" + index + "/_bulk?filter_path=errors,items.*.error";
  const uint32_t batch = std::max<uint32_t>(1, sink.batch_max);
  const uint32_t connections =
      std::max<uint32_t>(1, sink.Options<connectors::elasticsearch::ElasticsearchSinkOptions>().connections);

  WriteResult r;
  std::mutex mu;  // r.problems
  std::atomic<uint64_t> done{0};
  // Connection k sends the partitions p with p % connections == k, in `order`.
  auto send = [&](uint32_t k) -> Status {
    HttpConnection client(server);
    std::string body;
    for (const Backlog::Chunk& chunk : backlog.Chunks(order, config.engine.batch_max, batch, k, connections)) {
      body.clear();
      uint64_t documents = 0;
      for (const Backlog::Run& run : chunk) {
        for (uint64_t id = run.first; id <= run.last; ++id, ++documents) {
          const Backlog::Event e = backlog.At(run.partition, id);
          body += R"({"index":{"_id":)";
          AppendJsonString(body, backlog.EntityId(e.entity));
          if (versioned) {
            body += R"(,"version":)";
            body += std::to_string(e.version);
            body += R"(,"version_type":"external")";
          }
          body += "}}\n";
          body += backlog.State(e.entity, e.version);
          body += '\n';
        }
      }
      ASSIGN_OR_RETURN(auto reply, client.Send("POST", path, body, "application/x-ndjson"));
      if (reply.status != 200) {
        return Unavailable("_bulk: HTTP " + std::to_string(reply.status) + ": " + Excerpt(reply.body));
      }
      if (reply.body.find("\"errors\":false") == std::string::npos) {
        std::lock_guard lock(mu);
        r.problems.push_back("_bulk reported item errors: " + reply.body.substr(0, 300));
        if (r.problems.size() > 8) return Internal("the server refuses the documents: " + r.problems.front());
      }
      done.fetch_add(documents);
    }
    return Status::Ok();
  };
  const auto start = Clock::now();
  std::vector<Status> results(connections, Status::Ok());
  {
    uint64_t last_done = 0;
    double last_t = 0;
    ProgressLine progress("raw _bulk", [&](double t) {
      return RateText(done.load(), backlog.total_events(), t, last_done, last_t, "documents");
    });
    std::vector<std::thread> threads;
    for (uint32_t k = 1; k < connections; ++k) threads.emplace_back([&, k] { results[k] = send(k); });
    results[0] = send(0);
    for (std::thread& t : threads) t.join();
  }
  for (const Status& st : results) RETURN_IF_ERROR(st);
  r.seconds = SecondsSince(start);
  r.events = done.load();
  r.applied = r.events;
  return r;
}

}  // namespace sluice::bench
