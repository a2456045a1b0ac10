#include "sql/memory_tables.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "sql/delta_states.h"

namespace sluice::sql {

struct MemoryStorage::Tables {
  // (type, partition) -> event_id -> row
  std::map<std::pair<std::string, uint32_t>, std::map<uint64_t, EventRow>> events;
  // (sink, type) -> partition -> row
  std::map<std::pair<std::string, std::string>, std::map<uint32_t, OffsetRow>> offsets;
  std::vector<FiledDeadLetter> dead_letters;  // by id
  struct Lease {
    std::string owner;
    uint64_t token = 0;
    std::chrono::steady_clock::time_point expires{};  // the validity it got when taken
  };
  // (scope, type) -> partition -> lease
  std::map<std::pair<std::string, std::string>, std::map<uint32_t, Lease>> leases;
  // sluice_lease_holders: (scope, type) -> owner -> until when all its leases there are valid
  std::map<std::pair<std::string, std::string>, std::map<std::string, std::chrono::steady_clock::time_point>> holders;
  // sluice_lease_log: (scope, type, partition, token) -> its hold, times in
  // system-clock ms (steady_clock mapped at the moment it is written)
  std::map<std::tuple<std::string, std::string, uint32_t, uint64_t>, LeaseSpan> lease_log;
  struct Member {
    std::string address;
    std::chrono::steady_clock::time_point heartbeat{};
  };
  // group -> member -> its last heartbeat
  std::map<std::string, std::map<std::string, Member>> members;
  // (group, member) -> the LeaseTable whose session claimed it (LeaseTable::Claim)
  std::map<std::pair<std::string, std::string>, const void*> claims;
  // sluice_archive_segments: (type, partition) -> first_event_id -> segment
  std::map<std::pair<std::string, uint32_t>, std::map<uint64_t, SegmentRecord>> segments;
  // (type, partition) -> the ArchiveTable whose session holds its archiving lock
  std::map<std::pair<std::string, uint32_t>, const void*> archive_locks;
};

namespace {

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Status Duplicate(const std::string& key) {
  // The text sql::Connection gives MariaDB's error 1062, which DuplicateKeyName reads.
  return Aborted("MySQL error 1062 (23000): Duplicate entry for key '" + key + "'");
}

using Lock = std::lock_guard<std::mutex>;

class MemoryAppend : public EventAppend {
 public:
  MemoryAppend(std::string type, uint32_t partition) : type_(std::move(type)), partition_(partition) {}
  bool TryAdd(const NewEvent& e, size_t max_bytes) override {
    // About what the INSERT's row would take.
    const size_t row_bytes = 64 + e.entity_id.size() + e.command_id.size() + e.command_name.size() +
                             e.request.size() + e.response.size() +
                             (e.deleted ? 0 : e.delta.empty() ? e.state.size() : e.delta.size());
    if (!rows_.empty() && bytes_ + row_bytes > max_bytes) return false;
    bytes_ += row_bytes;
    EventRow r;
    r.event_id = e.event_id;
    r.entity_id = e.entity_id;
    r.version = e.version;
    r.command_id = e.command_id;
    r.command_name = e.command_name;
    r.expected_version = e.expected_version;
    r.request = e.request;
    r.response = e.response;
    r.deleted = e.deleted;
    if (!e.deleted && !e.delta.empty()) {
      r.delta = e.delta;  // the state is made again on every read, as from MariaDB
    } else if (!e.deleted) {
      r.state = e.state;
    }
    rows_.push_back(std::move(r));
    return true;
  }
  size_t rows() const override { return rows_.size(); }

  std::string type_;
  uint32_t partition_;
  std::vector<EventRow> rows_;
  size_t bytes_ = 64;
};

class MemoryEventLog : public EventLog {
 public:
  explicit MemoryEventLog(std::shared_ptr<MemoryStorage> s) : s_(std::move(s)) {}

  bool healthy() const override { return open_; }
  Status Open() override {
    if (open_) return Status::Ok();
    return s_->Enter(MemoryStorage::Op::kOpen, &open_);
  }

  Result<uint64_t> Head(const std::string& type, uint32_t partition) override {
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kHead));
    Lock lock(s_->mu());
    const auto& t = s_->tables().events[{type, partition}];
    return t.empty() ? uint64_t{0} : t.rbegin()->first;
  }

