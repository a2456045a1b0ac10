// Comparing a kafka sink's topic with main storage (`sluice verify`,
// Sink::Verify and Sink::VerifyHistory): what differs, from the records as
// they are read, with no broker of its own, so that the comparison is
// tested on records made by hand.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "connectors/sink.h"
#include "core/status.h"

namespace sluice::connectors::kafka {

// Gives each record of the topic (decoded) with where it is.
using EachRecord = std::function<void(ChangeEvent&&, int32_t topic_partition, int64_t offset)>;
// Reads every record of the topic into `each`.
using ReadRecords = std::function<Status(const EachRecord& each)>;

// The latest record of each entity against storage's latest state: missing,
// extra (no such entity, or records that repeat or go back in version),
// version or content mismatch. `topic` names the topic in the details.
Status CompareLatest(const std::string& topic, const ReadRecords& read, const std::vector<EntitySnapshot>& truth,
                     std::vector<Difference>& differences);

// Reads the records of one topic partition (up to where it ended when the
// comparison began) into `each`.
using ReadTopicPartition = std::function<Status(int32_t topic_partition, const EachRecord& each)>;

// Every event of `history` against its record (Sink::VerifyHistory), topic
// partition by topic partition: the records of one, in their order, merged
// by event_id with the events of the source partitions `topic_partition_of`
// maps to it, a page of each at a time. A record is its event's when the
// event_id, entity and version agree; then command and state must too
// (content mismatch). A record ahead of its partition's next event is looked
// up: the events before it have no record (missing, unless theirs comes
// later: out of order); no such event, a phantom. A record behind its
// place (a repeat, a late one) is looked up at the end of the topic
// partition, many at a time: out of order, duplicate or phantom. So memory
// holds a page per source partition of the topic partition and what
// differs, not the history.
Status CompareHistory(const std::string& topic, int32_t topic_partitions,
                      const std::function<int32_t(uint32_t)>& topic_partition_of, const ReadTopicPartition& read,
                      HistoryPages& history, std::vector<Difference>& differences);

}  // namespace sluice::connectors::kafka
