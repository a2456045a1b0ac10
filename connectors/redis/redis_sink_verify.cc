// Verify (the whole view against storage, then the keys storage does not
// know), VerifyEntities (value and tombstone of given entities) and
// ScanViewIds (the ids of the view's value keys).
#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "connectors/redis/key_template.h"
#include "connectors/redis/redis_sink_impl.h"
#include "connectors/redis/view_value.h"
#include "core/json.h"

namespace sluice::connectors::redis {

Status RedisSink::Verify(const std::vector<EntitySnapshot>& truth, std::vector<Difference>& differences) {
  SigpipeGuard guard;
  try {
    return VerifyAll(truth, differences);
  } catch (const std::exception& e) {
    DropConnections();
    return Internal(where_ + ": verify: " + e.what());
  }
}

Status RedisSink::VerifyEntities(std::span<const EntitySnapshot> truth, std::vector<Difference>& differences) {
  SigpipeGuard guard;
  try {
    return CheckEntities(truth, differences);
  } catch (const std::exception& e) {
    DropConnections();
    return Internal(where_ + ": verify: " + e.what());
  }
}

Status RedisSink::ScanViewIds(size_t page, const std::function<Status(std::span<const std::string> ids)>& each) {
  SigpipeGuard guard;
  page = std::max<size_t>(1, page);
  std::vector<std::string> ids;
  const auto give = [&](size_t keep) -> Status {
    while (ids.size() > keep) {
      const size_t n = std::min(page, ids.size());
      RETURN_IF_ERROR(each(std::span<const std::string>(ids).first(n)));
      ids.erase(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n));
    }
    return Status::Ok();
  };
  try {
    RETURN_IF_ERROR(ScanKeys(keys_.ScanPattern(), [&](const std::vector<std::string>& keys) -> Status {
      for (const std::string& key : keys) {
        if (key.ends_with(kTombstoneSuffix)) continue;
        if (std::optional<std::string_view> id = keys_.IdOf(key)) ids.emplace_back(*id);
      }
      return give(page - 1);
    }));
    return give(0);
  } catch (const std::exception& e) {
    DropConnections();
    return Internal(where_ + ": scanning the view: " + e.what());
  }
}

Status RedisSink::VerifyAll(const std::vector<EntitySnapshot>& truth, std::vector<Difference>& differences) {
  routed_.clear();
  std::vector<std::string> keys;
  for (size_t begin = 0; begin < truth.size(); begin += kVerifyChunk) {
    const size_t end = std::min(truth.size(), begin + kVerifyChunk);
    keys.clear();
    for (size_t i = begin; i < end; ++i) {
      const EntitySnapshot& s = truth[i];
      keys.push_back(keys_.Key(s.entity_id));
      const char* cmd = s.deleted ? "EXISTS" : hash_ ? "HGETALL" : "GET";
      const char* argv[] = {cmd, keys.back().data()};
      size_t lens[] = {std::char_traits<char>::length(cmd), keys.back().size()};
      RETURN_IF_ERROR(Route(keys.back(), 2, argv, lens));
    }
    for (size_t i = begin; i < end; ++i) {
      ASSIGN_OR_RETURN(ReplyPtr reply, NextRouted());
      const std::string& key = keys[i - begin];
      if (reply->type == REDIS_REPLY_ERROR) {
        std::string_view err = ReplyText(*reply);
        if (Classify(err) != ErrorClass::kEvent) return ServerError("verify", err);
        differences.push_back({Difference::Kind::kContentMismatch, truth[i].entity_id,
                               "reading key '" + key + "' failed: " + std::string(err)});
        continue;
      }
      CompareOne(truth[i], key, *reply, differences);
    }
  }
  return FindExtraKeys(truth, differences);
}

