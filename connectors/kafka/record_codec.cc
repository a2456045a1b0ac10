#include "connectors/kafka/record_codec.h"

#include <algorithm>
#include <charconv>

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
  ASSIGN_OR_RETURN(Json j, ParseJson(value));
  try {
    e.entity_type = j.at("type").get<std::string>();
    e.entity_id = j.at("id").get<std::string>();
    e.version = j.at("version").get<uint64_t>();
    e.deleted = j.at("deleted").get<bool>();
    if (!j.at("state").is_null()) e.state = CanonicalJson(j.at("state"));
    e.partition = j.at("partition").get<uint32_t>();
    e.event_id = j.at("event_id").get<uint64_t>();
    e.command_name = j.at("command").get<std::string>();
    e.command_id = j.at("command_id").get<std::string>();
    e.committed_at_us = j.at("committed_at_us").get<int64_t>();
  } catch (const std::exception& ex) {
    return InvalidArgument(std::string("not a sluice change event: ") + ex.what());
  }
  return e;
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
