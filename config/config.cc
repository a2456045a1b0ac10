#include "config/config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/redact.h"
#include "config/sink_type.h"
#include "core/json.h"
#include "core/names.h"

namespace sluice::config {

// One key/value pair being read, with where to point when its value is wrong.
struct Field {
  YAML::Node key;
  YAML::Node value;
  std::string path;  // dotted path of the key, e.g. "storage.mysql.port"
  YAML::Mark mark;   // the value, or the key when the value is empty
};

const std::string& FieldPath(const Field& f) { return f.path; }
const std::string& FieldKey(const Field& f) { return f.key.Scalar(); }
int FieldLine(const Field& f) { return f.mark.line + 1; }

std::string_view DurabilityBarrierName(DurabilityBarrier b) {
  switch (b) {
    case DurabilityBarrier::kAuto: return "auto";
    case DurabilityBarrier::kLsn: return "lsn";
    case DurabilityBarrier::kCommit: return "commit";
    case DurabilityBarrier::kOff: return "off";
  }
  return "auto";
}
namespace {

// Caps that keep a mistaken path (/dev/zero, a log file) from eating memory.
constexpr size_t kMaxConfigFileBytes = 16u << 20;
constexpr size_t kMaxSecretFileBytes = 64u << 10;
constexpr std::chrono::milliseconds kMinTimeout{1};
constexpr std::chrono::milliseconds kMaxTimeout{60 * 60 * 1000};
constexpr uint64_t kMaxBodyBytesLimit = 64u << 20;
// Every field whose value may be a ${env:...} / ${file:...} reference.
constexpr std::string_view kSecretFields =
    "storage.mysql.password, admin.token, sinks[*].url, sinks[*].password, sinks[*].api_key, "
    "sinks[*].properties.*, secret-named plugin options";
constexpr size_t kMaxQuotedChars = 60;

// Reads the whole file into *out; returns 0 or an errno value.
int ReadWholeFile(const std::string& path, size_t max_bytes, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return err;
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return EISDIR;
  }
  out->clear();
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return err;
    }
    if (n == 0) break;
    if (out->size() + static_cast<size_t>(n) > max_bytes) {
      ::close(fd);
      return EFBIG;
    }
    out->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return 0;
}

std::string ErrnoText(int err) { return std::system_category().message(err); }

// Appends c, or "\xNN" when it is a control character.
void AppendPrintable(unsigned char c, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  if (c < 0x20 || c == 0x7f) {
    *out += "\\x";
    *out += kHex[c >> 4];
    *out += kHex[c & 0xf];
  } else {
    *out += static_cast<char>(c);
  }
}

// A value shown back to the user: quoted, escaped, and cut short.
std::string Quote(std::string_view s) {
  std::string out = "\"";
  size_t shown = 0;
  for (unsigned char c : s) {
    if (shown++ == kMaxQuotedChars) {
      out += "...";
      break;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else {
      AppendPrintable(c, &out);
    }
  }
  out += '"';
  return out;
}

// What the user wrote, for "got ..." in a message.
std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a sequence";
    case YAML::NodeType::Scalar: return Quote(node.Scalar());
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: break;
  }
  return "an empty value";
}

std::string JoinPath(std::string_view parent, std::string_view key) {
  std::string out(parent);
  if (!out.empty()) out += '.';
  out += key;
  return out;
}

bool HasSecretReference(std::string_view s) {
  return s.find("${env:") != std::string_view::npos || s.find("${file:") != std::string_view::npos;
}

