// What config/ needs to know about one sink type, and the reading API a sink
// type's folder uses to check its own keys.
//
// config/ owns the YAML file, the FILE:LINE:COL error machinery, secrets and
// the keys every sink has (name, type, entity, on_error, batch_max, push...).
// Each built-in sink type describes the rest from its own folder
// (connectors/<type>/<type>_options.h/.cc) as a SinkType: its name, whether
// the writer may push to it, its key table (how each key is read and
// checked, which are required, which are secret), the checks across its keys
// and how Redacted() prints it. Its options are a struct of its own, which a
// SinkConfig holds (SinkConfig::Options<T>(), config.h) without config/
// knowing the type. connectors/builtin_sink_types.cc lists them; the
// loader gets that list as an argument (LoadConfig below), so config/ never
// depends on connectors/. Any type not in the list is a plugin's, accepted
// when the file lists plugins (as before).
//
// Threads: a SinkTypes is immutable once built and may be shared. A
// SinkOptionReader and a SinkOptionPrinter live for one LoadConfig or one
// Redacted() call on the caller's thread; sink types must not keep them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"
#include "core/status.h"

namespace sluice::config {

// One key/value being read, with where to point when it is wrong. Opaque
// outside config/ (config_reader.h): a sink type only hands it back to the reader.
struct Field;

// The dotted path of a field in messages, e.g. "sinks[0].url".
const std::string& FieldPath(const Field& f);
// The key as written, e.g. "sasl.password" for "sinks[0].properties.sasl.password".
const std::string& FieldKey(const Field& f);
// The 1-based line a problem about the field points at (its value's, or its
// key's when the value is empty), for messages that refer to another line.
int FieldLine(const Field& f);

// The shape of a mapping entry read by SinkOptionReader::ReadMappings.
enum class MappingKind {
  kRedisField,   // name -> JSON pointer
  kMysqlColumn,  // name -> JSON pointer, or {pointer, type}; "id" and case-duplicates refused
};

// The reading primitives of config/, for a sink type's keys. Every problem is
// reported as "FILE:LINE:COL: path: problem"; a Read* that finds a problem
// reports it and leaves *out as it was (its default).
class SinkOptionReader {
 public:
  virtual ~SinkOptionReader() = default;

  // Reports `what` at the field's value (or its key when the value is empty).
  virtual void Problem(const Field& f, std::string_view what) = 0;
  // Reports `what` at the field's key (a key that must not be there).
  virtual void KeyProblem(const Field& f, std::string_view what) = 0;
  // Reports "must be <expected>, got <quoted got>" at the value.
  virtual void Expected(const Field& f, std::string_view expected, std::string_view got) = 0;

  // The scalar text of a field that may not hold a secret, or nullopt after
  // reporting why not. `expected` completes "must be ...".
  virtual std::optional<std::string> PlainScalar(const Field& f, std::string_view expected) = 0;
  // A field marked secret: a literal or a whole "${env:NAME}" /
  // "${file:PATH}", resolved; the reference is remembered for Redacted().
  // No message quotes the value. *from_reference: whether it was a reference.
  virtual bool ReadSecret(const Field& f, std::string* out, bool* from_reference = nullptr) = 0;
  virtual bool ReadString(const Field& f, bool may_be_empty, std::string* out) = 0;
  virtual void ReadBool(const Field& f, bool* out) = 0;
  virtual void ReadUint(const Field& f, uint64_t min, uint64_t max, uint64_t* out) = 0;
  // "500ms", "2s", "1m", "24h" between min and max.
  virtual void ReadDuration(const Field& f, std::chrono::milliseconds min, std::chrono::milliseconds max,
                            std::chrono::milliseconds* out) = 0;
  // A duration between 1ms and 1h (the connect and request timeouts).
  virtual void ReadTimeout(const Field& f, std::chrono::milliseconds* out) = 0;
  // A readable file (relative to the config file's folder) holding one JSON
  // object: its normalized path and its text.
  virtual void ReadJsonObjectFile(const Field& f, std::string* path_out, std::string* json_out) = 0;
  // A readable PEM file (relative to the config file's folder): its
  // normalized path. `what` starts the messages ("CA file ").
  virtual void ReadPemFile(const Field& f, std::string_view what, std::string* path_out) = 0;
  // Each entry of a mapping (nothing when the value is empty), as a Field
  // whose path is "<f's path>.<key>"; a value that is not a mapping, a key
  // that is not a string and a duplicate key are reported and skipped.
  virtual void ForEachEntry(const Field& f, const std::function<void(const Field&)>& each) = 0;
  // fields (Redis hash) or columns (MySQL), in file order.
  virtual void ReadMappings(const Field& f, MappingKind kind, std::vector<FieldMapping>* out) = 0;
  // A copy of `f` to report at after the other keys were read (Check()).
  virtual std::shared_ptr<const Field> Keep(const Field& f) = 0;

