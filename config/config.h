// The typed configuration of a sluice process, loaded from one YAML file.
//
// LoadConfig validates the whole file and reports every problem at once as
// "FILE:LINE:COLUMN: message" (1-based line and column). Secrets are written
// inline or as "${env:NAME}" / "${file:/path}", which are accepted only in
// fields marked secret: storage.mysql.password, each
// storage.servers.NAME.password, admin.token, archive.s3.access_key and
// secret_key, every sink's url, an
// elasticsearch sink's password and api_key, a kafka sink's properties, and
// a plugin sink's options whose names look secret (config/redact.h). Their
// values never appear in an error message or in
// Redacted() output: config/redact.h is the one rule for showing them.
//
// A Config is an immutable value once loaded; share it by const reference
// from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace sluice::config {

// TLS to a MySQL server, with the ssl_mode values MySQL's own clients use.
enum class MysqlSslMode : uint8_t {
  kDisabled,        // plain TCP
  kRequired,        // encrypted; the server's certificate is not checked (logged as a warning)
  kVerifyCa,        // encrypted; the certificate must be signed by ssl_ca (any host name; logged as a warning)
  kVerifyIdentity,  // encrypted; signed by ssl_ca and issued to the host connected to
};
std::string_view MysqlSslModeName(MysqlSslMode mode);

struct MysqlConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 3306;
  std::string socket;  // when set, used instead of host:port
  std::string user = "sluice";
  std::string password;  // secret: resolved value, never printed
  std::string database = "sluice";
  std::chrono::milliseconds connect_timeout{2000};
  // Seconds a statement may wait on the network before the connection is
  // treated as lost (MySQL read/write timeouts).
  std::chrono::milliseconds io_timeout{10000};
  // TLS (docs/security.md): ssl_mode, default disabled, or verify_identity
  // when ssl_ca is given without it; the files are PEM, resolved against
  // the config file's folder.
  MysqlSslMode ssl_mode = MysqlSslMode::kDisabled;
  std::string ssl_ca;    // the CAs to trust (verify_ca, verify_identity)
  std::string ssl_cert;  // a client certificate (mutual TLS), with ssl_key
  std::string ssl_key;   // its private key
};

// The name of the storage server storage.mysql describes; no entry of
// storage.servers may take it.
inline constexpr std::string_view kMainServer = "main";

// One more MySQL server holding event tables (storage.servers.NAME). Each
// key not given in the file takes storage.mysql's value; no two servers
// (main included) reach the same database on the same server.
struct StorageServerConfig {
  std::string name;    // [a-z][a-z0-9_]{0,31}, never kMainServer
  MysqlConfig mysql;   // password is secret, as storage.mysql's
  std::string origin;  // "file:line:col" of the entry
};

// Partitions first..last (inclusive) of an entity type stored on `server`.
struct PartitionRange {
  uint32_t first = 0;
  uint32_t last = 0;
  std::string server;  // kMainServer or the name of an entry of Config::servers
};

// When an event stores what changed instead of the whole state
// (docs/delta.md, docs/storage.md): the key `deltas` of an entity type.
struct DeltaPolicy {
  // A whole state at least every this many versions; 1: every event stores
  // its whole state (no deltas).
  uint32_t snapshot_every = 50;
  // Or as soon as the deltas since the last whole state would reach this
  // percentage of the state's size (so that reading a state back never
  // costs much more than reading it whole).
  uint32_t snapshot_percent = 50;
};

// Which events of an entity type leave the hot event tables for the archive
// (docs/archive.md): the key `archive` of an entity type.
struct ArchivePolicyConfig {
  bool enabled = false;  // the key is there
  // Only events older than this; 0: as soon as every sink applied them.
  std::chrono::milliseconds after{0};
  // Each entity's last this many versions stay whole in the hot table.
  uint64_t keep_versions = 1;
};

