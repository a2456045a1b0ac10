// The mysql sink's class, shared by the files that implement it (private to
// this folder; everyone else goes through MakeMysqlSink in mysql_sink.h).
//
// The implementation is split by concern, as the redis sink's is:
//   mysql_sink.cc          the factory, the constructor (the statements it
//                          prepares), opening the lanes, the table, Health
//   mysql_sink_apply.cc    Apply and Repair: each lane's transactions, the
//                          per-row version check, the version hints
//   mysql_sink_verify.cc   Verify (the whole view) and VerifyEntities
//   mysql_sink_rebuild.cc  the rebuild shadow: its table, switching it in
//
// Threads: as every Sink, one thread at a time per instance (see sink.h);
// within Apply, one thread per lane, each with its own connection and hints.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/config.h"
#include "connectors/mysql/mysql_options.h"
#include "connectors/mysql/mysql_sink.h"
#include "connectors/sink.h"
#include "core/status.h"
#include "sql/connection.h"
#include "sql/errors.h"

namespace sluice::connectors::mysql {

// Bytes of ids and values per transaction. A batch beyond it is applied in
// several transactions, so that no statement exceeds max_allowed_packet
// (which the server answers by closing the connection, a retry loop).
inline constexpr size_t kMaxChunkBytes = size_t{4} << 20;
// What a row costs in a statement besides its values (quotes, commas, numbers).
inline constexpr size_t kValueOverheadBytes = 8;

std::string Lower(std::string_view s);
std::optional<uint64_t> ParseUint(const std::optional<std::string>& s);
using sql::BatchFailure;  // sql/errors.h
using sql::IsDataError;

// The row versions one lane of the sink last saw committed: id -> the
// version its row held. Only a hint, never trusted to call an event stale:
// an event newer than its hint skips the locking read, and the write's
// affected-row count confirms that the row existed and took it (see
// ApplyInTransaction). Bounded: when full it forgets everything.
class VersionHints {
 public:
  explicit VersionHints(size_t capacity) : capacity_(capacity) {}

  std::optional<uint64_t> Find(std::string_view id) const {
    if (map_.empty()) return std::nullopt;
    const auto it = map_.find(id);
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }
  void Remember(std::string_view id, uint64_t version) {
    if (capacity_ == 0) return;
    const auto it = map_.find(id);
    if (it != map_.end()) {
      it->second = version;
      return;
    }
    if (map_.size() >= capacity_) map_.clear();
    map_.emplace(std::string(id), version);
  }
  void Forget(std::string_view id) {
    if (const auto it = map_.find(id); it != map_.end()) map_.erase(it);
  }
  void Clear() { map_.clear(); }
  bool enabled() const { return capacity_ > 0; }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  size_t capacity_;
  std::unordered_map<std::string, uint64_t, Hash, std::equal_to<>> map_;
};

// Whether a lane guesses that an entity's first version (1) finds no row and
// inserts it without the locking read (see ApplyInTransaction). A wrong
// guess costs a rolled-back chunk, so after one the lane stops guessing for
// the next 1, 2, 4, ... up to kMaxSkip chunks that have such an entity, and
// each right one halves that: a view whose new entities are mostly there
// already (the push path wrote them first, a replay) mostly reads them, as
// without the guess.
class AbsentGuesses {
 public:
  static constexpr uint32_t kMaxSkip = 1024;
  // True when this chunk may guess; counts the chunk otherwise.
  bool Allowed() {
    if (skip_ == 0) return true;
    --skip_;
    return false;
  }
  void Right() { penalty_ /= 2; }
  void Wrong() {
    penalty_ = penalty_ == 0 ? 1 : std::min(penalty_ * 2, kMaxSkip);
    skip_ = penalty_;
  }

 private:
  uint32_t skip_ = 0;
  uint32_t penalty_ = 0;
};

// One event of a batch. Its state is parsed only when the event is to be
// written (stale and superseded events never need their columns), at most once.
struct PreparedEvent {
  const ChangeEvent* event = nullptr;
  std::vector<std::optional<std::string>> values;  // per mapped column; all NULL for a delete
  size_t bytes = 0;                                // a bound of what it adds to the statements
  bool extracted = false;                          // `values` are filled
  bool rejected = false;                           // its state cannot be read: rejected without SQL
};

// Why MySQL refused an event's row, for its kRejected result.
std::string RefusalText(const Status& refused);

// The row of `p` in an INSERT's VALUES list: (id, version, deleted, columns...).
void AppendRow(sql::Connection& conn, const PreparedEvent& p, std::string& sql);

class MysqlSink final : public Sink {
 public:
  MysqlSink(config::SinkConfig cfg, sql::ConnectParams params);

  const std::string& name() const override { return cfg_.name; }
  Capabilities capabilities() const override {
    return Capabilities{
        .can_push = true, .entity_checks = true, .overwrite = true,
        // Every write is version-checked (the hints are only hints): nothing to learn at a takeover.
        .stays_open_at_takeover = true};
  }
  Status Open() override;
  ApplyResult Apply(std::span<const ChangeEvent> events) override;
  Status Health() override;
  void Close() override;
  Status Verify(const std::vector<EntitySnapshot>& truth, std::vector<Difference>& differences) override;
  Status VerifyEntities(std::span<const EntitySnapshot> truth, std::vector<Difference>& differences) override;
  Status ScanViewIds(size_t page, const std::function<Status(std::span<const std::string> ids)>& each) override;
  ApplyResult Repair(std::span<const ChangeEvent> events, RepairGuard guard) override;
  Result<std::unique_ptr<Sink>> MakeRebuildShadow() const override;
  Status PromoteRebuildShadow() override;
  HintStats hint_stats() const {
    return {reads_skipped_.load(), wrong_guesses_.load(), inserted_unread_.load(), wrong_inserts_.load()};
  }

