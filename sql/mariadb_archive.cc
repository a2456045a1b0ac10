// The MariaDB implementation of ArchiveTable (tables.h): the statements on
// sluice_archive_segments, and the archive step's change of event rows into
// stubs.
#include <cstdio>

#include "core/failpoint.h"
#include "core/partitioner.h"
#include "sql/mariadb_session.h"
#include "sql/mariadb_tables.h"
#include "sql/schema.h"

namespace sluice::sql {
namespace {

// Statements carry at most this many event_ids.
constexpr size_t kChunk = 1000;

std::string Table(const std::string& type, uint32_t partition) {
  return QuoteIdent(EventTableName(type, partition));
}

class MariaDbArchiveTable : public ArchiveTable {
 public:
  explicit MariaDbArchiveTable(ConnectParams params) : session_(std::move(params)) {}

  Result<bool> Lock(const std::string& type, uint32_t partition) override {
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    ASSIGN_OR_RETURN(std::string name, LockName(*c, type, partition));
    std::string q = "SELECT GET_LOCK(";
    c->AppendQuoted(q, name);
    ASSIGN_OR_RETURN(auto rows, c->Query(q + ", 0)"));
    return !rows.empty() && rows.at(0).at(0) == "1";
  }

  Status Unlock(const std::string& type, uint32_t partition) override {
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    ASSIGN_OR_RETURN(std::string name, LockName(*c, type, partition));
    std::string q = "SELECT RELEASE_LOCK(";
    c->AppendQuoted(q, name);
    return c->Query(q + ")").status();
  }

  Result<std::vector<SegmentRecord>> Segments(const std::string& type, uint32_t partition) override {
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    ASSIGN_OR_RETURN(auto rows,
                     c->Query("SELECT first_event_id, last_event_id, events, bytes, state_bytes, sha256, object_key, "
                              "CAST(UNIX_TIMESTAMP(created_at) * 1000000 AS UNSIGNED) FROM sluice_archive_segments "
                              "WHERE " + Key(*c, type, partition) + " ORDER BY first_event_id"));
    std::vector<SegmentRecord> out;
    out.reserve(rows.size());
    for (auto& r : rows) {
      SegmentRecord s;
      s.entity_type = type;
      s.partition = partition;
      s.first_event_id = U64(r.at(0));
      s.last_event_id = U64(r.at(1));
      s.events = U64(r.at(2));
      s.bytes = U64(r.at(3));
      s.state_bytes = U64(r.at(4));
      s.sha256 = std::move(r.at(5)).value_or("");
      s.key = std::move(r.at(6)).value_or("");
      s.created_at_us = I64(r.at(7));
      out.push_back(std::move(s));
    }
    return out;
  }

  Result<std::map<uint32_t, uint64_t>> Watermarks(const std::string& type,
                                                  const std::vector<uint32_t>& partitions) override {
    std::map<uint32_t, uint64_t> out;
    if (partitions.empty()) return out;
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    std::string q = "SELECT partition_id, MAX(last_event_id) FROM sluice_archive_segments WHERE entity_type=";
    c->AppendQuoted(q, type);
    q += " AND partition_id IN (";
    for (size_t i = 0; i < partitions.size(); ++i) {
      q += (i == 0 ? "" : ",") + std::to_string(partitions[i]);
      out[partitions[i]] = 0;
    }
    ASSIGN_OR_RETURN(auto rows, c->Query(q + ") GROUP BY partition_id"));
    for (const auto& r : rows) out[static_cast<uint32_t>(U64(r.at(0)))] = U64(r.at(1));
    return out;
  }

  Result<std::vector<HotRow>> PlanRows(const std::string& type, uint32_t partition, uint64_t after, uint64_t upto,
                                       uint64_t lookback) override {
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    const std::string t = Table(type, partition);
    const std::string lb = std::to_string(lookback);
    // The range's entities, then each one's rows from a little below its
    // lowest version in the range: an index range on uk_entity_version each.
    ASSIGN_OR_RETURN(auto rows,
                     c->Query("SELECT e.event_id, e.entity_id, e.version, e.command_id, (e.delta IS NULL), "
                              "CAST(UNIX_TIMESTAMP(e.committed_at) * 1000000 AS UNSIGNED) FROM " + t +
                              " e JOIN (SELECT entity_id, MIN(version) AS v FROM " + t + " WHERE event_id > " +
                              std::to_string(after) + " AND event_id <= " + std::to_string(upto) +
                              " GROUP BY entity_id) r ON e.entity_id = r.entity_id AND e.version >= GREATEST(r.v, " + lb +
                              ") - " + lb + " WHERE e.archived=0 AND e.event_id <= " + std::to_string(upto) +
                              " ORDER BY e.entity_id, e.version"));
    std::vector<HotRow> out;
    out.reserve(rows.size());
    for (auto& r : rows) {
      HotRow h;
      h.event_id = U64(r.at(0));
      h.entity_id = std::move(r.at(1)).value_or("");
      h.version = U64(r.at(2));
      h.command_id = std::move(r.at(3)).value_or("");
      h.snapshot = r.at(4).value_or("0") != "0";
      h.committed_at_us = I64(r.at(5));
      out.push_back(std::move(h));
    }
    return out;
  }