// Where archived events go and how the archiver runs: the section `archive`.
struct ArchiveConfig {
  bool enabled = false;  // the section is there
  std::string store;     // "file:///absolute/dir" or "s3://bucket[/prefix]"
  // s3 only (the key `s3`):
  std::string endpoint;  // empty: https://s3.<region>.amazonaws.com
  std::string region = "us-east-1";
  std::string access_key;  // secret
  std::string secret_key;  // secret
  bool path_style = true;
  std::string tls_ca;
  bool tls_verify = true;
  // Rows younger than this stay whole in the hot tables, whatever the policy:
  // a retry within it is answered from the hot table.
  std::chrono::milliseconds idempotency_window{std::chrono::hours(24)};
  // How often serve and sync archive; 0: only `sluice archive run`.
  std::chrono::milliseconds interval{std::chrono::minutes(1)};
  uint64_t segment_events = 10000;
  uint64_t segment_bytes = uint64_t{16} << 20;
  uint64_t cache_bytes = uint64_t{256} << 20;  // decoded segments kept by each process
};

struct EntityTypeConfig {
  std::string name;          // [a-z][a-z0-9_]*, the map key in YAML
  uint32_t partitions = 0;   // 1..1024, fixed once the tables exist
  DeltaPolicy deltas;
  ArchivePolicyConfig archive;
  // JavaScript command handlers (docs/handlers.md): the file's path, resolved
  // against the config file's folder; empty when the type has none.
  std::string handlers;
  std::string handlers_origin;  // "file:line:col" of the handlers key, for messages
  // Which server holds which partitions, sorted by `first`, covering every
  // partition exactly once; empty: every partition on "main" (storage.mysql).
  // Adjacent ranges of one server are merged, and a placement with main
  // only is left empty. Recorded by `sluice init`; changing it is a migration
  // (docs/deployment.md#moving-partitions-between-servers).
  std::vector<PartitionRange> placement;
};

// Limits of one HTTP listener (http/server.h), so that slow or idle
// clients cannot starve it: the keys max_connections, header_timeout,
// body_timeout, idle_timeout and write_timeout of the writer, admin and
// metrics sections.
struct ListenerLimits {
  uint32_t max_connections = 64;                   // 1..1000000; a newcomer over it evicts the longest-idle one
  std::chrono::milliseconds header_timeout{10000};  // the whole request header within it
  std::chrono::milliseconds body_timeout{30000};    // the whole body within it, after the header
  std::chrono::milliseconds idle_timeout{60000};    // a kept-alive connection without a request
  std::chrono::milliseconds write_timeout{30000};   // the whole reply taken by the client within it
};

// TLS on one of sluice's own listeners: the `tls` key of the writer, admin
// and metrics sections (docs/security.md). PEM files, resolved against the
// config file's folder, served again when they change (no restart).
struct ListenerTls {
  std::string cert;       // the certificate chain (required with tls)
  std::string key;        // its private key (required with tls)
  std::string client_ca;  // optional: every client must present a certificate signed by these CAs
  // Optional: the CAs sluice's own clients of this listener trust (the
  // operator commands reaching the admin endpoint, a writer forwarding to
  // another); empty: the machine's trusted CAs. Such a client presents
  // cert and key when client_ca is set.
  std::string ca;
  bool enabled() const { return !cert.empty(); }
};