 private:
  // A shadow's first Open(): an empty table made from the sink's current
  // definition (so a rebuild takes new columns and types), with the live
  // table's secondary indexes whose columns it still has.
  Status PrepareShadowTable();
  // Opens when not open or after a lost connection (once, without waiting).
  Status EnsureOpen();
  Status CheckOrCreateTable();
  // Fills p.values from the state; false (and a rejection in `result`) when it cannot.
  bool Extract(PreparedEvent& p, EventResult& result) const;
  // The connection of lane k: conn_ for lane 0, else lanes_[k - 1].
  std::unique_ptr<sql::Connection>& Lane(size_t k) { return k == 0 ? conn_ : lanes_[k - 1]; }
  // Applies lane k's events on its connection, in transactions of at most
  // chunk_bytes_; a batch-level failure as Fail() gives it.
  Status ApplyOnLane(size_t lane, std::span<PreparedEvent> events, std::span<EventResult> results);
  // One transaction; on a data error, one transaction per event.
  Status ApplyChunk(size_t lane, std::span<PreparedEvent> chunk, std::span<EventResult> results);
  // Decides and writes `chunk` in one transaction; rolls back on failure.
  // With `guess`, ids whose lane hint is older than their one event are not
  // read, nor (AbsentGuesses) ids whose first event is version 1 and that
  // have no hint; a wrong guess rolls back and decides again with every id
  // read.
  Status ApplyInTransaction(size_t lane, std::span<PreparedEvent> chunk, std::span<EventResult> results,
                            bool guess = true);
  // BEGIN, then (unless `select` is empty) runs `select` (SELECT id, _version
  // ... FOR UPDATE) and calls `each` with every row's id and version; rolls
  // back when the read fails.
  static Status BeginAndLockRows(std::unique_ptr<sql::Connection>& conn, const std::string& select,
                                 const std::function<void(const std::string&, std::optional<uint64_t>)>& each);
  // Ends the open transaction; drops the connection when that fails.
  static void Rollback(std::unique_ptr<sql::Connection>& conn);
  // Runs `select` (a SELECT ... FROM t, no WHERE) in keyset pages of `page`
  // rows over the primary key, ordered by id, handing each page to `each`;
  // `doing` names a failed read.
  Status KeysetPages(const std::string& select, size_t page, std::string_view doing,
                     const std::function<Status(std::vector<sql::Row>& rows)>& each);
  // Compares one row of verify_select_ with `snap` (null, or deleted at
  // version 0: an entity storage has no events for).
  void CompareRow(const EntitySnapshot* snap, const sql::Row& row, std::vector<Difference>& differences) const;
  // Repair(): one transaction on lane 0 that locks the rows, decides under
  // `guard`, upserts (or, for a removal, deletes) and commits.
  Status RepairInTransaction(std::span<PreparedEvent> chunk, std::span<EventResult> results, RepairGuard guard);
  // "sink 'x' (db.t): doing: message" with the code the caller acts on.
  Status Fail(const Status& status, std::string_view doing) const;
  std::string Context() const { return "sink '" + cfg_.name + "' (" + where_ + ")"; }
  const MysqlSinkOptions& options() const { return cfg_.Options<MysqlSinkOptions>(); }

  const config::SinkConfig cfg_;
  const sql::ConnectParams params_;
  const std::string where_;  // database.table, for messages
  std::string create_sql_;
  std::string select_prefix_;   // ... WHERE id IN (
  std::string insert_prefix_;   // INSERT ... VALUES
  std::string upsert_suffix_;   // ON DUPLICATE KEY UPDATE ...
  std::string repair_suffix_not_older_;  // the same, guarded by >= (Repair kNotOlder)
  std::string repair_suffix_any_;        // the same, unguarded (Repair kAny)
  std::string verify_select_;   // SELECT id, _version, _deleted, columns FROM t
  std::string ids_select_;       // SELECT id, _deleted FROM t
  // Lane 0: also the connection of Open, Health, Verify and the rebuild.
  std::unique_ptr<sql::Connection> conn_;
  // Lanes 1..connections-1; null after a failed rollback, reopened by EnsureOpen.
  std::vector<std::unique_ptr<sql::Connection>> lanes_;
  // Per lane (0..connections-1), used only by that lane's thread.
  std::vector<VersionHints> hints_;
  std::vector<AbsentGuesses> absent_;
  std::atomic<uint64_t> reads_skipped_{0};
  std::atomic<uint64_t> wrong_guesses_{0};
  std::atomic<uint64_t> inserted_unread_{0};
  std::atomic<uint64_t> wrong_inserts_{0};
  bool open_ = false;
  // Set on a rebuild shadow: the live table it will replace, and whether its
  // fresh table has been made yet.
  std::string shadow_of_;
  bool shadow_prepared_ = false;
  size_t max_statement_bytes_ = size_t{16} << 20;
  size_t chunk_bytes_ = kMaxChunkBytes;
};

}  // namespace sluice::connectors::mysql
