// Config::Redacted(): the configuration printed back as YAML, by the rule of
// config/redact.h, and the printer each built-in sink type prints its keys to.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"
#include "config/config_text.h"
#include "config/redact.h"
#include "config/sink_type.h"
#include "core/json.h"

namespace sluice::config {
namespace {

// The limit keys of a listener section.
void EmitLimits(YAML::Emitter& out, const ListenerLimits& l) {
  out << YAML::Key << "max_connections" << YAML::Value << static_cast<unsigned>(l.max_connections);
  out << YAML::Key << "header_timeout" << YAML::Value << FormatDuration(l.header_timeout);
  out << YAML::Key << "body_timeout" << YAML::Value << FormatDuration(l.body_timeout);
  out << YAML::Key << "idle_timeout" << YAML::Value << FormatDuration(l.idle_timeout);
  out << YAML::Key << "write_timeout" << YAML::Value << FormatDuration(l.write_timeout);
}

// One storage server's keys; `password` is already shown by the redact rule.
// A server's empty socket is printed when storage.mysql's is not
// (`main_socket`), so that it does not take main's when read back.
// Likewise ssl_mode: printed when TLS is on, or off where main's is on (`main_tls`).
void EmitMysql(YAML::Emitter& out, const MysqlConfig& m, const std::string& main_socket,
               const std::string& password, bool main_tls = false) {
  out << YAML::BeginMap;
  out << YAML::Key << "host" << YAML::Value << m.host;
  out << YAML::Key << "port" << YAML::Value << static_cast<unsigned>(m.port);
  if (!m.socket.empty() || !main_socket.empty()) out << YAML::Key << "socket" << YAML::Value << m.socket;
  out << YAML::Key << "user" << YAML::Value << m.user;
  // Always shown as *** (or its reference), even when empty, so the output says nothing about it.
  out << YAML::Key << "password" << YAML::Value << YAML::DoubleQuoted << password;
  out << YAML::Key << "database" << YAML::Value << m.database;
  out << YAML::Key << "connect_timeout" << YAML::Value << FormatDuration(m.connect_timeout);
  out << YAML::Key << "io_timeout" << YAML::Value << FormatDuration(m.io_timeout);
  if (m.ssl_mode != MysqlSslMode::kDisabled || main_tls) {
    out << YAML::Key << "ssl_mode" << YAML::Value << std::string(MysqlSslModeName(m.ssl_mode));
  }
  if (!m.ssl_ca.empty()) out << YAML::Key << "ssl_ca" << YAML::Value << m.ssl_ca;
  if (!m.ssl_cert.empty()) out << YAML::Key << "ssl_cert" << YAML::Value << m.ssl_cert;
  if (!m.ssl_key.empty()) out << YAML::Key << "ssl_key" << YAML::Value << m.ssl_key;
  out << YAML::EndMap;
}

std::string RangeText(const PartitionRange& r) {
  return r.first == r.last ? std::to_string(r.first) : std::to_string(r.first) + "-" + std::to_string(r.last);
}

// An entity type's placement as it is written: nothing (all on main),
// `server: NAME` (all on one), or `servers:` with each server's ranges.
void EmitPlacement(YAML::Emitter& out, const EntityTypeConfig& entity) {
  const std::vector<PartitionRange>& placement = entity.placement;
  if (placement.empty()) return;
  if (placement.size() == 1 && placement[0].first == 0 && placement[0].last + 1 == entity.partitions) {
    out << YAML::Key << "server" << YAML::Value << placement[0].server;
    return;
  }
  // Each server once, in the order of its first range.
  std::vector<std::pair<std::string, std::vector<std::string>>> by_server;
  for (const PartitionRange& r : placement) {
    auto it = std::find_if(by_server.begin(), by_server.end(), [&](const auto& e) { return e.first == r.server; });
    if (it == by_server.end()) it = by_server.insert(by_server.end(), {r.server, {}});
    it->second.push_back(RangeText(r));
  }
  out << YAML::Key << "servers" << YAML::Value << YAML::BeginMap;
  for (const auto& [server, ranges] : by_server) {
    out << YAML::Key << server << YAML::Value;
    if (ranges.size() == 1) {
      out << ranges[0];
    } else {
      out << YAML::Flow << YAML::BeginSeq;
      for (const std::string& r : ranges) out << r;
      out << YAML::EndSeq;
    }
  }
  out << YAML::EndMap;
}

// Redacted()'s view of one sink for its type's print function.
class YamlSinkPrinter : public SinkOptionPrinter {
 public:
  using SecretFn = std::function<std::string(const std::string& path, const std::string& value, bool url)>;
  YamlSinkPrinter(YAML::Emitter& out, std::string at, SecretFn secret,
                  const std::map<std::string, std::string>& references)
      : out_(out), at_(std::move(at)), secret_(std::move(secret)), references_(references) {}