struct WriterConfig {
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 8080;
  ListenerTls tls;
  // The API keeps thousands of keep-alive connections (DESIGN 3.4).
  ListenerLimits limits{10000, std::chrono::seconds(10), std::chrono::seconds(30), std::chrono::seconds(300),
                        std::chrono::seconds(30)};
  uint32_t batch_max = 1000;              // commands per INSERT/COMMIT, 1..100000
  uint64_t max_body_bytes = 1 << 20;      // larger request bodies get 413
  uint32_t max_json_depth = 100;          // deeper request bodies get 400, 1..1000 (core/json.h)
  uint32_t io_threads = 2;                // HTTP event-loop threads, 1..64
  uint32_t read_threads = 4;              // threads serving GETs from MySQL, 1..256
  // Threads running the partitions' batches, each with its MySQL session
  // (two with overlap_commits); partition k of the writer on thread k mod n.
  // 1..1024, or 0 (`auto`): BatchThreadsFor().
  uint32_t batch_threads = 0;
  // The most partitions whose batches a batch thread stores in one
  // transaction (group commit, BatchThreads); 1: each batch in its own.
  // Not with overlap_commits. 1..1024.
  uint32_t group_commit_max = 32;
  uint32_t entity_cache_entries = 100000; // per partition: entities and recent command ids
  uint32_t conflict_retries = 16;         // duplicate-key retries before replying 503
  // A partition's next batch is planned and inserted on a second session
  // while the last one commits (docs/storage.md, "Overlapping batches").
  bool overlap_commits = false;
  // Start even when MySQL's durability settings are weaker than
  // innodb_flush_log_at_trx_commit=1 and (with a binlog) sync_binlog=1.
  bool allow_weak_durability = false;
  // Limits of one JavaScript handler call (docs/handlers.md).
  std::chrono::milliseconds handler_timeout{50};  // 1ms..60s
  uint64_t handler_memory = uint64_t{16} << 20;   // the GC heap of one partition's handler realm, 1MiB..1GiB
  // The time slice the scheduler gives each pusher thread (core/thread_slice.h):
  // short, so that a pusher woken by a commit runs at once on a busy machine.
  // 0: the kernel's default. Otherwise kMinThreadSliceUs..kMaxThreadSliceUs.
  std::chrono::microseconds push_thread_slice{100};
  // Several writers (docs/deployment.md#writers): each partition's lease in
  // MySQL names the writer that owns it, and a command for a partition
  // another live writer owns is forwarded to it once (handled here when
  // that writer cannot be reached). A hint for speed only.
  bool routing = true;
  // This writer's name among writers (unique per process); empty: the host name.
  std::string id;
  // The URL other writers forward to ("http://host:port", https:// with
  // tls); empty: the listen address (the host name when it listens on
  // every address).
  std::string advertise;
  // How long a writer's leases last without renewal, 1s..10m.
  std::chrono::milliseconds lease_ttl{10'000};
};
inline constexpr int64_t kMinThreadSliceUs = 100;     // Linux clamps a custom slice to 100us..100ms
inline constexpr int64_t kMaxThreadSliceUs = 100000;

// The admin endpoint of `serve` and `sync` (operator commands: pause,
// resume, rewind, rebuild). Off unless the `admin` section is present.
struct AdminConfig {
  bool enabled = false;                 // the section is present
  std::string listen_host = "127.0.0.1";  // loopback unless told otherwise
  uint16_t listen_port = 9470;
  std::string token;  // secret: the bearer token every request needs; empty: every request refused
  ListenerLimits limits;
  ListenerTls tls;
};

// The process a listener belongs to: `sluice serve`, `sluice writer` or
// `sluice sync`, each of which may run from the same file.
enum class Process : uint8_t { kServe, kWriter, kSync };

// The metrics listener: /metrics (Prometheus text), /healthz and /readyz
// (docs/operations.md). Off unless the `metrics` section is present.
// Each process has its own address, so that `sluice writer` and `sluice
// sync` can run side by side from one file.
struct MetricsConfig {
  bool enabled = false;                    // the section is present
  std::string listen_host = "127.0.0.1";  // `sluice serve`; loopback unless told otherwise
  uint16_t listen_port = 9464;             // 0: any free port
  // `sluice writer` and `sluice sync` (metrics.writer_listen, metrics.sync_listen);
  // when not given, the same as listen.
  std::string writer_listen_host = "127.0.0.1";
  uint16_t writer_listen_port = 9464;
  std::string sync_listen_host = "127.0.0.1";
  uint16_t sync_listen_port = 9464;
  ListenerLimits limits;
  ListenerTls tls;  // the same certificate for each process's listener

