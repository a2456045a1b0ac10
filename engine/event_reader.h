// Reading committed events of one partition in event_id order (DESIGN 4.1),
// and the latest event per entity, as ChangeEvents. Free functions over a
// caller-owned sql::EventLog (sql/tables.h): the statements are there; call
// from the one thread that uses the log.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "connectors/sink.h"
#include "sql/tables.h"

namespace sluice::engine {

struct ReadResult {
  std::vector<connectors::ChangeEvent> events;  // event_ids after+1, after+2, ... without a gap
  bool gap = false;  // a gap in event_id was seen and the batch cut before it (I3 forbids it)
};

// The change event of a row the pull loop read (sql::EventLog::ReadAfter).
connectors::ChangeEvent ToChangeEvent(sql::EventRow&& row, const std::string& type, uint32_t partition);

// The rows of one partition read after `after`, as events, cut at the first
// gap in event_id (never skipped: the reader waits for it).
ReadResult ToReadResult(std::vector<sql::EventRow>&& rows, const std::string& type, uint32_t partition,
                        uint64_t after);

// Up to `limit` events of (type, partition) with event_id > after.
Result<ReadResult> ReadEvents(sql::EventLog& log, const std::string& type, uint32_t partition, uint64_t after,
                              uint32_t limit, sql::EventLog::Columns columns = sql::EventLog::Columns::kView);

// The same for several partitions (partition, after) in one round trip
// (sql::EventLog::ReadAfter). One entry per partition asked for.
Result<std::map<uint32_t, ReadResult>> ReadEventsOfPartitions(sql::EventLog& log, const std::string& type,
                                                              const std::vector<std::pair<uint32_t, uint64_t>>& from,
                                                              uint32_t limit,
                                                              sql::EventLog::Columns columns = sql::EventLog::Columns::kView);

// The events of (type, partition) with the given event_ids (for dead-letter retries).
Result<std::vector<connectors::ChangeEvent>> ReadEventsById(sql::EventLog& log, const std::string& type,
                                                            uint32_t partition, const std::vector<uint64_t>& ids);

// Every event of the type (what `verify` checks a log sink against, record
// by record: connectors::HistoryPages), per partition in event_id order,
// gaps included, a page per statement, up to the partition heads read at
// the first Next() (again after a Rewind()). With `full_events`, each
// event also carries its request, response and state before (what view
// code sees). Holds the page it reads and, for `full_events`, the latest
// states of as many entities per partition being read as its pages hold
// events (the states before of the next events).
class StoredHistory final : public connectors::HistoryPages {
 public:
  StoredHistory(sql::EventLog& log, std::string type, uint32_t partitions, bool full_events);
  ~StoredHistory() override;

  uint32_t partitions() const override { return partitions_; }
  Result<std::vector<connectors::ChangeEvent>> Next(uint32_t partition, uint32_t limit) override;
  Result<std::vector<connectors::ChangeEvent>> Of(uint32_t partition, const std::vector<uint64_t>& event_ids) override;
  void Rewind() override;

  // The events Next() gave since the start or the last Rewind(), and the
  // most of any such pass: the events compared.
  uint64_t given() const { return given_; }
  uint64_t most_given() const { return std::max(given_, most_given_); }
  // Every event Next() gave, whatever the rewinds (a progress line).
  uint64_t read() const { return read_; }
  // Called after each page Next() gives (a progress line); may be empty.
  std::function<void(const StoredHistory&)> on_page;

 private:
  struct Partition;
  Result<Partition*> Reading(uint32_t partition);  // reads the heads first

  sql::EventLog& log_;
  const std::string type_;
  const uint32_t partitions_;
  const bool full_events_;
  std::optional<std::map<uint32_t, uint64_t>> heads_;  // read at the first Next()
  std::map<uint32_t, std::unique_ptr<Partition>> reading_;
  uint64_t given_ = 0, most_given_ = 0, read_ = 0;
};

// The latest event of each of the first `limit` entities of (type,
// partition) whose id sorts after `after_id` (bytewise; empty: from the
// first), in entity_id order: one step of a walk over a partition's
// entities with a keyset cursor (sql::EventLog::LatestAfter).
Result<std::vector<connectors::ChangeEvent>> ReadLatestEventsAfter(sql::EventLog& log, const std::string& type,
                                                                   uint32_t partition, const std::string& after_id,
                                                                   uint32_t limit);

// The latest event of each of `ids` (entities of that partition); an id
// without events has no entry. In entity_id order.
Result<std::vector<connectors::ChangeEvent>> ReadLatestEventsOf(sql::EventLog& log, const std::string& type,
                                                                uint32_t partition, const std::vector<std::string>& ids);

// Walks the latest event of every entity of the type, partition by partition
// and in entity_id order within one, `page` entities per statement: `each`
// gets each page's snapshots (it may move from them) and its partition.
// With `ahead` (another session of the same storage, used by nothing else
// meanwhile) the next page is read on it, on a thread of its own, while
// `each` has the page before: two pages held instead of one, and `each`
// may use `log`.
Status ForEachLatestPage(sql::EventLog& log, const std::string& type, uint32_t partitions, uint32_t page,
                         const std::function<Status(uint32_t partition, std::vector<connectors::EntitySnapshot>& page)>& each,
                         sql::EventLog* ahead = nullptr);

// The latest event of every entity of the type (all partitions), `page`
// entities per statement so that each statement stays short however large
// the table: the truth that `verify` compares views without entity checks
// with (engine/view_compare.h compares the others page by page).
Result<std::vector<connectors::EntitySnapshot>> ReadTruth(sql::EventLog& log, const std::string& type,
                                                          uint32_t partitions, uint32_t page = 5000);

}  // namespace sluice::engine