  void Value(std::string_view key, std::string_view value) override {
    out_ << YAML::Key << std::string(key) << YAML::Value << std::string(value);
  }
  void Value(std::string_view key, bool value) override {
    out_ << YAML::Key << std::string(key) << YAML::Value << value;
  }
  void Value(std::string_view key, uint64_t value) override {
    out_ << YAML::Key << std::string(key) << YAML::Value << value;
  }
  void Duration(std::string_view key, std::chrono::milliseconds value) override {
    out_ << YAML::Key << std::string(key) << YAML::Value << FormatDuration(value);
  }
  void Secret(std::string_view key, const std::string& value, bool url) override {
    out_ << YAML::Key << std::string(key) << YAML::Value;
    // A URL reads back as one; any other secret is quoted so that *** stays a string.
    if (!url) out_ << YAML::DoubleQuoted;
    out_ << secret_(at_ + std::string(key), value, url);
  }
  void Mapping(std::string_view key, const std::vector<std::pair<std::string, std::string>>& entries) override {
    out_ << YAML::Key << std::string(key) << YAML::Value << YAML::BeginMap;
    for (const auto& [name, value] : entries) out_ << YAML::Key << name << YAML::Value << value;
    out_ << YAML::EndMap;
  }
  void FlowMappings(
      std::string_view key,
      const std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>>& entries) override {
    out_ << YAML::Key << std::string(key) << YAML::Value << YAML::BeginMap;
    for (const auto& [name, values] : entries) {
      out_ << YAML::Key << name << YAML::Value << YAML::Flow << YAML::BeginMap;
      for (const auto& [k, v] : values) out_ << YAML::Key << k << YAML::Value << v;
      out_ << YAML::EndMap;
    }
    out_ << YAML::EndMap;
  }
  void NestedFlowMappings(std::string_view key,
                          const std::vector<std::pair<std::string, FlowMappingList>>& entries) override {
    out_ << YAML::Key << std::string(key) << YAML::Value << YAML::BeginMap;
    for (const auto& [name, inner] : entries) {
      out_ << YAML::Key << name << YAML::Value << YAML::BeginMap;
      for (const auto& [sub, values] : inner) {
        out_ << YAML::Key << sub << YAML::Value << YAML::Flow << YAML::BeginMap;
        for (const auto& [k, v] : values) out_ << YAML::Key << k << YAML::Value << v;
        out_ << YAML::EndMap;
      }
      out_ << YAML::EndMap;
    }
    out_ << YAML::EndMap;
  }
  void SecretMapping(std::string_view key, const std::map<std::string, std::string>& entries) override {
    out_ << YAML::Key << std::string(key) << YAML::Value << YAML::BeginMap;
    for (const auto& [name, value] : entries) {
      const std::string path = at_ + std::string(key) + "." + name;
      out_ << YAML::Key << name << YAML::Value;
      if (IsSecretName(name) || references_.count(path) != 0) {
        out_ << YAML::DoubleQuoted << secret_(path, value, false);
      } else {
        out_ << value;
      }
    }
    out_ << YAML::EndMap;
  }

