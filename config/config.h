// The typed configuration of a sluice process, loaded from one YAML file.
//
// LoadConfig validates the whole file and reports every problem at once as
// "FILE:LINE:COLUMN: message" (1-based line and column). Secrets are written
// in the YAML as "${env:NAME}" (or "${file:/path}") and are accepted only in
// fields marked secret (today: storage.mysql.password); their resolved values
// never appear in an error message or in Redacted() output.
//
// A Config is an immutable value once loaded; share it by const reference
// from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace sluice::config {

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
};

struct EntityTypeConfig {
  std::string name;          // [a-z][a-z0-9_]*, the map key in YAML
  uint32_t partitions = 0;   // 1..1024, fixed once the tables exist
};

struct WriterConfig {
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 8080;
  uint32_t batch_max = 1000;              // commands per INSERT/COMMIT, 1..100000
  uint64_t max_body_bytes = 1 << 20;      // larger request bodies get 413
  uint32_t io_threads = 2;                // HTTP event-loop threads, 1..64
  uint32_t read_threads = 4;              // threads serving GETs from MySQL, 1..256
  uint32_t entity_cache_entries = 100000; // per partition: entities and recent command ids
  uint32_t conflict_retries = 16;         // duplicate-key retries before replying 503
  // Start even when MySQL's durability settings are weaker than
  // innodb_flush_log_at_trx_commit=1 and (with a binlog) sync_binlog=1.
  bool allow_weak_durability = false;
};

struct Config {
  std::string path;  // the file it was loaded from
  MysqlConfig mysql;
  std::map<std::string, EntityTypeConfig> entities;  // by name
  WriterConfig writer;

  // The configuration as YAML with every secret shown as "<redacted>".
  std::string Redacted() const;
};

// Reads, validates and resolves path. On failure, InvalidArgument whose
// message holds one "FILE:LINE:COL: problem" line per problem.
Result<Config> LoadConfig(const std::string& path);

// The same, from text already in memory; `path` is used in messages only.
Result<Config> LoadConfigFromString(const std::string& text, const std::string& path);

}  // namespace sluice::config