  Result<std::map<uint32_t, uint64_t>> Heads(const std::string& type,
                                             const std::vector<uint32_t>& partitions) override {
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kHead));
    Lock lock(s_->mu());
    std::map<uint32_t, uint64_t> out;
    for (const uint32_t p : partitions) {
      const auto& t = s_->tables().events[{type, p}];
      out[p] = t.empty() ? uint64_t{0} : t.rbegin()->first;
    }
    return out;
  }

  Result<std::map<uint32_t, double>> SecondsSinceCommit(
      const std::string& type, const std::vector<std::pair<uint32_t, uint64_t>>& events) override {
    std::map<uint32_t, double> out;
    if (events.empty()) return out;  // as the MariaDB log: no round trip
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kSecondsSinceCommit));
    Lock lock(s_->mu());
    for (const auto& [p, event_id] : events) {
      const auto& t = s_->tables().events[{type, p}];
      const auto it = t.find(event_id);
      if (it != t.end()) out[p] = std::max(0.0, static_cast<double>(NowUs() - it->second.committed_at_us) / 1e6);
    }
    return out;
  }

  Result<std::map<uint32_t, std::vector<EventRow>>> ReadAfter(const std::string& type,
                                                              const std::vector<std::pair<uint32_t, uint64_t>>& from,
                                                              uint32_t limit, Columns columns) override {
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kReadAfter));
    Lock lock(s_->mu());
    std::map<uint32_t, std::vector<EventRow>> out;
    for (const auto& [partition, after] : from) {
      auto& list = out[partition];
      const auto& t = s_->tables().events[{type, partition}];
      for (auto it = t.upper_bound(after); it != t.end() && list.size() < limit; ++it) {
        list.push_back(columns == Columns::kFull ? WithBodies(it->second) : Read(it->second));
      }
      RETURN_IF_ERROR(ResolveLocked(type, partition, list));
    }
    return out;
  }

  Result<std::vector<EventRow>> AtVersions(const std::string& type, uint32_t partition,
                                           const std::vector<std::pair<std::string, uint64_t>>& keys) override {
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kAtVersions));
    Lock lock(s_->mu());
    const std::set<std::pair<std::string, uint64_t>> wanted(keys.begin(), keys.end());
    std::vector<EventRow> out;
    for (const auto& [event_id, row] : s_->tables().events[{type, partition}]) {
      if (!wanted.count({row.entity_id, row.version})) continue;
      EventRow e;
      e.entity_id = row.entity_id;
      e.version = row.version;
      e.deleted = row.deleted;
      e.state = row.state;
      e.delta = row.delta;
      e.archived = row.archived;
      e.event_id = event_id;
      out.push_back(std::move(e));
    }
    RETURN_IF_ERROR(ResolveLocked(type, partition, out));
    return out;
  }

  Result<std::vector<EventRow>> LatestOf(const std::string& type, uint32_t partition,
                                         const std::vector<std::string>& ids) override {
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kLatestOf));
    Lock lock(s_->mu());
    const std::set<std::string> wanted(ids.begin(), ids.end());
    std::vector<EventRow> out;
    for (auto& [id, row] : Latest(type, partition)) {
      if (wanted.count(id)) out.push_back(Read(std::move(row)));
    }
    RETURN_IF_ERROR(ResolveLocked(type, partition, out));
    return out;
  }

  Result<std::vector<EventRow>> LatestAfter(const std::string& type, uint32_t partition, const std::string& after_id,
                                            uint32_t limit) override {
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kLatestAfter));
    Lock lock(s_->mu());
    auto latest = Latest(type, partition);
    std::vector<EventRow> out;
    // std::string compares bytewise, as VARBINARY sorts.
    for (auto it = latest.upper_bound(after_id); it != latest.end() && (limit == 0 || out.size() < limit); ++it) {
      out.push_back(Read(std::move(it->second)));
    }
    RETURN_IF_ERROR(ResolveLocked(type, partition, out));
    return out;
  }

  Result<std::map<std::string, uint64_t>> LatestVersions(const std::string& type, uint32_t partition,
                                                         const std::vector<std::string>& ids) override {
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kLatestVersions));
    Lock lock(s_->mu());
    const std::set<std::string> wanted(ids.begin(), ids.end());
    std::map<std::string, uint64_t> out;
    for (const auto& [id, row] : Latest(type, partition)) {
      if (wanted.count(id)) out[id] = row.version;
    }
    return out;
  }

  Result<std::vector<EventRow>> ByIds(const std::string& type, uint32_t partition,
                                      const std::vector<uint64_t>& event_ids) override {
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kByIds));
    Lock lock(s_->mu());
    const std::set<uint64_t> wanted(event_ids.begin(), event_ids.end());
    const auto& t = s_->tables().events[{type, partition}];
    std::vector<EventRow> out;
    for (uint64_t id : wanted) {
      if (const auto it = t.find(id); it != t.end()) out.push_back(WithBodies(it->second));
    }
    RETURN_IF_ERROR(ResolveLocked(type, partition, out));
    return out;
  }

  Result<std::vector<EventRow>> History(const std::string& type, uint32_t partition, const std::string& entity_id,
                                        uint64_t after_version, uint32_t limit) override {
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kHistory));
    Lock lock(s_->mu());
    std::map<uint64_t, EventRow> by_version;
    for (const auto& [event_id, row] : s_->tables().events[{type, partition}]) {
      if (row.entity_id == entity_id && row.version > after_version) by_version.emplace(row.version, row);
    }
    std::vector<EventRow> out;
    for (auto& [version, row] : by_version) {
      if (out.size() >= limit) break;
      EventRow r = std::move(row);
      r.expected_version.reset();
      out.push_back(std::move(r));
    }
    RETURN_IF_ERROR(ResolveLocked(type, partition, out));
    return out;
  }

  Result<std::vector<EventRow>> FindCommands(const std::string& type, uint32_t partition,
                                             const std::vector<std::pair<std::string, std::string>>& commands) override {
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kFindCommands));
    Lock lock(s_->mu());
    const std::set<std::pair<std::string, std::string>> wanted(commands.begin(), commands.end());
    std::vector<EventRow> out;
    for (const auto& [id, row] : s_->tables().events[{type, partition}]) {
      if (wanted.count({row.entity_id, row.command_id})) out.push_back(row);
    }
    return out;
  }

  std::unique_ptr<EventAppend> NewAppend(const std::string& type, uint32_t partition) override {
    return std::make_unique<MemoryAppend>(type, partition);
  }

  Status Append(EventAppend& append) override {
    if (append.rows() == 0) return Status::Ok();
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kAppend));
    auto& a = static_cast<MemoryAppend&>(append);
    Lock lock(s_->mu());
    return s_->InsertLocked(a.type_, a.partition_, a.rows_);
  }

  // The model of staged appends: their keys are checked against what is
  // committed when they are staged and again at their commit, where a row
  // another session committed meanwhile makes it fail (kAborted) as a
  // conflict found at commit would. Until then no other session sees them.
  // Appends of several tables are one transaction, stored all or nothing.
  Status Stage(EventAppend& append) override {
    if (append.rows() == 0) return Status::Ok();
    auto& a = static_cast<MemoryAppend&>(append);
    std::vector<MemoryAppend> staged = std::move(staged_);
    staged_.clear();
    if (!staged.empty() && !open_) return Unavailable("the session of the staged appends was lost");
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kAppend));
    auto same = std::find_if(staged.begin(), staged.end(), [&](const MemoryAppend& m) {
      return m.type_ == a.type_ && m.partition_ == a.partition_;
    });
    if (same == staged.end()) same = staged.insert(staged.end(), MemoryAppend(a.type_, a.partition_));
    for (const auto& r : a.rows_) same->rows_.push_back(r);
    Lock lock(s_->mu());
    RETURN_IF_ERROR(s_->CheckLocked(same->type_, same->partition_, same->rows_));
    staged_ = std::move(staged);
    return Status::Ok();
  }
  Status Commit() override {
    if (staged_.empty()) return Status::Ok();
    std::vector<MemoryAppend> staged = std::move(staged_);
    staged_.clear();
    // Never on a new session: what was staged went with the old one.
    if (!open_) return Unavailable("the session of the staged appends was lost before their COMMIT");
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kCommit));
    Lock lock(s_->mu());
    for (const auto& a : staged) RETURN_IF_ERROR(s_->CheckLocked(a.type_, a.partition_, a.rows_));
    for (auto& a : staged) RETURN_IF_ERROR(s_->InsertLocked(a.type_, a.partition_, std::move(a.rows_)));
    return Status::Ok();
  }
  void Rollback() override { staged_.clear(); }

 private:
  Status Begin(MemoryStorage::Op op) {
    RETURN_IF_ERROR(Open());
    return s_->Enter(op, &open_);
  }
  // Under the mutex: the full state of the rows of a read that stored a
  // delta, from each entity's chain (its rows from the nearest snapshot).
  Status ResolveLocked(const std::string& type, uint32_t partition, std::vector<EventRow>& rows) {
    return deltas_.Resolve(type, partition, rows, [&](const std::vector<std::pair<std::string, uint64_t>>& want) {
      std::vector<EventRow> chain;
      for (const auto& [id, version] : want) {
        std::map<uint64_t, const EventRow*> versions;
        for (const auto& [event_id, row] : s_->tables().events[{type, partition}]) {
          if (row.entity_id == id && row.version <= version) versions[row.version] = &row;
        }
        uint64_t snapshot = 0;
        for (const auto& [v, row] : versions) {
          if (row->delta.empty() && !row->archived) snapshot = v;
        }
        for (const auto& [v, row] : versions) {
          if (v >= snapshot) chain.push_back(*row);
        }
      }
      return Result<std::vector<EventRow>>(std::move(chain));
    });
  }
  // Under the mutex: the latest row of each entity of (type, partition), by entity_id.
  std::map<std::string, EventRow> Latest(const std::string& type, uint32_t partition) {
    std::map<std::string, EventRow> out;
    for (const auto& [event_id, row] : s_->tables().events[{type, partition}]) {
      auto it = out.find(row.entity_id);
      if (it == out.end() || it->second.version < row.version) out[row.entity_id] = row;
    }
    return out;
  }
  // The columns of ReadAfter (kFull) of a stored row.
  static EventRow WithBodies(EventRow row) {
    row.expected_version.reset();
    return row;
  }
  // The columns of ReadAfter (kView) of a stored row.
  static EventRow Read(EventRow row) {
    row.request.clear();
    row.response.clear();
    row.expected_version.reset();
    return row;
  }

  std::shared_ptr<MemoryStorage> s_;
  bool open_ = false;
  DeltaStates deltas_;
  std::vector<MemoryAppend> staged_;  // Stage()d, not committed: one per table
};

