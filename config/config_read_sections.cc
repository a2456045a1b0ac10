// ConfigReader: the sections other than sinks and plugins (storage and its
// servers, entities and their placement on those servers, writer, admin,
// metrics, engine) and the check that one process's listeners have distinct
// addresses.
#include <algorithm>
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

constexpr std::string_view kRangeExpected =
    "a partition range \"A-B\" or \"A\", or a sequence of them such as [0-3, 6]";

// [a-z][a-z0-9_]{0,31}.
bool IsValidServerName(std::string_view name) {
  if (name.empty() || name.size() > 32 || name[0] < 'a' || name[0] > 'z') return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; });
}

// Two entries reach the same tables: the same database through the same
// socket (host and port are then unused) or the same host and port.
bool SameTables(const MysqlConfig& a, const MysqlConfig& b) {
  if (a.database != b.database || a.socket != b.socket) return false;
  return !a.socket.empty() || (a.host == b.host && a.port == b.port);
}

std::string ServerAddress(const MysqlConfig& m) {
  return (m.socket.empty() ? "host " + m.host + ", port " + std::to_string(m.port) : "socket " + m.socket) +
         ", database " + m.database;
}

std::string RangeText(uint32_t first, uint32_t last) {
  return first == last ? std::to_string(first) : std::to_string(first) + "-" + std::to_string(last);
}

// "partition 7" or "partitions 2-3, 7".
std::string PartitionsText(const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
  std::string text = ranges.size() == 1 && ranges[0].first == ranges[0].second ? "partition " : "partitions ";
  for (size_t i = 0; i < ranges.size(); ++i) text += (i ? ", " : "") + RangeText(ranges[i].first, ranges[i].second);
  return text;
}

std::string ServerText(std::string_view name) {
  return name == kMainServer ? "main (storage.mysql)" : QuoteValue(name);
}
}  // namespace

void ConfigReader::ReadStorage(const Field& at, Config* config) {
  std::optional<Field> servers;
  ExpectKeys(at, {
      {"mysql", Presence::kRequired, [&](const Field& f) { ReadMysql(f, &config->mysql); }},
      {"servers", Presence::kOptional, [&](const Field& f) { servers = f; }},
  });
  if (!at.value.IsNull() && !at.value.IsMap()) return;
  server_names_.emplace();
  // After storage.mysql, wherever it is in the file: the servers take its values by default.
  if (servers) ReadStorageServers(*servers, config);
}

void ConfigReader::ReadMysql(const Field& at, MysqlConfig* m) {
  constexpr auto kOptional = Presence::kOptional;
  std::optional<Field> mode_key, ca_key, cert_key, key_key;
  ExpectKeys(at, {
      {"host", kOptional, [&](const Field& f) { ReadHost(f, &m->host); }},
      {"port", kOptional, [&](const Field& f) { ReadUint(f, 1, 65535, &m->port); }},
      {"socket", kOptional, [&](const Field& f) { ReadString(f, kMayBeEmpty, &m->socket); }},
      {"user", kOptional, [&](const Field& f) { ReadString(f, kNotEmpty, &m->user); }},
      {"password", kOptional, [&](const Field& f) { ReadSecret(f, &m->password); }},
      {"database", kOptional, [&](const Field& f) { ReadDatabaseName(f, &m->database); }},
      {"connect_timeout", kOptional, [&](const Field& f) { ReadTimeout(f, &m->connect_timeout); }},
      {"io_timeout", kOptional, [&](const Field& f) { ReadTimeout(f, &m->io_timeout); }},
      {"ssl_mode", kOptional,
       [&](const Field& f) {
         mode_key = f;
         ReadChoice(f, "disabled, required, verify_ca or verify_identity",
                    {{"disabled", MysqlSslMode::kDisabled},
                     {"required", MysqlSslMode::kRequired},
                     {"verify_ca", MysqlSslMode::kVerifyCa},
                     {"verify_identity", MysqlSslMode::kVerifyIdentity}},
                    &m->ssl_mode);
       }},
      {"ssl_ca", kOptional,
       [&](const Field& f) {
         ca_key = f;
         ReadPemFile(f, "CA file ", &m->ssl_ca);
       }},
      {"ssl_cert", kOptional,
       [&](const Field& f) {
         cert_key = f;
         ReadPemFile(f, "certificate file ", &m->ssl_cert);
       }},
      {"ssl_key", kOptional,
       [&](const Field& f) {
         key_key = f;
         ReadPemFile(f, "private key file ", &m->ssl_key);
       }},
  });
  // With a CA and no mode (here or taken from storage.mysql), the server is verified fully.
  if (!mode_key && ca_key && m->ssl_mode == MysqlSslMode::kDisabled) m->ssl_mode = MysqlSslMode::kVerifyIdentity;
  const bool verifies = m->ssl_mode == MysqlSslMode::kVerifyCa || m->ssl_mode == MysqlSslMode::kVerifyIdentity;
  if (mode_key && verifies && m->ssl_ca.empty()) {
    Problem(mode_key->mark, mode_key->path, "needs ssl_ca: the CA certificates to verify the server with");
  }
  if (mode_key && m->ssl_mode == MysqlSslMode::kDisabled) {
    if (ca_key || cert_key || key_key) {
      Problem(mode_key->mark, mode_key->path, "is disabled but TLS files are given; remove them or choose a mode");
    }
    m->ssl_ca.clear();  // a storage server that turns off what it took from storage.mysql
    m->ssl_cert.clear();
    m->ssl_key.clear();
  }
  if (cert_key && !key_key) Problem(cert_key->mark, cert_key->path, "needs ssl_key, the certificate's private key");
  if (key_key && !cert_key) Problem(key_key->mark, key_key->path, "needs ssl_cert, the certificate of this key");
}

