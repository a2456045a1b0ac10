// The sink interface: what the sync engine (pull) and, later, the writer
// (push) drive to keep one view in step with main storage (DESIGN 4 and 5).
//
// Contract:
//  - Open() connects and prepares (loads scripts, creates tables). It may be
//    called again after a failure; it never sleeps or retries by itself.
//  - Apply() takes events of ONE entity type in event order (several events
//    of one entity may be in a batch, oldest first) and returns either one
//    result per event, or a batch-level failure:
//      kUnavailable        nothing is known to be applied: retry the whole
//                          batch later (the version check makes a partial
//                          earlier application harmless)
//      kFailedPrecondition the sink is misconfigured (auth, missing table
//                          without auto_create): stop and tell the operator
//  - Every write is guarded by the per-row version check: an event applies
//    only when its version is greater than the version the view holds for
//    that entity, including the version of a deleted entity's tombstone.
//    Re-applying an event already applied yields kStale, never a change.
//  - What Apply() acknowledges (applied or stale) holds once the next
//    Flush() returned ok. The engine calls Flush() before it saves offsets
//    past acknowledged events (on its timer, before a pause, an offset move
//    or a stop) and before it closes the sink after a failed Apply(). A
//    failed Flush(): the engine closes the sink and re-applies every event
//    since the last successful one, so Close() may drop what was not
//    flushed and Open() must not answer kStale from such a buffer. Every
//    built-in sink writes through (Apply() returns after the server
//    acknowledged: a MySQL commit, a Redis reply, a _bulk response, Kafka
//    delivery reports) and keeps the default Flush().
//  - A connector never sleeps in a retry loop; the caller owns retries,
//    deadlines and threading.
//
// Threads: one thread at a time calls a Sink instance (the engine gives each
// sink its own applier thread). Different instances are independent.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"
#include "core/status.h"
#include "core/json.h"

