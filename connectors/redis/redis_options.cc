#include "connectors/redis/redis_options.h"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "connectors/redis/key_template.h"
#include "connectors/redis/redis_sink.h"
#include "connectors/redis/redis_url.h"

namespace sluice::connectors::redis {
namespace {

using config::Field;

constexpr std::chrono::milliseconds kMaxKeyTtl{365LL * 24 * 3600 * 1000};

// One redis sink's keys while it is read.
class RedisKeys : public config::SinkOptionsRead {
 public:
  RedisKeys(config::SinkOptionReader& reader, config::SinkConfig& sink)
      : r_(reader), sink_(sink), tls_(reader, [this] { return &o().tls; }) {}

  std::vector<config::SinkOptionKey> Keys() override {
    std::vector<config::SinkOptionKey> keys = {
        // Secret-capable: the URL may carry a password.
        {"url", false, [this](const Field& f) { ReadUrl(f); }},
        {"key", false, [this](const Field& f) { ReadKey(f); }},
        {"format", false, [this](const Field& f) { ReadFormat(f); }},
        {"fields", false,
         [this](const Field& f) {
           fields_key_ = r_.Keep(f);
           r_.ReadMappings(f, config::MappingKind::kRedisField, &o().fields);
         }},
        {"ttl", false,
         [this](const Field& f) { r_.ReadDuration(f, std::chrono::milliseconds(0), kMaxKeyTtl, &o().ttl); }},
        {"tombstone_ttl", false,
         [this](const Field& f) { r_.ReadDuration(f, std::chrono::seconds(1), kMaxKeyTtl, &o().tombstone_ttl); }},
        {"sentinel_password", false,
         [this](const Field& f) {
           sentinel_password_key_ = r_.Keep(f);
           r_.ReadSecret(f, &o().sentinel_password);
         }},
        {"wait_replicas", false, [this](const Field& f) { r_.ReadUint(f, 0, 16, &o().wait_replicas); }},
    };
    tls_.Add(keys);
    return keys;
  }

  void Check(const Field&) override {
    tls_.Check(url_tls_, "a rediss:// or rediss-sentinel:// url");
    if (sentinel_password_key_ && !url_sentinel_) {
      r_.KeyProblem(*sentinel_password_key_, "only with a redis-sentinel:// or rediss-sentinel:// url");
    }
    // An invalid format was reported already; fields are checked against a valid one only.
    if (fields_key_ && format_ == Format::kJson) {
      r_.KeyProblem(*fields_key_, "only for format: hash (this sink stores each entity as one JSON string)");
    }
  }

 private:
  enum class Format { kJson, kHash, kInvalid };

  void ReadUrl(const Field& f) {
    std::string url;
    if (!r_.ReadSecret(f, &url)) return;
    Result<RedisEndpoint> endpoint = ParseRedisUrl(url);
    if (!endpoint.ok()) {
      // The parser never quotes the URL, which may hold a password.
      r_.Problem(f, "must be a URL of the form " + std::string(kRedisUrlForm) + ": " + endpoint.status().message());
      return;
    }
    url_tls_ = endpoint->tls;
    url_sentinel_ = !endpoint->sentinels.empty();
    o().url = std::move(url);
  }

  void ReadKey(const Field& f) {
    const auto text = r_.PlainScalar(f, "a key template such as \"{type}:{id}\"");
    if (!text) return;
    if (auto problem = KeyTemplateProblem(*text, config::QuoteValue)) {
      r_.Problem(f, *problem + ", got " + config::QuoteValue(*text));
      return;
    }
    o().key = *text;
  }

  void ReadFormat(const Field& f) {
    constexpr std::string_view kExpected = "json or hash";
    format_ = Format::kInvalid;
    const auto text = r_.PlainScalar(f, kExpected);
    if (!text) return;
    if (*text == "json") {
      format_ = Format::kJson;
      o().format = RedisSinkOptions::Format::kJson;
    } else if (*text == "hash") {
      format_ = Format::kHash;
      o().format = RedisSinkOptions::Format::kHash;
    } else {
      r_.Expected(f, kExpected, *text);
    }
  }

  // The sink's options, made when one of its keys is read (SinkType::read).
  RedisSinkOptions& o() { return sink_.MutableOptions<RedisSinkOptions>(); }

  config::SinkOptionReader& r_;
  config::SinkConfig& sink_;
  Format format_ = Format::kJson;  // json unless given
  std::shared_ptr<const Field> fields_key_;
  config::TlsKeysRead tls_;
  bool url_tls_ = false;       // the url is rediss:// or rediss-sentinel://
  bool url_sentinel_ = false;  // the url lists sentinels
  std::shared_ptr<const Field> sentinel_password_key_;
};

void PrintRedisSink(const config::SinkConfig& sink, config::SinkOptionPrinter& out) {
  const RedisSinkOptions& r = sink.Options<RedisSinkOptions>();
  out.Secret("url", r.url, /*url=*/true);
  out.Value("key", r.key);
  out.Value("format", r.format == RedisSinkOptions::Format::kHash ? "hash" : "json");
  if (!r.fields.empty()) {
    std::vector<std::pair<std::string, std::string>> fields;
    for (const config::FieldMapping& f : r.fields) fields.emplace_back(f.name, f.pointer);
    out.Mapping("fields", fields);
  }
  out.Duration("ttl", r.ttl);
  out.Duration("tombstone_ttl", r.tombstone_ttl);
  config::PrintTls(r.tls, out);
  if (!r.sentinel_password.empty()) out.Secret("sentinel_password", r.sentinel_password);
  if (r.wait_replicas > 0) out.Value("wait_replicas", uint64_t{r.wait_replicas});
}

}  // namespace

BuiltinSinkType RedisSinkType() {
  config::SinkType t;
  t.name = "redis";
  t.can_push = true;
  t.read = [](config::SinkOptionReader& reader, config::SinkConfig* sink) -> std::unique_ptr<config::SinkOptionsRead> {
    return std::make_unique<RedisKeys>(reader, *sink);
  };
  t.print = PrintRedisSink;
  t.warnings = [](const config::SinkConfig& sink) {
    std::vector<std::string> out;
    if (auto w = config::TlsWarning("sink '" + sink.name + "'", sink.Options<RedisSinkOptions>().tls); !w.empty()) {
      out.push_back(std::move(w));
    }
    return out;
  };
  return {std::move(t), [](const config::SinkConfig& sink, const config::Config& global) {
            return MakeRedisSink(sink, global);
          }};
}

}  // namespace sluice::connectors::redis