  // The host and port `process` listens on.
  std::pair<std::string, uint16_t> ListenOf(Process process) const;
};

// How the engine makes sure it never hands a sink an event that a crash of
// the MySQL server could still roll back (DESIGN I5, docs/storage.md).
enum class DurabilityBarrier {
  kAuto,    // kLsn where the server reports Innodb_lsn_flushed (MariaDB), else kCommit
  kLsn,     // wait until the server's flushed log sequence number passes the one current after the read
  kCommit,  // commit a one-row write of its own, whose flush covers every commit the read saw
  kOff,     // none: a crash of the MySQL server can leave views ahead of storage
};
std::string_view DurabilityBarrierName(DurabilityBarrier b);
// writer.batch_threads as configured (0: auto) for a process that can use
// `cores` CPUs (UsableCpus()): auto is twice the cores, between 4 and 32.
uint32_t BatchThreadsFor(uint32_t configured, unsigned cores);

// The engine's sampled anti-entropy (docs/configuration.md): per sink that
// supports entity checks, a walk over its entity type's entities that
// compares each with the view and repairs what differs.
struct AntiEntropyConfig {
  bool enabled = true;
  uint32_t rate = 100;   // entities read per second per sink, 1..1000000
  uint32_t batch = 100;  // entities per step (one storage read, one view read), 1..5000
};

// engine.notices: where the engine takes the writers' commit notices
// (engine/notice_listener.h), UDP.
struct NoticesConfig {
  bool enabled = true;  // false: no listener, and writers of this config announce nothing
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 0;  // 0: any free port (published in sluice_members)
  // HOST:PORT writers send to, when the listen address is not one they can
  // reach (0.0.0.0, NAT); empty: the bound address.
  std::string advertise_host;
  uint16_t advertise_port = 0;
};

struct EngineConfig {
  std::chrono::milliseconds offset_flush_interval{1000};  // offsets written this often (and on clean stop)
  uint32_t batch_max = 5000;                   // events read per query, 1..100000
  std::chrono::milliseconds idle_poll_max{5000};  // longest time between two head looks (engine/head_watcher.h), 1ms..10s
  std::chrono::milliseconds retry_backoff_max{5000};  // cap of the backoff while a sink is unavailable
  uint32_t inflight_batches = 4;               // read-ahead batches per sink (memory bound), 1..64
  DurabilityBarrier durability_barrier = DurabilityBarrier::kAuto;
  AntiEntropyConfig anti_entropy;
  NoticesConfig notices;
  // This engine's name among the engines sharing the sinks (DESIGN 10),
  // [A-Za-z0-9._:-]{1,128}; unique per process. Empty: the host name, which
  // suits one engine per host.
  std::string id;
  // How long an engine's leases last without renewal, 1s..10m: after a
  // crash its partitions move to the others about this long after (at most 1.25x).
  std::chrono::milliseconds lease_ttl{10'000};
};

// engine.id's pattern.
bool IsValidMemberName(std::string_view name);
// writer.advertise's form: http://host:port or https://host:port, no path.
bool IsValidAdvertiseUrl(std::string_view url);

// A column (MySQL sink) or hash field (Redis sink) filled from the entity state.
struct FieldMapping {
  std::string name;     // column or field name, [A-Za-z_][A-Za-z0-9_]{0,63}
  std::string pointer;  // RFC 6901 JSON pointer into the state, e.g. "/owner/name"
  std::string sql_type; // MySQL sink only: column type for auto-create; default "TEXT"
};

enum class OnError { kDeadLetter, kStop };

// The built-in sink types (config/sink_type.h), which LoadConfig is given.
class SinkTypes;

// The writer applies each committed batch to a push sink right away (DESIGN
// 3.5); the pull path repairs whatever a push missed.
struct PushConfig {
  bool enabled = false;
  // sync: the reply waits for the push (up to `timeout`) and says per view
  // whether it was updated; async: the reply goes first.
  enum class Mode { kSync, kAsync } mode = Mode::kAsync;
  std::chrono::milliseconds timeout{50};  // a push still running after this is late: counted, not waited for
  // Threads (each with its own connection to the sink) that push this
  // sink's batches, shared by the entity type's partitions (partition p uses
  // thread p mod threads): the count does not grow with the partitions.
  uint32_t threads = 2;
};

// A sink whose type a plugin library provides: its own keys, for the plugin
// to check when it creates the sink.
struct PluginSinkConfig {
  // JSON object of every key not common to all sinks. `url` and the options
  // whose names look secret (IsSecretName) may be secret references; they
  // are resolved here.
  std::string options_json = "{}";
};

// A shared library listed under `plugins:` (see include/sluice/plugin.h).
struct PluginConfig {
  std::string path;    // absolute or relative to the working directory; relative
                       // paths in the YAML are resolved against the file's directory
  std::string origin;  // "file:line:col" of the entry, for messages
};

// The options of one sink beyond the keys every sink has, held by value
// whatever their type. Each built-in type declares its own struct in its
// folder (connectors/<type>/<type>_options.h) and fills it when the file is
// read (SinkType::read, config/sink_type.h), so that config/ never names it.
// Copying copies the options (nothing is shared between copies).
//
// Threads: like any value, a const SinkTypeOptions may be read from any
// number of threads at once; a change needs the only reference.
class SinkTypeOptions {
 public:
  SinkTypeOptions() = default;
  SinkTypeOptions(const SinkTypeOptions& other) : held_(other.held_ ? other.held_->Clone() : nullptr) {}
  SinkTypeOptions& operator=(const SinkTypeOptions& other) {
    if (this != &other) held_ = other.held_ ? other.held_->Clone() : nullptr;
    return *this;
  }
  SinkTypeOptions(SinkTypeOptions&&) noexcept = default;
  SinkTypeOptions& operator=(SinkTypeOptions&&) noexcept = default;