namespace sluice::connectors {

// What Sink::Prepare made of one event for its own Apply (each sink type
// its own kind).
struct PreparedEvent {
  virtual ~PreparedEvent() = default;
};

// One committed event as sinks see it. Owned by the caller for the duration
// of Apply().
struct ChangeEvent {
  std::string entity_type;
  uint32_t partition = 0;
  uint64_t event_id = 0;     // the offset inside its partition
  std::string entity_id;
  uint64_t version = 0;      // the entity's version after this event
  bool deleted = false;      // the event deleted the entity
  std::string state;         // JSON text of the state after the event; empty when deleted
  std::string command_name;
  std::string command_id;
  int64_t committed_at_us = 0;  // commit time, microseconds since the Unix epoch (UTC)
  // What view code sees besides (DESIGN 4.4), filled only for a sink that
  // asks for them (Capabilities::full_events; the engine and the push path
  // supply them): the command's request and response (JSON text), and the
  // state before the event (JSON text; empty when the entity did not exist
  // before it: a creation, or the first event after a delete).
  std::string request;
  std::string response;
  std::string before;
  // Set by view code's route(event) for a sink that takes them
  // (Capabilities::record_keys: kafka): the record's key (empty: the entity
  // id) and headers added to the sink's own.
  std::string record_key;
  std::vector<std::pair<std::string, std::string>> record_headers;
  // Set by the sink's Prepare(), read by its Apply(); null when not prepared.
  std::shared_ptr<const PreparedEvent> prepared;
};

enum class Outcome : uint8_t {
  kApplied,   // the view now reflects this event
  kStale,     // the view already held this version or a newer one: skipped, counted
  kRejected,  // the sink refuses this event for good (reason says why): dead-letter it
};

struct EventResult {
  Outcome outcome = Outcome::kApplied;
  std::string reason;  // kRejected: why, for the dead-letter table
};

struct ApplyResult {
  Status status;                     // ok: `results` has one entry per event
  std::vector<EventResult> results;
};

struct Capabilities {
  bool can_push = false;       // the writer may push to it (issue: push path)
  bool verifies_history = false;  // `verify` calls VerifyHistory (a log), not Verify
  // VerifyEntities() and Repair(kNotOlder) work: the engine's sampled
  // anti-entropy and `sluice verify --repair` may use the sink. Logs (kafka)
  // and plugins say false and are left to `sluice verify`.
  bool entity_checks = false;
  // Repair(kAny) works: the sink can safely overwrite a row whatever version
  // it holds, and remove an entity's row and tombstone.
  bool overwrite = false;
  // ScanViewIds may give an id more than once (Redis SCAN).
  bool scan_repeats = false;
  // Apply() needs each event's request, response and state before
  // (ChangeEvent): the sink runs view code, or is a plugin that asked for them.
  bool full_events = false;
  // Apply() writes ChangeEvent::record_key and record_headers (kafka).
  bool record_keys = false;
  // Prepare() does work ahead of Apply() (view code); the engine calls it.
  bool prepares = false;
  // How many chunks the sink takes in flight at once through Send() and
  // Receive() (above 1: the engine's applier sends the next chunk before
  // the last one's results came back); 1: Apply() only.
  uint32_t pipeline = 1;
  // Taking partitions over leaves the sink open: Open() learns nothing of a
  // partition that TakeOver() does not (the Kafka sink reads the topic back
  // there; a view whose writes are version-checked has nothing to learn).
  // False: the engine closes the sink and opens it again before the
  // partitions' first event, so that Open() learns what their last owner
  // wrote.
  bool stays_open_at_takeover = false;
};

// The latest truth about one entity, from main storage, for Verify().
struct EntitySnapshot {
  std::string entity_id;
  uint64_t version = 0;
  bool deleted = false;
  std::string state;  // JSON text; empty when deleted
};

// A log sink's history, read a page at a time (Sink::VerifyHistory), so
// that a comparison holds a page per partition, not every event: every
// event of the sink's type, per partition in event_id order (gaps
// included), up to the partition heads storage had when it was first
// asked.
class HistoryPages {
 public:
  virtual ~HistoryPages() = default;
  virtual uint32_t partitions() const = 0;
  // The next up to `limit` events of `partition` after those it gave
  // before; empty: no more.
  virtual Result<std::vector<ChangeEvent>> Next(uint32_t partition, uint32_t limit) = 0;
  // The events of `partition` with these event_ids that exist (up to the
  // head), in event_id order: for records ahead of or behind their place.
  virtual Result<std::vector<ChangeEvent>> Of(uint32_t partition, const std::vector<uint64_t>& event_ids) = 0;
  // From the first event again, up to heads asked for anew (the next log's
  // comparison, after it learned where that log ends).
  virtual void Rewind() = 0;
};

struct Difference {
  // A log sink (VerifyHistory) also reports kPhantom (a record of an event
  // storage does not have: e.g. an event a crash of the MySQL server rolled
  // back after the sink got it) and kDuplicate (an event recorded twice); a
  // record whose event storage has with other fields is kContentMismatch.
  // kOutOfOrder is a record after a later event's record of its partition
  // (one difference, which also names other fields of the record).
  enum class Kind { kMissing, kExtra, kVersionMismatch, kContentMismatch, kPhantom, kDuplicate, kOutOfOrder };
  Difference() = default;
  Difference(Kind k, std::string id, std::string text, std::optional<uint64_t> version = std::nullopt)
      : kind(k), entity_id(std::move(id)), detail(std::move(text)), view_version(version) {}
  Kind kind = Kind::kMissing;
  std::string entity_id;
  std::string detail;  // e.g. "view has version 3, storage has 5"
  // The version the view holds for the entity (its row, key or document, or
  // else its tombstone) when the sink read one; nullopt when it holds none
  // or the sink cannot tell. A view_version above storage's means the view
  // is ahead of storage, which no versioned write can fix.
  std::optional<uint64_t> view_version;
};

// Partitions an engine has just taken over (Sink::TakeOver): the scope of
// their leases in sluice_leases ("sink/NAME"), the engine that holds them,
// and each one's fencing token.
struct TakenOver {
  std::string scope;
  std::string owner;
  std::map<uint32_t, uint64_t> tokens;  // partition -> fencing token
};

// How a repair write is guarded (Sink::Repair).
enum class RepairGuard : uint8_t {
  // Writes when the event's version is at least the view's: like Apply(),
  // but the same version is written again (fixing content changed behind the
  // sink's back). Never replaces a newer version, so it is safe beside the
  // engine and the push path.
  kNotOlder,
  // Writes whatever version the view holds (a view ahead of storage). Only
  // safe when the caller re-reads storage afterwards and re-applies what
  // changed meanwhile (`sluice verify --repair` does).
  kAny,
};

std::string_view DifferenceKindName(Difference::Kind kind);

class Sink {
 public:
  virtual ~Sink() = default;