class MemoryOffsetTable : public OffsetTable {
 public:
  explicit MemoryOffsetTable(std::shared_ptr<MemoryStorage> s) : s_(std::move(s)) {}

  Result<std::map<uint32_t, OffsetRow>> Load(const std::string& sink, const std::string& type) override {
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kOffsetsLoad));
    Lock lock(s_->mu());
    return s_->tables().offsets[{sink, type}];
  }
  Status Save(const std::string& sink, const std::string& type, const std::map<uint32_t, OffsetRow>& rows) override {
    if (rows.empty()) return Status::Ok();
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kOffsetsSave));
    Lock lock(s_->mu());
    auto& stored = s_->tables().offsets[{sink, type}];
    for (const auto& [p, row] : rows) {
      stored[p] = row;
      stored[p].last_error = row.last_error.substr(0, 2000);
    }
    return Status::Ok();
  }
  Result<std::set<uint32_t>> SaveFenced(const std::string& sink, const std::string& type,
                                        const std::map<uint32_t, OffsetRow>& rows, const Fence& fence) override {
    std::set<uint32_t> refused;
    if (rows.empty()) return refused;
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kOffsetsSave));
    Lock lock(s_->mu());
    auto& leases = s_->tables().leases[{fence.scope, type}];
    auto& stored = s_->tables().offsets[{sink, type}];
    for (const auto& [p, row] : rows) {
      const auto lease = leases.find(p);
      const auto token = fence.tokens.find(p);
      if (lease == leases.end() || token == fence.tokens.end() || lease->second.owner != fence.owner ||
          lease->second.token != token->second) {
        refused.insert(p);
        continue;
      }
      stored[p] = row;
      stored[p].last_error = row.last_error.substr(0, 2000);
    }
    return refused;
  }
  Status Delete(const std::string& sink, const std::string& type) override {
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kOffsetsDelete));
    Lock lock(s_->mu());
    s_->tables().offsets.erase({sink, type});
    return Status::Ok();
  }

 private:
  Status Begin(MemoryStorage::Op op) {
    if (!open_) RETURN_IF_ERROR(s_->Enter(MemoryStorage::Op::kOpen, &open_));
    return s_->Enter(op, &open_);
  }
  std::shared_ptr<MemoryStorage> s_;
  bool open_ = false;
};

