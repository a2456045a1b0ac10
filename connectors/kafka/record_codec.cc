#include "connectors/kafka/record_codec.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include <simdjson.h>

#include "core/change_event.pb.h"
#include "core/json.h"

namespace sluice::connectors::kafka {

std::string TopicName(std::string_view topic_template, std::string_view entity_type) {
  std::string out;
  constexpr std::string_view kType = "{type}";
  size_t at = 0;
  while (true) {
    const size_t next = topic_template.find(kType, at);
    out.append(topic_template.substr(at, next == std::string_view::npos ? std::string_view::npos : next - at));
    if (next == std::string_view::npos) break;
    out.append(entity_type);
    at = next + kType.size();
  }
  return out;
}

namespace {

// A JSON string literal: plain printable ASCII (ids, names, command ids are
// almost always that) is copied as it is; anything else goes through the
// full escaper. Saves the allocations of the general path per field.
void AppendString(std::string& out, std::string_view s) {
  const bool plain = std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; });
  if (!plain) return AppendJsonString(out, s);
  out += '"';
  out += s;
  out += '"';
}

template <typename Int>
void AppendNumber(std::string& out, Int v) {
  char digits[24];
  const auto r = std::to_chars(std::begin(digits), std::end(digits), v);
  out.append(digits, r.ptr);
}

}  // namespace

std::string EncodeValue(const ChangeEvent& e, KafkaSinkOptions::Format format) {
  std::string out;
  AppendValue(out, e, format);
  return out;
}

void AppendValue(std::string& out, const ChangeEvent& e, KafkaSinkOptions::Format format) {
  if (format == KafkaSinkOptions::Format::kProtobuf) {
    sluice::v1::ChangeEvent m;
    m.set_entity_type(e.entity_type);
    m.set_entity_id(e.entity_id);
    m.set_version(e.version);
    m.set_deleted(e.deleted);
    if (!e.deleted) m.set_state_json(e.state);
    m.set_partition(e.partition);
    m.set_event_id(e.event_id);
    m.set_command_name(e.command_name);
    m.set_command_id(e.command_id);
    m.set_committed_at_us(e.committed_at_us);
    m.AppendToString(&out);
    return;
  }
  // The state is already JSON text from main storage: spliced in, not re-parsed.
  out.reserve(out.size() + 160 + e.entity_id.size() + e.state.size());
  out += "{\"type\":";
  AppendString(out, e.entity_type);
  out += ",\"id\":";
  AppendString(out, e.entity_id);
  out += ",\"version\":";
  AppendNumber(out, e.version);
  out += e.deleted ? ",\"deleted\":true" : ",\"deleted\":false";
  out += ",\"state\":";
  out += e.deleted || e.state.empty() ? std::string_view("null") : std::string_view(e.state);
  out += ",\"partition\":";
  AppendNumber(out, e.partition);
  out += ",\"event_id\":";
  AppendNumber(out, e.event_id);
  out += ",\"command\":";
  AppendString(out, e.command_name);
  out += ",\"command_id\":";
  AppendString(out, e.command_id);
  out += ",\"committed_at_us\":";
  AppendNumber(out, e.committed_at_us);
  out += '}';
}

