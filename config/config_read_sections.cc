// ConfigReader: the sections other than sinks and plugins (storage,
// entities, writer, admin, metrics, engine) and the check that one
// process's listeners have distinct addresses.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config_reader.h"
#include "config/config_text.h"
#include "core/json.h"
#include "core/names.h"

namespace sluice::config {

namespace {
constexpr uint64_t kMaxBodyBytesLimit = 64u << 20;
}  // namespace

void ConfigReader::ReadStorage(const Field& at, Config* config) {
  ExpectKeys(at, {
      {"mysql", Presence::kRequired, [&](const Field& f) { ReadMysql(f, &config->mysql); }},
  });
}

void ConfigReader::ReadMysql(const Field& at, MysqlConfig* m) {
  constexpr auto kOptional = Presence::kOptional;
  ExpectKeys(at, {
      {"host", kOptional, [&](const Field& f) { ReadHost(f, &m->host); }},
      {"port", kOptional, [&](const Field& f) { ReadUint(f, 1, 65535, &m->port); }},
      {"socket", kOptional, [&](const Field& f) { ReadString(f, kMayBeEmpty, &m->socket); }},
      {"user", kOptional, [&](const Field& f) { ReadString(f, kNotEmpty, &m->user); }},
      {"password", kOptional, [&](const Field& f) { ReadSecret(f, &m->password); }},
      {"database", kOptional, [&](const Field& f) { ReadDatabaseName(f, &m->database); }},
      {"connect_timeout", kOptional, [&](const Field& f) { ReadTimeout(f, &m->connect_timeout); }},
      {"io_timeout", kOptional, [&](const Field& f) { ReadTimeout(f, &m->io_timeout); }},
  });
}

void ConfigReader::ReadEntities(const Field& at, std::map<std::string, EntityTypeConfig>* entities) {
  if (!at.value.IsNull() && !at.value.IsMap()) {
    Problem(at.mark, at.path, "must be a mapping from entity type name to its settings, got " + Describe(at.value));
    return;
  }
  if (at.value.size() == 0) {
    Problem(at.mark, at.path, "at least one entity type is required");
    return;
  }
  entity_names_.emplace();
  ForEachEntry(at, [&](const Field& f) {
    const std::string& name = f.key.Scalar();
    entity_names_->push_back(name);
    const bool valid_name = IsValidTypeName(name);
    if (!valid_name) {
      Problem(f.key.Mark(), f.path, "entity type names must match [a-z][a-z0-9_]{0,47}");
    }
    EntityTypeConfig entity;
    entity.name = name;
    ExpectKeys(f, {
        {"partitions", Presence::kRequired, [&](const Field& p) { ReadUint(p, 1, 1024, &entity.partitions); }},
        {"handlers", Presence::kOptional, [&](const Field& h) { ReadHandlersFile(h, &entity); }},
    });
    if (valid_name) entities->emplace(name, std::move(entity));
  });
}

// entities.<type>.handlers: a readable JavaScript file, relative to the
// config file's folder. Compiling it is the handlers module's job.
void ConfigReader::ReadHandlersFile(const Field& f, EntityTypeConfig* entity) {
  std::string source;
  const std::optional<std::filesystem::path> p = ReadNamedFile(f, "handler file ", &source);
  if (!p) return;
  entity->handlers = p->lexically_normal().string();
  entity->handlers_origin = Origin(f.mark);
}

// sinks[i].code: a readable JavaScript file, as handlers are; compiling it
// is the sink's job (connectors/view_code.h).
void ConfigReader::ReadViewCodeFile(const Field& f, SinkConfig* sink) {
  std::string source;
  const std::optional<std::filesystem::path> p = ReadNamedFile(f, "view code file ", &source);
  if (!p) return;
  sink->code = p->lexically_normal().string();
  sink->code_origin = Origin(f.mark);
}

void ConfigReader::ReadWriter(const Field& at, WriterConfig* w) {
  constexpr auto kOptional = Presence::kOptional;
  std::vector<KeySpec> keys = {
      {"listen", kOptional, [&](const Field& f) { ReadListenKey(f, &w->listen_host, &w->listen_port); }},
      {"batch_max", kOptional, [&](const Field& f) { ReadUint(f, 1, 100000, &w->batch_max); }},
      {"max_body_bytes", kOptional,
       [&](const Field& f) { ReadByteSize(f, 1, kMaxBodyBytesLimit, &w->max_body_bytes); }},
      {"max_json_depth", kOptional, [&](const Field& f) { ReadUint(f, 1, kMaxJsonDepthCap, &w->max_json_depth); }},
      {"io_threads", kOptional, [&](const Field& f) { ReadUint(f, 1, 64, &w->io_threads); }},
      {"read_threads", kOptional, [&](const Field& f) { ReadUint(f, 1, 256, &w->read_threads); }},
      {"entity_cache_entries", kOptional,
       [&](const Field& f) { ReadUint(f, 1, 10000000, &w->entity_cache_entries); }},
      {"conflict_retries", kOptional, [&](const Field& f) { ReadUint(f, 1, 1000, &w->conflict_retries); }},
      {"allow_weak_durability", kOptional, [&](const Field& f) { ReadBool(f, &w->allow_weak_durability); }},
      {"handler_timeout", kOptional,
       [&](const Field& f) {
         ReadDuration(f, std::chrono::milliseconds(1), std::chrono::seconds(60), &w->handler_timeout);
       }},
      {"handler_memory", kOptional,
       [&](const Field& f) { ReadByteSize(f, uint64_t{1} << 20, uint64_t{1} << 30, &w->handler_memory); }},
      {"push_thread_slice", kOptional, [&](const Field& f) { ReadThreadSlice(f, &w->push_thread_slice); }},
      {"routing", kOptional, [&](const Field& f) { ReadBool(f, &w->routing); }},
      {"id", kOptional,
       [&](const Field& f) {
         ReadMatching(f, "a name of 1-128 letters, digits, '.', '_', ':' or '-'", IsValidMemberName, &w->id);
       }},
      {"advertise", kOptional,
       [&](const Field& f) { ReadMatching(f, "an http://host:port URL", IsValidAdvertiseUrl, &w->advertise); }},
      {"lease_ttl", kOptional,
       [&](const Field& f) {
         ReadDuration(f, std::chrono::seconds(1), std::chrono::minutes(10), &w->lease_ttl);
       }},
  };
  for (KeySpec& k : LimitKeys(&w->limits)) keys.push_back(std::move(k));
  ExpectKeys(at, keys);
}

// 0 (the kernel's default) or the range Linux accepts for a custom slice.
void ConfigReader::ReadThreadSlice(const Field& f, std::chrono::microseconds* out) {
  using std::chrono::microseconds;
  const std::optional<DurationText> d = ParseDurationText(f, /*fine=*/true);
  if (!d) return;
  const std::optional<uint64_t> us = d->Micros(static_cast<uint64_t>(kMaxThreadSliceUs));
  if (!us || (*us != 0 && *us < static_cast<uint64_t>(kMinThreadSliceUs))) {
    return Expected(f, "0s (the kernel's default) or between " + FormatDuration(microseconds(kMinThreadSliceUs)) +
                           " and " + FormatDuration(microseconds(kMaxThreadSliceUs)),
                    d->text);
  }
  *out = microseconds(static_cast<int64_t>(*us));
}

void ConfigReader::ReadAdmin(const Field& at, AdminConfig* a) {
  a->enabled = true;
  std::vector<KeySpec> keys = {
      {"listen", Presence::kOptional, [&](const Field& f) { ReadListenKey(f, &a->listen_host, &a->listen_port); }},
      {"token", Presence::kOptional, [&](const Field& f) { ReadSecret(f, &a->token); }},
  };
  for (KeySpec& k : LimitKeys(&a->limits)) keys.push_back(std::move(k));
  ExpectKeys(at, keys);
}

// metrics: one address per process (listen for serve; writer_listen and
// sync_listen, which default to it) and the listener's limits.
void ConfigReader::ReadMetrics(const Field& at, Config* config) {
  MetricsConfig& m = config->metrics;
  m.enabled = true;
  constexpr auto kOptional = Presence::kOptional;
  std::vector<KeySpec> keys = {
      {"listen", kOptional, [&](const Field& f) { ReadListenKey(f, &m.listen_host, &m.listen_port); }},
      {"writer_listen", kOptional,
       [&](const Field& f) { ReadListenKey(f, &m.writer_listen_host, &m.writer_listen_port); }},
      {"sync_listen", kOptional,
       [&](const Field& f) { ReadListenKey(f, &m.sync_listen_host, &m.sync_listen_port); }},
  };
  for (KeySpec& k : LimitKeys(&m.limits)) keys.push_back(std::move(k));
  ExpectKeys(at, keys);
  if (!listen_keys_.count("metrics.writer_listen")) {
    m.writer_listen_host = m.listen_host;
    m.writer_listen_port = m.listen_port;
  }
  if (!listen_keys_.count("metrics.sync_listen")) {
    m.sync_listen_host = m.listen_host;
    m.sync_listen_port = m.listen_port;
  }
}

std::vector<KeySpec> ConfigReader::LimitKeys(ListenerLimits* l) {
  using std::chrono::hours;
  using std::chrono::milliseconds;
  constexpr auto kOptional = Presence::kOptional;
  auto timeout = [this](std::chrono::milliseconds* out) {
    return [this, out](const Field& f) { ReadDuration(f, milliseconds(100), hours(1), out); };
  };
  return {
      {"max_connections", kOptional, [this, l](const Field& f) { ReadUint(f, 1, 1000000, &l->max_connections); }},
      {"header_timeout", kOptional, timeout(&l->header_timeout)},
      {"body_timeout", kOptional, timeout(&l->body_timeout)},
      {"idle_timeout", kOptional, timeout(&l->idle_timeout)},
      {"write_timeout", kOptional, timeout(&l->write_timeout)},
  };
}

// After the whole file: the listeners one process opens need distinct
// addresses. serve opens writer.listen, admin.listen and metrics.listen;
// writer opens writer.listen and metrics.writer_listen; sync opens
// admin.listen and metrics.sync_listen. A clash is reported at the key
// given in the file (the later one of the pair when both are).
void ConfigReader::CheckListenAddresses(const Config& config) {
  struct Listener {
    std::string path;
    bool open;  // the section is present (the writer's always is)
    const std::string& host;
    uint16_t port;
  };
  const Listener writer{"writer.listen", true, config.writer.listen_host, config.writer.listen_port};
  const Listener admin{"admin.listen", config.admin.enabled, config.admin.listen_host, config.admin.listen_port};
  const MetricsConfig& m = config.metrics;
  const Listener metrics{"metrics.listen", m.enabled, m.listen_host, m.listen_port};
  const Listener metrics_writer{"metrics.writer_listen", m.enabled, m.writer_listen_host, m.writer_listen_port};
  const Listener metrics_sync{"metrics.sync_listen", m.enabled, m.sync_listen_host, m.sync_listen_port};
  auto check = [&](const Listener& a, const Listener& b, std::string_view process) {
    if (!a.open || !b.open || !SameListenAddress(a.host, a.port, b.host, b.port)) return;
    const auto given_a = listen_keys_.find(a.path);
    const auto given_b = listen_keys_.find(b.path);
    const auto at = given_b != listen_keys_.end() ? given_b : given_a;
    if (at == listen_keys_.end()) return;  // two defaults never clash
    const std::string& other = at == given_b ? a.path : b.path;
    const std::string a_text = FormatListenAddress(a.host, a.port);
    const std::string b_text = FormatListenAddress(b.host, b.port);
    Problem(at->second.mark, at->second.path,
            "must differ from " + other + ", which `sluice " + std::string(process) + "` also opens (" +
                (a_text == b_text ? "both are " + a_text : a_text + " and " + b_text + " share the port") + ")");
  };
  check(writer, metrics, "serve");
  check(writer, admin, "serve");
  check(admin, metrics, "serve");
  if (listen_keys_.count(metrics_writer.path)) check(writer, metrics_writer, "writer");
  if (listen_keys_.count(metrics_sync.path)) check(admin, metrics_sync, "sync");
}

void ConfigReader::ReadEngine(const Field& at, EngineConfig* e) {
  using std::chrono::milliseconds;
  using std::chrono::minutes;
  using std::chrono::seconds;
  constexpr auto kOptional = Presence::kOptional;
  const auto barrier = [](DurabilityBarrier b) { return std::pair(DurabilityBarrierName(b), b); };
  ExpectKeys(at, {
      {"offset_flush_interval", kOptional,
       [&](const Field& f) { ReadDuration(f, milliseconds(10), minutes(1), &e->offset_flush_interval); }},
      {"batch_max", kOptional, [&](const Field& f) { ReadUint(f, 1, 100000, &e->batch_max); }},
      {"idle_poll_max", kOptional,
       [&](const Field& f) { ReadDuration(f, milliseconds(1), seconds(10), &e->idle_poll_max); }},
      {"retry_backoff_max", kOptional,
       [&](const Field& f) { ReadDuration(f, milliseconds(10), minutes(10), &e->retry_backoff_max); }},
      {"inflight_batches", kOptional, [&](const Field& f) { ReadUint(f, 1, 64, &e->inflight_batches); }},
      {"durability_barrier", kOptional,
       [&](const Field& f) {
         ReadChoice(f, "auto, lsn, commit or off",
                    {barrier(DurabilityBarrier::kAuto), barrier(DurabilityBarrier::kLsn),
                     barrier(DurabilityBarrier::kCommit), barrier(DurabilityBarrier::kOff)},
                    &e->durability_barrier);
       }},
      {"anti_entropy", kOptional, [&](const Field& f) { ReadAntiEntropy(f, &e->anti_entropy); }},
      {"id", kOptional,
       [&](const Field& f) { ReadMatching(f, "a name of 1-128 letters, digits, '.', '_', ':' or '-'", IsValidMemberName, &e->id); }},
      {"lease_ttl", kOptional, [&](const Field& f) { ReadDuration(f, seconds(1), minutes(10), &e->lease_ttl); }},
  });
}

void ConfigReader::ReadAntiEntropy(const Field& at, AntiEntropyConfig* a) {
  constexpr auto kOptional = Presence::kOptional;
  ExpectKeys(at, {
      {"enabled", kOptional, [&](const Field& f) { ReadBool(f, &a->enabled); }},
      {"rate", kOptional, [&](const Field& f) { ReadUint(f, 1, 1000000, &a->rate); }},
      {"batch", kOptional, [&](const Field& f) { ReadUint(f, 1, 5000, &a->batch); }},
  });
}

}  // namespace sluice::config
