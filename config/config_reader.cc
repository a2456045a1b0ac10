// ConfigReader: the walk over the document and the scalar values.
#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config_reader.h"
#include "config/config_text.h"
#include "core/names.h"

namespace sluice::config {

namespace {
constexpr std::chrono::milliseconds kMinTimeout{1};
constexpr std::chrono::milliseconds kMaxTimeout{60 * 60 * 1000};
// Every field whose value may be a ${env:...} / ${file:...} reference.
constexpr std::string_view kSecretFields =
    "storage.mysql.password, storage.servers.*.password, admin.token, sinks[*].url, sinks[*].password, "
    "sinks[*].api_key, sinks[*].properties.*, secret-named plugin options, archive.s3.access_key, archive.s3.secret_key";
}  // namespace

const std::string& FieldPath(const Field& f) { return f.path; }
const std::string& FieldKey(const Field& f) { return f.key.Scalar(); }
int FieldLine(const Field& f) { return f.mark.line + 1; }

Field MakeField(const YAML::Node& key, const YAML::Node& value, std::string path) {
  const YAML::Mark mark = value.IsNull() ? key.Mark() : value.Mark();
  return Field{key, value, std::move(path), mark};
}

std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a sequence";
    case YAML::NodeType::Scalar: return QuoteValue(node.Scalar());
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: break;
  }
  return "an empty value";
}

void Problems::Add(const YAML::Mark& mark, std::string_view path, std::string_view what) {
  std::string text;
  // Keys may hold control characters; keep each problem on one line.
  for (unsigned char c : std::string(path) + (path.empty() ? "" : ": ") + std::string(what)) {
    AppendPrintable(c, &text);
  }
  problems_.push_back({mark.is_null() ? -1 : mark.line, mark.is_null() ? -1 : mark.column, std::move(text)});
}

std::string Problems::Join() {
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

// ---- the walk ----

void ConfigReader::ReadRoot(const YAML::Node& doc, Config* config) {
  secret_references_ = &config->secret_references;
  if (!doc.IsMap()) {
    Problem(doc.Mark(), "",
            "the configuration must be a mapping with storage and entities sections, got " + Describe(doc));
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
      {"archive", kOptional, [&](const Field& f) { ReadArchive(f, &config->archive); }},
  });
  if (!config->archive.enabled) {
    for (const Field& policy : archive_policies_) {
      KeyProblem(policy, "an entity type's archive policy needs the top-level archive section (where segments go)");
    }
  }
  // Sinks refer to other sections, which may come later in the file.
  CheckSinkReferences(*config);
  CheckServerReferences();
  CheckListenAddresses(*config);
}