void ConfigReader::ReadStorageServers(const Field& at, Config* config) {
  if (!at.value.IsNull() && !at.value.IsMap()) {
    Problem(at.mark, at.path, "must be a mapping from server name to its settings, got " + Describe(at.value));
    server_names_.reset();  // then no server name in entities is reported unknown
    return;
  }
  std::vector<YAML::Mark> key_marks;  // of each entry of config->servers
  ForEachEntry(at, [&](const Field& f) {
    const std::string& name = f.key.Scalar();
    server_names_->push_back(name);
    bool valid_name = false;
    if (name == kMainServer) {
      KeyProblem(f, "the name main is reserved for storage.mysql; give this server another name");
    } else if (!IsValidServerName(name)) {
      KeyProblem(f, "server names must match [a-z][a-z0-9_]{0,31}");
    } else {
      valid_name = true;
    }
    StorageServerConfig server{name, config->mysql, Origin(f.key.Mark())};
    // A server given its own host or port is reached there, not through
    // storage.mysql's socket (which would lead to main's instance).
    if (f.value.IsMap() && (f.value["host"].IsDefined() || f.value["port"].IsDefined()) &&
        !f.value["socket"].IsDefined()) {
      server.mysql.socket.clear();
    }
    ReadMysql(f, &server.mysql);
    // A password taken from storage.mysql is shown as storage.mysql's is (Redacted()).
    if (!f.value.IsMap() || !f.value["password"].IsDefined()) {
      if (const auto it = secret_references_->find("storage.mysql.password"); it != secret_references_->end()) {
        (*secret_references_)[JoinPath(f.path, "password")] = it->second;
      }
    }
    // One that is not a mapping is reported as such, not as a copy of main.
    if (!valid_name || !(f.value.IsNull() || f.value.IsMap())) return;
    config->servers.push_back(std::move(server));
    key_marks.push_back(f.key.Mark());
  });
  // Two names for the same tables would let two writers believe they each own them.
  for (size_t i = 0; i < config->servers.size(); ++i) {
    const StorageServerConfig& server = config->servers[i];
    std::string_view same;
    if (SameTables(server.mysql, config->mysql)) same = kMainServer;
    for (size_t j = 0; same.empty() && j < i; ++j) {
      if (SameTables(server.mysql, config->servers[j].mysql)) same = config->servers[j].name;
    }
    if (same.empty()) continue;
    Problem(key_marks[i], JoinPath(at.path, server.name),
            "reaches the same tables as " + ServerText(same) + " (" + ServerAddress(server.mysql) +
                "); give it another host, port, socket or database");
  }
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
    std::optional<Field> server;
    std::optional<Field> servers;
    ExpectKeys(f, {
        {"partitions", Presence::kRequired, [&](const Field& p) { ReadUint(p, 1, 1024, &entity.partitions); }},
        {"handlers", Presence::kOptional, [&](const Field& h) { ReadHandlersFile(h, &entity); }},
        {"deltas", Presence::kOptional,
         [&](const Field& d) {
           ExpectKeys(d, {
               {"snapshot_every", Presence::kOptional,
                [&](const Field& v) { ReadUint(v, 1, 1000000, &entity.deltas.snapshot_every); }},
               {"snapshot_percent", Presence::kOptional,
                [&](const Field& v) { ReadUint(v, 1, 1000, &entity.deltas.snapshot_percent); }},
           });
         }},
        {"archive", Presence::kOptional,
         [&](const Field& a) {
           entity.archive.enabled = true;
           archive_policies_.push_back(a);
           ExpectKeys(a, {
               {"after", Presence::kOptional,
                [&](const Field& v) {
                  ReadDuration(v, std::chrono::milliseconds(0), std::chrono::hours(24 * 36500), &entity.archive.after);
                }},
               {"keep_versions", Presence::kOptional,
                [&](const Field& v) { ReadUint(v, 1, 1000000, &entity.archive.keep_versions); }},
           });
         }},
        {"server", Presence::kOptional, [&](const Field& s) { server = s; }},
        {"servers", Presence::kOptional, [&](const Field& s) { servers = s; }},
    });
    // After the mapping: the ranges are checked against partitions, wherever it is.
    ReadPlacement(server, servers, &entity);
    if (valid_name) entities->emplace(name, std::move(entity));
  });
}