// VerifyEntities: per entity, its value and its tombstone in one pipeline
// (2 commands per entity, one round trip per kVerifyChunk entities).
Status RedisSink::CheckEntities(std::span<const EntitySnapshot> truth, std::vector<Difference>& differences) {
  routed_.clear();
  std::vector<std::string> keys;
  for (size_t begin = 0; begin < truth.size(); begin += kVerifyChunk) {
    const size_t end = std::min(truth.size(), begin + kVerifyChunk);
    keys.clear();
    for (size_t i = begin; i < end; ++i) {
      keys.push_back(keys_.Key(truth[i].entity_id));
      const std::string tomb = TombstoneKey(keys.back());
      const char* cmd = hash_ ? "HGETALL" : "GET";
      const char* argv[] = {cmd, keys.back().data()};
      size_t lens[] = {std::char_traits<char>::length(cmd), keys.back().size()};
      RETURN_IF_ERROR(Route(keys.back(), 2, argv, lens));
      const char* targv[] = {"GET", tomb.data()};
      size_t tlens[] = {3, tomb.size()};
      RETURN_IF_ERROR(Route(tomb, 2, targv, tlens));
    }
    for (size_t i = begin; i < end; ++i) {
      ReplyPtr replies[2];
      for (ReplyPtr& r : replies) {
        Result<ReplyPtr> read = NextRouted();
        if (!read.ok()) return read.status();
        r = std::move(read).value();
      }
      const EntitySnapshot& s = truth[i];
      const std::string& key = keys[i - begin];
      const redisReply& value = *replies[0];
      const redisReply& tomb = *replies[1];
      if (value.type == REDIS_REPLY_ERROR || tomb.type == REDIS_REPLY_ERROR) {
        std::string_view err = ReplyText(value.type == REDIS_REPLY_ERROR ? value : tomb);
        if (Classify(err) != ErrorClass::kEvent) return ServerError("verify", err);
        // A key of another Redis type (WRONGTYPE) exists: for an entity
        // that is deleted or has no events, that is a key too many.
        differences.push_back({s.deleted && value.type == REDIS_REPLY_ERROR ? Difference::Kind::kExtra
                                                                            : Difference::Kind::kContentMismatch,
                               s.entity_id, "reading key '" + key + "' failed: " + std::string(err)});
        continue;
      }
      const bool absent = value.type == REDIS_REPLY_NIL || (value.type == REDIS_REPLY_ARRAY && value.elements == 0);
      if (s.deleted) {
        if (!absent) {
          differences.push_back({Difference::Kind::kExtra, s.entity_id,
                                 s.version == 0 ? "the view has key '" + key + "' of an entity storage has no events for"
                                                : "storage deleted the entity at version " +
                                                      std::to_string(s.version) + " but the view still has key '" +
                                                      key + "'",
                                 ValueVersion(value)});
        }
        continue;
      }
      if (absent) {
        // With a ttl the key may have expired, as it is meant to.
        if (values_expire()) continue;
        std::optional<uint64_t> tomb_version;
        if (tomb.type == REDIS_REPLY_STRING) tomb_version = ParseVersion(ReplyText(tomb));
        differences.push_back({Difference::Kind::kMissing, s.entity_id,
                               "the view has no key '" + key + "'" +
                                   (tomb_version ? " (its tombstone has version " + std::to_string(*tomb_version) + ")"
                                                 : std::string()) +
                                   "; storage has version " + std::to_string(s.version),
                               tomb_version});
        continue;
      }
      if (hash_) {
        CompareHash(s, key, value, differences);
      } else {
        CompareJson(s, key, value, differences);
      }
    }
  }
  return Status::Ok();
}

std::optional<uint64_t> RedisSink::ParseVersion(std::string_view text) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

// The version a value key holds (json: its leading "_version" member, hash:
// its _version field), or nullopt.
std::optional<uint64_t> RedisSink::ValueVersion(const redisReply& value) const {
  if (value.type == REDIS_REPLY_STRING) {
    constexpr std::string_view kPrefix = "{\"_version\":";
    std::string_view text = ReplyText(value);
    if (!text.starts_with(kPrefix)) return std::nullopt;
    text.remove_prefix(kPrefix.size());
    return ParseVersion(text.substr(0, text.find_first_not_of("0123456789")));
  }
  if (value.type == REDIS_REPLY_ARRAY) {
    for (size_t k = 0; k + 1 < value.elements; k += 2) {
      if (ReplyText(*value.element[k]) == kVersionMember) return ParseVersion(ReplyText(*value.element[k + 1]));
    }
  }
  return std::nullopt;
}

void RedisSink::CompareOne(const EntitySnapshot& s, const std::string& key, const redisReply& reply,
                           std::vector<Difference>& differences) {
  if (s.deleted) {
    if (reply.type == REDIS_REPLY_INTEGER && reply.integer != 0) {
      differences.push_back({Difference::Kind::kExtra, s.entity_id,
                             "storage deleted the entity at version " + std::to_string(s.version) +
                                 " but the view still has key '" + key + "'"});
    }
    return;
  }
  const bool absent = reply.type == REDIS_REPLY_NIL || (reply.type == REDIS_REPLY_ARRAY && reply.elements == 0);
  if (absent) {
    differences.push_back({Difference::Kind::kMissing, s.entity_id,
                           "the view has no key '" + key + "'; storage has version " + std::to_string(s.version)});
    return;
  }
  if (hash_) {
    CompareHash(s, key, reply, differences);
  } else {
    CompareJson(s, key, reply, differences);
  }
}

std::string RedisSink::VersionDetail(std::string_view view, uint64_t storage) {
  return "the view has version " + std::string(view) + ", storage has " + std::to_string(storage);
}

