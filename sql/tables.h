// The access layer of sluice's own tables in main storage: the event tables
// (one per entity type and partition), sluice_offsets, sluice_dead_letters,
// sluice_leases and sluice_members.
// Every statement sluice runs on those tables is behind these interfaces:
// the engine's pull loop, verify, view repair and anti-entropy, the offset
// store, the operator's dead-letter commands, the writer's partition workers
// and its GET reads (the benchmarks in bench/ seed and time the tables with
// SQL of their own). The MariaDB implementation (mariadb_tables.h) holds the
// SQL; the in-memory fake (memory_tables.h) lets the logic above be tested
// without a server.
//
// Lifecycle: a Storage is made once per process (or per test) and shared; it
// opens one EventLog, OffsetTable or DeadLetterTable per calling thread.
// Each of those owns its session: it opens it on first use and again after a
// call failed with kUnavailable (the session is gone).
//
// Errors (core/status.h), as sql::Connection classifies them:
//   kUnavailable  the server is unreachable or the session broke: retry later
//   kAborted      a duplicate key (its name: DuplicateKeyName), a deadlock or a
//                 lock wait timeout: reload and retry
//   others        stop and report
//
// Threads: Storage's methods may be called from any thread. An object it
// returns is used by one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace sluice::sql {

// One row of an event table. A read fills what its caller asks for (the
// comments below say which columns); the others keep their defaults.
struct EventRow {
  uint64_t event_id = 0;
  std::string entity_id;
  uint64_t version = 0;
  std::string command_id;
  std::string command_name;
  std::optional<uint64_t> expected_version;  // the command's If-Match
  std::string request;                       // canonical JSON
  std::string response;                      // canonical JSON
  std::string state;                         // JSON of the state after the event; empty when deleted
  std::string delta;                         // what the event stored instead of the state (docs/delta.md), or
                                             // empty; a read fills `state` all the same
  // The deltas stored since the entity's last snapshot (a row with its whole
  // state), this row's included, and their bytes: 0 for a snapshot. Filled
  // by the reads that return `state`.
  uint32_t deltas_since_snapshot = 0;
  uint64_t delta_bytes_since_snapshot = 0;
  bool deleted = false;
  int64_t committed_at_us = 0;               // microseconds since the Unix epoch (UTC)
  // The row is an archived event's stub (docs/archive.md): its keys
  // (event_id, entity_id, version, command_id), command_name,
  // expected_version, deleted and committed_at stay in the hot table, its
  // bodies (request, response, state, delta) are in a segment of the archive.
  // The access layer returns stubs as they are (state, request and response
  // empty); archive::ArchivedStorage fills them in from the archive.
  bool archived = false;
};

// A new event as the writer appends it; the views point into the caller's
// strings, which must outlive the EventAppend::TryAdd() call.
struct NewEvent {
  uint64_t event_id = 0;
  std::string_view entity_id;
  uint64_t version = 0;
  std::string_view command_id;
  std::string_view command_name;
  std::optional<uint64_t> expected_version;
  std::string_view request;
  std::string_view response;
  std::string_view state;  // ignored when deleted
  // Non-empty: the event stores this delta from the previous version
  // (which must exist and not be a delete) instead of `state`; reads still
  // return the full state, `state`.
  std::string_view delta;
  bool deleted = false;
};

// A multi-row append being built for one partition (EventLog::NewAppend).
class EventAppend {
 public:
  virtual ~EventAppend() = default;
  // Adds the event unless the append already holds rows and would then grow
  // past max_bytes (its statement's size); false: not added, cut the batch here.
  virtual bool TryAdd(const NewEvent& event, size_t max_bytes) = 0;
  // Rows added so far.
  virtual size_t rows() const = 0;
  // The storage server its table is on (sql/layout.h; 0 with one server):
  // appends of one server can be staged in one transaction.
  virtual size_t server() const { return 0; }
};

// The event tables of main storage.
class EventLog {
 public:
  virtual ~EventLog() = default;

  // Whether the session is open and usable (no call has failed with kUnavailable since it was opened).
  virtual bool healthy() const = 0;
  // Opens a new session when there is no healthy one.
  virtual Status Open() = 0;

  // The partition head: the highest event_id of (type, partition), 0 when empty.
  virtual Result<uint64_t> Head(const std::string& type, uint32_t partition) = 0;
  // The heads of the given partitions of a type, in one round trip per
  // server (the engine's look for commits no writer announced).
  virtual Result<std::map<uint32_t, uint64_t>> Heads(const std::string& type,
                                                     const std::vector<uint32_t>& partitions) = 0;
  // For each (partition, event_id) of a type: how long ago that event
  // committed, in seconds (never negative), in one round trip per server;
  // an event that does not exist has no entry. Lag in seconds is this for
  // the first event a sink has not applied.
  virtual Result<std::map<uint32_t, double>> SecondsSinceCommit(
      const std::string& type, const std::vector<std::pair<uint32_t, uint64_t>>& events) = 0;

