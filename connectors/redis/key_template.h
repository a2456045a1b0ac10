// The redis sink's key template ("{type}:{id}" by default): builds the key of
// an entity, the SCAN pattern that matches every such key, and the entity id
// back from a key. An immutable value; safe to share between threads.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace sluice::connectors::redis {

// Suffix appended to an entity's value key to name its tombstone key.
inline constexpr std::string_view kTombstoneSuffix = ":_tomb";

// The one check of the key template grammar (the config check and Parse()
// both call it): `{id}` at least once, `{type}` allowed, no other `{...}` and
// no unmatched brace. Why `key_template` breaks it, or nullopt; `quote`
// formats a placeholder named in the reason.
std::optional<std::string> KeyTemplateProblem(std::string_view key_template,
                                              const std::function<std::string(std::string_view)>& quote);

class KeyTemplate {
 public:
  // `{type}` is replaced by `type` once here; `{id}` by each entity's id.
  // InvalidArgument when KeyTemplateProblem finds one.
  static Result<KeyTemplate> Parse(std::string_view key_template, std::string_view type);

  // Appends the key of entity `id` to out (no allocation beyond out's growth).
  void AppendKey(std::string& out, std::string_view id) const;
  std::string Key(std::string_view id) const;

  // A SCAN MATCH glob matching every key of this template: `{id}` becomes `*`,
  // glob characters of the literal parts are backslash-escaped.
  std::string ScanPattern() const;

  // The id whose key is `key`, or nullopt when no id yields exactly this key.
  // The result views into `key`.
  std::optional<std::string_view> IdOf(std::string_view key) const;

  // Whether `key` is an entity's value key or its tombstone key.
  bool IsViewKey(std::string_view key) const;

  // The literal text before the first {id} (empty when the template starts with it).
  const std::string& literal_prefix() const { return literals_.front(); }

 private:
  KeyTemplate() = default;
  // The literal text around the n occurrences of {id}: n + 1 parts.
  std::vector<std::string> literals_;
  size_t literal_size_ = 0;
};

// What a rebuild's shadow view puts before every key of the live template
// whose literal prefix is `live_prefix` (non-empty): "__rebuild:", or
// "rebuild:" when the live prefix starts with '_'. Either way its first
// character differs from the live prefix's, so no shadow key matches the live
// template's SCAN pattern and no live key matches the shadow's.
std::string ShadowKeyPrefix(std::string_view live_prefix);

}  // namespace sluice::connectors::redis
