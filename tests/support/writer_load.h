// Clients that send each command to a random writer among several and,
// until it is acknowledged, again (to another random one), as a client of a
// load-balanced set of writers does; and the check that follows: every
// acknowledged command is stored exactly once, on its entity, in dense
// event tables (issue 21, items 2, 4 and 5c).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/test_support.h"

namespace sluice::testing {

class RandomWriterLoad {
 public:
  // `commands` patches of type `type` over `entities` hot entities ("a0"..),
  // each with its own Idempotency-Key, from `clients` threads, each command
  // sent to a random one of `ports` (retried up to 60 times, 10 ms apart,
  // 100 ms after no answer at all). Keys are key_prefix + the command's number.
  RandomWriterLoad(std::vector<uint16_t> ports, std::string type, int clients, int commands, int entities,
                   std::string key_prefix = "g-");
  ~RandomWriterLoad();  // joins

  void Start();
  // Commands handed out so far (sent at least once).
  int started() const { return next_.load(); }
  void Join();

  // After Join(): Idempotency-Key -> entity of every acknowledged command.
  const std::map<std::string, std::string>& acknowledged() const { return acknowledged_; }
  // Every answer's status -> count (0: no answer).
  const std::map<int, int>& statuses() const { return statuses_; }
  // " 200x3990 0x12 ..." for messages.
  std::string StatusText() const;
  // entity -> the writers (Sluice-Writer) that acknowledged its commands.
  const std::map<std::string, std::set<std::string>>& handled_by() const { return handled_by_; }

 private:
  const std::vector<uint16_t> ports_;
  const std::string type_;
  const int clients_, commands_, entities_;
  const std::string key_prefix_;
  std::atomic<int> next_{0};
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::map<std::string, std::string> acknowledged_;
  std::map<int, int> statuses_;
  std::map<std::string, std::set<std::string>> handled_by_;
};

// Runs `load` to its end while writer `which` of `writers` is killed
// (SIGKILL) once a quarter of `commands` were handed out, and started again
// (`sluice writer --config path`, on `port`) half a second later.
void RunKillingAWriter(RandomWriterLoad& load, int commands, std::vector<std::unique_ptr<SluiceProcess>>& writers,
                       size_t which, const std::string& path, uint16_t port);

// Every command acknowledged; none refused on stale state (409) or failed inside (500).
void ExpectEveryCommandAcknowledged(const RandomWriterLoad& load, int commands);

// Every event table of `type` is dense (event_ids 1..n) with each entity's
// versions 1..n, holds `commands` events, and each acknowledged command is
// stored exactly once, on its entity.
void ExpectStoredExactlyOnce(TestDatabase& db, const std::string& type, uint32_t partitions,
                             const std::map<std::string, std::string>& acknowledged, int64_t commands);
// The same with each partition's tables in the database db_of(partition)
// (storage across several servers).
void ExpectStoredExactlyOnce(const std::function<TestDatabase&(uint32_t)>& db_of, const std::string& type,
                             uint32_t partitions, const std::map<std::string, std::string>& acknowledged,
                             int64_t commands);

}  // namespace sluice::testing