  // The T held; when none or another type is held, a default T (so that a
  // SinkConfig built by hand, as in tests, has the type's defaults).
  template <class T>
  const T& Get() const {
    if (const auto* held = dynamic_cast<const Held<T>*>(held_.get())) return held->value;
    static const T kDefaults{};
    return kDefaults;
  }

  // The T held, for changing it; a default T replaces whatever else was
  // held. The reference is valid until this is assigned to or moved from,
  // or Mutable is called for another type.
  template <class T>
  T& Mutable() {
    auto* held = dynamic_cast<Held<T>*>(held_.get());
    if (held == nullptr) {
      auto made = std::make_unique<Held<T>>();
      held = made.get();
      held_ = std::move(made);
    }
    return held->value;
  }

 private:
  struct Base {
    virtual ~Base() = default;
    virtual std::unique_ptr<Base> Clone() const = 0;
  };
  template <class T>
  struct Held final : Base {
    T value{};
    std::unique_ptr<Base> Clone() const override { return std::make_unique<Held>(*this); }
  };
  std::unique_ptr<Base> held_;
};

struct SinkConfig {
  std::string name;    // unique, [a-z][a-z0-9_-]{0,63}
  std::string type;    // a built-in type (connectors/builtin_sink_types.cc) or a plugin's
  std::string entity;  // an entity type of `entities`
  OnError on_error = OnError::kDeadLetter;
  // Events per Apply call, 1..100000; the default is the type's
  // (SinkType::default_batch_max, config/sink_type.h: larger for kafka, whose
  // Apply waits for its records' delivery reports).
  uint32_t batch_max = 1000;
  PushConfig push;
  bool anti_entropy = true;  // false: the engine's anti-entropy leaves this sink alone
  // View code (docs/views.md): a JavaScript file, resolved against the
  // config file's folder, whose functions filter and shape what the sink
  // writes; empty: the sink mirrors each entity's state.
  std::string code;
  std::string code_origin;  // "file:line:col" of the code key, for messages
  // Destinations the code's route(event) may pick besides the sink's own
  // (kafka topics, elasticsearch indexes: SinkType::routes_to); empty: none.
  std::vector<std::string> routes;
  PluginSinkConfig plugin;  // when type is not built in (a plugin's)
  // Where in the file the sink was declared ("file:line:col"), for messages.
  std::string origin;
  // The options of a built-in type (its struct T from
  // connectors/<type>/<type>_options.h), e.g.
  // sink.Options<connectors::redis::RedisSinkOptions>().url; defaults when
  // the sink holds no T. MutableOptions makes them (the type's reader fills
  // them while the file is read; tests set them by hand).
  template <class T>
  const T& Options() const {
    return type_options_.Get<T>();
  }
  template <class T>
  T& MutableOptions() {
    return type_options_.Mutable<T>();
  }

