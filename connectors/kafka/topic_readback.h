// What a kafka sink's topic already holds of each source partition, read
// back before the sink produces (docs/sinks/kafka.md, "No duplicates after
// a crash"). A topic partition is read from its end backwards, in windows
// of 256 records and then four times as many each step, until what is
// looked for is found.
//
// Threads: any; each call uses the handles it is given (a reader handle by
// one call at a time; `ends` may be asked by several at once).
#pragma once

#include <librdkafka/rdkafka.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "connectors/kafka/record_codec.h"
#include "core/status.h"

namespace sluice::connectors::kafka {

// The (source partition, event id) headers of one of the sink's records;
// nullopt for a record without them.
std::optional<std::pair<uint32_t, uint64_t>> SourcePosition(const rd_kafka_message_t& m);

// Transactional: the event id of source partition p's last committed record
// in topic partition tp (or of the last sluice-positions header naming p,
// written by the idempotent mode); nullopt when the topic holds none.
// `ends` says where the log ends (a read_uncommitted client: the end of the
// log, not the last stable offset, so that records of p committed after
// another partition's transaction still open are waited for); `reader`
// (read_committed) reads.
Result<std::optional<uint64_t>> LastEventOf(rd_kafka_t* ends, rd_kafka_t* reader, const std::string& topic,
                                            int32_t tp, uint32_t p, std::chrono::milliseconds timeout);

// Idempotent: for each source partition that topic partition tp holds, the
// highest event id there: the positions of the last record that carries
// sluice-positions, raised by the (sluice-partition, sluice-event-id) of
// every record after it (a batch cut short). Read with `consumer`, up to its
// answer of where the partition ends.
Result<Positions> PositionsOf(rd_kafka_t* consumer, const std::string& topic, int32_t tp,
                              std::chrono::milliseconds timeout);

}  // namespace sluice::connectors::kafka
