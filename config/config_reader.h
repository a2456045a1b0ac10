// Internal to config/: not part of the module's API (config.h and
// sink_type.h are), and included by config/*.cc only.
//
// ConfigReader walks one YAML document into a Config, collecting every
// problem on the way as "FILE:LINE:COL: path: problem". Its member
// functions are defined by concern, in the style of RocksDB's db_impl_*.cc:
//   config_reader.cc         the walk (ReadRoot, ExpectKeys, ForEachEntry)
//                            and the scalar values (numbers, durations,
//                            sizes, strings, listen addresses);
//   config_read_files.cc     what a value points to outside the YAML:
//                            ${env:...} / ${file:...} secrets and JSON files;
//   config_read_sections.cc  storage, entities, writer, admin, metrics, engine;
//   config_read_sinks.cc     sinks: the keys every sink has, each type's
//                            keys, mappings and the checks across the file;
//   config_read_plugins.cc   plugins and a plugin sink's options.
//
// Threads: a ConfigReader lives for one LoadConfig call on the caller's thread.
#pragma once

#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "config/sink_type.h"

namespace sluice::config {

// Caps that keep a mistaken path (/dev/zero, a log file) from eating memory.
inline constexpr size_t kMaxConfigFileBytes = 16u << 20;

// Reads the whole file into *out; returns 0 or an errno value (EFBIG past max_bytes).
int ReadWholeFile(const std::string& path, size_t max_bytes, std::string* out);
// The text of an errno value.
std::string ErrnoText(int err);

// One key/value pair being read, with where to point when its value is wrong.
struct Field {
  YAML::Node key;
  YAML::Node value;
  std::string path;  // dotted path of the key, e.g. "storage.mysql.port"
  YAML::Mark mark;   // the value, or the key when the value is empty
};

// A Field for key: value, pointing at the value (at the key when the value is empty).
Field MakeField(const YAML::Node& key, const YAML::Node& value, std::string path);

// What the user wrote, for "got ..." in a message: a scalar quoted, else its kind.
std::string Describe(const YAML::Node& node);

// Problems in one file, printed as "FILE:LINE:COL: path: problem".
class Problems {
 public:
  explicit Problems(std::string file) : file_(std::move(file)) {}

  void Add(const YAML::Mark& mark, std::string_view path, std::string_view what);
  bool empty() const { return problems_.empty(); }
  // One line per problem, in file order.
  std::string Join();

 private:
  struct Entry {
    int line;
    int column;
    std::string text;
  };
  std::string file_;
  std::vector<Entry> problems_;
};

// kMisplaced: a key that belongs elsewhere (another sink type); its `read`
// says why it is wrong here, and it is never offered as a suggestion.
enum class Presence { kRequired, kOptional, kMisplaced };

// A KeySpec name that takes every key no other KeySpec names (a plugin
// sink's own options).
inline constexpr std::string_view kAnyOtherKey = "*";

// One key a mapping accepts: its name, whether it must be present, and how to
// read its value.
struct KeySpec {
  std::string_view name;
  Presence presence;
  std::function<void(const Field&)> read;
};

// Walks a YAML document into a Config, collecting every problem on the way.
// Each section is one Read* function with a table of the keys it accepts;
// adding a section is a new function and one row in ReadRoot's table.
class ConfigReader final : public SinkOptionReader {
 public:
  ConfigReader(Problems* problems, std::string file, std::filesystem::path base_dir, const SinkTypes* types)
      : problems_(problems), file_(std::move(file)), base_dir_(std::move(base_dir)), types_(types) {}

  // Reads the whole document into *config; then the checks across sections.
  void ReadRoot(const YAML::Node& doc, Config* config);

  // ---- SinkOptionReader: what a sink type's keys read with ----

  void Problem(const Field& f, std::string_view what) override { Problem(f.mark, f.path, what); }
  void KeyProblem(const Field& f, std::string_view what) override { Problem(f.key.Mark(), f.path, what); }
  void Expected(const Field& f, std::string_view expected, std::string_view got) override;
  std::optional<std::string> PlainScalar(const Field& f, std::string_view expected) override;
  bool ReadSecret(const Field& f, std::string* out, bool* from_reference = nullptr) override;
  bool ReadString(const Field& f, bool may_be_empty, std::string* out) override {
    return ReadString(f, may_be_empty ? kMayBeEmpty : kNotEmpty, out);
  }
  void ReadBool(const Field& f, bool* out) override;
  void ReadUint(const Field& f, uint64_t min, uint64_t max, uint64_t* out) override;
  using SinkOptionReader::ReadUint;  // into a narrower integer
  void ReadDuration(const Field& f, std::chrono::milliseconds min, std::chrono::milliseconds max,
                    std::chrono::milliseconds* out) override;
  void ReadTimeout(const Field& f, std::chrono::milliseconds* out) override;
  void ReadJsonObjectFile(const Field& f, std::string* path_out, std::string* json_out) override;
  void ForEachEntry(const Field& at, const std::function<void(const Field&)>& each) override;
  void ReadMappings(const Field& at, MappingKind kind, std::vector<FieldMapping>* out) override;
  std::shared_ptr<const Field> Keep(const Field& f) override { return std::make_shared<const Field>(f); }