void ConfigReader::ReadPlacement(const std::optional<Field>& server, const std::optional<Field>& servers,
                                 EntityTypeConfig* entity) {
  // 0 when partitions is missing or wrong, or when both keys are given: the
  // names and ranges are then only read, for their own problems.
  uint32_t partitions = entity->partitions;
  if (server && servers) {
    const bool server_first = std::pair(server->key.Mark().line, server->key.Mark().column) <
                              std::pair(servers->key.Mark().line, servers->key.Mark().column);
    KeyProblem(server_first ? *servers : *server,
               "give either server (every partition on one server) or servers (partition ranges per "
               "server), not both");
    partitions = 0;
  }
  if (server) {
    const std::optional<std::string> name = PlainScalar(*server, "a server name");
    if (name) {
      server_refs_.push_back({*name, server->mark, server->path});
      if (partitions > 0 && *name != kMainServer) entity->placement.push_back({0, partitions - 1, *name});
    }
  }
  if (!servers) return;

  struct Given {
    PartitionRange range;
    YAML::Mark mark;
  };
  std::vector<Given> given;  // in file order
  // Whether every range was read, so that what no range covers is worth
  // reporting (ForEachEntry skips a repeated or non-string key).
  bool complete = servers->value.IsNull() || servers->value.IsMap();
  size_t entries = 0;
  ForEachEntry(*servers, [&](const Field& f) {
    ++entries;
    const std::string& name = f.key.Scalar();
    server_refs_.push_back({name, f.key.Mark(), f.path});
    const auto read = [&](const Field& r) {
      const std::optional<std::pair<uint32_t, uint32_t>> range = ReadPartitionRange(r);
      if (!range) {
        complete = false;
        return;
      }
      if (partitions == 0) return;
      auto [first, last] = *range;
      if (last >= partitions) {
        Problem(r.mark, r.path,
                "partition range " + r.value.Scalar() + " is past the last partition, " +
                    std::to_string(partitions - 1) + " (the type has " + std::to_string(partitions) +
                    (partitions == 1 ? " partition)" : " partitions)"));
        if (first >= partitions) return;
        last = partitions - 1;
      }
      for (const Given& g : given) {
        const uint32_t from = std::max(first, g.range.first);
        const uint32_t to = std::min(last, g.range.last);
        if (from > to) continue;
        Problem(r.mark, r.path,
                PartitionsText({{from, to}}) + " also given to " + ServerText(g.range.server) + " on line " +
                    std::to_string(g.mark.line + 1) + "; each partition must be on exactly one server");
        break;
      }
      given.push_back({{first, last, name}, r.mark});
    };
    if (f.value.IsSequence()) {
      ForEachItem(f, kRangeExpected, read);
    } else {
      read(f);
    }
  });
  if (servers->value.IsMap() && entries != servers->value.size()) complete = false;
  if (partitions == 0) return;

  std::stable_sort(given.begin(), given.end(),
                   [](const Given& a, const Given& b) { return a.range.first < b.range.first; });
  std::vector<std::pair<uint32_t, uint32_t>> missing;
  uint32_t next = 0;  // the first partition no range so far covers
  for (const Given& g : given) {
    if (g.range.first > next) missing.emplace_back(next, g.range.first - 1);
    next = std::max(next, g.range.last + 1);
  }
  if (next < partitions) missing.emplace_back(next, partitions - 1);
  if (complete && !missing.empty()) {
    const bool one = missing.size() == 1 && missing[0].first == missing[0].second;
    KeyProblem(*servers, PartitionsText(missing) + (one ? " is" : " are") + " on no server; each of the type's " +
                             std::to_string(partitions) +
                             (partitions == 1 ? " partition" : " partitions") + " must be on exactly one");
  }
  // Sorted, adjacent ranges of one server merged; main alone is the default, left empty.
  for (const Given& g : given) {
    if (!entity->placement.empty() && entity->placement.back().server == g.range.server &&
        entity->placement.back().last + 1 == g.range.first) {
      entity->placement.back().last = g.range.last;
    } else {
      entity->placement.push_back(g.range);
    }
  }
  if (entity->placement.size() == 1 && entity->placement[0].server == kMainServer) entity->placement.clear();
}