class MemoryLeaseTable : public LeaseTable {
 public:
  explicit MemoryLeaseTable(std::shared_ptr<MemoryStorage> s) : s_(std::move(s)) {}
  // Its session ends: its claims go (as a named lock with a MariaDB session).
  ~MemoryLeaseTable() override {
    Lock lock(s_->mu());
    std::erase_if(s_->tables().claims, [this](const auto& c) { return c.second == this; });
  }

  Result<std::map<uint32_t, uint64_t>> Acquire(const std::string& scope, const std::string& type,
                                               const std::vector<uint32_t>& partitions, const std::string& owner,
                                               std::chrono::milliseconds ttl,
                                               const std::map<uint32_t, uint64_t>& known) override {
    std::map<uint32_t, uint64_t> held;
    if (partitions.empty()) return held;
    RETURN_IF_ERROR(Begin());
    Lock lock(s_->mu());
    const auto now = std::chrono::steady_clock::now();
    auto& leases = s_->tables().leases[{scope, type}];
    auto& holders = s_->tables().holders[{scope, type}];
    holders[owner] = now + ttl;  // renews every lease naming owner here
    // So the ones naming it that it did not ask for (forgot) are let go.
    const std::set<uint32_t> asked(partitions.begin(), partitions.end());
    for (auto& [p, l] : leases) {
      if (l.owner != owner || asked.count(p)) continue;
      LeaseSpan& span = Span(scope, type, p, l.token);
      span.ended_at_ms = std::min(span.ended_at_ms, NowMs());
      l.owner.clear();
      l.expires = {};
    }
    for (const uint32_t p : asked) {
      MemoryStorage::Tables::Lease& l = leases[p];
      const bool mine = l.owner == owner;
      const auto k = known.find(p);
      if (mine && k != known.end() && k->second == l.token) {
        held[p] = l.token;
        continue;
      }
      if (Live(scope, type, l, now) && !mine) continue;
      if (!l.owner.empty()) {  // the hold it ends: a former process of owner now, another owner's at its expiry
        LeaseSpan& former = Span(scope, type, p, l.token);
        former.ended_at_ms = std::min(former.ended_at_ms, mine ? NowMs() : EndMs(scope, type, l, now));
      }
      l.owner = owner;
      ++l.token;
      l.expires = now + ttl;
      Span(scope, type, p, l.token) = {scope, type, p, l.token, owner, NowMs(), kOpen};
      held[p] = l.token;
    }
    return held;
  }

  Status Release(const std::string& scope, const std::string& type, const std::map<uint32_t, uint64_t>& held,
                 const std::string& owner) override {
    RETURN_IF_ERROR(Begin());
    Lock lock(s_->mu());
    auto& leases = s_->tables().leases[{scope, type}];
    const auto now = std::chrono::steady_clock::now();
    for (const auto& [p, token] : held) {
      const auto it = leases.find(p);
      if (it == leases.end() || it->second.owner != owner || it->second.token != token) continue;
      // It ends now, or when its owner's leases expired if they did.
      const auto& holders = s_->tables().holders[{scope, type}];
      const auto h = holders.find(owner);
      LeaseSpan& span = Span(scope, type, p, token);
      span.ended_at_ms = std::min({span.ended_at_ms, NowMs(), h == holders.end() ? NowMs() : MsAt(h->second, now)});
      it->second.owner.clear();
      it->second.expires = {};
    }
    return Status::Ok();
  }

