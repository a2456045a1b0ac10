// Loading configuration text in unit tests, with sluice's built-in sink types
// (connectors::BuiltinSinkTypes(), as every command loads its file): the
// loader's tests (config/config_test.cc) and each sink type's
// (connectors/<type>/<type>_options_test.cc) share these, so that a test of a
// sink option reads like one of the loader's.
//
// Threads: the test's thread only; ScopedEnv changes the process environment.
#pragma once

#include <filesystem>
#include <string>

#include "config/config.h"
#include "core/status.h"

namespace sluice::testing {

// config::LoadConfigFromString / config::LoadConfig with the built-in sink types.
Result<config::Config> LoadConfigFromString(const std::string& text, const std::string& path);
Result<config::Config> LoadConfig(const std::string& path);

// The file name messages give for the texts below.
inline constexpr char kFile[] = "t.yaml";

// A valid file; tests append to it or replace one line of it.
inline constexpr char kValid[] = R"(storage:
  mysql:
    host: 127.0.0.1
    port: 13306
    user: sluice
    password: literal-pw
    database: sluice_demo
entities:
  account: {partitions: 4}
)";

// Three valid sinks (two redis, one mysql) to follow kValid; tests replace
// one line of it (SinksWith). The first sink starts on line 11.
inline constexpr char kSinks[] = R"yaml(sinks:
  - name: account_cache
    type: redis
    entity: account
    url: redis://127.0.0.1:16379/0
    key: "account:{id}"
  - name: account-hash
    type: redis
    entity: account
    on_error: stop
    batch_max: 200
    url: "redis://:p@ss:w/rd@cache.internal:6380/15"
    key: "{type}/{id}"
    format: hash
    fields: {owner: /owner/name, balance: /balance, Total_2: ""}
    ttl: 10m
    tombstone_ttl: 48h
  - name: account_table
    type: mysql
    entity: account
    database: other_db
    table: account_view
    columns:
      owner: /owner/name
      note: {pointer: /note, type: "varchar(8)"}
      a_b: /a~1b/~0c
      amount: {pointer: /amount, type: "decimal(12,2)"}
      seen: {type: datetime(3), pointer: /seen}
    auto_create: false
    connections: 2
)yaml";

// The error message for `yaml` (named kFile), or "" when it loads; a failure
// other than InvalidArgument fails the test.
std::string Errors(const std::string& yaml);

// kValid plus `sinks:` and then `items` (which start on line 11).
std::string WithSinks(const std::string& items);

// kValid with its line `from` replaced by `to` (both without indentation).
std::string ValidWith(const std::string& from, const std::string& to);

// kValid + kSinks with its line `from` replaced by `to`.
std::string SinksWith(const std::string& from, const std::string& to);

// Sets an environment variable (unsets it for nullptr) for one test and
// restores it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::string old_;
  bool had_ = false;
};

// A scratch directory (under the system's temporary directory) removed at
// the end of the test, for config files that name other files.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  // Writes `contents` to `name` in the directory; its path.
  std::filesystem::path Write(const std::string& name, const std::string& contents) const;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace sluice::testing