  virtual const std::string& name() const = 0;
  virtual Capabilities capabilities() const = 0;

  virtual Status Open() = 0;
  virtual ApplyResult Apply(std::span<const ChangeEvent> events) = 0;
  // Pipelining, for a sink whose Capabilities::pipeline is above 1: Send()
  // starts applying a chunk and returns without waiting for the server;
  // Receive() waits for the oldest chunk sent and not yet received and
  // returns what Apply() would have returned for it. The caller keeps at
  // most `pipeline` chunks sent and not received, keeps each chunk's events
  // alive until its Receive(), and calls nothing else on the sink while
  // any chunk is in flight. Chunks in flight together may reach the server
  // in any order: of two events of one entity in different chunks the
  // older may come back kStale (the version check keeps the newer, as it
  // would for a retry). After a failed Receive() the caller receives the
  // others in flight (their results are moot), closes the sink and sends
  // every one of them again. The defaults (pipeline 1) are never called.
  virtual void Send(std::span<const ChangeEvent> events);
  virtual ApplyResult Receive();
  // Work on events ahead of Apply() (Capabilities::prepares): the engine's
  // preparer thread calls it on each batch read, in order, so that it
  // overlaps the writes of the batches before and the reads of the next ones
  // (a sink with view code runs the code there). It may set ChangeEvent::prepared, which Apply() then uses;
  // Apply() still takes events nobody prepared. Called by one thread at a
  // time, possibly while another calls Apply(): it touches nothing Apply()
  // does.
  virtual void Prepare(std::span<ChangeEvent> events) { (void)events; }
  // Makes what Apply() acknowledged since the last Flush() durable (see the
  // contract above); ok, kUnavailable or kFailedPrecondition.
  virtual Status Flush() { return Status::Ok(); }
  // The engine has just taken these source partitions over (from another
  // engine, or at its start) and applies them from now on, under the given
  // fencing tokens. A sink that fences writers per partition (the Kafka
  // sink's transactional producers) fences them here, so that what a former
  // owner left unfinished is settled at once, not at the partition's next
  // event; a sink that writes in MySQL beside the leases (an aggregate view)
  // can keep the tokens and write only while they are current. Called after
  // Open(); the default does nothing. An error is logged and the call is
  // repeated at the next lease round (with the same tokens: a sink makes
  // that cheap for what it already did). A sink that says
  // Capabilities::stays_open_at_takeover learns here what the partitions'
  // former owner wrote, and its Apply() learns whatever a failed TakeOver()
  // did not before it writes those partitions.
  virtual Status TakeOver(const TakenOver& taken) {
    (void)taken;
    return Status::Ok();
  }
  // Called by the engine's applier, on the thread that applies (between
  // Apply calls), about every offset flush interval whether or not events
  // come (an open sink only). A sink may let go of what it holds for
  // partitions that stopped sending: the Kafka sink closes the
  // transactional producers of partitions without a batch for its
  // producer_idle. The default does nothing.
  virtual void Idle() {}
  // The engine no longer applies these source partitions: another engine
  // took them over, or this one lost their leases. Called on the applier's
  // thread between Apply calls, once their offsets are saved, on an open
  // sink. A sink may let go of what it holds for them only: the Kafka sink
  // closes their transactional producers (fenced by the new owner anyway)
  // instead of keeping them until producer_idle. Should the engine take
  // one back, TakeOver() comes first, as for any partition taken. The
  // default does nothing.
  virtual void Released(std::span<const uint32_t> partitions) { (void)partitions; }
  // A cheap round trip to the view's server: ok, kUnavailable or kFailedPrecondition.
  virtual Status Health() = 0;
  // Releases its connections; also after a failed or no Open(), and more
  // than once (the callers close after every failure).
  virtual void Close() = 0;