  // ---- the pull loop ----
  // Which columns a pull read returns.
  enum class Columns : uint8_t {
    kView,  // event_id, entity_id, version, deleted, state, command_name, command_id, committed_at_us
    kFull,  // those, request and response (what view code sees)
  };
  // For each (partition, after) in `from`, up to `limit` events with
  // event_id > after in event_id order, in one round trip, with `columns`.
  // One entry per partition asked for.
  virtual Result<std::map<uint32_t, std::vector<EventRow>>> ReadAfter(
      const std::string& type, const std::vector<std::pair<uint32_t, uint64_t>>& from, uint32_t limit,
      Columns columns) = 0;
  // The events at the given (entity_id, version) keys of one partition that
  // exist, in one indexed read (the uk_entity_version key): the states
  // before events view code sees. Columns: entity_id, version, deleted,
  // state, event_id (and `archived`).
  virtual Result<std::vector<EventRow>> AtVersions(const std::string& type, uint32_t partition,
                                                   const std::vector<std::pair<std::string, uint64_t>>& keys) = 0;

  // ---- latest states (the writer's cache, verify, view repair, anti-entropy) ----
  // The latest event of each of `ids` that has one, in entity_id order.
  // Columns: those of ReadAfter.
  virtual Result<std::vector<EventRow>> LatestOf(const std::string& type, uint32_t partition,
                                                 const std::vector<std::string>& ids) = 0;
  // The latest event of each entity of (type, partition) whose id sorts
  // after `after_id` (bytewise; empty: from the first), in entity_id order,
  // at most `limit` entities (0: no limit): one step of a walk over a
  // partition's entities with a keyset cursor, served by the (entity_id,
  // version) key. Columns: those of ReadAfter.
  virtual Result<std::vector<EventRow>> LatestAfter(const std::string& type, uint32_t partition,
                                                    const std::string& after_id, uint32_t limit) = 0;
  // The latest version of each of `ids` that has events.
  virtual Result<std::map<std::string, uint64_t>> LatestVersions(const std::string& type, uint32_t partition,
                                                                 const std::vector<std::string>& ids) = 0;

  // ---- single events and one entity's history ----
  // The events of (type, partition) with the given event_ids that exist, in
  // event_id order (a dead letter's event, for a retry). Columns: those of
  // ReadAfter with Columns::kFull.
  virtual Result<std::vector<EventRow>> ByIds(const std::string& type, uint32_t partition,
                                              const std::vector<uint64_t>& event_ids) = 0;
  // Up to `limit` events of `entity_id` with version > after_version, in
  // version order (the writer's GET of an entity's events). Columns: those
  // of ReadAfter, request and response.
  virtual Result<std::vector<EventRow>> History(const std::string& type, uint32_t partition,
                                                const std::string& entity_id, uint64_t after_version,
                                                uint32_t limit) = 0;

  // ---- the writer's partition workers ----
  // The stored events of the given (entity_id, command_id) pairs. Columns:
  // entity_id, command_id, version, event_id, command_name,
  // expected_version, request, response (empty for a stub: `archived`).
  virtual Result<std::vector<EventRow>> FindCommands(
      const std::string& type, uint32_t partition,
      const std::vector<std::pair<std::string, std::string>>& commands) = 0;
  // An empty append for (type, partition).
  virtual std::unique_ptr<EventAppend> NewAppend(const std::string& type, uint32_t partition) = 0;
  // Stores every row of the append in one transaction, all or nothing. A
  // duplicate key is kAborted and names the key: PRIMARY (the event_id is
  // taken), uk_entity_version, uk_entity_command.
  virtual Status Append(EventAppend& append) = 0;
  // Append in two steps, so that a writer can build and insert its next
  // batch while the last one commits on another session, or store the
  // batches of several partitions in one transaction: Stage runs the
  // append's INSERT in a transaction it leaves open (or in the one open
  // already: the appends staged since the last Commit or Rollback are one
  // transaction, of one server, of any tables of it); Commit commits them (kAborted: a conflict
  // found only at commit, as on Galera), Rollback drops them. A failed
  // Stage or Commit leaves nothing staged and nothing stored (a duplicate
  // key is reported as by Append). What reads on a session with appends
  // staged see of them differs (MariaDB shows them, the in-memory tables do
  // not): callers do not rely on it. Commit and Rollback with nothing
  // staged do nothing.
  virtual Status Stage(EventAppend& append) = 0;
  virtual Status Commit() = 0;
  virtual void Rollback() = 0;
};