  Result<std::vector<EventRow>> RowsBetween(const std::string& type, uint32_t partition, uint64_t after,
                                            uint64_t upto, uint64_t max_bytes) override {
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    std::vector<EventRow> out;
    std::vector<std::pair<std::string, uint64_t>> deltas;
    uint64_t bytes = 0;
    // In pages, so that a range of large states stops at max_bytes without reading the rest.
    for (uint64_t from = after; from < upto && bytes < max_bytes;) {
      ASSIGN_OR_RETURN(auto rows,
                       c->Query("SELECT event_id, entity_id, version, command_id, command_name, expected_version, "
                                "request, response, state, delta, deleted, "
                                "CAST(UNIX_TIMESTAMP(committed_at) * 1000000 AS UNSIGNED), archived FROM " +
                                Table(type, partition) + " WHERE event_id > " + std::to_string(from) +
                                " AND event_id <= " + std::to_string(upto) + " ORDER BY event_id LIMIT 256"));
      if (rows.empty()) break;
      for (auto& r : rows) {
        if (bytes >= max_bytes) break;
        if (r.at(12).value_or("0") != "0") {
          return FailedPrecondition("event " + r.at(0).value_or("") + " of " + EventTableName(type, partition) +
                                    " is archived already");
        }
        EventRow e;
        e.event_id = U64(r.at(0));
        e.entity_id = std::move(r.at(1)).value_or("");
        e.version = U64(r.at(2));
        e.command_id = std::move(r.at(3)).value_or("");
        e.command_name = std::move(r.at(4)).value_or("");
        if (r.at(5)) e.expected_version = U64(r[5]);
        e.request = std::move(r.at(6)).value_or("null");
        e.response = std::move(r.at(7)).value_or("null");
        e.deleted = r.at(10).value_or("0") != "0";
        if (!e.deleted) {
          e.delta = std::move(r.at(9)).value_or("");
          if (e.delta.empty()) e.state = std::move(r.at(8)).value_or("null");
          else deltas.emplace_back(e.entity_id, e.version);
        }
        e.committed_at_us = I64(r.at(11));
        bytes += e.request.size() + e.response.size() + (e.delta.empty() ? e.state.size() : e.delta.size());
        from = e.event_id;
        out.push_back(std::move(e));
      }
    }
    // The whole states of the rows that stored a delta, as every read gives them.
    std::map<std::pair<std::string, uint64_t>, std::string> states;
    auto log = EventLogOn(*c);
    for (size_t i = 0; i < deltas.size(); i += kChunk) {
      const std::vector<std::pair<std::string, uint64_t>> part(
          deltas.begin() + static_cast<std::ptrdiff_t>(i),
          deltas.begin() + static_cast<std::ptrdiff_t>(std::min(deltas.size(), i + kChunk)));
      ASSIGN_OR_RETURN(auto found, log->AtVersions(type, partition, part));
      for (auto& f : found) states[{f.entity_id, f.version}] = std::move(f.state);
    }
    for (auto& e : out) {
      if (e.delta.empty()) continue;
      auto it = states.find({e.entity_id, e.version});
      if (it == states.end()) {
        return Internal("event " + std::to_string(e.event_id) + " of " + EventTableName(type, partition) +
                        " stores a delta whose state could not be rebuilt");
      }
      e.state = std::move(it->second);
    }
    return out;
  }