 private:
  // ---- the walk (config_reader.cc) ----

  void Problem(const YAML::Mark& mark, std::string_view path, std::string_view what) {
    problems_->Add(mark, path, what);
  }
  // Reads a mapping that accepts exactly `keys`.
  void ExpectKeys(const Field& at, const std::vector<KeySpec>& keys);
  static std::string UnknownKeyText(std::string_view name, const std::vector<KeySpec>& keys);
  // Calls `each` for every item of the sequence at `at` (nothing when the
  // value is empty) as a Field "<at's path>[i]"; anything but a sequence is
  // reported as "must be <expected>, got ...".
  void ForEachItem(const Field& at, std::string_view expected, const std::function<void(const Field&)>& each);
  // "file:line:col" of `mark`, for the origin of what a message names later.
  std::string Origin(const YAML::Mark& mark) const;

  // ---- scalar values (config_reader.cc) ----

  enum class Emptiness { kMayBeEmpty, kNotEmpty };
  static constexpr Emptiness kMayBeEmpty = Emptiness::kMayBeEmpty;
  static constexpr Emptiness kNotEmpty = Emptiness::kNotEmpty;
  bool ReadString(const Field& f, Emptiness emptiness, std::string* out);
  // A scalar that `valid` accepts; otherwise "must be <expected>". Returns whether *out was set.
  bool ReadMatching(const Field& f, std::string_view expected, bool (*valid)(std::string_view), std::string* out);
  void ReadHost(const Field& f, std::string* out);
  void ReadDatabaseName(const Field& f, std::string* out);
  // One of the names in `choices`; otherwise "must be <expected>".
  template <typename T>
  void ReadChoice(const Field& f, std::string_view expected,
                  std::initializer_list<std::pair<std::string_view, T>> choices, T* out) {
    const auto text = PlainScalar(f, expected);
    if (!text) return;
    for (const auto& [name, value] : choices) {
      if (*text == name) {
        *out = value;
        return;
      }
    }
    Expected(f, expected, *text);
  }

  // A duration's text split into its number and unit, before any range check.
  struct DurationText {
    std::string text;
    std::optional<uint64_t> count;  // empty: too many digits for 64 bits
    uint64_t scale;                 // microseconds per unit

    // The duration in microseconds when it is at most `max_us`.
    std::optional<uint64_t> Micros(uint64_t max_us) const {
      if (!count || *count > max_us / scale) return std::nullopt;
      return *count * scale;
    }
  };
  // Reports a syntax error (and returns nothing) unless the field is a
  // number followed by a unit: ms, s, m or h, and also us when `fine`.
  std::optional<DurationText> ParseDurationText(const Field& f, bool fine);
  // A byte count, or a number with a binary unit: "1048576", "512KiB", "1MiB".
  void ReadByteSize(const Field& f, uint64_t min, uint64_t max, uint64_t* out);
  // "host:port" or "[ipv6]:port"; port 0 asks the OS for a free port.
  void ReadListen(const Field& f, std::string* host, uint16_t* port);
  // A listen key given in the file, for the checks after the whole file.
  void ReadListenKey(const Field& f, std::string* host, uint16_t* port);

  // ---- outside the YAML (config_read_files.cc) ----

  // A path as written, relative to the config file's folder.
  std::filesystem::path ResolvePath(std::string_view written) const;
  // The file a string field names (relative to the config file's folder):
  // its path, and its text in *text; nullopt after reporting "cannot read
  // <what><path>: <why>".
  std::optional<std::filesystem::path> ReadNamedFile(const Field& f, std::string_view what, std::string* text);
  void ReadPemFile(const Field& f, std::string_view what, std::string* path_out) override;
  // Redacted() shows a secret given as a reference as it was written.
  void RememberReference(const Field& f, const std::string& reference);

  // ---- sections (config_read_sections.cc) ----