  // ReadUint into a narrower integer.
  template <typename T>
  void ReadUint(const Field& f, uint64_t min, uint64_t max, T* out) {
    uint64_t v = *out;
    ReadUint(f, min, max, &v);
    *out = static_cast<T>(v);
  }
};

// One key a sink type accepts and how to read its value.
struct SinkOptionKey {
  std::string_view name;
  bool required = false;
  std::function<void(const Field&)> read;
};

// One sink's type-specific keys while that sink is read: Keys() fill the
// options of the SinkConfig given to SinkType::read; Check() runs once every
// key was read (checks across keys), with the sink's whole mapping for
// messages about it.
class SinkOptionsRead {
 public:
  virtual ~SinkOptionsRead() = default;
  virtual std::vector<SinkOptionKey> Keys() = 0;
  virtual void Check(const Field& sink) { (void)sink; }
};

// What Redacted() offers a sink type to print its keys (after the common
// ones), as YAML, by the rule of config/redact.h.
class SinkOptionPrinter {
 public:
  virtual ~SinkOptionPrinter() = default;
  virtual void Value(std::string_view key, std::string_view value) = 0;
  virtual void Value(std::string_view key, bool value) = 0;
  virtual void Value(std::string_view key, uint64_t value) = 0;
  void Value(std::string_view key, const char* value) { Value(key, std::string_view(value)); }
  // As "500ms", "2s", "1m"...
  virtual void Duration(std::string_view key, std::chrono::milliseconds value) = 0;
  // A field marked secret: the reference it was written as, or "***"; a URL
  // without its credentials. Never the value.
  virtual void Secret(std::string_view key, const std::string& value, bool url = false) = 0;
  // A nested mapping of names to pointers (fields: ...).
  virtual void Mapping(std::string_view key, const std::vector<std::pair<std::string, std::string>>& entries) = 0;
  // A nested mapping of names to values, each shown as a secret (quoted,
  // never the value) when its name looks secret (IsSecretName) or it was
  // written as a reference (properties: ...).
  virtual void SecretMapping(std::string_view key, const std::map<std::string, std::string>& entries) = 0;
  // A nested mapping of names to one-line mappings (columns: {id: {pointer: ..., type: ...}}).
  virtual void FlowMappings(
      std::string_view key,
      const std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>>& entries) = 0;
  // One level deeper: names to mappings of names to one-line mappings
  // (tables: {t: {key: {owner: VARCHAR(64)}, columns: {...}}}).
  using FlowMappingList = std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>>;
  virtual void NestedFlowMappings(std::string_view key,
                                  const std::vector<std::pair<std::string, FlowMappingList>>& entries) = 0;
};

// One built-in sink type as the config loader sees it.
struct SinkType {
  std::string_view name;
  // The writer may push to it (a point view: one key or row per entity).
  bool can_push = false;
  // sinks[*].batch_max when the file does not give it.
  uint32_t default_batch_max = 1000;
  // The sink runs its `code:` itself (an aggregate view) instead of being
  // wrapped in the filter/transform of view code.
  bool runs_code = false;
  // The view keeps its own offsets and applies each event exactly once (an
  // aggregate view): moving the engine's offsets back would re-apply nothing,
  // so `sluice rewind` rebuilds it instead.
  bool exactly_once = false;
  // What a sink's `routes:` name (docs/views.md, routing): "topic", "index";
  // empty when the type has no destinations to route to. destination is a
  // sink's own (its topic or index, templates filled in); route_to points a
  // copy of a sink's config at another.
  std::string_view routes_to;
  std::function<std::string(const SinkConfig& sink)> destination;
  std::function<void(SinkConfig* sink, const std::string& destination)> route_to;
  // Starts reading one sink's keys of this type into its options (the
  // type's struct T in its folder, sink->MutableOptions<T>()). Called for
  // every type for each sink, so that config/ knows every type's key names
  // (to refuse another type's key by name); only the sink's own type's keys
  // are ever read, and Check() is only called on its own type's. So the
  // SinkOptionsRead reaches sink->MutableOptions<T>() when one of its keys is
  // read, never when it is made; *sink outlives it while the sink is read.
  std::function<std::unique_ptr<SinkOptionsRead>(SinkOptionReader& reader, SinkConfig* sink)> read;
  // Prints one sink's type-specific keys for Redacted().
  std::function<void(const SinkConfig& sink, SinkOptionPrinter& out)> print;
  // Optional: checks that need the whole file (across the sinks of this
  // type, or against another section such as storage.mysql.database, which
  // may come after sinks:). Runs once, after every section was read, with
  // each sink of this type in file order: its index in config.sinks and the
  // SinkOptionsRead that `read` returned for it (still alive, so it may keep
  // Fields to report at through its reader).
  std::function<void(const Config& config, const std::vector<std::pair<size_t, SinkOptionsRead*>>& sinks)>
      check_file;
  // Optional: what a process logs as a WARNING at start about one sink's
  // settings (a TLS check turned down, config/tls_options.h).
  std::function<std::vector<std::string>(const SinkConfig& sink)> warnings;
};

// The built-in sink types, in the order messages list them.
class SinkTypes {
 public:
  SinkTypes() = default;
  explicit SinkTypes(std::vector<SinkType> types) : types_(std::move(types)) {}

  // nullptr when `name` is not built in (a plugin's type, or a mistake).
  const SinkType* Find(std::string_view name) const;
  const std::vector<SinkType>& all() const { return types_; }

 private:
  std::vector<SinkType> types_;
};

// How messages quote a value written in the file: double quotes, control
// characters escaped, long values cut.
std::string QuoteValue(std::string_view s);

// [A-Za-z_][A-Za-z0-9_]{0,63}: a MySQL table or column name, or a hash field.
bool IsIdentifier(std::string_view s);
// [A-Za-z0-9_]{1,64}: a MySQL database name (storage.mysql.database and a
// mysql sink's database).
bool IsDatabaseName(std::string_view s);

}  // namespace sluice::config