void RedisSink::CompareJson(const EntitySnapshot& s, const std::string& key, const redisReply& reply,
                            std::vector<Difference>& differences) {
  if (reply.type != REDIS_REPLY_STRING) {
    differences.push_back({Difference::Kind::kContentMismatch, s.entity_id, "key '" + key + "' is not a string"});
    return;
  }
  // The bytes Apply() writes for this state and version: nothing to parse
  // (a state with a "_version" member, which Apply() refuses, is compared
  // below).
  std::string& written = compare_buffer_;
  written.clear();
  if (s.state.find(kVersionMember) == std::string::npos && AppendVersionedJson(written, s.state, s.version) &&
      std::string_view(reply.str, reply.len) == written) {
    return;
  }
  Json view = ParseJsonOrDiscarded(std::string_view(reply.str, reply.len));
  if (view.is_discarded() || !view.is_object()) {
    differences.push_back(
        {Difference::Kind::kContentMismatch, s.entity_id, "key '" + key + "' does not hold a JSON object"});
    return;
  }
  auto version = view.find(kVersionMember);
  if (version == view.end() || !version->is_number_unsigned()) {
    differences.push_back({Difference::Kind::kVersionMismatch, s.entity_id,
                           VersionDetail(version == view.end() ? "none" : version->dump(), s.version)});
    return;
  }
  if (version->get<uint64_t>() != s.version) {
    differences.push_back({Difference::Kind::kVersionMismatch, s.entity_id,
                           VersionDetail(std::to_string(version->get<uint64_t>()), s.version),
                           version->get<uint64_t>()});
    return;
  }
  view.erase(std::string(kVersionMember));
  Result<Json> expected = ParseJson(s.state);
  if (!expected.ok()) {
    differences.push_back({Difference::Kind::kContentMismatch, s.entity_id,
                           "storage's state is not valid JSON: " + expected.status().message(), s.version});
    return;
  }
  if (view != *expected) {
    Json patch = Json::diff(view, *expected);
    std::string where = patch.empty() ? "" : patch[0].value("path", "");
    differences.push_back({Difference::Kind::kContentMismatch, s.entity_id,
                           "same version " + std::to_string(s.version) + ", content differs at '" + where + "'",
                           s.version});
  }
}

void RedisSink::CompareHash(const EntitySnapshot& s, const std::string& key, const redisReply& reply,
                            std::vector<Difference>& differences) {
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements % 2 != 0) {
    differences.push_back({Difference::Kind::kContentMismatch, s.entity_id, "key '" + key + "' is not a hash"});
    return;
  }
  std::map<std::string, std::string, std::less<>> view;
  for (size_t k = 0; k + 1 < reply.elements; k += 2) {
    view.emplace(ReplyText(*reply.element[k]), ReplyText(*reply.element[k + 1]));
  }
  auto version = view.find(kVersionMember);
  if (version == view.end()) {
    differences.push_back({Difference::Kind::kVersionMismatch, s.entity_id, VersionDetail("none", s.version)});
    return;
  }
  uint64_t v = 0;
  const std::string& vt = version->second;
  auto [end, ec] = std::from_chars(vt.data(), vt.data() + vt.size(), v);
  if (ec != std::errc() || end != vt.data() + vt.size() || v != s.version) {
    const bool parsed = ec == std::errc() && end == vt.data() + vt.size();
    differences.push_back({Difference::Kind::kVersionMismatch, s.entity_id, VersionDetail(vt, s.version),
                           parsed ? std::optional<uint64_t>(v) : std::nullopt});
    return;
  }
  view.erase(version);
  Result<Json> state = ParseJson(s.state);
  std::string reason;
  HashFields fields;
  if (!state.ok() || !HashFieldsOf(*state, hash_fields(), fields, reason)) {
    differences.push_back({Difference::Kind::kContentMismatch, s.entity_id,
                           "storage's state cannot be mapped: " + (state.ok() ? reason : state.status().message()),
                           s.version});
    return;
  }
  std::map<std::string, std::string, std::less<>> expected(fields.begin(), fields.end());
  if (view == expected) return;
  std::string detail;
  for (const auto& [field, value] : expected) {
    auto it = view.find(field);
    if (it == view.end()) {
      detail = "the view lacks field '" + field + "'";
    } else if (it->second != value) {
      detail = "field '" + field + "' differs";
    }
    if (!detail.empty()) break;
  }
  if (detail.empty()) {
    for (const auto& [field, value] : view) {
      if (!expected.contains(field)) {
        detail = "the view has an extra field '" + field + "'";
        break;
      }
    }
  }
  differences.push_back({Difference::Kind::kContentMismatch, s.entity_id,
                         "same version " + std::to_string(s.version) + ", " + detail, s.version});
}

// Keys of this template whose entity storage does not know at all (entities
// it knows were checked one by one above).
Status RedisSink::FindExtraKeys(const std::vector<EntitySnapshot>& truth, std::vector<Difference>& differences) {
  std::unordered_set<std::string_view> known;
  known.reserve(truth.size());
  for (const auto& s : truth) known.insert(s.entity_id);
  std::unordered_set<std::string> reported;
  return ScanViewIds(kVerifyChunk, [&](std::span<const std::string> ids) -> Status {
    for (const std::string& id : ids) {
      if (known.contains(id) || !reported.emplace(id).second) continue;
      differences.push_back({Difference::Kind::kExtra, id,
                             "the view has key '" + keys_.Key(id) + "' of an entity storage has no events for"});
    }
    return Status::Ok();
  });
}

}  // namespace sluice::connectors::redis