 private:
  YAML::Emitter& out_;
  std::string at_;
  SecretFn secret_;
  const std::map<std::string, std::string>& references_;
};

// The tls key of a listener section, when given.
void EmitListenerTls(YAML::Emitter& out, const ListenerTls& t) {
  if (!t.enabled()) return;
  out << YAML::Key << "tls" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "cert" << YAML::Value << t.cert;
  out << YAML::Key << "key" << YAML::Value << t.key;
  if (!t.client_ca.empty()) out << YAML::Key << "client_ca" << YAML::Value << t.client_ca;
  if (!t.ca.empty()) out << YAML::Key << "ca" << YAML::Value << t.ca;
  out << YAML::EndMap;
}

}  // namespace

std::string Config::Redacted() const {
  // The rule of config/redact.h: a secret given as a reference is shown as
  // written, one given inline as ***, or, for a URL, without its credentials.
  const auto secret = [this](const std::string& path, const std::string& value, bool url = false) {
    if (const auto it = secret_references.find(path); it != secret_references.end()) return it->second;
    return url ? RedactUrl(value) : std::string(kRedactedValue);
  };
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "storage" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "mysql" << YAML::Value;
  EmitMysql(out, mysql, /*main_socket=*/"", secret("storage.mysql.password", mysql.password));
  if (!servers.empty()) {
    out << YAML::Key << "servers" << YAML::Value << YAML::BeginMap;
    for (const StorageServerConfig& server : servers) {
      out << YAML::Key << server.name << YAML::Value;
      EmitMysql(out, server.mysql, mysql.socket,
                secret("storage.servers." + server.name + ".password", server.mysql.password),
                mysql.ssl_mode != MysqlSslMode::kDisabled);
    }
    out << YAML::EndMap;
  }
  out << YAML::EndMap;

  out << YAML::Key << "entities" << YAML::Value << YAML::BeginMap;
  for (const auto& [name, entity] : entities) {
    out << YAML::Key << name << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "partitions" << YAML::Value << static_cast<unsigned>(entity.partitions);
    if (!entity.handlers.empty()) out << YAML::Key << "handlers" << YAML::Value << entity.handlers;
    out << YAML::Key << "deltas" << YAML::Value << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "snapshot_every" << YAML::Value << entity.deltas.snapshot_every;
    out << YAML::Key << "snapshot_percent" << YAML::Value << entity.deltas.snapshot_percent;
    out << YAML::EndMap;
    if (entity.archive.enabled) {
      out << YAML::Key << "archive" << YAML::Value << YAML::Flow << YAML::BeginMap;
      out << YAML::Key << "after" << YAML::Value << FormatDuration(entity.archive.after);
      out << YAML::Key << "keep_versions" << YAML::Value << entity.archive.keep_versions;
      out << YAML::EndMap;
    }
    EmitPlacement(out, entity);
    out << YAML::EndMap;
  }
  out << YAML::EndMap;

  out << YAML::Key << "writer" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "listen" << YAML::Value << FormatListenAddress(writer.listen_host, writer.listen_port);
  out << YAML::Key << "batch_max" << YAML::Value << static_cast<unsigned>(writer.batch_max);
  out << YAML::Key << "max_body_bytes" << YAML::Value
      << static_cast<unsigned long long>(writer.max_body_bytes);
  out << YAML::Key << "max_json_depth" << YAML::Value << static_cast<unsigned>(writer.max_json_depth);
  out << YAML::Key << "io_threads" << YAML::Value << static_cast<unsigned>(writer.io_threads);
  out << YAML::Key << "read_threads" << YAML::Value << static_cast<unsigned>(writer.read_threads);
  if (writer.batch_threads == 0) {
    out << YAML::Key << "batch_threads" << YAML::Value << "auto";
  } else {
    out << YAML::Key << "batch_threads" << YAML::Value << static_cast<unsigned>(writer.batch_threads);
  }
  out << YAML::Key << "group_commit_max" << YAML::Value << static_cast<unsigned>(writer.group_commit_max);
  out << YAML::Key << "entity_cache_entries" << YAML::Value
      << static_cast<unsigned>(writer.entity_cache_entries);
  out << YAML::Key << "conflict_retries" << YAML::Value
      << static_cast<unsigned>(writer.conflict_retries);
  out << YAML::Key << "overlap_commits" << YAML::Value << writer.overlap_commits;
  out << YAML::Key << "allow_weak_durability" << YAML::Value << writer.allow_weak_durability;
  out << YAML::Key << "handler_timeout" << YAML::Value << FormatDuration(writer.handler_timeout);
  out << YAML::Key << "handler_memory" << YAML::Value << static_cast<unsigned long long>(writer.handler_memory);
  out << YAML::Key << "push_thread_slice" << YAML::Value << FormatDuration(writer.push_thread_slice);
  out << YAML::Key << "routing" << YAML::Value << writer.routing;
  if (!writer.id.empty()) out << YAML::Key << "id" << YAML::Value << writer.id;
  if (!writer.advertise.empty()) out << YAML::Key << "advertise" << YAML::Value << writer.advertise;
  out << YAML::Key << "lease_ttl" << YAML::Value << FormatDuration(writer.lease_ttl);
  EmitLimits(out, writer.limits);
  EmitListenerTls(out, writer.tls);
  out << YAML::EndMap;

  if (archive.enabled) {
    out << YAML::Key << "archive" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "store" << YAML::Value << archive.store;
    if (archive.store.rfind("s3://", 0) == 0) {
      out << YAML::Key << "s3" << YAML::Value << YAML::BeginMap;
      if (!archive.endpoint.empty()) out << YAML::Key << "endpoint" << YAML::Value << archive.endpoint;
      out << YAML::Key << "region" << YAML::Value << archive.region;
      if (!archive.access_key.empty()) {
        out << YAML::Key << "access_key" << YAML::Value << YAML::DoubleQuoted
            << secret("archive.s3.access_key", archive.access_key);
      }
      if (!archive.secret_key.empty()) {
        out << YAML::Key << "secret_key" << YAML::Value << YAML::DoubleQuoted
            << secret("archive.s3.secret_key", archive.secret_key);
      }
      out << YAML::Key << "path_style" << YAML::Value << archive.path_style;
      if (!archive.tls_ca.empty()) out << YAML::Key << "tls_ca" << YAML::Value << archive.tls_ca;
      out << YAML::Key << "tls_verify" << YAML::Value << archive.tls_verify;
      out << YAML::EndMap;
    }
    out << YAML::Key << "idempotency_window" << YAML::Value << FormatDuration(archive.idempotency_window);
    out << YAML::Key << "interval" << YAML::Value << FormatDuration(archive.interval);
    out << YAML::Key << "segment_events" << YAML::Value << static_cast<unsigned long long>(archive.segment_events);
    out << YAML::Key << "segment_size" << YAML::Value << static_cast<unsigned long long>(archive.segment_bytes);
    out << YAML::Key << "cache_size" << YAML::Value << static_cast<unsigned long long>(archive.cache_bytes);
    out << YAML::EndMap;
  }

  if (admin.enabled) {
    out << YAML::Key << "admin" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "listen" << YAML::Value << FormatListenAddress(admin.listen_host, admin.listen_port);
    if (!admin.token.empty()) {
      out << YAML::Key << "token" << YAML::Value << YAML::DoubleQuoted << secret("admin.token", admin.token);
    }
    EmitLimits(out, admin.limits);
    EmitListenerTls(out, admin.tls);
    out << YAML::EndMap;
  }

  out << YAML::Key << "engine" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "offset_flush_interval" << YAML::Value
      << FormatDuration(engine.offset_flush_interval);
  out << YAML::Key << "batch_max" << YAML::Value << static_cast<unsigned>(engine.batch_max);
  out << YAML::Key << "idle_poll_max" << YAML::Value << FormatDuration(engine.idle_poll_max);
  out << YAML::Key << "retry_backoff_max" << YAML::Value
      << FormatDuration(engine.retry_backoff_max);
  out << YAML::Key << "inflight_batches" << YAML::Value
      << static_cast<unsigned>(engine.inflight_batches);
  out << YAML::Key << "durability_barrier" << YAML::Value << std::string(DurabilityBarrierName(engine.durability_barrier));
  if (!engine.id.empty()) out << YAML::Key << "id" << YAML::Value << engine.id;
  out << YAML::Key << "lease_ttl" << YAML::Value << FormatDuration(engine.lease_ttl);
  out << YAML::Key << "anti_entropy" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "enabled" << YAML::Value << engine.anti_entropy.enabled;
  out << YAML::Key << "rate" << YAML::Value << static_cast<unsigned>(engine.anti_entropy.rate);
  out << YAML::Key << "batch" << YAML::Value << static_cast<unsigned>(engine.anti_entropy.batch);
  out << YAML::EndMap;
  out << YAML::Key << "notices" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "enabled" << YAML::Value << engine.notices.enabled;
  out << YAML::Key << "listen" << YAML::Value
      << FormatListenAddress(engine.notices.listen_host, engine.notices.listen_port);
  if (!engine.notices.advertise_host.empty()) {
    out << YAML::Key << "advertise" << YAML::Value
        << FormatListenAddress(engine.notices.advertise_host, engine.notices.advertise_port);
  }
  out << YAML::EndMap;
  out << YAML::EndMap;

  if (metrics.enabled) {
    out << YAML::Key << "metrics" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "listen" << YAML::Value << FormatListenAddress(metrics.listen_host, metrics.listen_port);
    out << YAML::Key << "writer_listen" << YAML::Value
        << FormatListenAddress(metrics.writer_listen_host, metrics.writer_listen_port);
    out << YAML::Key << "sync_listen" << YAML::Value
        << FormatListenAddress(metrics.sync_listen_host, metrics.sync_listen_port);
    EmitLimits(out, metrics.limits);
    EmitListenerTls(out, metrics.tls);
    out << YAML::EndMap;
  }

  out << YAML::Key << "sinks" << YAML::Value;
  if (sinks.empty()) out << YAML::Flow;
  out << YAML::BeginSeq;
  for (size_t index = 0; index < sinks.size(); ++index) {
    const SinkConfig& sink = sinks[index];
    const std::string at = "sinks[" + std::to_string(index) + "].";
    out << YAML::BeginMap;
    out << YAML::Key << "name" << YAML::Value << sink.name;
    out << YAML::Key << "type" << YAML::Value << sink.type;
    out << YAML::Key << "entity" << YAML::Value << sink.entity;
    out << YAML::Key << "on_error" << YAML::Value
        << (sink.on_error == OnError::kStop ? "stop" : "dead_letter");
    out << YAML::Key << "batch_max" << YAML::Value << static_cast<unsigned>(sink.batch_max);
    if (sink.push.enabled) {
      out << YAML::Key << "push" << YAML::Value << true;
      out << YAML::Key << "push_mode" << YAML::Value
          << (sink.push.mode == PushConfig::Mode::kSync ? "sync" : "async");
      out << YAML::Key << "push_timeout" << YAML::Value << FormatDuration(sink.push.timeout);
      out << YAML::Key << "push_threads" << YAML::Value << static_cast<unsigned>(sink.push.threads);
    }
    if (!sink.anti_entropy) out << YAML::Key << "anti_entropy" << YAML::Value << false;
    if (!sink.code.empty()) out << YAML::Key << "code" << YAML::Value << sink.code;
    if (!sink.routes.empty()) {
      out << YAML::Key << "routes" << YAML::Value << YAML::Flow << YAML::BeginSeq;
      for (const std::string& r : sink.routes) out << r;
      out << YAML::EndSeq;
    }
    if (const SinkType* spec = sink_types ? sink_types->Find(sink.type) : nullptr) {
      YamlSinkPrinter printer(out, at, secret, secret_references);
      spec->print(sink, printer);
    } else if (!sink.type.empty()) {
      // A plugin's sink: its options as they were given (JSON is valid YAML).
      auto options = ParseJsonOrDiscarded(sink.plugin.options_json);
      for (auto& [key, value] : options.items()) {
        out << YAML::Key << key << YAML::Value;
        if (key == "url" || IsSecretName(key)) {
          out << YAML::DoubleQuoted
              << secret(at + key, value.is_string() ? value.get<std::string>() : value.dump(), key == "url");
        } else if (value.is_string()) {
          // Quoted, so that "true" or "3" read back as strings.
          out << YAML::DoubleQuoted << value.get<std::string>();
        } else {
          out << YAML::Flow << YAML::Load(value.dump());
        }
      }
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  if (!plugins.empty()) {
    out << YAML::Key << "plugins" << YAML::Value << YAML::Block << YAML::BeginSeq;
    for (const PluginConfig& p : plugins) out << p.path;
    out << YAML::EndSeq;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace sluice::config