  Result<std::vector<LeaseSpan>> History(const std::string& scope) override {
    RETURN_IF_ERROR(Begin());
    Lock lock(s_->mu());
    std::vector<LeaseSpan> out;
    const auto now = std::chrono::steady_clock::now();
    for (const auto& [key, span] : s_->tables().lease_log) {
      if (!scope.empty() && span.scope != scope) continue;
      out.push_back(span);
      if (span.ended_at_ms == kOpen) {  // runs: ends when its owner's leases expire
        const auto& holders = s_->tables().holders[{span.scope, span.entity_type}];
        const auto h = holders.find(span.owner);
        out.back().ended_at_ms = h == holders.end() ? span.taken_at_ms : MsAt(h->second, now);
      }
    }
    return out;
  }

  Result<std::vector<LeaseRow>> List(const std::string& scope) override {
    RETURN_IF_ERROR(Begin());
    Lock lock(s_->mu());
    const auto now = std::chrono::steady_clock::now();
    std::vector<LeaseRow> out;
    for (const auto& [key, leases] : s_->tables().leases) {
      if (!scope.empty() && key.first != scope) continue;
      for (const auto& [p, l] : leases) {
        const auto until = Expiry(key.first, key.second, l);
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count();
        out.push_back({key.first, key.second, p, l.owner, l.token, until > now ? std::max<int64_t>(left, 1) : 0});
      }
    }
    return out;
  }

  Result<bool> Claim(const std::string& group, const std::string& member) override {
    RETURN_IF_ERROR(Begin());
    Lock lock(s_->mu());
    auto& holder = s_->tables().claims[{group, member}];
    if (holder != nullptr && holder != this) return false;
    holder = this;
    return true;
  }

  Status Heartbeat(const std::string& group, const std::string& member, const std::string& address) override {
    RETURN_IF_ERROR(Begin());
    Lock lock(s_->mu());
    s_->tables().members[group][member] = {address, std::chrono::steady_clock::now()};
    return Status::Ok();
  }

  Result<std::vector<MemberRow>> Members(const std::string& group, std::chrono::milliseconds ttl) override {
    RETURN_IF_ERROR(Begin());
    Lock lock(s_->mu());
    const auto now = std::chrono::steady_clock::now();
    std::vector<MemberRow> out;
    for (const auto& [name, m] : s_->tables().members[group]) {
      const auto age = std::chrono::duration_cast<std::chrono::milliseconds>(now - m.heartbeat);
      if (age < ttl) out.push_back({name, m.address, age.count()});
    }
    return out;
  }

  Status Leave(const std::string& group, const std::string& member) override {
    RETURN_IF_ERROR(Begin());
    Lock lock(s_->mu());
    s_->tables().members[group].erase(member);
    return Status::Ok();
  }

 private:
  Status Begin() {
    if (!open_) RETURN_IF_ERROR(s_->Enter(MemoryStorage::Op::kOpen, &open_));
    return s_->Enter(MemoryStorage::Op::kLeases, &open_);
  }
  // Under the lock: the log row of (scope, type, p, token), made when missing.
  LeaseSpan& Span(const std::string& scope, const std::string& type, uint32_t p, uint64_t token) {
    return s_->tables().lease_log[{scope, type, p, token}];
  }
  static int64_t NowMs() { return NowUs() / 1000; }
  static constexpr int64_t kOpen = std::numeric_limits<int64_t>::max();  // a hold that runs (kLeaseOpen)
  // Under the lock: until when lease l is valid (its own validity, or its owner's), and whether it still is.
  std::chrono::steady_clock::time_point Expiry(const std::string& scope, const std::string& type,
                                               const MemoryStorage::Tables::Lease& l) {
    if (l.owner.empty()) return {};
    const auto& holders = s_->tables().holders[{scope, type}];
    const auto h = holders.find(l.owner);
    return h == holders.end() ? l.expires : std::max(l.expires, h->second);
  }
  bool Live(const std::string& scope, const std::string& type, const MemoryStorage::Tables::Lease& l,
            std::chrono::steady_clock::time_point now) {
    return Expiry(scope, type, l) > now;
  }
  // The system-clock ms of steady time point t.
  static int64_t MsAt(std::chrono::steady_clock::time_point t, std::chrono::steady_clock::time_point now) {
    return NowMs() + std::chrono::duration_cast<std::chrono::milliseconds>(t - now).count();
  }
  int64_t EndMs(const std::string& scope, const std::string& type, const MemoryStorage::Tables::Lease& l,
                std::chrono::steady_clock::time_point now) {
    return MsAt(Expiry(scope, type, l), now);
  }
  std::shared_ptr<MemoryStorage> s_;
  bool open_ = false;
};

class MemoryDeadLetterTable : public DeadLetterTable {
 public:
  explicit MemoryDeadLetterTable(std::shared_ptr<MemoryStorage> s) : s_(std::move(s)) {}