// One row of sluice_offsets: a sink's progress on one partition.
struct OffsetRow {
  uint64_t event_id = 0;  // last applied event_id (0: nothing yet)
  uint64_t applied = 0;   // cumulative counters
  uint64_t stale = 0;
  uint64_t dead_lettered = 0;
  std::string state = "running";  // running | backoff | paused | stopped
  std::string last_error;
};

// sluice_leases and sluice_members (DESIGN 10): which member of a group (a
// sync engine, a writer) owns each (scope, entity type, partition), where a
// scope is what is owned ("sink/NAME" for a sink's partitions, "writer" for
// the writers'). A lease has an owner, an expiry by the SERVER's clock (so
// members need no synchronised clocks) and a fencing token, which grows by
// one each time the lease is taken while free or expired and never on a
// renewal: a write fenced by the token (OffsetTable::SaveFenced) from a
// former owner that was paused or cut off past its lease changes nothing
// once another member took it. The expiry of all the leases one owner
// holds of (scope, entity type) on a server is one row
// (sluice_lease_holders): renewing them costs one write, not one per lease.
struct LeaseRow {
  std::string scope;
  std::string entity_type;
  uint32_t partition = 0;
  std::string owner;          // empty: never taken, or released
  uint64_t token = 0;
  int64_t expires_in_ms = 0;  // by the server's clock; <= 0: expired (free to take)
};

// A live member of a group, as its last heartbeat left it.
struct MemberRow {
  std::string member;
  std::string address;        // where it serves (a writer's URL), may be empty
  int64_t heartbeat_age_ms = 0;
};

// The partitions a fenced write may touch: owner's tokens per partition of
// (scope, entity type).
struct Fence {
  std::string scope;
  std::string owner;
  std::map<uint32_t, uint64_t> tokens;
};

// One owner's hold of one lease, from sluice_lease_log: the token, who held
// it, and its span by the server's clock (ms since the Unix epoch). Two
// spans of one partition overlap only if two owners held it at once.
struct LeaseSpan {
  std::string scope;
  std::string entity_type;
  uint32_t partition = 0;
  uint64_t token = 0;
  std::string owner;
  int64_t taken_at_ms = 0;
  int64_t ended_at_ms = 0;  // when it was released, cut or expired; while it runs, its owner's expiry
};

// The member group of the sync engines in sluice_members; each one's
// address is where it takes commit notices ("udp:HOST:PORT", empty when it
// takes none).
inline constexpr const char* kEngineMembers = "engine";

class LeaseTable {
 public:
  virtual ~LeaseTable() = default;
  // For each of `partitions`: keeps it (same token) when `owner` holds it
  // with the token `known` gives for it, even if it expired meanwhile
  // (nobody took it); takes it (token + 1) when it is free or expired, or
  // held by `owner` under a token `known` does not give (a restarted
  // process of the same member takes over from its former self, which is
  // fenced from then on). Renews, with one write, every lease `owner` holds
  // of (scope, type) here (expiry now + ttl), and so first lets go of those
  // it holds here but does not ask for (it forgot them); the takes and
  // releases are one transaction. Returns partition -> token of every one
  // of `partitions` that `owner` holds afterwards; the others belong to
  // another owner whose lease runs.
  virtual Result<std::map<uint32_t, uint64_t>> Acquire(const std::string& scope, const std::string& type,
                                                       const std::vector<uint32_t>& partitions,
                                                       const std::string& owner, std::chrono::milliseconds ttl,
                                                       const std::map<uint32_t, uint64_t>& known) = 0;
  // Gives up the leases `owner` holds with these tokens: they expire now
  // (the token stays, so the next taker's is higher).
  virtual Status Release(const std::string& scope, const std::string& type,
                         const std::map<uint32_t, uint64_t>& held, const std::string& owner) = 0;
  // Every lease of `scope` (every scope when empty), by scope, type, partition.
  virtual Result<std::vector<LeaseRow>> List(const std::string& scope) = 0;
  // Every hold of a lease of `scope` (every scope when empty), by scope,
  // type, partition and token.
  virtual Result<std::vector<LeaseSpan>> History(const std::string& scope) = 0;