std::optional<std::pair<uint32_t, uint32_t>> ConfigReader::ReadPartitionRange(const Field& f) {
  const std::optional<std::string> text = PlainScalar(f, kRangeExpected);
  if (!text) return std::nullopt;
  const size_t dash = text->find('-');
  const std::optional<uint64_t> first = ParseDecimal(std::string_view(*text).substr(0, dash));
  const std::optional<uint64_t> last =
      dash == std::string::npos ? first : ParseDecimal(std::string_view(*text).substr(dash + 1));
  if (!first || !last) {
    Expected(f, kRangeExpected, *text);
    return std::nullopt;
  }
  if (*first > *last) {
    Expected(f, "a partition range \"A-B\" with A not greater than B", *text);
    return std::nullopt;
  }
  // Past any partition count (1024) either way: reported as past the type's.
  constexpr uint64_t kCap = 1u << 20;
  return std::pair(static_cast<uint32_t>(std::min(*first, kCap)), static_cast<uint32_t>(std::min(*last, kCap)));
}

void ConfigReader::CheckServerReferences() {
  // Without a readable storage.servers, that is the problem to report.
  if (!server_names_) return;
  std::vector<std::string_view> names = {kMainServer};
  names.insert(names.end(), server_names_->begin(), server_names_->end());
  for (const ServerRef& ref : server_refs_) {
    if (std::find(names.begin(), names.end(), ref.name) != names.end()) continue;
    const std::string_view best = ClosestName(ref.name, names);
    Problem(ref.mark, ref.path,
            "unknown server " + QuoteValue(ref.name) +
                (best.empty() ? " (expected one of: " + JoinNames(names) + ", or one added under storage.servers)"
                              : " (did you mean " + QuoteValue(best) + "?)"));
  }
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
      {"batch_threads", kOptional,
       [&](const Field& f) {
         constexpr std::string_view kExpected = "auto or an integer between 1 and 1024";
         const auto text = PlainScalar(f, kExpected);
         if (!text) return;
         if (*text == "auto") {
           w->batch_threads = 0;
           return;
         }
         const auto v = ParseDecimal(*text);
         if (!v || *v < 1 || *v > 1024) return Expected(f, kExpected, *text);
         w->batch_threads = static_cast<uint32_t>(*v);
       }},
      {"group_commit_max", kOptional, [&](const Field& f) { ReadUint(f, 1, 1024, &w->group_commit_max); }},
      {"entity_cache_entries", kOptional,
       [&](const Field& f) { ReadUint(f, 1, 10000000, &w->entity_cache_entries); }},
      {"conflict_retries", kOptional, [&](const Field& f) { ReadUint(f, 1, 1000, &w->conflict_retries); }},
      {"overlap_commits", kOptional, [&](const Field& f) { ReadBool(f, &w->overlap_commits); }},
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
       [&](const Field& f) { ReadMatching(f, "an http://host:port or https://host:port URL", IsValidAdvertiseUrl, &w->advertise); }},
      {"lease_ttl", kOptional,
       [&](const Field& f) {
         ReadDuration(f, std::chrono::seconds(1), std::chrono::minutes(10), &w->lease_ttl);
       }},
  };
  for (KeySpec& k : LimitKeys(&w->limits)) keys.push_back(std::move(k));
  keys.push_back({"tls", kOptional, [&](const Field& f) { ReadListenerTls(f, &w->tls); }});
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

