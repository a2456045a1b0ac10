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

// Every event of `history` against its record: missing, content mismatch,
// duplicate (the same event twice) or phantom (a record of no event).
Status CompareHistory(const std::string& topic, const ReadRecords& read, const std::vector<ChangeEvent>& history,
                      std::vector<Difference>& differences);

}  // namespace sluice::connectors::kafka