  // Compares the view with `truth` (every entity of the sink's type that has
  // events) and appends each difference: a live entity absent from the view
  // (missing), a view row of no live entity (extra), another version
  // (version mismatch), or the same version with other content (content
  // mismatch). Deleted entities must be absent (their tombstones are fine).
  virtual Status Verify(const std::vector<EntitySnapshot>& truth, std::vector<Difference>& differences) = 0;

  // A sink that is a log (a Kafka topic holds a record per event) is
  // checked record by record instead, against `history` (every event of the
  // sink's type), which it reads a page at a time: each event must have
  // exactly one record, in its partition's event order, with the same
  // event_id, entity, version, command and state (missing, duplicate,
  // out_of_order, content_mismatch otherwise), and every record must be an
  // event of `history` (phantom otherwise). The sink learns where
  // its log ends before it asks `history` for anything, so that every record
  // it reads is of an event `history` has. Only sinks whose capabilities say
  // verifies_history implement it.
  virtual Status VerifyHistory(HistoryPages& history, std::vector<Difference>& differences);

  // ---- entity checks and repair (capabilities().entity_checks), optional ----
  // Compares the view's rows of the given entities only, with one batched
  // read (a pipeline, one SELECT ... IN, one _mget), and appends each
  // difference as Verify() would, with view_version filled where the view
  // holds a version; it never looks at other entities (no extra rows of
  // unknown entities). A snapshot that is deleted with version 0 stands for
  // an entity storage has no events for: any live row of it is extra. The
  // default refuses (FailedPrecondition).
  virtual Status VerifyEntities(std::span<const EntitySnapshot> truth, std::vector<Difference>& differences);
  // Calls `each` with the entity ids of the view's live rows (keys,
  // documents; not tombstones), at most `page` at a time, until the view is
  // read or `each` fails: how a view is compared page by page without
  // holding all of it (engine/view_compare.h). In no set order, and an id
  // may come twice (Redis SCAN) or be missed if its row is written or
  // removed meanwhile; rows present throughout are all given. The default
  // refuses (FailedPrecondition); every sink with entity checks implements it.
  virtual Status ScanViewIds(size_t page, const std::function<Status(std::span<const std::string> ids)>& each);
  // Writes each event (the latest of its entity, from storage) under
  // `guard` instead of Apply()'s strictly-newer rule, with one result per
  // event: applied (written), stale (the guard kept the view's row) or
  // rejected. Under kAny, a deleted event with version 0 removes the
  // entity's row and its tombstone (an entity storage has no events for).
  // The default refuses (FailedPrecondition); so does a sink asked for kAny
  // without capabilities().overwrite.
  virtual ApplyResult Repair(std::span<const ChangeEvent> events, RepairGuard guard);

  // ---- rebuild (DESIGN 4.4), optional ----
  // A sink whose view can be rebuilt beside the live one and then swapped in
  // atomically returns a new, unopened sink (same name) that writes a fresh
  // shadow view; the shadow's first successful Open() replaces whatever an
  // earlier attempt left with an empty view. Reads only the configuration, so
  // any thread may call it. The default refuses, saying why.
  virtual Result<std::unique_ptr<Sink>> MakeRebuildShadow() const;
  // Called on the shadow (by its one caller) once it holds at least every
  // event the live view holds: makes the shadow the live view in one atomic
  // step and drops the old view. The live sink keeps working on the new view.
  virtual Status PromoteRebuildShadow();
};

// Builds the sink a config describes (not yet opened). `global` supplies the
// main storage connection for sinks that default to it.
Result<std::unique_ptr<Sink>> MakeSink(const config::SinkConfig& sink, const config::Config& global);

// Compiles the view code of every sink that has some, as starting the sink
// would (`sluice config check`): InvalidArgument listing each problem, one
// per line, as "sink NAME: FILE:LINE: ... (code at ORIGIN)".
Status CheckViewCode(const config::Config& config);

// The JSON value at an RFC 6901 pointer of a state, as text for a column or
// hash field: strings as their raw text, numbers and booleans as JSON text,
// objects and arrays as compact JSON; nullopt when absent or null.
std::optional<std::string> FieldText(const nlohmann::json& state, const std::string& pointer);

}  // namespace sluice::connectors