// Edit distance counting an adjacent swap as one edit ("hots" -> "host").
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::optional<uint64_t> ParseDecimal(std::string_view s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string FormatDuration(std::chrono::microseconds d) {
  const auto us = d.count();
  if (us == 0) return "0s";
  if (us % 1000 != 0) return std::to_string(us) + "us";
  const auto ms = us / 1000;
  if (ms % 3600000 == 0) return std::to_string(ms / 3600000) + "h";
  if (ms % 60000 == 0) return std::to_string(ms / 60000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string ToUpper(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return out;
}

std::string JoinNames(const std::vector<std::string_view>& names) {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

// "a", "a and b", "a, b and c" (with `last` = " and ").
std::string JoinWords(const std::vector<std::string_view>& words, std::string_view last) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += i + 1 == words.size() ? std::string(last) : std::string(", ");
    out += words[i];
  }
  return out;
}

// The candidate within two edits of `name` (and not a whole rewrite of it),
// closest first; empty when there is none.
std::string_view ClosestName(std::string_view name,
                             const std::vector<std::string_view>& candidates) {
  std::string_view best;
  size_t best_distance = 3;
  for (std::string_view c : candidates) {
    const size_t d = EditDistance(name, c);
    if (d < best_distance && d < name.size()) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

// "host:port" or "[ipv6]:port"; false when it is neither.
bool ParseHostPort(std::string_view s, std::string* host, uint16_t* port) {
  std::string_view h;
  std::string_view p;
  if (!s.empty() && s.front() == '[') {
    const size_t close = s.find("]:");
    if (close == std::string_view::npos) return false;
    h = s.substr(1, close - 1);
    p = s.substr(close + 2);
    const bool ipv6 = !h.empty() && h.find_first_not_of("0123456789abcdefABCDEF:.") == std::string_view::npos;
    if (!ipv6) return false;
  } else {
    const size_t colon = s.rfind(':');
    if (colon == std::string_view::npos) return false;
    h = s.substr(0, colon);
    p = s.substr(colon + 1);
    if (!IsValidHostName(h)) return false;
  }
  const auto n = p.size() <= 5 ? ParseDecimal(p) : std::nullopt;
  if (!n || *n > 65535) return false;
  *host = std::string(h);
  *port = static_cast<uint16_t>(*n);
  return true;
}

// Two listen addresses one process cannot both bind: the same port (not 0)
// on the same host, or on a wildcard host.
bool SameListenAddress(const std::string& h1, uint16_t p1, const std::string& h2, uint16_t p2) {
  if (p1 == 0 || p1 != p2) return false;
  auto wildcard = [](const std::string& h) { return h == "0.0.0.0" || h == "::" || h == "0:0:0:0:0:0:0:0"; };
  return h1 == h2 || wildcard(h1) || wildcard(h2);
}

// Problems in one file, printed as "FILE:LINE:COL: path: problem".
class Problems {
 public:
  explicit Problems(std::string file) : file_(std::move(file)) {}

  void Add(const YAML::Mark& mark, std::string_view path, std::string_view what) {
    std::string text;
    // Keys may hold control characters; keep each problem on one line.
    for (unsigned char c : std::string(path) + (path.empty() ? "" : ": ") + std::string(what)) {
      AppendPrintable(c, &text);
    }
    problems_.push_back({mark.is_null() ? -1 : mark.line, mark.is_null() ? -1 : mark.column,
                         std::move(text)});
  }

  bool empty() const { return problems_.empty(); }

  // One line per problem, in file order.
  std::string Join() {
    std::stable_sort(problems_.begin(), problems_.end(), [](const Entry& a, const Entry& b) {
      return std::pair(a.line, a.column) < std::pair(b.line, b.column);
    });
    std::string out;
    for (const Entry& p : problems_) {
      if (!out.empty()) out += '\n';
      out += file_;
      if (p.line >= 0) {
        out += ':' + std::to_string(p.line + 1) + ':' + std::to_string(p.column + 1);
      }
      out += ": ";
      out += p.text;
    }
    return out;
  }

 private:
  struct Entry {
    int line;
    int column;
    std::string text;
  };
  std::string file_;
  std::vector<Entry> problems_;
};

Field MakeField(const YAML::Node& key, const YAML::Node& value, std::string path) {
  const YAML::Mark mark = value.IsNull() ? key.Mark() : value.Mark();
  return Field{key, value, std::move(path), mark};
}

// kMisplaced: a key that belongs elsewhere (another sink type); its `read`
// says why it is wrong here, and it is never offered as a suggestion.
enum class Presence { kRequired, kOptional, kMisplaced };

// A KeySpec name that takes every key no other KeySpec names (a plugin
// sink's own options).
constexpr std::string_view kAnyOtherKey = "*";

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
class ConfigReader : public SinkOptionReader {
 public:
  ConfigReader(Problems* problems, std::string file, std::filesystem::path base_dir, const SinkTypes* types)
      : problems_(problems), file_(std::move(file)), base_dir_(std::move(base_dir)), types_(types) {}

  // ---- the built-in types whose keys are still read here ----

  // ---- SinkOptionReader: what a sink type's keys read with ----

  void Problem(const Field& f, std::string_view what) override { Problem(f.mark, f.path, what); }
  void KeyProblem(const Field& f, std::string_view what) override { Problem(f.key.Mark(), f.path, what); }
  bool ReadString(const Field& f, bool may_be_empty, std::string* out) override {
    return ReadString(f, may_be_empty ? kMayBeEmpty : kNotEmpty, out);
  }
  void ReadUint(const Field& f, uint64_t min, uint64_t max, uint64_t* out) override {
    ReadUint<uint64_t>(f, min, max, out);
  }
  void ReadDuration(const Field& f, std::chrono::milliseconds min, std::chrono::milliseconds max,
                    std::chrono::milliseconds* out) override {
    ReadDuration<std::chrono::milliseconds>(f, min, max, out);
  }
  std::shared_ptr<const Field> Keep(const Field& f) override { return std::make_shared<const Field>(f); }

  void ReadRoot(const YAML::Node& doc, Config* config) {
    secret_references_ = &config->secret_references;
    if (!doc.IsMap()) {
      Problem(doc.Mark(), "",
              "the configuration must be a mapping with storage and entities sections, got " +
                  Describe(doc));
      return;
    }
    const Field root{YAML::Node(), doc, "", doc.Mark()};
    // Sinks may name plugin types before the plugins section that provides them.
    plugins_declared_ = doc["plugins"].IsDefined();
    constexpr auto kRequired = Presence::kRequired;
    constexpr auto kOptional = Presence::kOptional;
    ExpectKeys(root, {
        {"storage", kRequired, [&](const Field& f) { ReadStorage(f, config); }},
        {"entities", kRequired, [&](const Field& f) { ReadEntities(f, &config->entities); }},
        {"writer", kOptional, [&](const Field& f) { ReadWriter(f, &config->writer); }},
        {"engine", kOptional, [&](const Field& f) { ReadEngine(f, &config->engine); }},
        {"metrics", kOptional, [&](const Field& f) { ReadMetrics(f, config); }},
        {"sinks", kOptional, [&](const Field& f) { ReadSinks(f, &config->sinks); }},
        {"admin", kOptional, [&](const Field& f) { ReadAdmin(f, &config->admin); }},
        {"plugins", kOptional, [&](const Field& f) { ReadPlugins(f, &config->plugins); }},
    });
    // Sinks refer to other sections, which may come later in the file.
    CheckSinkReferences(*config);
    CheckListenAddresses(*config);
  }

 private:
  void Problem(const YAML::Mark& mark, std::string_view path, std::string_view what) {
    problems_->Add(mark, path, what);
  }

  // Calls `each` for every entry of the mapping at `at` (an empty value counts
  // as an empty mapping), reporting non-string and duplicate keys.
  void ForEachEntry(const Field& at, const std::function<void(const Field&)>& each) override {
    if (at.value.IsNull()) return;
    if (!at.value.IsMap()) {
      Problem(at.mark, at.path, "must be a mapping, got " + Describe(at.value));
      return;
    }
    std::map<std::string, int> seen_at_line;
    for (const auto& kv : at.value) {
      const YAML::Node& key = kv.first;
      if (!key.IsScalar()) {
        Problem(key.Mark(), at.path, "keys must be strings, got " + Describe(key));
        continue;
      }
      const std::string& name = key.Scalar();
      const auto [it, inserted] = seen_at_line.emplace(name, key.Mark().line + 1);
      if (!inserted) {
        Problem(key.Mark(), JoinPath(at.path, name),
                "duplicate key (first given on line " + std::to_string(it->second) + ")");
        continue;
      }
      each(MakeField(key, kv.second, JoinPath(at.path, name)));
    }
  }

  // Reads a mapping that accepts exactly `keys`.
  void ExpectKeys(const Field& at, const std::vector<KeySpec>& keys) {
    std::vector<bool> present(keys.size(), false);
    ForEachEntry(at, [&](const Field& f) {
      const std::string& name = f.key.Scalar();
      const KeySpec* any = nullptr;
      // A key that several sink types share (format) is read by the sink's
      // own type; it is misplaced only when no type present owns it.
      std::optional<size_t> match;
      for (size_t i = 0; i < keys.size(); ++i) {
        if (keys[i].name == kAnyOtherKey) any = &keys[i];
        if (keys[i].name != name) continue;
        if (!match || (keys[*match].presence == Presence::kMisplaced && keys[i].presence != Presence::kMisplaced)) {
          match = i;
        }
      }
      if (match) {
        present[*match] = true;
        keys[*match].read(f);
        return;
      }
      if (any != nullptr) return any->read(f);
      Problem(f.key.Mark(), f.path, UnknownKeyText(name, keys));
    });
    if (!at.value.IsNull() && !at.value.IsMap()) return;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i].presence == Presence::kRequired && !present[i]) {
        Problem(at.mark, JoinPath(at.path, keys[i].name), "required key is missing");
      }
    }
  }

  static std::string UnknownKeyText(std::string_view name, const std::vector<KeySpec>& keys) {
    std::vector<std::string_view> accepted;
    for (const KeySpec& k : keys) {
      if (k.presence != Presence::kMisplaced && k.name != kAnyOtherKey) accepted.push_back(k.name);
    }
    const std::string_view best = ClosestName(name, accepted);
    if (!best.empty()) return "unknown key (did you mean " + Quote(best) + "?)";
    return "unknown key (expected one of: " + JoinNames(accepted) + ")";
  }

  // ---- sections ----

  void ReadStorage(const Field& at, Config* config) {
    ExpectKeys(at, {
        {"mysql", Presence::kRequired, [&](const Field& f) { ReadMysql(f, &config->mysql); }},
    });
  }

  void ReadMysql(const Field& at, MysqlConfig* m) {
    constexpr auto kOptional = Presence::kOptional;
    ExpectKeys(at, {
        {"host", kOptional, [&](const Field& f) { ReadHost(f, &m->host); }},
        {"port", kOptional, [&](const Field& f) { ReadUint(f, 1, 65535, &m->port); }},
        {"socket", kOptional, [&](const Field& f) { ReadString(f, kMayBeEmpty, &m->socket); }},
        {"user", kOptional, [&](const Field& f) { ReadString(f, kNotEmpty, &m->user); }},
        {"password", kOptional, [&](const Field& f) { ReadSecret(f, &m->password); }},
        {"database", kOptional, [&](const Field& f) { ReadDatabaseName(f, &m->database); }},
        {"connect_timeout", kOptional,
         [&](const Field& f) { ReadTimeout(f, &m->connect_timeout); }},
        {"io_timeout", kOptional, [&](const Field& f) { ReadTimeout(f, &m->io_timeout); }},
    });
  }

  void ReadEntities(const Field& at, std::map<std::string, EntityTypeConfig>* entities) {
    if (!at.value.IsNull() && !at.value.IsMap()) {
      Problem(at.mark, at.path,
              "must be a mapping from entity type name to its settings, got " + Describe(at.value));
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
          {"partitions", Presence::kRequired,
           [&](const Field& p) { ReadUint(p, 1, 1024, &entity.partitions); }},
          {"handlers", Presence::kOptional, [&](const Field& h) { ReadHandlersFile(h, &entity); }},
      });
      if (valid_name) entities->emplace(name, std::move(entity));
    });
  }

  // entities.<type>.handlers: a readable JavaScript file, relative to the
  // config file's folder. Compiling it is the handlers module's job.
  void ReadHandlersFile(const Field& f, EntityTypeConfig* entity) {
    std::string path;
    if (!ReadString(f, kNotEmpty, &path)) return;
    std::filesystem::path p(path);
    if (p.is_relative() && !base_dir_.empty()) p = base_dir_ / p;
    std::string source;
    if (const int err = ReadWholeFile(p.string(), kMaxConfigFileBytes, &source); err != 0) {
      return Problem(f.mark, f.path, "cannot read handler file " + Quote(p.string()) + ": " + ErrnoText(err));
    }
    entity->handlers = p.lexically_normal().string();
    entity->handlers_origin =
        file_ + ":" + std::to_string(f.mark.line + 1) + ":" + std::to_string(f.mark.column + 1);
  }

  void ReadWriter(const Field& at, WriterConfig* w) {
    constexpr auto kOptional = Presence::kOptional;
    std::vector<KeySpec> keys = {
        {"listen", kOptional,
         [&](const Field& f) { ReadListenKey(f, &w->listen_host, &w->listen_port); }},
        {"batch_max", kOptional, [&](const Field& f) { ReadUint(f, 1, 100000, &w->batch_max); }},
        {"max_body_bytes", kOptional,
         [&](const Field& f) { ReadByteSize(f, 1, kMaxBodyBytesLimit, &w->max_body_bytes); }},
        {"max_json_depth", kOptional,
         [&](const Field& f) { ReadUint(f, 1, kMaxJsonDepthCap, &w->max_json_depth); }},
        {"io_threads", kOptional, [&](const Field& f) { ReadUint(f, 1, 64, &w->io_threads); }},
        {"read_threads", kOptional, [&](const Field& f) { ReadUint(f, 1, 256, &w->read_threads); }},
        {"entity_cache_entries", kOptional,
         [&](const Field& f) { ReadUint(f, 1, 10000000, &w->entity_cache_entries); }},
        {"conflict_retries", kOptional,
         [&](const Field& f) { ReadUint(f, 1, 1000, &w->conflict_retries); }},
        {"allow_weak_durability", kOptional,
         [&](const Field& f) { ReadBool(f, &w->allow_weak_durability); }},
        {"handler_timeout", kOptional,
         [&](const Field& f) {
           ReadDuration(f, std::chrono::milliseconds(1), std::chrono::seconds(60), &w->handler_timeout);
         }},
        {"handler_memory", kOptional,
         [&](const Field& f) { ReadByteSize(f, uint64_t{1} << 20, uint64_t{1} << 30, &w->handler_memory); }},
        {"push_thread_slice", kOptional, [&](const Field& f) { ReadThreadSlice(f, &w->push_thread_slice); }},
    };
    for (KeySpec& k : LimitKeys(&w->limits)) keys.push_back(std::move(k));
    ExpectKeys(at, keys);
  }

  // 0 (the kernel's default) or the range Linux accepts for a custom slice.
  void ReadThreadSlice(const Field& f, std::chrono::microseconds* out) {
    using std::chrono::microseconds;
    const std::optional<DurationText> d = ParseDurationText<microseconds>(f);
    if (!d) return;
    const std::optional<uint64_t> us = d->Micros(static_cast<uint64_t>(kMaxThreadSliceUs));
    if (!us || (*us != 0 && *us < static_cast<uint64_t>(kMinThreadSliceUs))) {
      return Expected(f, "0s (the kernel's default) or between " + FormatDuration(microseconds(kMinThreadSliceUs)) +
                             " and " + FormatDuration(microseconds(kMaxThreadSliceUs)),
                      d->text);
    }
    *out = microseconds(static_cast<int64_t>(*us));
  }

  void ReadAdmin(const Field& at, AdminConfig* a) {
    a->enabled = true;
    std::vector<KeySpec> keys = {
        {"listen", Presence::kOptional,
         [&](const Field& f) { ReadListenKey(f, &a->listen_host, &a->listen_port); }},
        {"token", Presence::kOptional, [&](const Field& f) { ReadSecret(f, &a->token); }},
    };
    for (KeySpec& k : LimitKeys(&a->limits)) keys.push_back(std::move(k));
    ExpectKeys(at, keys);
  }

  // metrics: one address per process (listen for serve; writer_listen and
  // sync_listen, which default to it) and the listener's limits.
  void ReadMetrics(const Field& at, Config* config) {
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

  // After the whole file: the listeners one process opens need distinct
  // addresses. serve opens writer.listen, admin.listen and metrics.listen;
  // writer opens writer.listen and metrics.writer_listen; sync opens
  // admin.listen and metrics.sync_listen. A clash is reported at the key
  // given in the file (the later one of the pair when both are).
  void CheckListenAddresses(const Config& config) {
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

  void ReadEngine(const Field& at, EngineConfig* e) {
    using std::chrono::milliseconds;
    using std::chrono::minutes;
    using std::chrono::seconds;
    constexpr auto kOptional = Presence::kOptional;
    ExpectKeys(at, {
        {"offset_flush_interval", kOptional,
         [&](const Field& f) {
           ReadDuration(f, milliseconds(10), minutes(1), &e->offset_flush_interval);
         }},
        {"batch_max", kOptional, [&](const Field& f) { ReadUint(f, 1, 100000, &e->batch_max); }},
        {"idle_poll_max", kOptional,
         [&](const Field& f) { ReadDuration(f, milliseconds(1), seconds(10), &e->idle_poll_max); }},
        {"retry_backoff_max", kOptional,
         [&](const Field& f) {
           ReadDuration(f, milliseconds(10), minutes(10), &e->retry_backoff_max);
         }},
        {"inflight_batches", kOptional,
         [&](const Field& f) { ReadUint(f, 1, 64, &e->inflight_batches); }},
        {"durability_barrier", kOptional, [&](const Field& f) { ReadDurabilityBarrier(f, &e->durability_barrier); }},
        {"anti_entropy", kOptional, [&](const Field& f) { ReadAntiEntropy(f, &e->anti_entropy); }},
    });
  }

  void ReadAntiEntropy(const Field& at, AntiEntropyConfig* a) {
    constexpr auto kOptional = Presence::kOptional;
    ExpectKeys(at, {
        {"enabled", kOptional, [&](const Field& f) { ReadBool(f, &a->enabled); }},
        {"rate", kOptional, [&](const Field& f) { ReadUint(f, 1, 1000000, &a->rate); }},
        {"batch", kOptional, [&](const Field& f) { ReadUint(f, 1, 5000, &a->batch); }},
    });
  }

  void ReadDurabilityBarrier(const Field& f, DurabilityBarrier* out) {
    constexpr std::string_view kExpected = "auto, lsn, commit or off";
    const auto text = PlainScalar(f, kExpected);
    if (!text) return;
    for (const DurabilityBarrier b :
         {DurabilityBarrier::kAuto, DurabilityBarrier::kLsn, DurabilityBarrier::kCommit, DurabilityBarrier::kOff}) {
      if (*text == DurabilityBarrierName(b)) {
        *out = b;
        return;
      }
    }
    Expected(f, kExpected, *text);
  }

  // ---- sinks ----

  void ReadSinks(const Field& at, std::vector<SinkConfig>* sinks) {
    if (at.value.IsNull()) return;
    if (!at.value.IsSequence()) {
      Problem(at.mark, at.path, "must be a sequence of sinks, got " + Describe(at.value));
      return;
    }
    size_t index = 0;
    for (const YAML::Node& item : at.value) {
      const std::string path = at.path + "[" + std::to_string(index++) + "]";
      const YAML::Mark mark = item.Mark().is_null() ? at.mark : item.Mark();
      if (!item.IsMap()) {
        Problem(mark, path, "must be a mapping, got " + Describe(item));
        continue;
      }
      SinkConfig sink;
      sink.origin =
          file_ + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
      ReadSink(Field{YAML::Node(), item, path, mark}, sinks->size(), &sink);
      sinks->push_back(std::move(sink));
    }
  }

  // The scalar value of `key` in `map`, or "" (used to pick a sink's keys
  // before its `type` is read and checked in file order).
  static std::string PeekScalar(const YAML::Node& map, std::string_view key) {
    for (const auto& kv : map) {
      if (kv.first.IsScalar() && kv.first.Scalar() == key) {
        return kv.second.IsScalar() ? kv.second.Scalar() : "";
      }
    }
    return "";
  }

  void ReadSink(const Field& at, size_t index, SinkConfig* sink) {
    constexpr auto kRequired = Presence::kRequired;
    constexpr auto kOptional = Presence::kOptional;
    const std::string type = PeekScalar(at.value, "type");
    SinkRefs refs;
    refs.sink = index;
    std::optional<Field> push_key, push_options_key;

    std::vector<KeySpec> keys = {
        {"name", kRequired, [&](const Field& f) { ReadSinkName(f, sink); }},
        {"type", kRequired, [&](const Field& f) { ReadSinkType(f, &sink->type); }},
        {"entity", kRequired,
         [&](const Field& f) {
           if (ReadString(f, kNotEmpty, &sink->entity)) refs.entity = f;
         }},
        {"on_error", kOptional, [&](const Field& f) { ReadOnError(f, &sink->on_error); }},
        {"batch_max", kOptional, [&](const Field& f) { ReadUint(f, 1, 100000, &sink->batch_max); }},
        {"push", kOptional,
         [&](const Field& f) {
           push_key = f;
           ReadBool(f, &sink->push.enabled);
         }},
        {"push_mode", kOptional,
         [&](const Field& f) {
           push_options_key = f;
           ReadPushMode(f, &sink->push.mode);
         }},
        {"push_timeout", kOptional,
         [&](const Field& f) {
           push_options_key = f;
           ReadDuration(f, std::chrono::milliseconds(1), std::chrono::milliseconds(10000), &sink->push.timeout);
         }},
        {"anti_entropy", kOptional, [&](const Field& f) { ReadBool(f, &sink->anti_entropy); }},
    };
    // Every built-in type's keys: this sink's type's to read, the others' to
    // refuse with the type they belong to.
    std::unique_ptr<SinkOptionsRead> own;
    for (const SinkType& t : types_->all()) {
      std::unique_ptr<SinkOptionsRead> read = t.read(*this, sink);
      std::vector<KeySpec> owned;
      for (SinkOptionKey& k : read->Keys()) {
        owned.push_back({k.name, k.required ? kRequired : kOptional, std::move(k.read)});
      }
      AddSinkTypeKeys(t.name, type, &keys, std::move(owned));
      if (t.name == type) own = std::move(read);
    }
    if (const SinkType* spec = types_->Find(type)) {
      sink->batch_max = spec->default_batch_max;  // `batch_max` below overrides it
    }
    PluginOptions plugin_options;
    if (IsPluginSinkType(type)) {
      keys.push_back({kAnyOtherKey, Presence::kOptional,
                      [&](const Field& f) { ReadPluginOption(f, &plugin_options); }});
    }
    ExpectKeys(at, keys);
    if (own) own->Check(at);
    if (IsPluginSinkType(type)) sink->plugin.options_json = plugin_options.values.dump();

    CheckPush(sink->type, sink->push, push_key, push_options_key);
    refs.own = std::move(own);
    sink_refs_.push_back(std::move(refs));
  }

  // Appends the keys of sinks of type `owner`: as they are for such a sink,
  // as errors for a sink of another known type, and unchecked when the
  // sink's own type is unknown (that is reported once, at `type`).
  void AddSinkTypeKeys(std::string_view owner, const std::string& type, std::vector<KeySpec>* keys,
                       std::vector<KeySpec> owned) {
    const bool known_type = types_->Find(type) != nullptr;
    for (KeySpec& k : owned) {
      // A key that several types have (url, auto_create) is listed once: as
      // the sink's own type's when it has it, else as the first type's.
      const auto same =
          std::find_if(keys->begin(), keys->end(), [&](const KeySpec& e) { return e.name == k.name; });
      if (same != keys->end()) {
        if (type == owner) *same = std::move(k);
        continue;
      }
      if (type == owner) {
        keys->push_back(std::move(k));
      } else if (known_type) {
        keys->push_back({k.name, Presence::kMisplaced, [this, owner, type](const Field& f) {
                           Problem(f.key.Mark(), f.path,
                                   "only for " + std::string(owner) + " sinks (this sink is type " +
                                       type + ")");
                         }});
      } else if (!IsPluginSinkType(type)) {
        keys->push_back({k.name, Presence::kOptional, [](const Field&) {}});
      }  // else a plugin type: the key is one of its options
    }
  }

  void ReadSinkName(const Field& f, SinkConfig* sink) {
    constexpr std::string_view kExpected = "a name matching [a-z][a-z0-9_-]{0,63}";
    const auto text = PlainScalar(f, kExpected);
    if (!text) return;
    const std::string& s = *text;
    const bool ok = !s.empty() && s.size() <= 64 && s[0] >= 'a' && s[0] <= 'z' &&
                    std::all_of(s.begin(), s.end(), [](char c) {
                      return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
                             c == '-';
                    });
    if (!ok) return Expected(f, kExpected, s);
    sink->name = s;
    const auto [it, inserted] = sink_name_lines_.emplace(s, f.mark.line + 1);
    if (!inserted) {
      Problem(f.mark, f.path,
              "duplicate sink name " + Quote(s) + " (first given on line " +
                  std::to_string(it->second) + ")");
    }
  }

  void ReadSinkType(const Field& f, std::string* out) {
    const auto text = PlainScalar(f, "redis, mysql or kafka");
    if (!text) return;
    if (IsPluginSinkType(*text)) {
      // Whether a plugin provides it is checked when the plugins are loaded.
      *out = *text;
      return;
    }
    if (types_->Find(*text) == nullptr) {
      std::vector<std::string_view> names;
      for (const SinkType& t : types_->all()) names.push_back(t.name);
      Problem(f.mark, f.path,
              "unknown sink type " + Quote(*text) + " (expected one of: " + JoinNames(names) +
                  "; or a type of a library listed under plugins:)");
      return;
    }
    *out = *text;
  }

  // ---- plugins ----

  // A `type:` that is neither built in nor empty, in a file with plugins.
  bool IsPluginSinkType(std::string_view type) const {
    return plugins_declared_ && !type.empty() && types_->Find(type) == nullptr;
  }

  // plugins: a sequence of shared-library paths, relative to the file's directory.
  void ReadPlugins(const Field& at, std::vector<PluginConfig>* plugins) {
    if (at.value.IsNull()) return;
    if (!at.value.IsSequence()) {
      Problem(at.mark, at.path,
              "must be a sequence of plugin library paths (.so files), got " + Describe(at.value));
      return;
    }
    std::map<std::string, int> seen_at_line;
    size_t index = 0;
    for (const YAML::Node& item : at.value) {
      const YAML::Mark mark = item.Mark().is_null() ? at.mark : item.Mark();
      const Field f{YAML::Node(), item, at.path + "[" + std::to_string(index++) + "]", mark};
      const auto text = PlainScalar(f, "the path of a plugin library (.so file)");
      if (!text) continue;
      if (text->empty()) {
        Problem(f.mark, f.path, "must be the path of a plugin library (.so file), got \"\"");
        continue;
      }
      std::filesystem::path path{*text};
      if (path.is_relative() && !base_dir_.empty()) path = base_dir_ / path;
      path = path.lexically_normal();
      std::error_code ec;
      const auto status = std::filesystem::status(path, ec);
      if (ec || !std::filesystem::exists(status)) {
        Problem(f.mark, f.path,
                "plugin library " + path.string() + " not found" +
                    (ec && ec != std::errc::no_such_file_or_directory ? ": " + ec.message() : ""));
        continue;
      }
      if (!std::filesystem::is_regular_file(status)) {
        Problem(f.mark, f.path, "plugin library " + path.string() + " is not a regular file");
        continue;
      }
      const auto [it, inserted] = seen_at_line.emplace(path.string(), mark.line + 1);
      if (!inserted) {
        Problem(f.mark, f.path,
                "plugin library " + path.string() + " is already listed on line " +
                    std::to_string(it->second));
        continue;
      }
      plugins->push_back(PluginConfig{
          path.string(),
          file_ + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1)});
    }
  }

  struct PluginOptions {
    nlohmann::json values = nlohmann::json::object();
  };

  // One key of a plugin sink, for the plugin to check. `url` is secret-capable
  // like every sink's url, and so is an option whose name looks secret
  // (api_token, password); no other option may hold a secret reference. A
  // secret given inline keeps its YAML type (a token_ttl of 30 stays a number).
  void ReadPluginOption(const Field& f, PluginOptions* options) {
    const std::string& key = f.key.Scalar();
    const bool reference = f.value.IsScalar() && HasSecretReference(f.value.Scalar());
    std::optional<nlohmann::json> value;
    if (key == "url" || (IsSecretName(key) && reference)) {
      std::string text;
      if (ReadSecret(f, &text)) value = std::move(text);
    } else {
      JsonBudget budget{&f};
      value = YamlToJson(f, &budget);
    }
    if (!value) return;
    // yaml-cpp passes through bytes that are not UTF-8, which JSON text cannot
    // hold. Never quotes the value: it may be a secret.
    if (!IsJsonText(nlohmann::json(key)) || !IsJsonText(*value)) {
      return Problem(f.mark, f.path, "must be valid UTF-8 (a plugin gets its options as JSON)");
    }
    options->values[key] = std::move(*value);
  }

  // Whether `v` can be written as JSON text (its strings are valid UTF-8).
  static bool IsJsonText(const nlohmann::json& v) {
    try {
      (void)v.dump();
      return true;
    } catch (const nlohmann::json::type_error&) {
      return false;
    }
  }

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

  // A YAML value as JSON: plain scalars that read as null, true/false or a
  // number become those; quoted scalars and everything else stay strings.
  std::optional<nlohmann::json> YamlToJson(const Field& f, JsonBudget* budget, size_t depth = 0) {
    if (budget->exceeded) return std::nullopt;
    if (budget->values == 0 || depth > kMaxOptionDepth) {
      budget->exceeded = true;
      Problem(budget->option->mark, budget->option->path,
              budget->values == 0
                  ? "must have at most " + std::to_string(kMaxOptionValues) +
                        " values, counting each use of a YAML alias"
                  : "must be nested at most " + std::to_string(kMaxOptionDepth) +
                        " levels deep, counting each use of a YAML alias");
      return std::nullopt;
    }
    --budget->values;
    const YAML::Node& v = f.value;
    if (v.IsNull()) return nlohmann::json(nullptr);
    if (v.IsSequence()) {
      nlohmann::json out = nlohmann::json::array();
      size_t i = 0;
      for (const YAML::Node& item : v) {
        auto one = YamlToJson(Field{YAML::Node(), item, f.path + "[" + std::to_string(i++) + "]",
                                    item.Mark()},
                              budget, depth + 1);
        if (!one) return std::nullopt;
        out.push_back(std::move(*one));
      }
      return out;
    }
    if (v.IsMap()) {
      nlohmann::json out = nlohmann::json::object();
      bool ok = true;
      ForEachEntry(f, [&](const Field& member) {
        auto one = YamlToJson(member, budget, depth + 1);
        if (one) {
          out[member.key.Scalar()] = std::move(*one);
        } else {
          ok = false;
        }
      });
      if (!ok) return std::nullopt;
      return out;
    }
    const auto text = PlainScalar(f, "a value");
    if (!text) return std::nullopt;
    if (v.Tag() == "!") return nlohmann::json(*text);  // quoted: a string
    if (*text == "null" || *text == "~") return nlohmann::json(nullptr);
    if (*text == "true") return nlohmann::json(true);
    if (*text == "false") return nlohmann::json(false);
    // A JSON number (one a double can hold; 1e400 stays text). Not
    // std::regex: libstdc++'s matcher recurses once per character and a long
    // run of digits overflowed the stack.
    if (auto number = ParseJson(*text, 0); number.ok() && number->is_number()) return std::move(number).value();
    return nlohmann::json(*text);
  }

  // push: true only where a committed batch can be applied right away as a
  // point view (one key or row per entity); push_mode/push_timeout only with it.
  void CheckPush(const std::string& type, const PushConfig& push, const std::optional<Field>& push_key,
                 const std::optional<Field>& options_key) {
    // `type` is empty when it was missing or unknown (reported at `type`).
    const SinkType* spec = types_->Find(type);
    if (push.enabled && push_key && spec != nullptr && !spec->can_push) {
      std::vector<std::string_view> can;
      for (const SinkType& t : types_->all()) {
        if (t.can_push) can.push_back(t.name);
      }
      Problem(push_key->mark, push_key->path,
              "a " + type + " sink cannot be pushed to: push is for point views (sink types " +
                  JoinWords(can, " and ") + "), which the writer can update right after a commit; " +
                  "remove push or use a " + JoinWords(can, " or ") + " sink");
    }
    if (!push.enabled && options_key) {
      Problem(options_key->key.Mark(), options_key->path, "only with push: true");
    }
  }

  void ReadPushMode(const Field& f, PushConfig::Mode* out) {
    constexpr std::string_view kExpected = "sync or async";
    const auto text = PlainScalar(f, kExpected);
    if (!text) return;
    if (*text == "sync") {
      *out = PushConfig::Mode::kSync;
    } else if (*text == "async") {
      *out = PushConfig::Mode::kAsync;
    } else {
      Expected(f, kExpected, *text);
    }
  }

  // A readable file, relative to the config file's folder, holding one JSON
  // object: its path and its text.
  void ReadJsonObjectFile(const Field& f, std::string* path_out, std::string* json_out) override {
    std::string path;
    if (!ReadString(f, kNotEmpty, &path)) return;
    std::filesystem::path p(path);
    if (p.is_relative() && !base_dir_.empty()) p = base_dir_ / p;
    std::string text;
    if (const int err = ReadWholeFile(p.string(), kMaxConfigFileBytes, &text); err != 0) {
      return Problem(f.mark, f.path, "cannot read " + Quote(p.string()) + ": " + ErrnoText(err));
    }
    const nlohmann::json parsed = ParseJsonOrDiscarded(text);
    if (parsed.is_discarded() || !parsed.is_object()) {
      return Problem(f.mark, f.path, Quote(p.string()) + " must hold one JSON object");
    }
    *path_out = p.lexically_normal().string();
    *json_out = std::move(text);
  }

  void ReadOnError(const Field& f, OnError* out) {
    constexpr std::string_view kExpected = "dead_letter or stop";
    const auto text = PlainScalar(f, kExpected);
    if (!text) return;
    if (*text == "dead_letter") {
      *out = OnError::kDeadLetter;
    } else if (*text == "stop") {
      *out = OnError::kStop;
    } else {
      Expected(f, kExpected, *text);
    }
  }

  // fields (Redis hash) or columns (MySQL): name -> JSON pointer, and for
  // MySQL also name -> {pointer, type}. In file order.
  void ReadMappings(const Field& at, MappingKind kind, std::vector<FieldMapping>* out) override {
    const bool mysql = kind == MappingKind::kMysqlColumn;
    const std::string what = mysql ? "column" : "field";
    if (!at.value.IsMap() || at.value.size() == 0) {
      const std::string shape =
          "a mapping from " + what + " name to JSON pointer" +
          (mysql ? " (or to {pointer: ..., type: ...})" : "") + " with at least one entry";
      const std::string got = at.value.IsMap() ? "an empty mapping" : Describe(at.value);
      Problem(at.mark, at.path, "must be " + shape + ", got " + got);
      return;
    }
    // MySQL column names ignore case, so "Owner" and "owner" collide.
    std::map<std::string, int> lower_name_lines;
    ForEachEntry(at, [&](const Field& f) {
      const std::string& name = f.key.Scalar();
      const YAML::Mark key_mark = f.key.Mark();
      bool ok = true;
      if (!IsIdentifier(name)) {
        Problem(key_mark, f.path, what + " names must match [A-Za-z_][A-Za-z0-9_]{0,63}");
        ok = false;
      } else if (name[0] == '_') {
        Problem(key_mark, f.path,
                what + " names starting with _ are reserved for sluice (_version, _deleted)");
        ok = false;
      } else if (mysql && ToLower(name) == "id") {
        Problem(key_mark, f.path,
                "the column name id is reserved for the primary key (the entity id)");
        ok = false;
      } else if (mysql) {
        const auto [it, inserted] = lower_name_lines.emplace(ToLower(name), key_mark.line + 1);
        if (!inserted) {
          Problem(key_mark, f.path,
                  "duplicate column (MySQL column names ignore case; first given on line " +
                      std::to_string(it->second) + ")");
          ok = false;
        }
      }
      FieldMapping mapping;
      mapping.name = name;
      if (mysql) mapping.sql_type = "TEXT";
      if (mysql && f.value.IsMap()) {
        ExpectKeys(f, {
            {"pointer", Presence::kRequired,
             [&](const Field& p) { ReadJsonPointer(p, &mapping.pointer); }},
            {"type", Presence::kOptional,
             [&](const Field& t) { ReadColumnType(t, &mapping.sql_type); }},
        });
      } else if (f.value.IsScalar()) {
        ReadJsonPointer(f, &mapping.pointer);
      } else {
        Problem(f.mark, f.path,
                std::string("must be a JSON pointer such as /owner/name") +
                    (mysql ? " or a mapping {pointer: ..., type: ...}" : "") + ", got " +
                    Describe(f.value));
      }
      if (ok) out->push_back(std::move(mapping));
    });
  }

  // RFC 6901: empty (the whole state) or "/"-separated tokens in which "~"
  // appears only as "~0" (a "~") or "~1" (a "/").
  void ReadJsonPointer(const Field& f, std::string* out) {
    constexpr std::string_view kExpected = "a JSON pointer (RFC 6901) such as /owner/name";
    const auto text = PlainScalar(f, kExpected);
    if (!text) return;
    const std::string_view s = *text;
    if (!s.empty() && s[0] != '/') return Expected(f, kExpected, s);
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '~' && (i + 1 == s.size() || (s[i + 1] != '0' && s[i + 1] != '1'))) {
        return Expected(f, "a JSON pointer (RFC 6901), in which ~ is only allowed as ~0 or ~1", s);
      }
    }
    *out = *text;
  }

  // A conservative allow-list: types that hold any JSON scalar sensibly and
  // cannot smuggle SQL into CREATE TABLE. Stored in upper case.
  void ReadColumnType(const Field& f, std::string* out) {
    constexpr std::string_view kExpected =
        "one of TEXT, MEDIUMTEXT, LONGTEXT, JSON, VARCHAR(N), CHAR(N), [TINY|SMALL|BIG]INT "
        "[UNSIGNED], DECIMAL(M,D), DOUBLE, BOOLEAN, DATETIME[(N)]";
    const auto text = PlainScalar(f, kExpected);
    if (!text) return;
    static const std::regex kAllowed(
        R"(^(TEXT|MEDIUMTEXT|LONGTEXT|JSON|VARCHAR\(\d{1,5}\)|CHAR\(\d{1,3}\)|)"
        R"((BIG|SMALL|TINY)?INT( UNSIGNED)?|DECIMAL\((\d{1,2}),(\d{1,2})\)|DOUBLE|BOOLEAN|)"
        R"(DATETIME(\([0-6]\))?)$)",
        std::regex::icase | std::regex::ECMAScript);
    std::smatch match;
    if (!std::regex_match(*text, match, kAllowed)) return Expected(f, kExpected, *text);
    // DECIMAL(M,D) needs D <= M.
    if (match[4].matched && std::stoi(match[5].str()) > std::stoi(match[4].str())) {
      return Expected(f, kExpected, *text);
    }
    *out = ToUpper(*text);
  }

  // Checks that need the whole file: each sink's entity type exists, and
  // each sink type's own (SinkType::check_file: no two MySQL sinks write the
  // same table).
  void CheckSinkReferences(const Config& config) {
    for (const SinkRefs& refs : sink_refs_) {
      const SinkConfig& sink = config.sinks[refs.sink];
      // Without a usable entities section that is the problem to report, not every sink.
      if (refs.entity && entity_names_ && !entity_names_->empty() &&
          std::find(entity_names_->begin(), entity_names_->end(), sink.entity) ==
              entity_names_->end()) {
        std::vector<std::string_view> names(entity_names_->begin(), entity_names_->end());
        const std::string_view best = ClosestName(sink.entity, names);
        Problem(refs.entity->mark, refs.entity->path,
                "unknown entity type " + Quote(sink.entity) +
                    (best.empty() ? " (expected one of: " + JoinNames(names) + ")"
                                  : " (did you mean " + Quote(best) + "?)"));
      }
    }
    for (const SinkType& t : types_->all()) {
      if (!t.check_file) continue;
      std::vector<std::pair<size_t, SinkOptionsRead*>> sinks;
      for (const SinkRefs& refs : sink_refs_) {
        if (refs.own && config.sinks[refs.sink].type == t.name) sinks.emplace_back(refs.sink, refs.own.get());
      }
      t.check_file(config, sinks);
    }
  }

  // ---- values ----

  // The scalar text of a non-secret field, or nullopt after reporting why not.
  // `expected` completes "must be ...".
  std::optional<std::string> PlainScalar(const Field& f, std::string_view expected) override {
    if (!f.value.IsScalar()) {
      Problem(f.mark, f.path, "must be " + std::string(expected) + ", got " + Describe(f.value));
      return std::nullopt;
    }
    const std::string& text = f.value.Scalar();
    if (HasSecretReference(text)) {
      Problem(f.mark, f.path, "secrets are only accepted in fields marked secret: " + std::string(kSecretFields));
      return std::nullopt;
    }
    return text;
  }

  void Expected(const Field& f, std::string_view expected, std::string_view got) override {
    Problem(f.mark, f.path, "must be " + std::string(expected) + ", got " + Quote(got));
  }

  template <typename T>
  void ReadUint(const Field& f, uint64_t min, uint64_t max, T* out) {
    const std::string expected =
        "an integer between " + std::to_string(min) + " and " + std::to_string(max);
    const auto text = PlainScalar(f, expected);
    if (!text) return;
    const auto v = ParseDecimal(*text);
    if (!v || *v < min || *v > max) return Expected(f, expected, *text);
    *out = static_cast<T>(*v);
  }

  void ReadBool(const Field& f, bool* out) override {
    const auto text = PlainScalar(f, "true or false");
    if (!text) return;
    if (*text == "true") {
      *out = true;
    } else if (*text == "false") {
      *out = false;
    } else {
      Expected(f, "true or false", *text);
    }
  }

  enum class Emptiness { kMayBeEmpty, kNotEmpty };
  static constexpr Emptiness kMayBeEmpty = Emptiness::kMayBeEmpty;
  static constexpr Emptiness kNotEmpty = Emptiness::kNotEmpty;

  bool ReadString(const Field& f, Emptiness emptiness, std::string* out) {
    const auto text = PlainScalar(f, "a string");
    if (!text) return false;
    if (text->empty() && emptiness == kNotEmpty) {
      Problem(f.mark, f.path, "must not be empty");
      return false;
    }
    *out = *text;
    return true;
  }

  void ReadHost(const Field& f, std::string* out) {
    constexpr std::string_view kExpected = "a host name or IP address";
    const auto text = PlainScalar(f, kExpected);
    if (!text) return;
    if (!IsValidHostName(*text)) return Expected(f, kExpected, *text);
    *out = *text;
  }

  void ReadDatabaseName(const Field& f, std::string* out) {
    constexpr std::string_view kExpected = "a name matching [A-Za-z0-9_]{1,64}";
    const auto text = PlainScalar(f, kExpected);
    if (!text) return;
    if (!IsDatabaseName(*text)) return Expected(f, kExpected, *text);
    *out = *text;
  }

  void ReadTimeout(const Field& f, std::chrono::milliseconds* out) override {
    ReadDuration(f, kMinTimeout, kMaxTimeout, out);
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
  // number followed by a unit that `Duration` can hold.
  template <typename Duration>
  std::optional<DurationText> ParseDurationText(const Field& f) {
    constexpr bool kMicros = std::is_same_v<Duration, std::chrono::microseconds>;
    static_assert(kMicros || std::is_same_v<Duration, std::chrono::milliseconds>);
    const std::string_view expected =
        kMicros ? "a duration such as 100us, 2ms or 1s" : "a duration such as 500ms, 2s, 1m or 24h";
    const auto text = PlainScalar(f, expected);
    if (!text) return std::nullopt;
    const std::string_view s = *text;
    const size_t digits = s.find_first_not_of("0123456789");
    if (digits == 0 || digits == std::string_view::npos) {
      Expected(f, expected, s);
      return std::nullopt;
    }
    const std::string_view unit = s.substr(digits);
    uint64_t scale = 0;
    if (unit == "us" && kMicros) {
      scale = 1;
    } else if (unit == "ms") {
      scale = 1000;
    } else if (unit == "s") {
      scale = 1000000;
    } else if (unit == "m") {
      scale = 60000000;
    } else if (unit == "h") {
      scale = 3600000000;
    } else {
      Expected(f, expected, s);
      return std::nullopt;
    }
    return DurationText{std::string(s), ParseDecimal(s.substr(0, digits)), scale};
  }

  // "500ms", "2s", "1m", "24h"; "100us" where `Duration` is finer than a millisecond.
  template <typename Duration>
  void ReadDuration(const Field& f, std::type_identity_t<Duration> min, std::type_identity_t<Duration> max,
                    Duration* out) {
    const auto min_us = static_cast<uint64_t>(std::chrono::microseconds(min).count());
    const auto max_us = static_cast<uint64_t>(std::chrono::microseconds(max).count());
    const std::optional<DurationText> d = ParseDurationText<Duration>(f);
    if (!d) return;
    const std::optional<uint64_t> us = d->Micros(max_us);
    if (!us || *us < min_us) {
      return Expected(f, "between " + FormatDuration(min) + " and " + FormatDuration(max), d->text);
    }
    *out = std::chrono::duration_cast<Duration>(std::chrono::microseconds(static_cast<int64_t>(*us)));
  }

  // A byte count, or a number with a binary unit: "1048576", "512KiB", "1MiB".
  void ReadByteSize(const Field& f, uint64_t min, uint64_t max, uint64_t* out) {
    const std::string expected = "a size between " + std::to_string(min) + " and " +
                                 std::to_string(max) +
                                 " bytes (a byte count, or a number with KiB, MiB or GiB)";
    const auto text = PlainScalar(f, expected);
    if (!text) return;
    const std::string_view s = *text;
    const size_t digits = std::min(s.find_first_not_of("0123456789"), s.size());
    const std::string_view unit = s.substr(digits);
    uint64_t scale = 0;
    if (unit.empty() || unit == "B") {
      scale = 1;
    } else if (unit == "KiB") {
      scale = uint64_t{1} << 10;
    } else if (unit == "MiB") {
      scale = uint64_t{1} << 20;
    } else if (unit == "GiB") {
      scale = uint64_t{1} << 30;
    } else {
      return Expected(f, expected, s);
    }
    const auto n = ParseDecimal(s.substr(0, digits));
    if (!n || *n > max / scale || *n * scale < min) return Expected(f, expected, s);
    *out = *n * scale;
  }

  // "host:port" or "[ipv6]:port"; port 0 asks the OS for a free port.
  void ReadListen(const Field& f, std::string* host, uint16_t* port) {
    constexpr std::string_view kExpected = "host:port with a port between 0 and 65535";
    const auto text = PlainScalar(f, kExpected);
    if (!text) return;
    if (!ParseHostPort(*text, host, port)) return Expected(f, kExpected, *text);
  }

  // A listen key given in the file, for the checks after the whole file.
  void ReadListenKey(const Field& f, std::string* host, uint16_t* port) {
    ReadListen(f, host, port);
    listen_keys_.insert_or_assign(f.path, f);
  }

  // The limit keys every HTTP listener section accepts.
  std::vector<KeySpec> LimitKeys(ListenerLimits* l) {
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


  // A secret field: a literal, or a whole-value "${env:NAME}" / "${file:PATH}".
  // No message here may include the value. Returns whether *out was set, and
  // in *from_reference whether it came from a reference.
  bool ReadSecret(const Field& f, std::string* out, bool* from_reference = nullptr) override {
    if (!f.value.IsScalar()) {
      // Describe() quotes only scalars, so this never shows a value.
      Problem(f.mark, f.path, "must be a string, got " + Describe(f.value));
      return false;
    }
    const std::string& text = f.value.Scalar();
    const bool reference =
        text.size() >= 3 && text.compare(0, 2, "${") == 0 && text.back() == '}';
    if (from_reference != nullptr) *from_reference = reference;
    if (!reference) {
      if (HasSecretReference(text)) {
        Problem(f.mark, f.path,
                "a secret reference must be the whole value, "
                "as in \"${env:NAME}\" or \"${file:PATH}\"");
        return false;
      }
      *out = text;
      return true;
    }
    const std::string_view inner = std::string_view(text).substr(2, text.size() - 3);
    if (inner.rfind("env:", 0) == 0) {
      const std::string name(inner.substr(4));
      const bool valid_name =
          !name.empty() && !(name[0] >= '0' && name[0] <= '9') &&
          std::all_of(name.begin(), name.end(), [](char c) {
            return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '_';
          });
      if (!valid_name) {
        Problem(f.mark, f.path,
                "invalid environment variable name " + Quote(name) + " in ${env:NAME}");
        return false;
      }
      const char* value = std::getenv(name.c_str());
      if (value == nullptr) {
        Problem(f.mark, f.path, "environment variable " + name + " is not set");
        return false;
      }
      *out = value;
      RememberReference(f, text);
      return true;
    }
    if (inner.rfind("file:", 0) == 0) {
      const std::string_view file = inner.substr(5);
      if (file.empty()) {
        Problem(f.mark, f.path, "${file:PATH} needs a path");
        return false;
      }
      std::filesystem::path p{std::string(file)};
      if (p.is_relative() && !base_dir_.empty()) p = base_dir_ / p;
      std::string contents;
      if (const int err = ReadWholeFile(p.string(), kMaxSecretFileBytes, &contents); err != 0) {
        Problem(f.mark, f.path, "cannot read secret file " + p.string() + ": " + ErrnoText(err));
        return false;
      }
      if (!contents.empty() && contents.back() == '\n') {
        contents.pop_back();
        if (!contents.empty() && contents.back() == '\r') contents.pop_back();
      }
      *out = std::move(contents);
      RememberReference(f, text);
      return true;
    }
    Problem(f.mark, f.path, "a value of the form ${...} must be ${env:NAME} or ${file:PATH}");
    return false;
  }

  // Redacted() shows a secret given as a reference as it was written.
  void RememberReference(const Field& f, const std::string& reference) {
    if (secret_references_ != nullptr) (*secret_references_)[f.path] = reference;
  }

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
  std::map<std::string, int> sink_name_lines_;  // sink name -> line of its first use
  std::vector<SinkRefs> sink_refs_;
  const SinkTypes* types_;  // the built-in sink types
  std::map<std::string, Field> listen_keys_;  // the listen keys given, by path ("metrics.listen")
  bool plugins_declared_ = false;  // the file has a plugins section
  std::map<std::string, std::string>* secret_references_ = nullptr;  // Config::secret_references
};

// Where the documents of a YAML text start, read with a Parser because
// yaml-cpp 0.7 never reads past a stray ',' (", a: 1"): it keeps handing out
// empty documents at the same place, and YAML::LoadAll collected them until
// memory ran out.
class DocumentStarts : public YAML::EventHandler {
 public:
  // The first node's mark of each document handled so far.
  const std::vector<YAML::Mark>& roots() const { return roots_; }

  void OnDocumentStart(const YAML::Mark&) override { in_root_ = true; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& m, YAML::anchor_t) override { Node(m); }
  void OnAlias(const YAML::Mark& m, YAML::anchor_t) override { Node(m); }
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t, const std::string&) override { Node(m); }
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    Node(m);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    Node(m);
  }
  void OnMapEnd() override {}

 private:
  void Node(const YAML::Mark& m) {
    if (in_root_) roots_.push_back(m);
    in_root_ = false;
  }
  bool in_root_ = false;
  std::vector<YAML::Mark> roots_;
};

