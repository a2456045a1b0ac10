// MemoryStorage: an in-memory fake of the access layer (sql/tables.h), for
// unit tests of the logic above it (the pull loop, offset flushing, the
// partition worker) without a server. It keeps the event tables' keys as
// MariaDB does (PRIMARY event_id, uk_entity_version, uk_entity_command, with
// the same kAborted message, so DuplicateKeyName works on it), files dead
// letters once per key and replaces offset rows.
//
// Tests inject failures per operation (FailNext) and read or change the
// tables directly, e.g. to play another writer (Insert).
//
// Threads: every method may be called from any thread (one mutex); objects
// it opens share its tables.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "sql/tables.h"

namespace sluice::sql {

class MemoryStorage : public Storage, public std::enable_shared_from_this<MemoryStorage> {
 public:
  // The operations a test can make fail.
  enum class Op {
    kOpen,            // opening a session (any object's first call, or after kUnavailable)
    kHead,
    kSecondsSinceCommit,
    kReadAfter,
    kAtVersions,
    kLatestOf,
    kLatestAfter,
    kLatestVersions,
    kByIds,
    kHistory,
    kFindCommands,
    kAppend,          // Append, and Stage (the INSERT of a two-step append)
    kCommit,          // Commit of a staged append
    kOffsetsLoad,
    kOffsetsSave,
    kOffsetsDelete,
    kDeadLetterAdd,
    kDeadLetterAmong,
    kDeadLetterList,
    kDeadLetterCount,
    kDeadLetterResolve,
    kDeadLetterSetError,
    kLeases,  // every LeaseTable call
    kArchive,  // every ArchiveTable call
  };

  // Made through Create(): the objects it opens keep it alive.
  static std::shared_ptr<MemoryStorage> Create();

  std::unique_ptr<EventLog> OpenEventLog() override;
  std::unique_ptr<OffsetTable> OpenOffsets() override;
  std::unique_ptr<DeadLetterTable> OpenDeadLetters() override;
  std::unique_ptr<LeaseTable> OpenLeases() override;
  std::unique_ptr<ArchiveTable> OpenArchive() override;

  // The next `times` calls of `op` fail with `status` (and write nothing). A
  // kUnavailable failure also breaks the calling object's session.
  void FailNext(Op op, Status status, int times = 1);
  // Until Release(op), every call of `op` waits (before it fails or does
  // anything): a statement that takes as long as the test wants.
  void Hold(Op op);
  void Release(Op op);
  // How many times `op` was called (failed calls included, waiting ones too).
  uint64_t calls(Op op) const;

  // Stores a row as another writer would (same keys as Append); committed_at_us
  // 0 means now.
  Status Insert(const std::string& type, uint32_t partition, EventRow row);
  // Every row of (type, partition) in event_id order.
  std::vector<EventRow> Events(const std::string& type, uint32_t partition) const;
  std::map<uint32_t, OffsetRow> Offsets(const std::string& sink, const std::string& type) const;
  // Makes every lease of (scope, type) expire now, as if its owner had
  // stopped renewing it a TTL ago (the in-memory leases use this process's clock).
  void ExpireLeases(const std::string& scope, const std::string& type);
  std::vector<DeadLetter> DeadLetters() const;
  // Every dead letter with its id and resolution, by id.
  std::vector<FiledDeadLetter> FiledDeadLetters() const;

  // Internal to the objects it opens: runs one call under the mutex.
  struct Tables;
  Status Enter(Op op, bool* healthy);
  std::mutex& mu() const { return mu_; }
  Tables& tables() { return *tables_; }
  Status InsertLocked(const std::string& type, uint32_t partition, std::vector<EventRow> rows);
  // InsertLocked's key checks alone (a staged append's INSERT).
  Status CheckLocked(const std::string& type, uint32_t partition, const std::vector<EventRow>& rows);

 private:
  MemoryStorage();

  mutable std::mutex mu_;
  std::unique_ptr<Tables> tables_;
  std::map<Op, std::vector<Status>> failures_;
  std::map<Op, uint64_t> calls_;
  std::set<Op> held_;
  std::condition_variable released_;
};

}  // namespace sluice::sql