 private:
  SinkTypeOptions type_options_;
};

struct Config {
  std::string path;  // the file it was loaded from
  MysqlConfig mysql;  // storage.mysql: the server called kMainServer
  std::vector<StorageServerConfig> servers;  // storage.servers, in file order (main not included)
  std::map<std::string, EntityTypeConfig> entities;  // by name
  WriterConfig writer;
  EngineConfig engine;
  MetricsConfig metrics;
  std::vector<SinkConfig> sinks;  // in file order
  std::vector<PluginConfig> plugins;  // in file order, existing regular files
  AdminConfig admin;
  ArchiveConfig archive;
  // How each secret field that was given as a reference was written, by its
  // path in messages ("storage.mysql.password",
  // "storage.servers.orders_b.password", "sinks[2].url",
  // "sinks[3].properties.sasl.password") -> "${env:NAME}" or "${file:PATH}".
  // Secrets written inline are not listed. A server that takes its password
  // from storage.mysql also takes storage.mysql's reference, if any.
  std::map<std::string, std::string> secret_references;
  // The built-in sink types the file was read with (Redacted() prints each
  // sink's own keys through its type); null in a Config built by hand.
  std::shared_ptr<const SinkTypes> sink_types;

  // The server called `name` (kMainServer: storage.mysql); null when there is none.
  const MysqlConfig* FindServer(std::string_view name) const;
  // The name of the server holding partition `partition` of entity type
  // `type`: kMainServer unless its placement puts it elsewhere (also for a
  // type or partition the configuration does not have). Valid as long as
  // this Config is.
  const std::string& ServerOf(const std::string& type, uint32_t partition) const;

  // The configuration as YAML, defaults included, by the rule of
  // config/redact.h: each secret shown as the reference it was written as,
  // or "***"; each URL without its credentials.
  std::string Redacted() const;
};

// Parses "host:port" or "[ipv6]:port" (port 0..65535) as the listen keys
// do; InvalidArgument saying what is wrong otherwise.
Result<std::pair<std::string, uint16_t>> ParseListenAddress(std::string_view text);

// "host:port", with an IPv6 host in brackets.
std::string FormatListenAddress(const std::string& host, uint16_t port);

// Reads, validates and resolves path, with `types` as the built-in sink
// types (connectors::BuiltinSinkTypes(); any other sink type must be a
// plugin's). On failure, InvalidArgument whose message holds one
// "FILE:LINE:COL: problem" line per problem.
Result<Config> LoadConfig(const std::string& path, const SinkTypes& types);

// The same, from text already in memory; `path` is used in messages only.
Result<Config> LoadConfigFromString(const std::string& text, const std::string& path, const SinkTypes& types);

}  // namespace sluice::config
