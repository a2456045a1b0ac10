// ConfigReader: sinks. The keys every sink has, each built-in type's keys
// (from its SinkType), the mappings a type reads with (fields, columns) and
// the checks that need the whole file.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config_reader.h"
#include "config/config_text.h"

namespace sluice::config {

void ConfigReader::ReadSinks(const Field& at, std::vector<SinkConfig>* sinks) {
  ForEachItem(at, "a sequence of sinks", [&](const Field& item) {
    if (!item.value.IsMap()) {
      Problem(item.mark, item.path, "must be a mapping, got " + Describe(item.value));
      return;
    }
    SinkConfig sink;
    sink.origin = Origin(item.mark);
    ReadSink(item, sinks->size(), &sink);
    sinks->push_back(std::move(sink));
  });
}

// The scalar value of `key` in `map`, or "" (used to pick a sink's keys
// before its `type` is read and checked in file order).
std::string ConfigReader::PeekScalar(const YAML::Node& map, std::string_view key) {
  for (const auto& kv : map) {
    if (kv.first.IsScalar() && kv.first.Scalar() == key) {
      return kv.second.IsScalar() ? kv.second.Scalar() : "";
    }
  }
  return "";
}

void ConfigReader::ReadSink(const Field& at, size_t index, SinkConfig* sink) {
  constexpr auto kRequired = Presence::kRequired;
  constexpr auto kOptional = Presence::kOptional;
  const std::string type = PeekScalar(at.value, "type");
  SinkRefs refs;
  refs.sink = index;
  std::optional<Field> push_key, push_options_key, routes_key;

  std::vector<KeySpec> keys = {
      {"name", kRequired, [&](const Field& f) { ReadSinkName(f, sink); }},
      {"type", kRequired, [&](const Field& f) { ReadSinkType(f, &sink->type); }},
      {"entity", kRequired,
       [&](const Field& f) {
         if (ReadString(f, kNotEmpty, &sink->entity)) refs.entity = f;
       }},
      {"on_error", kOptional,
       [&](const Field& f) {
         ReadChoice(f, "dead_letter or stop", {{"dead_letter", OnError::kDeadLetter}, {"stop", OnError::kStop}},
                    &sink->on_error);
       }},
      {"batch_max", kOptional, [&](const Field& f) { ReadUint(f, 1, 100000, &sink->batch_max); }},
      {"push", kOptional,
       [&](const Field& f) {
         push_key = f;
         ReadBool(f, &sink->push.enabled);
       }},
      {"push_mode", kOptional,
       [&](const Field& f) {
         push_options_key = f;
         ReadChoice(f, "sync or async", {{"sync", PushConfig::Mode::kSync}, {"async", PushConfig::Mode::kAsync}},
                    &sink->push.mode);
       }},
      {"push_timeout", kOptional,
       [&](const Field& f) {
         push_options_key = f;
         ReadDuration(f, std::chrono::milliseconds(1), std::chrono::milliseconds(10000), &sink->push.timeout);
       }},
      {"push_threads", kOptional,
       [&](const Field& f) {
         push_options_key = f;
         ReadUint(f, 1, 64, &sink->push.threads);
       }},
      {"anti_entropy", kOptional, [&](const Field& f) { ReadBool(f, &sink->anti_entropy); }},
      {"code", kOptional, [&](const Field& f) { ReadViewCodeFile(f, sink); }},
      {"routes", kOptional,
       [&](const Field& f) {
         routes_key = f;
         ReadRoutes(f, sink);
       }},
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
  if (routes_key) CheckRoutes(*routes_key, *sink);
  refs.own = std::move(own);
  sink_refs_.push_back(std::move(refs));
}

// Kafka's legal topic characters, which every index name also takes.
void ConfigReader::ReadRoutes(const Field& at, SinkConfig* sink) {
  ForEachItem(at, "a sequence of topic or index names", [&](const Field& item) {
    std::string name;
    if (!ReadString(item, kNotEmpty, &name)) return;
    const bool legal = name.size() <= 249 && name != "." && name != ".." &&
                       std::all_of(name.begin(), name.end(), [](char c) {
                         return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
                       });
    if (!legal) {
      Problem(item, "'" + name + "' is not a destination name: use letters, digits, '.', '_' and '-' (at most 249)");
      return;
    }
    if (std::find(sink->routes.begin(), sink->routes.end(), name) != sink->routes.end()) {
      Problem(item, "'" + name + "' is listed twice");
      return;
    }
    sink->routes.push_back(std::move(name));
  });
}

// Routes need code that picks among them, and a type with destinations.
void ConfigReader::CheckRoutes(const Field& at, const SinkConfig& sink) {
  const SinkType* spec = types_->Find(sink.type);
  if (spec == nullptr || spec->routes_to.empty()) {
    std::string takers;
    for (const SinkType& t : types_->all()) {
      if (!t.routes_to.empty()) takers += std::string(takers.empty() ? "" : ", ") + std::string(t.name);
    }
    Problem(at, "a " + sink.type + " sink has no destinations to route to; routes apply to " + takers);
    return;
  }
  if (sink.code.empty()) {
    Problem(at, "routes need `code:` whose route(event) picks one of them for each event");
  }
  if (spec->routes_to == "index") {
    // Elasticsearch and OpenSearch refuse other index names at the first write.
    for (const std::string& name : sink.routes) {
      const bool lower = std::none_of(name.begin(), name.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
      if (!lower || name[0] == '_' || name[0] == '-' || name[0] == '+') {
        Problem(at, "'" + name + "' is not an index name: use lower case, not starting with '_', '-' or '+'");
      }
    }
  }
}

// Appends the keys of sinks of type `owner`: as they are for such a sink,
// as errors for a sink of another known type, and unchecked when the
// sink's own type is unknown (that is reported once, at `type`).
void ConfigReader::AddSinkTypeKeys(std::string_view owner, const std::string& type, std::vector<KeySpec>* keys,
                                   std::vector<KeySpec> owned) {
  const bool known_type = types_->Find(type) != nullptr;
  for (KeySpec& k : owned) {
    // A key that several types have (url, auto_create) is listed once: as
    // the sink's own type's when it has it, else as the first type's.
    const auto same = std::find_if(keys->begin(), keys->end(), [&](const KeySpec& e) { return e.name == k.name; });
    if (same != keys->end()) {
      if (type == owner) *same = std::move(k);
      continue;
    }
    if (type == owner) {
      keys->push_back(std::move(k));
    } else if (known_type) {
      keys->push_back({k.name, Presence::kMisplaced, [this, owner, type](const Field& f) {
                         Problem(f.key.Mark(), f.path,
                                 "only for " + std::string(owner) + " sinks (this sink is type " + type + ")");
                       }});
    } else if (!IsPluginSinkType(type)) {
      keys->push_back({k.name, Presence::kOptional, [](const Field&) {}});
    }  // else a plugin type: the key is one of its options
  }
}

namespace {
// [a-z][a-z0-9_-]{0,63}
bool IsSinkName(std::string_view s) {
  return !s.empty() && s.size() <= 64 && s[0] >= 'a' && s[0] <= 'z' && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
         });
}
}  // namespace

void ConfigReader::ReadSinkName(const Field& f, SinkConfig* sink) {
  if (!ReadMatching(f, "a name matching [a-z][a-z0-9_-]{0,63}", IsSinkName, &sink->name)) return;
  const auto [it, inserted] = sink_name_lines_.emplace(sink->name, f.mark.line + 1);
  if (!inserted) {
    Problem(f.mark, f.path,
            "duplicate sink name " + QuoteValue(sink->name) + " (first given on line " + std::to_string(it->second) +
                ")");
  }
}

void ConfigReader::ReadSinkType(const Field& f, std::string* out) {
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
            "unknown sink type " + QuoteValue(*text) + " (expected one of: " + JoinNames(names) +
                "; or a type of a library listed under plugins:)");
    return;
  }
  *out = *text;
}