  Status Commit(const SegmentRecord& segment, const std::vector<uint64_t>& leaving) override {
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    const std::string key = Key(*c, segment.entity_type, segment.partition);
    return InTransaction(*c, [&]() -> Status {
      ASSIGN_OR_RETURN(auto wm, c->Query("SELECT COALESCE(MAX(last_event_id), 0) FROM sluice_archive_segments WHERE " +
                                         key + " FOR UPDATE"));
      const uint64_t watermark = U64(wm.at(0).at(0));
      if (watermark + 1 != segment.first_event_id) {
        return Aborted("the archive of " + EventTableName(segment.entity_type, segment.partition) +
                       " moved to event " + std::to_string(watermark) + " meanwhile (this step starts after " +
                       std::to_string(segment.first_event_id - 1) + ")");
      }
      std::string ins =
          "INSERT INTO sluice_archive_segments (entity_type, partition_id, first_event_id, last_event_id, events, "
          "bytes, state_bytes, sha256, object_key) VALUES (";
      c->AppendQuoted(ins, segment.entity_type);
      ins += "," + std::to_string(segment.partition) + "," + std::to_string(segment.first_event_id) + "," +
             std::to_string(segment.last_event_id) + "," + std::to_string(segment.events) + "," +
             std::to_string(segment.bytes) + "," + std::to_string(segment.state_bytes) + ",";
      c->AppendQuoted(ins, segment.sha256);
      ins += ",";
      c->AppendQuoted(ins, segment.key);
      RETURN_IF_ERROR(c->Execute(ins + ")").status());
      if (SLUICE_FAILPOINT("archive.commit.after_segment")) return Unavailable("failpoint archive.commit.after_segment");
      const std::string table = Table(segment.entity_type, segment.partition);
      for (size_t i = 0; i < leaving.size(); i += kChunk) {
        const size_t end = std::min(leaving.size(), i + kChunk);
        std::string ids;
        for (size_t k = i; k < end; ++k) {
          if (leaving[k] > segment.last_event_id) {
            return InvalidArgument("event " + std::to_string(leaving[k]) + " is above the segment");
          }
          ids += (k == i ? "" : ",") + std::to_string(leaving[k]);
        }
        ASSIGN_OR_RETURN(uint64_t changed,
                         c->Execute("UPDATE " + table +
                                    " SET archived=1, request='', response='', state=NULL, delta=NULL "
                                    "WHERE archived=0 AND event_id IN (" + ids + ")"));
        if (changed != end - i) {
          return Aborted("of " + std::to_string(end - i) + " events of " +
                         EventTableName(segment.entity_type, segment.partition) + " to archive, " +
                         std::to_string(changed) + " were there and not archived yet");
        }
      }
      if (SLUICE_FAILPOINT("archive.commit.before_commit")) return Unavailable("failpoint archive.commit.before_commit");
      return Status::Ok();
    });
  }

  Result<HotTableSize> Size(const std::string& type, uint32_t partition) override {
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    const std::string t = Table(type, partition);
    HotTableSize size;
    ASSIGN_OR_RETURN(auto counts, c->Query("SELECT COUNT(*), COALESCE(SUM(archived), 0), "
                                           "COALESCE(MIN(IF(archived=0, event_id, NULL)), 0) FROM " + t));
    size.rows = U64(counts.at(0).at(0));
    size.stubs = U64(counts.at(0).at(1));
    size.oldest_event_id = U64(counts.at(0).at(2));
    if (size.oldest_event_id != 0) {
      ASSIGN_OR_RETURN(auto oldest, c->Query("SELECT CAST(UNIX_TIMESTAMP(committed_at) * 1000000 AS UNSIGNED) FROM " +
                                             t + " WHERE event_id=" + std::to_string(size.oldest_event_id)));
      if (!oldest.empty()) size.oldest_committed_at_us = I64(oldest.at(0).at(0));
    }
    ASSIGN_OR_RETURN(size.bytes, TableBytes(type, partition));
    return size;
  }

  Result<uint64_t> TableBytes(const std::string& type, uint32_t partition) override {
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    std::string q = "SELECT COALESCE(data_length + index_length, 0) FROM information_schema.tables "
                    "WHERE table_schema=DATABASE() AND table_name=";
    c->AppendQuoted(q, EventTableName(type, partition));
    ASSIGN_OR_RETURN(auto bytes, c->Query(q));
    return bytes.empty() ? uint64_t{0} : U64(bytes.at(0).at(0));
  }

 private:
  static std::string Key(Connection& c, const std::string& type, uint32_t partition) {
    std::string w = "entity_type=";
    c.AppendQuoted(w, type);
    return w + " AND partition_id=" + std::to_string(partition);
  }

  // A GET_LOCK name unique to (database, type, partition), at most 64 characters.
  static Result<std::string> LockName(Connection& c, const std::string& type, uint32_t partition) {
    ASSIGN_OR_RETURN(auto db, c.Query("SELECT DATABASE()"));
    const std::string scope = db.empty() ? "" : db.at(0).at(0).value_or("");
    char name[64];
    std::snprintf(name, sizeof name, "sluice:archive:%08x:%08x:%u", static_cast<uint32_t>(Murmur2(scope)),
                  static_cast<uint32_t>(Murmur2(type)), partition);
    return std::string(name);
  }

  Session session_;
};

}  // namespace

std::unique_ptr<ArchiveTable> MariaDbStorage::OpenArchive() { return std::make_unique<MariaDbArchiveTable>(params_); }

}  // namespace sluice::sql