  Status Add(const DeadLetter& d) override {
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kDeadLetterAdd));
    Lock lock(s_->mu());
    auto& filed = s_->tables().dead_letters;
    for (const auto& f : filed) {
      const DeadLetter& x = f.letter;
      if (std::tie(x.sink, x.entity_type, x.partition, x.event_id) ==
          std::tie(d.sink, d.entity_type, d.partition, d.event_id)) {
        return Status::Ok();  // INSERT IGNORE
      }
    }
    FiledDeadLetter f;
    f.id = filed.empty() ? 1 : filed.back().id + 1;
    f.letter = d;
    f.letter.error = d.error.substr(0, 4000);
    f.created_at = TimestampText(NowUs());
    filed.push_back(std::move(f));
    return Status::Ok();
  }

  Result<std::set<std::pair<uint32_t, uint64_t>>> Among(
      const std::string& sink, const std::string& type,
      const std::vector<std::pair<uint32_t, uint64_t>>& events) override {
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kDeadLetterAmong));
    Lock lock(s_->mu());
    const std::set<std::pair<uint32_t, uint64_t>> wanted(events.begin(), events.end());
    std::set<std::pair<uint32_t, uint64_t>> out;
    for (const auto& f : s_->tables().dead_letters) {
      const DeadLetter& x = f.letter;
      if (x.sink == sink && x.entity_type == type && wanted.count({x.partition, x.event_id})) {
        out.emplace(x.partition, x.event_id);
      }
    }
    return out;
  }

  Result<std::vector<FiledDeadLetter>> List(const DeadLetterSelection& which) override {
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kDeadLetterList));
    Lock lock(s_->mu());
    std::vector<FiledDeadLetter> out;
    for (const auto& f : s_->tables().dead_letters) {
      if (Selected(f, which)) out.push_back(f);
    }
    return out;
  }

  Result<uint64_t> Count(const DeadLetterSelection& which) override {
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kDeadLetterCount));
    Lock lock(s_->mu());
    uint64_t n = 0;
    for (const auto& f : s_->tables().dead_letters) n += Selected(f, which) ? 1 : 0;
    return n;
  }

  Result<uint64_t> Resolve(const DeadLetterSelection& which, std::string_view resolution) override {
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kDeadLetterResolve));
    Lock lock(s_->mu());
    DeadLetterSelection unresolved = which;
    unresolved.unresolved_only = true;
    uint64_t n = 0;
    for (auto& f : s_->tables().dead_letters) {
      if (!Selected(f, unresolved)) continue;
      f.resolved_at = TimestampText(NowUs());
      f.resolution = resolution;
      ++n;
    }
    return n;
  }

  Status SetError(uint64_t id, std::string_view error) override {
    RETURN_IF_ERROR(Begin(MemoryStorage::Op::kDeadLetterSetError));
    Lock lock(s_->mu());
    for (auto& f : s_->tables().dead_letters) {
      if (f.id == id) f.letter.error = error.substr(0, 4000);
    }
    return Status::Ok();
  }

 private:
  static bool Selected(const FiledDeadLetter& f, const DeadLetterSelection& which) {
    return (!which.unresolved_only || !f.resolved_at) && (!which.sink || f.letter.sink == *which.sink) &&
           (!which.id || f.id == *which.id);
  }

  Status Begin(MemoryStorage::Op op) {
    if (!open_) RETURN_IF_ERROR(s_->Enter(MemoryStorage::Op::kOpen, &open_));
    return s_->Enter(op, &open_);
  }
  std::shared_ptr<MemoryStorage> s_;
  bool open_ = false;
};


class MemoryArchiveTable : public ArchiveTable {
  using Guard = std::lock_guard<std::mutex>;  // Lock is a method here

 public:
  explicit MemoryArchiveTable(std::shared_ptr<MemoryStorage> s) : s_(std::move(s)) {}
  // Its session ends: its locks go.
  ~MemoryArchiveTable() override {
    Guard lock(s_->mu());
    std::erase_if(s_->tables().archive_locks, [this](const auto& l) { return l.second == this; });
  }

  Result<bool> Lock(const std::string& type, uint32_t partition) override {
    RETURN_IF_ERROR(Begin());
    Guard lock(s_->mu());
    auto [it, taken] = s_->tables().archive_locks.emplace(std::make_pair(type, partition), this);
    return taken || it->second == this;
  }
  Status Unlock(const std::string& type, uint32_t partition) override {
    RETURN_IF_ERROR(Begin());
    Guard lock(s_->mu());
    auto& locks = s_->tables().archive_locks;
    if (auto it = locks.find({type, partition}); it != locks.end() && it->second == this) locks.erase(it);
    return Status::Ok();
  }

  Result<std::vector<SegmentRecord>> Segments(const std::string& type, uint32_t partition) override {
    RETURN_IF_ERROR(Begin());
    Guard lock(s_->mu());
    std::vector<SegmentRecord> out;
    for (const auto& [first, seg] : s_->tables().segments[{type, partition}]) out.push_back(seg);
    return out;
  }

  Result<std::map<uint32_t, uint64_t>> Watermarks(const std::string& type,
                                                  const std::vector<uint32_t>& partitions) override {
    RETURN_IF_ERROR(Begin());
    Guard lock(s_->mu());
    std::map<uint32_t, uint64_t> out;
    for (const uint32_t p : partitions) out[p] = WatermarkLocked(type, p);
    return out;
  }