  // ---- members ----
  // Makes this table's session the only one that runs `member` of `group`
  // (a named lock of the server, held while the session lives): false when
  // another live session holds it, i.e. a second process runs under that
  // name. A process that died lost its session, and with it the claim.
  // Claimed again after a reconnect (Heartbeat fails if another took it).
  virtual Result<bool> Claim(const std::string& group, const std::string& member) = 0;
  // Records that `member` of `group` ("engine", "writer") is alive now.
  virtual Status Heartbeat(const std::string& group, const std::string& member, const std::string& address) = 0;
  // The members of `group` whose last heartbeat is younger than `ttl`, by name.
  virtual Result<std::vector<MemberRow>> Members(const std::string& group, std::chrono::milliseconds ttl) = 0;
  // Removes `member` (it stops cleanly; the others need not wait for its heartbeat to age).
  virtual Status Leave(const std::string& group, const std::string& member) = 0;
};

// sluice_offsets.
class OffsetTable {
 public:
  virtual ~OffsetTable() = default;
  // Every stored partition of (sink, type).
  virtual Result<std::map<uint32_t, OffsetRow>> Load(const std::string& sink, const std::string& type) = 0;
  // Inserts or replaces the given partitions' rows in one statement
  // (last_error is cut to 2,000 bytes). Nothing to do when empty.
  virtual Status Save(const std::string& sink, const std::string& type,
                      const std::map<uint32_t, OffsetRow>& rows) = 0;
  // Removes every row of (sink, type).
  virtual Status Delete(const std::string& sink, const std::string& type) = 0;
  // Save() of the rows whose partition's lease in `fence` is still held by
  // fence.owner with fence.tokens' token, in one transaction that locks
  // those lease rows first (a takeover waits for it, and it for a
  // takeover). Returns the partitions refused: their leases were lost (or
  // the fence names no token for them), and nothing was written for them.
  virtual Result<std::set<uint32_t>> SaveFenced(const std::string& sink, const std::string& type,
                                                const std::map<uint32_t, OffsetRow>& rows, const Fence& fence) = 0;
};

// One event a sink rejected for good.
struct DeadLetter {
  std::string sink;
  std::string entity_type;
  uint32_t partition = 0;
  uint64_t event_id = 0;
  std::string entity_id;
  uint64_t version = 0;
  std::string error;  // cut to 4,000 bytes
};

// A dead letter as it is filed, with what became of it.
struct FiledDeadLetter {
  uint64_t id = 0;  // sluice_dead_letters.id: increases in filing order
  DeadLetter letter;
  std::string created_at;                  // TimestampText of when it was filed
  std::optional<std::string> resolved_at;  // TimestampText; nullopt while unresolved
  std::string resolution;                  // applied | stale | discarded; empty while unresolved
};

// Which dead letters an operator's call is about: those that match every
// field that is set.
struct DeadLetterSelection {
  std::optional<std::string> sink;
  std::optional<uint64_t> id;
  bool unresolved_only = true;  // false: resolved ones too
};

// sluice_dead_letters: filed and looked up by the pull loop, listed,
// resolved and counted by the operator (`sluice deadletters`).
class DeadLetterTable {
 public:
  virtual ~DeadLetterTable() = default;

  // ---- the pull loop ----
  // Files the event; a second filing of the same (sink, type, partition,
  // event_id) is ignored.
  virtual Status Add(const DeadLetter& letter) = 0;
  // Which of the (partition, event_id) are filed for (sink, type).
  virtual Result<std::set<std::pair<uint32_t, uint64_t>>> Among(
      const std::string& sink, const std::string& type,
      const std::vector<std::pair<uint32_t, uint64_t>>& events) = 0;

  // ---- the operator ----
  // The selected dead letters, by id.
  virtual Result<std::vector<FiledDeadLetter>> List(const DeadLetterSelection& which) = 0;
  // How many dead letters are selected.
  virtual Result<uint64_t> Count(const DeadLetterSelection& which) = 0;
  // Marks those selected that are unresolved (whatever
  // which.unresolved_only says) resolved now with `resolution` (applied,
  // stale or discarded). Returns how many it marked.
  virtual Result<uint64_t> Resolve(const DeadLetterSelection& which, std::string_view resolution) = 0;
  // Replaces the error of dead letter `id` (cut to 4,000 bytes), e.g. with
  // the one a retry was rejected with.
  virtual Status SetError(uint64_t id, std::string_view error) = 0;
};

// ---- the archive's records in main storage (docs/archive.md) ----

// One segment of the archive as sluice_archive_segments records it: every
// event of (type, partition) with first_event_id <= event_id <= last_event_id
// is in the object `key`. A partition's segments follow each other without
// gaps or overlaps; the last one's last_event_id is the partition's
// watermark: every event at or below it can be read from the archive.
struct SegmentRecord {
  std::string entity_type;
  uint32_t partition = 0;
  uint64_t first_event_id = 0;
  uint64_t last_event_id = 0;
  uint64_t events = 0;        // events in the segment
  uint64_t bytes = 0;         // the object's size
  uint64_t state_bytes = 0;   // what the events' state and delta columns held in the hot table
  std::string sha256;         // hex, of the object
  std::string key;            // the object's key in the store
  int64_t created_at_us = 0;  // filled by reads
};