// archive: where archived events go (docs/archive.md).
void ConfigReader::ReadArchive(const Field& at, ArchiveConfig* a) {
  a->enabled = true;
  constexpr auto kOptional = Presence::kOptional;
  ExpectKeys(at, {
      {"store", Presence::kRequired,
       [&](const Field& f) {
         if (!ReadString(f, kNotEmpty, &a->store)) return;
         if (a->store.rfind("file:///", 0) != 0 && a->store.rfind("s3://", 0) != 0) {
           Expected(f, "file:///absolute/dir or s3://bucket[/prefix]", a->store);
         }
       }},
      {"s3", kOptional,
       [&](const Field& s3) {
         ExpectKeys(s3, {
             {"endpoint", kOptional, [&](const Field& f) { ReadString(f, kNotEmpty, &a->endpoint); }},
             {"region", kOptional, [&](const Field& f) { ReadString(f, kNotEmpty, &a->region); }},
             {"access_key", kOptional, [&](const Field& f) { ReadSecret(f, &a->access_key); }},
             {"secret_key", kOptional, [&](const Field& f) { ReadSecret(f, &a->secret_key); }},
             {"path_style", kOptional, [&](const Field& f) { ReadBool(f, &a->path_style); }},
             {"tls_ca", kOptional,
              [&](const Field& f) {
                if (ReadString(f, kNotEmpty, &a->tls_ca)) a->tls_ca = ResolvePath(a->tls_ca).string();
              }},
             {"tls_verify", kOptional, [&](const Field& f) { ReadBool(f, &a->tls_verify); }},
         });
       }},
      {"idempotency_window", kOptional,
       [&](const Field& f) {
         ReadDuration(f, std::chrono::milliseconds(0), std::chrono::hours(24 * 36500), &a->idempotency_window);
       }},
      {"interval", kOptional,
       [&](const Field& f) { ReadDuration(f, std::chrono::milliseconds(0), std::chrono::hours(24), &a->interval); }},
      {"segment_events", kOptional, [&](const Field& f) { ReadUint(f, 1, 10000000, &a->segment_events); }},
      {"segment_size", kOptional,
       [&](const Field& f) { ReadByteSize(f, 1 << 10, uint64_t{4} << 30, &a->segment_bytes); }},
      {"cache_size", kOptional,
       [&](const Field& f) { ReadByteSize(f, 1 << 20, uint64_t{64} << 30, &a->cache_bytes); }},
  });
}

void ConfigReader::ReadAdmin(const Field& at, AdminConfig* a) {
  a->enabled = true;
  std::vector<KeySpec> keys = {
      {"listen", Presence::kOptional, [&](const Field& f) { ReadListenKey(f, &a->listen_host, &a->listen_port); }},
      {"token", Presence::kOptional, [&](const Field& f) { ReadSecret(f, &a->token); }},
  };
  for (KeySpec& k : LimitKeys(&a->limits)) keys.push_back(std::move(k));
  keys.push_back({"tls", Presence::kOptional, [&](const Field& f) { ReadListenerTls(f, &a->tls); }});
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
  keys.push_back({"tls", kOptional, [&](const Field& f) { ReadListenerTls(f, &m.tls); }});
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

// A listener's tls: {cert, key, client_ca, ca}.
void ConfigReader::ReadListenerTls(const Field& at, ListenerTls* t) {
  constexpr auto kOptional = Presence::kOptional;
  ExpectKeys(at, {
      {"cert", Presence::kRequired, [&](const Field& f) { ReadPemFile(f, "certificate file ", &t->cert); }},
      {"key", Presence::kRequired, [&](const Field& f) { ReadPemFile(f, "private key file ", &t->key); }},
      {"client_ca", kOptional, [&](const Field& f) { ReadPemFile(f, "client CA file ", &t->client_ca); }},
      {"ca", kOptional, [&](const Field& f) { ReadPemFile(f, "CA file ", &t->ca); }},
  });
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
      {"notices", kOptional, [&](const Field& f) { ReadNotices(f, &e->notices); }},
      {"id", kOptional,
       [&](const Field& f) { ReadMatching(f, "a name of 1-128 letters, digits, '.', '_', ':' or '-'", IsValidMemberName, &e->id); }},
      {"lease_ttl", kOptional, [&](const Field& f) { ReadDuration(f, seconds(1), minutes(10), &e->lease_ttl); }},
  });
}

void ConfigReader::ReadNotices(const Field& at, NoticesConfig* n) {
  constexpr auto kOptional = Presence::kOptional;
  ExpectKeys(at, {
      {"enabled", kOptional, [&](const Field& f) { ReadBool(f, &n->enabled); }},
      {"listen", kOptional, [&](const Field& f) { ReadListenKey(f, &n->listen_host, &n->listen_port); }},
      {"advertise", kOptional, [&](const Field& f) { ReadListenKey(f, &n->advertise_host, &n->advertise_port); }},
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