// An empty value counts as an empty mapping.
void ConfigReader::ForEachEntry(const Field& at, const std::function<void(const Field&)>& each) {
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

void ConfigReader::ForEachItem(const Field& at, std::string_view expected,
                               const std::function<void(const Field&)>& each) {
  if (at.value.IsNull()) return;
  if (!at.value.IsSequence()) {
    Problem(at.mark, at.path, "must be " + std::string(expected) + ", got " + Describe(at.value));
    return;
  }
  size_t index = 0;
  for (const YAML::Node& item : at.value) {
    const YAML::Mark mark = item.Mark().is_null() ? at.mark : item.Mark();
    each(Field{YAML::Node(), item, at.path + "[" + std::to_string(index++) + "]", mark});
  }
}

void ConfigReader::ExpectKeys(const Field& at, const std::vector<KeySpec>& keys) {
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

std::string ConfigReader::UnknownKeyText(std::string_view name, const std::vector<KeySpec>& keys) {
  std::vector<std::string_view> accepted;
  for (const KeySpec& k : keys) {
    if (k.presence != Presence::kMisplaced && k.name != kAnyOtherKey) accepted.push_back(k.name);
  }
  const std::string_view best = ClosestName(name, accepted);
  if (!best.empty()) return "unknown key (did you mean " + QuoteValue(best) + "?)";
  return "unknown key (expected one of: " + JoinNames(accepted) + ")";
}

std::string ConfigReader::Origin(const YAML::Mark& mark) const {
  return file_ + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

// ---- scalar values ----

std::optional<std::string> ConfigReader::PlainScalar(const Field& f, std::string_view expected) {
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

void ConfigReader::Expected(const Field& f, std::string_view expected, std::string_view got) {
  Problem(f.mark, f.path, "must be " + std::string(expected) + ", got " + QuoteValue(got));
}

void ConfigReader::ReadUint(const Field& f, uint64_t min, uint64_t max, uint64_t* out) {
  const std::string expected = "an integer between " + std::to_string(min) + " and " + std::to_string(max);
  const auto text = PlainScalar(f, expected);
  if (!text) return;
  const auto v = ParseDecimal(*text);
  if (!v || *v < min || *v > max) return Expected(f, expected, *text);
  *out = *v;
}

void ConfigReader::ReadBool(const Field& f, bool* out) {
  ReadChoice(f, "true or false", {{"true", true}, {"false", false}}, out);
}

bool ConfigReader::ReadString(const Field& f, Emptiness emptiness, std::string* out) {
  const auto text = PlainScalar(f, "a string");
  if (!text) return false;
  if (text->empty() && emptiness == kNotEmpty) {
    Problem(f.mark, f.path, "must not be empty");
    return false;
  }
  *out = *text;
  return true;
}

bool ConfigReader::ReadMatching(const Field& f, std::string_view expected, bool (*valid)(std::string_view),
                                std::string* out) {
  const auto text = PlainScalar(f, expected);
  if (!text) return false;
  if (!valid(*text)) {
    Expected(f, expected, *text);
    return false;
  }
  *out = *text;
  return true;
}

void ConfigReader::ReadHost(const Field& f, std::string* out) {
  ReadMatching(f, "a host name or IP address", IsValidHostName, out);
}

void ConfigReader::ReadDatabaseName(const Field& f, std::string* out) {
  ReadMatching(f, "a name matching [A-Za-z0-9_]{1,64}", IsDatabaseName, out);
}

void ConfigReader::ReadTimeout(const Field& f, std::chrono::milliseconds* out) {
  ReadDuration(f, kMinTimeout, kMaxTimeout, out);
}

std::optional<ConfigReader::DurationText> ConfigReader::ParseDurationText(const Field& f, bool fine) {
  const std::string_view expected =
      fine ? "a duration such as 100us, 2ms or 1s" : "a duration such as 500ms, 2s, 1m or 24h";
  const auto text = PlainScalar(f, expected);
  if (!text) return std::nullopt;
  const std::optional<NumberWithUnit> n =
      fine ? SplitNumberUnit(*text, kFineDurationUnits) : SplitNumberUnit(*text, kDurationUnits);
  if (!n) {
    Expected(f, expected, *text);
    return std::nullopt;
  }
  return DurationText{*text, n->count, n->scale};
}

// "500ms", "2s", "1m", "24h".
void ConfigReader::ReadDuration(const Field& f, std::chrono::milliseconds min, std::chrono::milliseconds max,
                                std::chrono::milliseconds* out) {
  const auto min_us = static_cast<uint64_t>(std::chrono::microseconds(min).count());
  const auto max_us = static_cast<uint64_t>(std::chrono::microseconds(max).count());
  const std::optional<DurationText> d = ParseDurationText(f, /*fine=*/false);
  if (!d) return;
  const std::optional<uint64_t> us = d->Micros(max_us);
  if (!us || *us < min_us) {
    return Expected(f, "between " + FormatDuration(min) + " and " + FormatDuration(max), d->text);
  }
  *out = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::microseconds(static_cast<int64_t>(*us)));
}

void ConfigReader::ReadByteSize(const Field& f, uint64_t min, uint64_t max, uint64_t* out) {
  const std::string expected = "a size between " + std::to_string(min) + " and " + std::to_string(max) +
                               " bytes (a byte count, or a number with KiB, MiB or GiB)";
  const auto text = PlainScalar(f, expected);
  if (!text) return;
  const std::optional<NumberWithUnit> n = SplitNumberUnit(*text, kByteUnits);
  if (!n || !n->count || *n->count > max / n->scale || *n->count * n->scale < min) {
    return Expected(f, expected, *text);
  }
  *out = *n->count * n->scale;
}

void ConfigReader::ReadListen(const Field& f, std::string* host, uint16_t* port) {
  const auto text = PlainScalar(f, kListenAddressExpected);
  if (!text) return;
  if (!ParseHostPort(*text, host, port)) return Expected(f, kListenAddressExpected, *text);
}

void ConfigReader::ReadListenKey(const Field& f, std::string* host, uint16_t* port) {
  ReadListen(f, host, port);
  listen_keys_.insert_or_assign(f.path, f);
}

}  // namespace sluice::config