namespace {

// The fields of a JSON record value, each a bit: all are required.
enum Field : uint32_t {
  kType = 1, kId = 2, kVersion = 4, kDeleted = 8, kState = 16, kPartition = 32, kEventId = 64, kCommand = 128,
  kCommandId = 256, kCommittedAt = 512, kEveryField = 1023,
};

constexpr std::pair<std::string_view, Field> kFields[] = {
    {"type", kType},       {"id", kId},           {"version", kVersion},       {"deleted", kDeleted},
    {"state", kState},     {"partition", kPartition}, {"event_id", kEventId}, {"command", kCommand},
    {"command_id", kCommandId}, {"committed_at_us", kCommittedAt},
};

std::string_view FieldName(uint32_t bit) {
  for (const auto& [name, f] : kFields) {
    if (f == bit) return name;
  }
  return "?";
}

// simdjson's On-Demand parser: a record's fields are read where they are
// and the state is taken as the bytes it is, not parsed (a verify compares
// it with storage's text first; see DecodeValue in the header).
Result<ChangeEvent> DecodeJsonValue(std::string_view value) {
  thread_local simdjson::ondemand::parser parser;
  thread_local std::string padded;  // simdjson reads up to SIMDJSON_PADDING bytes past the end
  padded.resize(value.size() + simdjson::SIMDJSON_PADDING);
  std::memcpy(padded.data(), value.data(), value.size());
  std::memset(padded.data() + value.size(), 0, simdjson::SIMDJSON_PADDING);  // not the record before's bytes
  const auto bad = [](std::string_view why) {
    return InvalidArgument("not a sluice change event: " + std::string(why));
  };
  ChangeEvent e;
  uint32_t seen = 0;
  // A field of another producer's is skipped by counting brackets, as is a
  // state: not checked to be JSON.
  bool foreign = false;
  simdjson::ondemand::document doc;
  simdjson::ondemand::object object;
  if (auto err = parser.iterate(padded.data(), value.size(), padded.size()).get(doc); err != simdjson::SUCCESS) {
    return bad(simdjson::error_message(err));
  }
  if (auto err = doc.get_object().get(object); err != simdjson::SUCCESS) return bad(simdjson::error_message(err));
  const auto text = [](simdjson::ondemand::value v, std::string& out) {
    std::string_view s;
    const auto err = v.get_string().get(s);
    if (err == simdjson::SUCCESS) out.assign(s);
    return err;
  };
  for (auto field : object) {
    std::string_view key;
    simdjson::ondemand::value v;
    if (auto err = field.unescaped_key().get(key); err != simdjson::SUCCESS) return bad(simdjson::error_message(err));
    if (auto err = field.value().get(v); err != simdjson::SUCCESS) return bad(simdjson::error_message(err));
    Field f{};
    for (const auto& [name, bit] : kFields) {
      if (name == key) f = bit;
    }
    simdjson::error_code err = simdjson::SUCCESS;
    switch (f) {
      case kType: err = text(v, e.entity_type); break;
      case kId: err = text(v, e.entity_id); break;
      case kVersion: err = v.get_uint64().get(e.version); break;
      case kDeleted: err = v.get_bool().get(e.deleted); break;
      case kState: {
        e.state.clear();  // the last "state" is the record's, as for every field
        bool null = false;
        if (err = v.is_null().get(null); err != simdjson::SUCCESS || null) break;
        simdjson::ondemand::json_type type;
        if (err = v.type().get(type); err != simdjson::SUCCESS) break;
        std::string_view raw;
        if (type == simdjson::ondemand::json_type::object) {
          simdjson::ondemand::object o;
          if (err = v.get_object().get(o); err == simdjson::SUCCESS) err = o.raw_json().get(raw);
        } else if (type == simdjson::ondemand::json_type::array) {
          simdjson::ondemand::array a;
          if (err = v.get_array().get(a); err == simdjson::SUCCESS) err = a.raw_json().get(raw);
        } else {
          raw = v.raw_json_token();
        }
        while (!raw.empty() && (raw.back() == ' ' || raw.back() == '\n' || raw.back() == '\r' || raw.back() == '\t')) {
          raw.remove_suffix(1);
        }
        e.state.assign(raw);
        break;
      }
      case kPartition: {
        uint64_t p = 0;
        err = v.get_uint64().get(p);
        if (err == simdjson::SUCCESS && p > UINT32_MAX) return bad("partition " + std::to_string(p) + " is out of range");
        e.partition = static_cast<uint32_t>(p);
        break;
      }
      case kEventId: err = v.get_uint64().get(e.event_id); break;
      case kCommand: err = text(v, e.command_name); break;
      case kCommandId: err = text(v, e.command_id); break;
      case kCommittedAt: err = v.get_int64().get(e.committed_at_us); break;
      default: foreign = true; break;  // read below
    }
    if (err != simdjson::SUCCESS) {
      return bad("\"" + std::string(key) + "\": " + simdjson::error_message(err));
    }
    seen |= f;
  }
  // Past the object's end (simdjson 3.0's documents have no at_end()).
  if (const char* more = nullptr; doc.current_location().get(more) != simdjson::OUT_OF_BOUNDS) {
    return bad("more after the object");
  }
  // What no comparison reads must still be JSON: a field of another
  // producer's, or the state of a delete (compared with nothing). Rare: the
  // whole record is parsed.
  if (foreign || (e.deleted && !e.state.empty())) {
    if (auto whole = ParseJson(value); !whole.ok()) return bad(whole.status().message());
  }
  if (seen != kEveryField) {
    for (uint32_t bit = 1; bit < kEveryField; bit <<= 1) {
      if ((seen & bit) == 0) return bad("no \"" + std::string(FieldName(bit)) + "\"");
    }
  }
  return e;
}

}  // namespace

Result<ChangeEvent> DecodeValue(std::string_view value, KafkaSinkOptions::Format format) {
  ChangeEvent e;
  if (format == KafkaSinkOptions::Format::kProtobuf) {
    sluice::v1::ChangeEvent m;
    if (!m.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      return InvalidArgument("not a sluice.v1.ChangeEvent");
    }
    e.entity_type = m.entity_type();
    e.entity_id = m.entity_id();
    e.version = m.version();
    e.deleted = m.deleted();
    e.state = m.state_json();
    e.partition = m.partition();
    e.event_id = m.event_id();
    e.command_name = m.command_name();
    e.command_id = m.command_id();
    e.committed_at_us = m.committed_at_us();
    return e;
  }
  return DecodeJsonValue(value);
}

std::string EncodePositions(const Positions& positions) {
  std::string out;
  for (const auto& [p, e] : positions) {
    if (!out.empty()) out += ',';
    out += std::to_string(p);
    out += ':';
    out += std::to_string(e);
  }
  return out;
}

std::optional<uint64_t> ParseDecimalHeader(std::string_view text) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

std::optional<Positions> DecodePositions(std::string_view text) {
  Positions out;
  if (text.empty()) return out;
  while (true) {
    const size_t comma = text.find(',');
    const std::string_view one = text.substr(0, comma);
    const size_t colon = one.find(':');
    if (colon == std::string_view::npos) return std::nullopt;
    const auto p = ParseDecimalHeader(one.substr(0, colon));
    const auto e = ParseDecimalHeader(one.substr(colon + 1));
    if (!p || !e || *p > UINT32_MAX) return std::nullopt;
    out[static_cast<uint32_t>(*p)] = *e;
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  return out;
}

}  // namespace sluice::connectors::kafka