  Result<std::vector<HotRow>> PlanRows(const std::string& type, uint32_t partition, uint64_t after, uint64_t upto,
                                       uint64_t lookback) override {
    RETURN_IF_ERROR(Begin());
    Guard lock(s_->mu());
    const auto& table = s_->tables().events[{type, partition}];
    std::map<std::string, uint64_t> lowest;  // entity -> its lowest version in (after, upto]
    for (const auto& [id, row] : table) {
      if (id <= after || id > upto) continue;
      auto [it, fresh] = lowest.emplace(row.entity_id, row.version);
      if (!fresh) it->second = std::min(it->second, row.version);
    }
    std::map<std::pair<std::string, uint64_t>, HotRow> sorted;
    for (const auto& [id, row] : table) {
      const auto low = lowest.find(row.entity_id);
      if (row.archived || id > upto || low == lowest.end() || row.version + lookback < low->second) continue;
      HotRow h;
      h.event_id = id;
      h.entity_id = row.entity_id;
      h.version = row.version;
      h.command_id = row.command_id;
      h.snapshot = row.delta.empty();
      h.committed_at_us = row.committed_at_us;
      sorted[{row.entity_id, row.version}] = std::move(h);
    }
    std::vector<HotRow> out;
    out.reserve(sorted.size());
    for (auto& [key, h] : sorted) out.push_back(std::move(h));
    return out;
  }

  Result<std::vector<EventRow>> RowsBetween(const std::string& type, uint32_t partition, uint64_t after,
                                            uint64_t upto, uint64_t max_bytes) override {
    RETURN_IF_ERROR(Begin());
    std::vector<EventRow> out;
    std::vector<std::pair<std::string, uint64_t>> deltas;
    {
      Guard lock(s_->mu());
      const auto& table = s_->tables().events[{type, partition}];
      uint64_t bytes = 0;
      for (auto it = table.upper_bound(after); it != table.end() && it->first <= upto && bytes < max_bytes; ++it) {
        if (it->second.archived) return FailedPrecondition("event " + std::to_string(it->first) + " is archived already");
        const EventRow& r = it->second;
        bytes += r.request.size() + r.response.size() + (r.delta.empty() ? r.state.size() : r.delta.size());
        out.push_back(it->second);
        if (!it->second.delta.empty()) deltas.emplace_back(it->second.entity_id, it->second.version);
      }
    }
    ASSIGN_OR_RETURN(auto states, s_->OpenEventLog()->AtVersions(type, partition, deltas));
    std::map<std::pair<std::string, uint64_t>, std::string> by_key;
    for (auto& r : states) by_key[{r.entity_id, r.version}] = std::move(r.state);
    for (auto& r : out) {
      if (r.delta.empty()) continue;
      auto it = by_key.find({r.entity_id, r.version});
      if (it == by_key.end()) return Internal("a delta of event " + std::to_string(r.event_id) + " could not be rebuilt");
      r.state = it->second;
    }
    return out;
  }

  Status Commit(const SegmentRecord& segment, const std::vector<uint64_t>& leaving) override {
    RETURN_IF_ERROR(Begin());
    Guard lock(s_->mu());
    const std::pair<std::string, uint32_t> key{segment.entity_type, segment.partition};
    const uint64_t watermark = WatermarkLocked(segment.entity_type, segment.partition);
    if (watermark + 1 != segment.first_event_id) {
      return Aborted("the archive moved to event " + std::to_string(watermark) + " meanwhile");
    }
    auto& table = s_->tables().events[key];
    for (const uint64_t id : leaving) {
      const auto it = table.find(id);
      if (id > segment.last_event_id) return InvalidArgument("event " + std::to_string(id) + " is above the segment");
      if (it == table.end() || it->second.archived) {
        return Aborted("event " + std::to_string(id) + " is not there or archived already");
      }
    }
    for (const uint64_t id : leaving) {
      EventRow& row = table[id];
      row.archived = true;
      row.request.clear();
      row.response.clear();
      row.state.clear();
      row.delta.clear();
    }
    SegmentRecord stored = segment;
    stored.created_at_us = NowUs();
    s_->tables().segments[key][segment.first_event_id] = std::move(stored);
    return Status::Ok();
  }

  Result<HotTableSize> Size(const std::string& type, uint32_t partition) override {
    RETURN_IF_ERROR(Begin());
    Guard lock(s_->mu());
    HotTableSize size;
    const auto& table = s_->tables().events[{type, partition}];
    size.rows = table.size();
    for (const auto& [id, row] : table) {
      size.bytes += 64 + row.request.size() + row.response.size() + row.state.size() + row.delta.size();
      if (row.archived) {
        ++size.stubs;
      } else if (size.oldest_event_id == 0) {
        size.oldest_event_id = id;
        size.oldest_committed_at_us = row.committed_at_us;
      }
    }
    return size;
  }

  Result<uint64_t> TableBytes(const std::string& type, uint32_t partition) override {
    ASSIGN_OR_RETURN(HotTableSize size, Size(type, partition));
    return size.bytes;
  }

 private:
  Status Begin() {
    if (!open_) {
      RETURN_IF_ERROR(s_->Enter(MemoryStorage::Op::kOpen, &open_));
    }
    return s_->Enter(MemoryStorage::Op::kArchive, &open_);
  }
  uint64_t WatermarkLocked(const std::string& type, uint32_t partition) {
    const auto& segs = s_->tables().segments[{type, partition}];
    return segs.empty() ? 0 : segs.rbegin()->second.last_event_id;
  }

  std::shared_ptr<MemoryStorage> s_;
  bool open_ = false;
};
}  // namespace

