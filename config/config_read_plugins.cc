// ConfigReader: plugins. The list of plugin libraries, and the options of a
// sink whose type a plugin provides, turned into JSON for the plugin.
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config_reader.h"
#include "config/config_text.h"
#include "config/redact.h"
#include "core/json.h"

namespace sluice::config {

// plugins: a sequence of shared-library paths, relative to the file's directory.
void ConfigReader::ReadPlugins(const Field& at, std::vector<PluginConfig>* plugins) {
  std::map<std::string, int> seen_at_line;
  ForEachItem(at, "a sequence of plugin library paths (.so files)", [&](const Field& f) {
    const auto text = PlainScalar(f, "the path of a plugin library (.so file)");
    if (!text) return;
    if (text->empty()) {
      Problem(f.mark, f.path, "must be the path of a plugin library (.so file), got \"\"");
      return;
    }
    const std::filesystem::path path = ResolvePath(*text).lexically_normal();
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (ec || !std::filesystem::exists(status)) {
      Problem(f.mark, f.path,
              "plugin library " + path.string() + " not found" +
                  (ec && ec != std::errc::no_such_file_or_directory ? ": " + ec.message() : ""));
      return;
    }
    if (!std::filesystem::is_regular_file(status)) {
      Problem(f.mark, f.path, "plugin library " + path.string() + " is not a regular file");
      return;
    }
    const auto [it, inserted] = seen_at_line.emplace(path.string(), f.mark.line + 1);
    if (!inserted) {
      Problem(f.mark, f.path,
              "plugin library " + path.string() + " is already listed on line " + std::to_string(it->second));
      return;
    }
    plugins->push_back(PluginConfig{path.string(), Origin(f.mark)});
  });
}

// One key of a plugin sink, for the plugin to check. `url` is secret-capable
// like every sink's url, and so is an option whose name looks secret
// (api_token, password); no other option may hold a secret reference. A
// secret given inline keeps its YAML type (a token_ttl of 30 stays a number).
void ConfigReader::ReadPluginOption(const Field& f, PluginOptions* options) {
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
bool ConfigReader::IsJsonText(const nlohmann::json& v) {
  try {
    (void)v.dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

// A YAML value as JSON: plain scalars that read as null, true/false or a
// number become those; quoted scalars and everything else stay strings.
std::optional<nlohmann::json> ConfigReader::YamlToJson(const Field& f, JsonBudget* budget, size_t depth) {
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
      auto one = YamlToJson(Field{YAML::Node(), item, f.path + "[" + std::to_string(i++) + "]", item.Mark()},
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

}  // namespace sluice::config
