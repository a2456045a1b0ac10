#include "connectors/elasticsearch/elasticsearch_options.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/redact.h"
#include "connectors/elasticsearch/elasticsearch_sink.h"

namespace sluice::connectors::elasticsearch {
namespace {

using config::Field;

// One elasticsearch sink's keys while it is read.
class ElasticsearchKeys : public config::SinkOptionsRead {
 public:
  ElasticsearchKeys(config::SinkOptionReader& reader, config::SinkConfig& sink)
      : r_(reader), sink_(sink), tls_(reader, [this] { return &o().tls; }) {}

  std::vector<config::SinkOptionKey> Keys() override {
    std::vector<config::SinkOptionKey> keys = {
        {"url", true, [this](const Field& f) { ReadUrl(f); }},
        {"index", false, [this](const Field& f) { ReadIndex(f); }},
        {"mapping", false, [this](const Field& f) { r_.ReadJsonObjectFile(f, &o().mapping_path, &o().mapping_json); }},
        {"template", false,
         [this](const Field& f) { r_.ReadJsonObjectFile(f, &o().template_path, &o().template_json); }},
        {"auto_create", false, [this](const Field& f) { r_.ReadBool(f, &o().auto_create); }},
        {"username", false, [this](const Field& f) { r_.ReadString(f, /*may_be_empty=*/false, &o().username); }},
        {"password", false, [this](const Field& f) { r_.ReadSecret(f, &o().password); }},
        {"api_key", false, [this](const Field& f) { r_.ReadSecret(f, &o().api_key); }},
        {"connect_timeout", false, [this](const Field& f) { r_.ReadTimeout(f, &o().connect_timeout); }},
        {"request_timeout", false, [this](const Field& f) { r_.ReadTimeout(f, &o().request_timeout); }},
        {"connections", false, [this](const Field& f) { r_.ReadUint(f, 1, 16, &o().connections); }},
    };
    tls_.Add(keys);
    return keys;
  }

  // TLS keys only with https://; an elasticsearch sink authenticates one
  // way at most.
  void Check(const Field& at) override {
    tls_.Check(url_https_, "an https:// url");
    if (sink_.type != "elasticsearch") return;
    const ElasticsearchSinkOptions& o = sink_.Options<ElasticsearchSinkOptions>();
    if (o.username.empty() != o.password.empty()) {
      r_.Problem(at, "username and password go together (basic auth)");
    }
    if (!o.api_key.empty() && !o.username.empty()) {
      r_.Problem(at, "give either api_key or username/password, not both");
    }
  }

 private:
  // http(s)://host[:port][/prefix], credentials in username/password or
  // api_key rather than in the URL.
  void ReadUrl(const Field& f) {
    std::string url;
    bool from_secret = false;
    if (!r_.ReadSecret(f, &url, &from_secret)) return;
    constexpr std::string_view kForm = "http(s)://host[:port][/path]";
    const std::string_view s = url;
    const size_t scheme = s.find("://");
    const std::string_view name = scheme == std::string_view::npos ? "" : s.substr(0, scheme);
    const std::string_view rest = scheme == std::string_view::npos ? "" : s.substr(scheme + 3);
    const std::string_view authority = rest.substr(0, rest.find('/'));
    std::string_view problem;
    if (name != "http" && name != "https") {
      problem = "the scheme must be http or https";
    } else if (authority.empty()) {
      problem = "the host is missing";
    } else if (authority.find('@') != std::string_view::npos) {
      problem = "put credentials in username/password or api_key, not in the URL";
    } else if (s.find_first_of(" ?#") != std::string_view::npos) {
      problem = "no spaces, query or fragment";
    }
    if (!problem.empty()) {
      // Quoted without its credentials; a reference's value not at all.
      r_.Problem(f, "must be a URL of the form " + std::string(kForm) + ": " + std::string(problem) +
                        (from_secret ? "" : ", got " + config::QuoteValue(config::RedactUrl(s))));
      return;
    }
    while (!url.empty() && url.back() == '/') url.pop_back();
    url_https_ = name == "https";
    o().url = std::move(url);
  }

  // An index name template: lowercase, {type} the only placeholder, and
  // none of the characters Elasticsearch forbids in index names.
  void ReadIndex(const Field& f) {
    constexpr std::string_view kExpected =
        "an index name template such as \"{type}_view\" (lowercase; {type} is replaced)";
    const auto text = r_.PlainScalar(f, kExpected);
    if (!text) return;
    // The name as it would be with a one-letter type (in a loop rather than
    // with replace(), which GCC 12 -O3 wrongly warns about: -Wrestrict).
    const std::string_view given = *text;
    std::string rest;
    for (size_t i = 0; i < given.size();) {
      if (given.substr(i, 6) == "{type}") {
        rest += 't';
        i += 6;
      } else {
        rest += given[i++];
      }
    }
    const bool ok = !rest.empty() && rest.size() <= 200 && rest != "." && rest != ".." && rest[0] != '-' &&
                    rest[0] != '_' && rest[0] != '+' && std::all_of(rest.begin(), rest.end(), [](char c) {
                      return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                             c == '.' || c == '+';
                    });
    if (!ok) return r_.Expected(f, kExpected, *text);
    o().index = *text;
  }

  // The sink's options, made when one of its keys is read (SinkType::read).
  ElasticsearchSinkOptions& o() { return sink_.MutableOptions<ElasticsearchSinkOptions>(); }

  config::SinkOptionReader& r_;
  config::SinkConfig& sink_;
  config::TlsKeysRead tls_;
  bool url_https_ = false;  // the url is https://
};

void PrintElasticsearchSink(const config::SinkConfig& sink, config::SinkOptionPrinter& out) {
  const ElasticsearchSinkOptions& es = sink.Options<ElasticsearchSinkOptions>();
  out.Secret("url", es.url, /*url=*/true);
  out.Value("index", es.index);
  if (!es.mapping_path.empty()) out.Value("mapping", es.mapping_path);
  if (!es.template_path.empty()) out.Value("template", es.template_path);
  out.Value("auto_create", es.auto_create);
  if (!es.username.empty()) {
    out.Value("username", es.username);
    out.Secret("password", es.password);
  }
  if (!es.api_key.empty()) out.Secret("api_key", es.api_key);
  out.Duration("connect_timeout", es.connect_timeout);
  out.Duration("request_timeout", es.request_timeout);
  out.Value("connections", uint64_t{es.connections});
  config::PrintTls(es.tls, out);
}

}  // namespace

BuiltinSinkType ElasticsearchSinkType() {
  config::SinkType t;
  t.name = "elasticsearch";
  t.read = [](config::SinkOptionReader& reader, config::SinkConfig* sink) -> std::unique_ptr<config::SinkOptionsRead> {
    return std::make_unique<ElasticsearchKeys>(reader, *sink);
  };
  t.print = PrintElasticsearchSink;
  t.warnings = [](const config::SinkConfig& sink) {
    std::vector<std::string> out;
    if (auto w = config::TlsWarning("sink '" + sink.name + "'", sink.Options<ElasticsearchSinkOptions>().tls);
        !w.empty()) {
      out.push_back(std::move(w));
    }
    return out;
  };
  t.routes_to = "index";
  t.destination = [](const config::SinkConfig& sink) { return IndexName(sink); };
  t.route_to = [](config::SinkConfig* sink, const std::string& index) {
    sink->MutableOptions<ElasticsearchSinkOptions>().index = index;
  };
  return {std::move(t), [](const config::SinkConfig& sink, const config::Config& global) {
            return MakeElasticsearchSink(sink, global);
          }};
}

}  // namespace sluice::connectors::elasticsearch