// The first document of `text`, and the root mark of every document up to
// the second (enough to refuse a second one). Throws what YAML::Load throws,
// and a ParserException where yaml-cpp stops making progress.
YAML::Node LoadFirstDocument(const std::string& text, std::vector<YAML::Mark>* roots) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts starts;
  while (starts.roots().size() < 2 && parser.HandleNextDocument(starts)) {
  }
  *roots = starts.roots();
  if (roots->size() == 2 && (*roots)[0].pos == (*roots)[1].pos) {
    const YAML::Mark& at = (*roots)[0];
    const std::string_view rest = std::string_view(text).substr(std::min(text.size(), static_cast<size_t>(at.pos)));
    throw YAML::ParserException(at, "unexpected " + Quote(rest.substr(0, 1)));
  }
  return roots->empty() ? YAML::Node() : YAML::Load(text);
}

Result<Config> Load(const std::string& text, const std::string& path, const SinkTypes& types) {
  Problems problems(path);
  std::vector<YAML::Node> docs;
  std::vector<YAML::Mark> roots;
  try {
    docs.push_back(LoadFirstDocument(text, &roots));
  } catch (const YAML::DeepRecursion& e) {
    problems.Add(e.mark, "", "invalid YAML: nested more than " + std::to_string(e.depth()) +
                                 " levels deep");
    return InvalidArgument(problems.Join());
  } catch (const YAML::Exception& e) {
    problems.Add(e.mark, "", "invalid YAML: " + e.msg);
    return InvalidArgument(problems.Join());
  }
  if (roots.size() < 2 && docs[0].IsNull()) {
    YAML::Mark start;  // 1:1
    problems.Add(start, "",
                 "the configuration is empty; it needs at least the storage and entities sections");
    return InvalidArgument(problems.Join());
  }
  if (roots.size() > 1) {
    problems.Add(roots[1], "", "only one YAML document is allowed per file");
  }

  Config config;
  config.path = path;
  config.sink_types = std::make_shared<const SinkTypes>(types);
  ConfigReader reader(&problems, path, std::filesystem::path(path).parent_path(), config.sink_types.get());
  reader.ReadRoot(docs[0], &config);
  if (!problems.empty()) return InvalidArgument(problems.Join());
  return config;
}