  void ReadStorage(const Field& at, Config* config);
  void ReadMysql(const Field& at, MysqlConfig* m);
  // storage.servers, after storage.mysql (whose values they take by default).
  void ReadStorageServers(const Field& at, Config* config);
  void ReadEntities(const Field& at, std::map<std::string, EntityTypeConfig>* entities);
  // entities.<type>.server / servers into entity->placement, once its
  // partitions are read; the server names are checked by CheckServerReferences.
  void ReadPlacement(const std::optional<Field>& server, const std::optional<Field>& servers,
                     EntityTypeConfig* entity);
  // One "A-B" or "A" of entities.<type>.servers; nullopt after reporting it malformed.
  std::optional<std::pair<uint32_t, uint32_t>> ReadPartitionRange(const Field& f);
  // Every server an entity type names exists (storage.servers may come later in the file).
  void CheckServerReferences();
  void ReadHandlersFile(const Field& f, EntityTypeConfig* entity);
  void ReadViewCodeFile(const Field& f, SinkConfig* sink);
  void ReadRoutes(const Field& at, SinkConfig* sink);
  void CheckRoutes(const Field& at, const SinkConfig& sink);
  void ReadWriter(const Field& at, WriterConfig* w);
  void ReadThreadSlice(const Field& f, std::chrono::microseconds* out);
  void ReadAdmin(const Field& at, AdminConfig* a);
  void ReadArchive(const Field& at, ArchiveConfig* a);
  // Each entity type's `archive` key, checked against the archive section at the end.
  std::vector<Field> archive_policies_;
  void ReadMetrics(const Field& at, Config* config);
  // The limit keys every HTTP listener section accepts.
  std::vector<KeySpec> LimitKeys(ListenerLimits* l);
  void ReadListenerTls(const Field& at, ListenerTls* t);
  void CheckListenAddresses(const Config& config);
  void ReadEngine(const Field& at, EngineConfig* e);
  void ReadAntiEntropy(const Field& at, AntiEntropyConfig* a);
  void ReadNotices(const Field& at, NoticesConfig* n);

  // ---- sinks (config_read_sinks.cc) ----

  void ReadSinks(const Field& at, std::vector<SinkConfig>* sinks);
  static std::string PeekScalar(const YAML::Node& map, std::string_view key);
  void ReadSink(const Field& at, size_t index, SinkConfig* sink);
  void AddSinkTypeKeys(std::string_view owner, const std::string& type, std::vector<KeySpec>* keys,
                       std::vector<KeySpec> owned);
  void ReadSinkName(const Field& f, SinkConfig* sink);
  void ReadSinkType(const Field& f, std::string* out);
  void CheckPush(const std::string& type, const PushConfig& push, const std::optional<Field>& push_key,
                 const std::optional<Field>& options_key);
  void ReadJsonPointer(const Field& f, std::string* out);
  void ReadColumnType(const Field& f, std::string* out);
  void CheckSinkReferences(const Config& config);

  // ---- plugins (config_read_plugins.cc) ----

  // A `type:` that is neither built in nor empty, in a file with plugins.
  bool IsPluginSinkType(std::string_view type) const {
    return plugins_declared_ && !type.empty() && types_->Find(type) == nullptr;
  }
  void ReadPlugins(const Field& at, std::vector<PluginConfig>* plugins);
  struct PluginOptions {
    nlohmann::json values = nlohmann::json::object();
  };
  void ReadPluginOption(const Field& f, PluginOptions* options);
  static bool IsJsonText(const nlohmann::json& v);
  // What one plugin option may grow to as JSON. YAML aliases can repeat a
  // node many times over (a few hundred bytes of `&a [*b, *b, ...]` make
  // billions of values) or refer to themselves (`&a [*a]`, endless).
  static constexpr size_t kMaxOptionValues = 10000;
  static constexpr size_t kMaxOptionDepth = 100;
  struct JsonBudget {
    const Field* option;  // where a problem is reported
    size_t values = kMaxOptionValues;
    bool exceeded = false;
  };
  std::optional<nlohmann::json> YamlToJson(const Field& f, JsonBudget* budget, size_t depth = 0);

  // What the checks after the whole file need to know about one sink.
  struct SinkRefs {
    size_t sink = 0;              // index in Config::sinks
    std::optional<Field> entity;  // its `entity`, when that was a string
    // Its type's keys as read (for SinkType::check_file); null for a plugin's.
    std::unique_ptr<SinkOptionsRead> own;
  };

  Problems* problems_;
  std::string file_;                // the path as given, for SinkConfig::origin
  std::filesystem::path base_dir_;  // where relative ${file:...} paths start
  // Every key of `entities` as written (also invalid ones, which are reported
  // there); unset when there is no such mapping.
  std::optional<std::vector<std::string>> entity_names_;
  // Every key of storage.servers as written (also invalid ones, reported
  // there); unset when there is no storage section or its servers is not a mapping.
  std::optional<std::vector<std::string>> server_names_;
  // Each use of a server name in entities, for CheckServerReferences.
  struct ServerRef {
    std::string name;
    YAML::Mark mark;
    std::string path;
  };
  std::vector<ServerRef> server_refs_;
  std::map<std::string, int> sink_name_lines_;  // sink name -> line of its first use
  std::vector<SinkRefs> sink_refs_;
  const SinkTypes* types_;  // the built-in sink types
  std::map<std::string, Field> listen_keys_;  // the listen keys given, by path ("metrics.listen")
  bool plugins_declared_ = false;  // the file has a plugins section
  std::map<std::string, std::string>* secret_references_ = nullptr;  // Config::secret_references
};

}  // namespace sluice::config
