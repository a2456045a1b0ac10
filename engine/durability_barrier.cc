#include "engine/durability_barrier.h"

#include <algorithm>
#include <charconv>
#include <thread>

#include "core/log.h"

namespace sluice::engine {
namespace {

constexpr char kBarrierTable[] = "sluice_durability_barrier";

struct Lsns {
  uint64_t current = 0;
  uint64_t flushed = 0;
  bool has_current = false;
  bool has_flushed = false;
};

// A forced flush the server will refuse every time: no privilege
// (1142, 1044, 1227), a read-only server (1290) or table (1036). Anything
// else (a lock wait, a killed query) is tried again at the next round.
bool RefusedForGood(const Status& st) {
  for (const char* code : {"1142", "1044", "1227", "1290", "1036"}) {
    for (const char* after : {",", ")"}) {
      if (st.message().find(std::string("MySQL error ") + code + after) != std::string::npos) return true;
    }
  }
  return false;
}

Result<Lsns> ReadLsns(sql::Connection& conn) {
  ASSIGN_OR_RETURN(auto rows, conn.Query("SHOW GLOBAL STATUS LIKE 'Innodb_lsn\\_%'"));
  Lsns out;
  for (const auto& row : rows) {
    if (row.size() < 2 || !row[0] || !row[1]) continue;
    uint64_t v = 0;
    const std::string& text = *row[1];
    if (std::from_chars(text.data(), text.data() + text.size(), v).ec != std::errc()) continue;
    if (*row[0] == "Innodb_lsn_current") {
      out.current = v;
      out.has_current = true;
    } else if (*row[0] == "Innodb_lsn_flushed") {
      out.flushed = v;
      out.has_flushed = true;
    }
  }
  return out;
}

}  // namespace

DurabilityBarrier::DurabilityBarrier(sql::ConnectParams mysql, config::DurabilityBarrier mode,
                                     std::shared_ptr<metrics::DurabilityBarrierMetrics> metrics)
    : mysql_(std::move(mysql)), metrics_(std::move(metrics)), mode_(mode) {}

DurabilityBarrier::DurabilityBarrier(std::vector<std::shared_ptr<DurabilityBarrier>> parts)
    : parts_(std::move(parts)), mode_(config::DurabilityBarrier::kAuto) {}

DurabilityBarrier::~DurabilityBarrier() = default;

std::string DurabilityBarrier::mode() const {
  if (!parts_.empty()) return parts_.front()->mode();
  std::lock_guard lock(mu_);
  return std::string(config::DurabilityBarrierName(mode_));
}

DurabilityBarrier::Counters DurabilityBarrier::counters() const {
  if (!parts_.empty()) {
    Counters sum;
    for (const auto& part : parts_) {
      const Counters c = part->counters();
      sum.waits += c.waits;
      sum.rounds += c.rounds;
      sum.lsn_polls += c.lsn_polls;
      sum.forced_flushes += c.forced_flushes;
      sum.round_time += c.round_time;
    }
    return sum;
  }
  std::lock_guard lock(mu_);
  return counters_;
}

Status DurabilityBarrier::Wait() {
  if (!parts_.empty()) {
    for (const auto& part : parts_) RETURN_IF_ERROR(part->Wait());
    return Status::Ok();
  }
  std::unique_lock lock(mu_);
  ++counters_.waits;
  if (mode_ == config::DurabilityBarrier::kOff) return Status::Ok();
  const uint64_t ticket = ++next_ticket_;
  while (covered_ < ticket) {
    if (running_) {
      cv_.wait(lock);
      continue;
    }
    // Lead a round: it covers every ticket handed out so far, since each was
    // taken after its read returned, and the round starts after that.
    running_ = true;
    const uint64_t upto = next_ticket_;
    lock.unlock();
    const auto start = std::chrono::steady_clock::now();
    Status st = RunRound();
    const auto took = std::chrono::steady_clock::now() - start;
    if (metrics_) metrics_->Round(std::chrono::duration<double>(took).count(), st.ok());
    lock.lock();
    running_ = false;
    ++counters_.rounds;
    counters_.round_time += std::chrono::duration_cast<std::chrono::nanoseconds>(took);
    if (st.ok()) covered_ = std::max(covered_, upto);
    cv_.notify_all();
    // The waiters behind a failed round try again themselves.
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

Status DurabilityBarrier::Connect() {
  if (conn_ && conn_->healthy()) return Status::Ok();
  conn_.reset();
  ASSIGN_OR_RETURN(conn_, sql::Connection::Open(mysql_));
  // A round's own commit waits for no lock longer than a round may take.
  if (Status st = conn_->Execute("SET SESSION innodb_lock_wait_timeout=5").status(); !st.ok()) {
    conn_.reset();
    return st;
  }
  config::DurabilityBarrier mode;
  {
    std::lock_guard lock(mu_);
    mode = mode_;
  }
  if (mode == config::DurabilityBarrier::kAuto || mode == config::DurabilityBarrier::kLsn) {
    ASSIGN_OR_RETURN(Lsns lsns, ReadLsns(*conn_));
    const bool lsn_ok = lsns.has_current && lsns.has_flushed;
    if (mode == config::DurabilityBarrier::kLsn && !lsn_ok) {
      conn_.reset();
      return FailedPrecondition(
          "engine.durability_barrier is lsn, but the MySQL server does not report Innodb_lsn_current and "
          "Innodb_lsn_flushed (MariaDB does); use commit or auto");
    }
    mode = lsn_ok ? config::DurabilityBarrier::kLsn : config::DurabilityBarrier::kCommit;
  }
  table_ready_ = false;
  if (mode == config::DurabilityBarrier::kCommit) {
    if (Status st = EnsureBarrierTable(); !st.ok()) {
      conn_.reset();
      return st;
    }
  }
  std::lock_guard lock(mu_);
  mode_ = mode;
  return Status::Ok();
}

Status DurabilityBarrier::EnsureBarrierTable() {
  if (table_ready_) return Status::Ok();
  RETURN_IF_ERROR(conn_->Execute(std::string("CREATE TABLE IF NOT EXISTS ") + kBarrierTable +
                                 " (id TINYINT UNSIGNED NOT NULL PRIMARY KEY, n BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB")
                      .status());
  RETURN_IF_ERROR(conn_->Execute(std::string("INSERT IGNORE INTO ") + kBarrierTable + " (id, n) VALUES (1, 0)").status());
  table_ready_ = true;
  return Status::Ok();
}

Status DurabilityBarrier::RunRound() {
  RETURN_IF_ERROR(Connect());
  config::DurabilityBarrier mode;
  {
    std::lock_guard lock(mu_);
    mode = mode_;
  }
  return mode == config::DurabilityBarrier::kLsn ? LsnRound() : CommitRound();
}

Status DurabilityBarrier::LsnRound() {
  ASSIGN_OR_RETURN(Lsns first, ReadLsns(*conn_));
  const uint64_t target = first.current;
  if (first.flushed >= target) return Status::Ok();
  // The writers' commits flush the log; a group commit is a millisecond or
  // two away. Poll gently: 100 us, doubling to 2 ms. Past kPatience, flush
  // it with a commit of our own (once), then go on polling: under
  // innodb_flush_log_at_trx_commit=1 that commit has flushed past target.
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + kTimeout;
  auto pause = std::chrono::microseconds(100);
  bool forced = false;
  for (;;) {
    if (!forced && !force_refused_ && std::chrono::steady_clock::now() - start >= kPatience) {
      forced = true;
      Status st = EnsureBarrierTable();
      if (st.ok()) st = CommitRound();
      if (st.ok()) {
        std::lock_guard lock(mu_);
        ++counters_.forced_flushes;
      } else if (!conn_->healthy()) {
        return st;
      } else if (RefusedForGood(st)) {
        // No privilege to create or update the table, or a read-only
        // server: wait for the log as before, without asking again.
        force_refused_ = true;
        Log(LogLevel::kWarn, "engine: the durability barrier cannot commit a row of its own to flush the redo "
                             "log, so it waits for the server's own flush when nobody writes: " + st.message());
      }
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(2000));
    }
    ASSIGN_OR_RETURN(auto rows, conn_->Query("SHOW GLOBAL STATUS LIKE 'Innodb_lsn_flushed'"));
    {
      std::lock_guard lock(mu_);
      ++counters_.lsn_polls;
    }
    uint64_t flushed = 0;
    if (!rows.empty() && rows[0].size() >= 2 && rows[0][1]) {
      const std::string& text = *rows[0][1];
      (void)std::from_chars(text.data(), text.data() + text.size(), flushed);
    }
    if (flushed >= target) return Status::Ok();
    if (std::chrono::steady_clock::now() >= deadline) {
      return Unavailable("the MySQL server's redo log was not flushed past LSN " + std::to_string(target) +
                         " within " + std::to_string(kTimeout.count()) + "s (flushed: " + std::to_string(flushed) +
                         "); events read are held back until it is");
    }
  }
}

Status DurabilityBarrier::CommitRound() {
  // Autocommit: the statement is its own transaction, and it returns once
  // the log is flushed past its commit (innodb_flush_log_at_trx_commit=1).
  return conn_->Execute(std::string("UPDATE ") + kBarrierTable + " SET n = n + 1 WHERE id = 1").status();
}

ServerBarriers::ServerBarriers(const sql::StorageLayout& layout, config::DurabilityBarrier mode,
                               const std::shared_ptr<metrics::DurabilityBarrierMetrics>& metrics)
    : layout_(layout) {
  for (const sql::StorageServer& s : layout_.servers) {
    servers_.push_back(std::make_shared<DurabilityBarrier>(s.params, mode, metrics));
  }
}

std::shared_ptr<DurabilityBarrier> ServerBarriers::ForType(const std::string& type, uint32_t partitions) const {
  const std::vector<size_t> on = layout_.ServersOf(type, partitions);
  if (on.size() == 1) return servers_.at(on.front());
  std::vector<std::shared_ptr<DurabilityBarrier>> parts;
  for (const size_t s : on) parts.push_back(servers_.at(s));
  return std::make_shared<DurabilityBarrier>(std::move(parts));
}

}  // namespace sluice::engine