MemoryStorage::MemoryStorage() : tables_(std::make_unique<Tables>()) {}

std::shared_ptr<MemoryStorage> MemoryStorage::Create() { return std::shared_ptr<MemoryStorage>(new MemoryStorage()); }

std::unique_ptr<EventLog> MemoryStorage::OpenEventLog() {
  return std::make_unique<MemoryEventLog>(shared_from_this());
}
std::unique_ptr<OffsetTable> MemoryStorage::OpenOffsets() {
  return std::make_unique<MemoryOffsetTable>(shared_from_this());
}
std::unique_ptr<DeadLetterTable> MemoryStorage::OpenDeadLetters() {
  return std::make_unique<MemoryDeadLetterTable>(shared_from_this());
}
std::unique_ptr<LeaseTable> MemoryStorage::OpenLeases() { return std::make_unique<MemoryLeaseTable>(shared_from_this()); }
std::unique_ptr<ArchiveTable> MemoryStorage::OpenArchive() {
  return std::make_unique<MemoryArchiveTable>(shared_from_this());
}

void MemoryStorage::ExpireLeases(const std::string& scope, const std::string& type) {
  Lock lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  for (auto& [p, l] : tables_->leases[{scope, type}]) l.expires = {};
  for (auto& [owner, until] : tables_->holders[{scope, type}]) until = now;
}

void MemoryStorage::FailNext(Op op, Status status, int times) {
  Lock lock(mu_);
  for (int i = 0; i < times; ++i) failures_[op].push_back(status);
}

uint64_t MemoryStorage::calls(Op op) const {
  Lock lock(mu_);
  const auto it = calls_.find(op);
  return it == calls_.end() ? 0 : it->second;
}

void MemoryStorage::Hold(Op op) {
  Lock lock(mu_);
  held_.insert(op);
}

void MemoryStorage::Release(Op op) {
  {
    Lock lock(mu_);
    held_.erase(op);
  }
  released_.notify_all();
}

Status MemoryStorage::Enter(Op op, bool* healthy) {
  std::unique_lock lock(mu_);
  ++calls_[op];
  released_.wait(lock, [&] { return held_.count(op) == 0; });
  auto& queued = failures_[op];
  if (queued.empty()) {
    if (op == Op::kOpen) *healthy = true;
    return Status::Ok();
  }
  Status st = queued.front();
  queued.erase(queued.begin());
  if (st.code() == StatusCode::kUnavailable) *healthy = false;
  return st;
}

Status MemoryStorage::InsertLocked(const std::string& type, uint32_t partition, std::vector<EventRow> rows) {
  RETURN_IF_ERROR(CheckLocked(type, partition, rows));
  auto& table = tables_->events[{type, partition}];
  const int64_t now = NowUs();
  for (auto& r : rows) {
    if (r.committed_at_us == 0) r.committed_at_us = now;
    const uint64_t id = r.event_id;
    table.emplace(id, std::move(r));
  }
  return Status::Ok();
}

Status MemoryStorage::CheckLocked(const std::string& type, uint32_t partition, const std::vector<EventRow>& rows) {
  auto& table = tables_->events[{type, partition}];
  // All or nothing, checked in the order MariaDB reports: the first row's keys first.
  std::set<uint64_t> ids;
  std::set<std::pair<std::string, uint64_t>> versions;
  std::set<std::pair<std::string, std::string>> commands;
  for (const auto& [id, r] : table) {
    versions.emplace(r.entity_id, r.version);
    commands.emplace(r.entity_id, r.command_id);
  }
  for (const auto& r : rows) {
    if (table.count(r.event_id) || !ids.insert(r.event_id).second) return Duplicate("PRIMARY");
    if (!versions.emplace(r.entity_id, r.version).second) return Duplicate("uk_entity_version");
    if (!commands.emplace(r.entity_id, r.command_id).second) return Duplicate("uk_entity_command");
  }
  return Status::Ok();
}

Status MemoryStorage::Insert(const std::string& type, uint32_t partition, EventRow row) {
  Lock lock(mu_);
  std::vector<EventRow> rows;
  rows.push_back(std::move(row));
  return InsertLocked(type, partition, std::move(rows));
}

std::vector<EventRow> MemoryStorage::Events(const std::string& type, uint32_t partition) const {
  Lock lock(mu_);
  std::vector<EventRow> out;
  const auto it = tables_->events.find({type, partition});
  if (it == tables_->events.end()) return out;
  for (const auto& [id, row] : it->second) out.push_back(row);
  return out;
}

std::map<uint32_t, OffsetRow> MemoryStorage::Offsets(const std::string& sink, const std::string& type) const {
  Lock lock(mu_);
  const auto it = tables_->offsets.find({sink, type});
  return it == tables_->offsets.end() ? std::map<uint32_t, OffsetRow>{} : it->second;
}

std::vector<DeadLetter> MemoryStorage::DeadLetters() const {
  Lock lock(mu_);
  std::vector<DeadLetter> out;
  for (const auto& f : tables_->dead_letters) out.push_back(f.letter);
  return out;
}

std::vector<FiledDeadLetter> MemoryStorage::FiledDeadLetters() const {
  Lock lock(mu_);
  return tables_->dead_letters;
}

}  // namespace sluice::sql