// push: true only where a committed batch can be applied right away as a
// point view (one key or row per entity); push_mode, push_timeout and
// push_threads only with it.
void ConfigReader::CheckPush(const std::string& type, const PushConfig& push, const std::optional<Field>& push_key,
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

// fields (Redis hash) or columns (MySQL): name -> JSON pointer, and for
// MySQL also name -> {pointer, type}. In file order.
void ConfigReader::ReadMappings(const Field& at, MappingKind kind, std::vector<FieldMapping>* out) {
  const bool mysql = kind == MappingKind::kMysqlColumn;
  const std::string what = mysql ? "column" : "field";
  if (!at.value.IsMap() || at.value.size() == 0) {
    const std::string shape = "a mapping from " + what + " name to JSON pointer" +
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
      Problem(key_mark, f.path, what + " names starting with _ are reserved for sluice (_version, _deleted)");
      ok = false;
    } else if (mysql && ToLower(name) == "id") {
      Problem(key_mark, f.path, "the column name id is reserved for the primary key (the entity id)");
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
          {"pointer", Presence::kRequired, [&](const Field& p) { ReadJsonPointer(p, &mapping.pointer); }},
          {"type", Presence::kOptional, [&](const Field& t) { ReadColumnType(t, &mapping.sql_type); }},
      });
    } else if (f.value.IsScalar()) {
      ReadJsonPointer(f, &mapping.pointer);
    } else {
      Problem(f.mark, f.path,
              std::string("must be a JSON pointer such as /owner/name") +
                  (mysql ? " or a mapping {pointer: ..., type: ...}" : "") + ", got " + Describe(f.value));
    }
    if (ok) out->push_back(std::move(mapping));
  });
}

// RFC 6901: empty (the whole state) or "/"-separated tokens in which "~"
// appears only as "~0" (a "~") or "~1" (a "/").
void ConfigReader::ReadJsonPointer(const Field& f, std::string* out) {
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
void ConfigReader::ReadColumnType(const Field& f, std::string* out) {
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
void ConfigReader::CheckSinkReferences(const Config& config) {
  for (const SinkRefs& refs : sink_refs_) {
    const SinkConfig& sink = config.sinks[refs.sink];
    // Without a usable entities section that is the problem to report, not every sink.
    if (refs.entity && entity_names_ && !entity_names_->empty() &&
        std::find(entity_names_->begin(), entity_names_->end(), sink.entity) == entity_names_->end()) {
      std::vector<std::string_view> names(entity_names_->begin(), entity_names_->end());
      const std::string_view best = ClosestName(sink.entity, names);
      Problem(refs.entity->mark, refs.entity->path,
              "unknown entity type " + QuoteValue(sink.entity) +
                  (best.empty() ? " (expected one of: " + JoinNames(names) + ")"
                                : " (did you mean " + QuoteValue(best) + "?)"));
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

}  // namespace sluice::config