// The limit keys of a listener section.
void EmitLimits(YAML::Emitter& out, const ListenerLimits& l) {
  out << YAML::Key << "max_connections" << YAML::Value << static_cast<unsigned>(l.max_connections);
  out << YAML::Key << "header_timeout" << YAML::Value << FormatDuration(l.header_timeout);
  out << YAML::Key << "body_timeout" << YAML::Value << FormatDuration(l.body_timeout);
  out << YAML::Key << "idle_timeout" << YAML::Value << FormatDuration(l.idle_timeout);
  out << YAML::Key << "write_timeout" << YAML::Value << FormatDuration(l.write_timeout);
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

}  // namespace

std::string QuoteValue(std::string_view s) { return Quote(s); }

bool IsIdentifier(std::string_view s) {
  if (s.empty() || s.size() > 64 || (s[0] >= '0' && s[0] <= '9')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

bool IsDatabaseName(std::string_view s) {
  return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
         });
}

const SinkType* SinkTypes::Find(std::string_view name) const {
  for (const SinkType& t : types_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::pair<std::string, uint16_t> MetricsConfig::ListenOf(Process process) const {
  switch (process) {
    case Process::kWriter: return {writer_listen_host, writer_listen_port};
    case Process::kSync: return {sync_listen_host, sync_listen_port};
    case Process::kServe: break;
  }
  return {listen_host, listen_port};
}

Result<std::pair<std::string, uint16_t>> ParseListenAddress(std::string_view text) {
  std::pair<std::string, uint16_t> out;
  if (!ParseHostPort(text, &out.first, &out.second)) {
    return InvalidArgument("must be host:port with a port between 0 and 65535, got " + Quote(text));
  }
  return out;
}

std::string FormatListenAddress(const std::string& host, uint16_t port) {
  return (host.find(':') == std::string::npos ? host : "[" + host + "]") + ":" + std::to_string(port);
}

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
  out << YAML::Key << "mysql" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "host" << YAML::Value << mysql.host;
  out << YAML::Key << "port" << YAML::Value << static_cast<unsigned>(mysql.port);
  if (!mysql.socket.empty()) out << YAML::Key << "socket" << YAML::Value << mysql.socket;
  out << YAML::Key << "user" << YAML::Value << mysql.user;
  // Always shown as *** (or its reference), even when empty, so the output says nothing about it.
  out << YAML::Key << "password" << YAML::Value << YAML::DoubleQuoted
      << secret("storage.mysql.password", mysql.password);
  out << YAML::Key << "database" << YAML::Value << mysql.database;
  out << YAML::Key << "connect_timeout" << YAML::Value << FormatDuration(mysql.connect_timeout);
  out << YAML::Key << "io_timeout" << YAML::Value << FormatDuration(mysql.io_timeout);
  out << YAML::EndMap << YAML::EndMap;

  out << YAML::Key << "entities" << YAML::Value << YAML::BeginMap;
  for (const auto& [name, entity] : entities) {
    out << YAML::Key << name << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "partitions" << YAML::Value << static_cast<unsigned>(entity.partitions);
    if (!entity.handlers.empty()) out << YAML::Key << "handlers" << YAML::Value << entity.handlers;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;

  const std::string host = writer.listen_host.find(':') == std::string::npos
                               ? writer.listen_host
                               : "[" + writer.listen_host + "]";
  out << YAML::Key << "writer" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "listen" << YAML::Value << host + ":" + std::to_string(writer.listen_port);
  out << YAML::Key << "batch_max" << YAML::Value << static_cast<unsigned>(writer.batch_max);
  out << YAML::Key << "max_body_bytes" << YAML::Value
      << static_cast<unsigned long long>(writer.max_body_bytes);
  out << YAML::Key << "max_json_depth" << YAML::Value << static_cast<unsigned>(writer.max_json_depth);
  out << YAML::Key << "io_threads" << YAML::Value << static_cast<unsigned>(writer.io_threads);
  out << YAML::Key << "read_threads" << YAML::Value << static_cast<unsigned>(writer.read_threads);
  out << YAML::Key << "entity_cache_entries" << YAML::Value
      << static_cast<unsigned>(writer.entity_cache_entries);
  out << YAML::Key << "conflict_retries" << YAML::Value
      << static_cast<unsigned>(writer.conflict_retries);
  out << YAML::Key << "allow_weak_durability" << YAML::Value << writer.allow_weak_durability;
  out << YAML::Key << "handler_timeout" << YAML::Value << FormatDuration(writer.handler_timeout);
  out << YAML::Key << "handler_memory" << YAML::Value << static_cast<unsigned long long>(writer.handler_memory);
  out << YAML::Key << "push_thread_slice" << YAML::Value << FormatDuration(writer.push_thread_slice);
  EmitLimits(out, writer.limits);
  out << YAML::EndMap;

  if (admin.enabled) {
    const std::string admin_host = admin.listen_host.find(':') == std::string::npos
                                       ? admin.listen_host
                                       : "[" + admin.listen_host + "]";
    out << YAML::Key << "admin" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "listen" << YAML::Value << admin_host + ":" + std::to_string(admin.listen_port);
    if (!admin.token.empty()) {
      out << YAML::Key << "token" << YAML::Value << YAML::DoubleQuoted << secret("admin.token", admin.token);
    }
    EmitLimits(out, admin.limits);
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
  out << YAML::Key << "anti_entropy" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "enabled" << YAML::Value << engine.anti_entropy.enabled;
  out << YAML::Key << "rate" << YAML::Value << static_cast<unsigned>(engine.anti_entropy.rate);
  out << YAML::Key << "batch" << YAML::Value << static_cast<unsigned>(engine.anti_entropy.batch);
  out << YAML::EndMap;
  out << YAML::EndMap;

  if (metrics.enabled) {
    const std::string metrics_host = metrics.listen_host.find(':') == std::string::npos
                                         ? metrics.listen_host
                                         : "[" + metrics.listen_host + "]";
    out << YAML::Key << "metrics" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "listen" << YAML::Value << metrics_host + ":" + std::to_string(metrics.listen_port);
    out << YAML::Key << "writer_listen" << YAML::Value
        << FormatListenAddress(metrics.writer_listen_host, metrics.writer_listen_port);
    out << YAML::Key << "sync_listen" << YAML::Value
        << FormatListenAddress(metrics.sync_listen_host, metrics.sync_listen_port);
    EmitLimits(out, metrics.limits);
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
    }
    if (!sink.anti_entropy) out << YAML::Key << "anti_entropy" << YAML::Value << false;
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

Result<Config> LoadConfigFromString(const std::string& text, const std::string& path, const SinkTypes& types) {
  // yaml-cpp reports through exceptions; none may leave this module.
  try {
    return Load(text, path, types);
  } catch (const std::exception& e) {
    return Internal(path + ": unexpected error while reading the configuration: " + e.what());
  } catch (...) {
    return Internal(path + ": unexpected error while reading the configuration");
  }
}

Result<Config> LoadConfig(const std::string& path, const SinkTypes& types) {
  try {
    std::string text;
    if (const int err = ReadWholeFile(path, kMaxConfigFileBytes, &text); err != 0) {
      return InvalidArgument(path + ": cannot read: " + ErrnoText(err));
    }
    return LoadConfigFromString(text, path, types);
  } catch (...) {
    return Internal(path + ": unexpected error while reading the configuration");
  }
}

}  // namespace sluice::config
