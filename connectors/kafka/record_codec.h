// How the kafka sink turns a ChangeEvent into a Kafka record, and reads its
// own records back (recovery after a crash, verify, tests). Pure functions,
// safe from any thread.
//
//   key      the entity id
//   value    format json: {"type":..,"id":..,"version":..,"deleted":..,
//            "state":{..}|null,"partition":..,"event_id":..,"command":..,
//            "command_id":..,"committed_at_us":..}
//            format protobuf: sluice.v1.ChangeEvent (core/change_event.proto)
//   headers  sluice-entity-type, sluice-version, sluice-event-id,
//            sluice-partition (decimal text); the last record of each batch
//            in a topic partition also carries sluice-positions (below).
//
// sluice-positions is "p:e[,p:e...]": for every source partition p whose
// events go to this topic partition, the highest event id delivered so far.
// With the source partition and event id of each record after it, it tells a
// restarted sink exactly which events are already in the topic.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "connectors/kafka/kafka_options.h"
#include "connectors/sink.h"

namespace sluice::connectors::kafka {

inline constexpr std::string_view kHeaderEntityType = "sluice-entity-type";
inline constexpr std::string_view kHeaderVersion = "sluice-version";
inline constexpr std::string_view kHeaderEventId = "sluice-event-id";
inline constexpr std::string_view kHeaderPartition = "sluice-partition";
inline constexpr std::string_view kHeaderPositions = "sluice-positions";

// The topic a template names for an entity type ({type} replaced).
std::string TopicName(std::string_view topic_template, std::string_view entity_type);

// The record value of an event in a format.
std::string EncodeValue(const ChangeEvent& e, KafkaSinkOptions::Format format);
// The same, appended to `out`: a producer that reuses one buffer for every
// record allocates nothing per record here.
void AppendValue(std::string& out, const ChangeEvent& e, KafkaSinkOptions::Format format);

// Decodes a record value back into an event (entity_type, entity_id, version,
// deleted, state, partition, event_id, command_name, command_id,
// committed_at_us); InvalidArgument when it is not one of ours. In the JSON
// format the state is the record's text of it as it is, not checked to be
// JSON (a verify compares it with storage's text before parsing either);
// the rest of the record is (fields of another producer's, a delete's
// state).
Result<ChangeEvent> DecodeValue(std::string_view value, KafkaSinkOptions::Format format);

// Source partition -> highest delivered event id.
using Positions = std::map<uint32_t, uint64_t>;

std::string EncodePositions(const Positions& positions);
// nullopt when the text is not "p:e[,p:e...]".
std::optional<Positions> DecodePositions(std::string_view text);

// A header's decimal value; nullopt when not a decimal integer.
std::optional<uint64_t> ParseDecimalHeader(std::string_view text);

}  // namespace sluice::connectors::kafka
