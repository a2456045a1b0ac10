#include "connectors/redis/key_template.h"

namespace sluice::connectors::redis {

std::optional<std::string> KeyTemplateProblem(std::string_view s,
                                              const std::function<std::string(std::string_view)>& quote) {
  bool has_id = false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '}') return "has a } without a matching {";
    if (s[i] != '{') continue;
    const size_t close = s.find('}', i);
    const std::string_view placeholder =
        s.substr(i, close == std::string_view::npos ? std::string_view::npos : close - i + 1);
    if (placeholder != "{id}" && placeholder != "{type}") {
      return "unknown placeholder " + quote(placeholder) + " (only {id} and {type} are replaced)";
    }
    has_id = has_id || placeholder == "{id}";
    i = close;
  }
  if (!has_id) return "must contain {id}";
  return std::nullopt;
}

Result<KeyTemplate> KeyTemplate::Parse(std::string_view key_template, std::string_view type) {
  const auto quote = [](std::string_view p) { return "'" + std::string(p) + "'"; };
  if (auto problem = KeyTemplateProblem(key_template, quote)) {
    return InvalidArgument("redis key template '" + std::string(key_template) + "' " + *problem);
  }
  constexpr std::string_view kId = "{id}";
  constexpr std::string_view kType = "{type}";
  KeyTemplate t;
  t.literals_.emplace_back();
  for (size_t i = 0; i < key_template.size();) {
    std::string_view rest = key_template.substr(i);
    if (rest.substr(0, kId.size()) == kId) {
      t.literals_.emplace_back();
      i += kId.size();
    } else if (rest.substr(0, kType.size()) == kType) {
      t.literals_.back() += type;
      i += kType.size();
    } else {
      t.literals_.back() += key_template[i];
      ++i;
    }
  }
  for (const auto& l : t.literals_) t.literal_size_ += l.size();
  return t;
}

void KeyTemplate::AppendKey(std::string& out, std::string_view id) const {
  out += literals_[0];
  for (size_t i = 1; i < literals_.size(); ++i) {
    out += id;
    out += literals_[i];
  }
}

std::string KeyTemplate::Key(std::string_view id) const {
  std::string out;
  out.reserve(literal_size_ + id.size() * (literals_.size() - 1));
  AppendKey(out, id);
  return out;
}

std::string KeyTemplate::ScanPattern() const {
  std::string out;
  for (size_t i = 0; i < literals_.size(); ++i) {
    if (i > 0) out += '*';
    for (char c : literals_[i]) {
      if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out += '\\';
      out += c;
    }
  }
  return out;
}

std::optional<std::string_view> KeyTemplate::IdOf(std::string_view key) const {
  const size_t slots = literals_.size() - 1;
  if (key.size() < literal_size_ || (key.size() - literal_size_) % slots != 0) return std::nullopt;
  const size_t id_size = (key.size() - literal_size_) / slots;
  std::string_view id;
  size_t pos = 0;
  for (size_t i = 0; i < literals_.size(); ++i) {
    if (key.substr(pos, literals_[i].size()) != literals_[i]) return std::nullopt;
    pos += literals_[i].size();
    if (i == slots) break;
    std::string_view this_id = key.substr(pos, id_size);
    if (i == 0) {
      id = this_id;
    } else if (this_id != id) {
      return std::nullopt;
    }
    pos += id_size;
  }
  return id;
}

bool KeyTemplate::IsViewKey(std::string_view key) const {
  if (IdOf(key)) return true;
  return key.ends_with(kTombstoneSuffix) && IdOf(key.substr(0, key.size() - kTombstoneSuffix.size()));
}

std::string ShadowKeyPrefix(std::string_view live_prefix) {
  return !live_prefix.empty() && live_prefix.front() == '_' ? "rebuild:" : "__rebuild:";
}

}  // namespace sluice::connectors::redis