// What the archiver knows of a hot row when it decides whether the row may
// leave the hot table.
struct HotRow {
  uint64_t event_id = 0;
  std::string entity_id;
  uint64_t version = 0;
  std::string command_id;
  bool snapshot = false;      // the row holds the whole state (or is a delete): a chain starts here
  int64_t committed_at_us = 0;
};

// Sizes for `sluice archive status` and the metrics.
struct HotTableSize {
  uint64_t rows = 0;         // exact
  uint64_t bytes = 0;        // data and indexes, as the server estimates them
  uint64_t oldest_event_id = 0;  // the oldest row that is not a stub; 0: none
  int64_t oldest_committed_at_us = 0;
  uint64_t stubs = 0;        // rows that are archived events' stubs (exact)
};

// sluice_archive_segments, beside its partition's event table (a
// partition's archive step commits on one server), and the archive step's
// change to the event table.
class ArchiveTable {
 public:
  virtual ~ArchiveTable() = default;
  // Takes the archiving lock of (type, partition) for this table's session
  // (a named lock: it goes with the session, so a killed archiver holds
  // nothing): false when another session holds it.
  virtual Result<bool> Lock(const std::string& type, uint32_t partition) = 0;
  virtual Status Unlock(const std::string& type, uint32_t partition) = 0;
  // The segments of (type, partition), by first_event_id.
  virtual Result<std::vector<SegmentRecord>> Segments(const std::string& type, uint32_t partition) = 0;
  // The watermark (last archived event_id, 0: none) of each partition asked for, in one query per server.
  virtual Result<std::map<uint32_t, uint64_t>> Watermarks(const std::string& type,
                                                          const std::vector<uint32_t>& partitions) = 0;
  // For each entity with rows in after < event_id <= upto: its rows that are
  // not stubs, with event_id <= upto and version >= (its lowest version in
  // that range) - lookback, by entity_id and version. (Its rows above upto
  // are not read: they stay, and LatestVersions says how far it goes.)
  virtual Result<std::vector<HotRow>> PlanRows(const std::string& type, uint32_t partition, uint64_t after,
                                               uint64_t upto, uint64_t lookback) = 0;
  // The rows with after < event_id <= upto, every column, whole states
  // resolved (what a segment stores), in event_id order, stopping after the
  // row that brings their bodies (request, response, and state or delta as
  // stored) to max_bytes; kFailedPrecondition when one is a stub.
  virtual Result<std::vector<EventRow>> RowsBetween(const std::string& type, uint32_t partition, uint64_t after,
                                                    uint64_t upto, uint64_t max_bytes) = 0;
  // One archive step, in one transaction: records `segment` (refused with
  // kAborted when the partition's watermark is not segment.first_event_id - 1
  // any more) and turns the hot rows `leaving` (event_ids at or below
  // segment.last_event_id, not stubs yet) into stubs: their bodies go, their
  // keys stay, so the unique keys keep refusing a stale writer's reuse of an
  // event_id, a version or a command id (docs/storage.md I4).
  virtual Status Commit(const SegmentRecord& segment, const std::vector<uint64_t>& leaving) = 0;
  // Exact counts (a scan of the table): for `sluice archive status`.
  virtual Result<HotTableSize> Size(const std::string& type, uint32_t partition) = 0;
  // The event table's size as the server estimates it, data and indexes (cheap): for the metrics.
  virtual Result<uint64_t> TableBytes(const std::string& type, uint32_t partition) = 0;
};

// The text MariaDB gives a TIMESTAMP(6) in sluice's UTC sessions, e.g.
// "2026-11-21 12:00:00.123456", of `us` microseconds since the Unix epoch.
std::string TimestampText(int64_t us);

// Opens the objects above. Thread-safe.
class Storage {
 public:
  virtual ~Storage() = default;
  virtual std::unique_ptr<EventLog> OpenEventLog() = 0;
  virtual std::unique_ptr<OffsetTable> OpenOffsets() = 0;
  virtual std::unique_ptr<DeadLetterTable> OpenDeadLetters() = 0;
  virtual std::unique_ptr<LeaseTable> OpenLeases() = 0;
  virtual std::unique_ptr<ArchiveTable> OpenArchive() = 0;
};

}  // namespace sluice::sql
