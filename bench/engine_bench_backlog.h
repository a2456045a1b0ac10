// The backlog the sync-engine benchmark drains, and everything that writes it
// somewhere other than through the engine:
//
//   Backlog        a deterministic description of N events over E entities:
//                  entity k is "<run>-a<k>", in partition PartitionOf(id);
//                  every entity has versions 1..V; inside a partition,
//                  event_ids 1..n go round by round (version 1 of every
//                  member, then version 2, ...), so consecutive events touch
//                  different entities, as they do under real traffic
//   LoadBacklog    multi-row INSERTs straight into the event tables (no
//                  writer), then checks them (dense event_ids and versions)
//   RawRedisSets   baseline: the same final values as SETs pipelined over one
//                  hiredis connection, no version check
//   RawMysqlUpserts baseline: the same rows as multi-row INSERT ... ON
//                  DUPLICATE KEY UPDATE into a table shaped like the MySQL
//                  sink's, autocommit, over one or more connections
//   ApplyDirect    the sink's own Apply() on the same events, in the engine's
//                  order and chunking, without reading MySQL: what the sink
//                  costs alone
// The baselines go partition by partition, or in the order and chunking the
// sync engine drains the backlog in (Backlog::Chunks, Order::kEngine).
//
// Threads: every function runs on the calling thread and joins any thread it
// starts before returning.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "bench/engine_bench_util.h"
#include "config/config.h"
#include "connectors/sink.h"
#include "core/status.h"
#include "sql/connection.h"

namespace sluice::bench {

struct BacklogSpec {
  std::string run_id;          // prefix of entity ids and command ids
  std::string type = "account";
  uint32_t partitions = 16;
  uint64_t entities = 100000;
  uint32_t versions = 10;
};

class Backlog {
 public:
  explicit Backlog(BacklogSpec spec);

  const BacklogSpec& spec() const { return spec_; }
  uint64_t total_events() const { return spec_.entities * spec_.versions; }
  // Events of partition p: its members times the versions.
  uint64_t PartitionEvents(uint32_t p) const { return members_[p].size() * spec_.versions; }

  struct Event {
    uint64_t entity = 0;
    uint32_t version = 0;
  };
  // The event with event_id (1-based) of partition p.
  Event At(uint32_t p, uint64_t event_id) const {
    const uint64_t i = event_id - 1;
    const auto& m = members_[p];
    return Event{m[i % m.size()], static_cast<uint32_t>(i / m.size() + 1)};
  }

  // A run of partition p's event_ids, first..last.
  struct Run {
    uint32_t partition = 0;
    uint64_t first = 0, last = 0;
  };
  using Chunk = std::vector<Run>;
  enum class Order {
    kPartitions,  // each partition whole, one after the other
    // As the sync engine drains a backlog: passes over the partitions not yet
    // read to the end, in the reader's groups (engine/read_groups.h), each
    // partition's read a batch; the applier joins consecutive batches while
    // they fit in one chunk (SinkRunner::TakeWork) and splits larger ones
    // (ApplyLoop). It assumes the applier always finds the next batches
    // read, as in a drain that the sink, not the reader, holds back.
    kEngine,
  };
  // The backlog of the partitions p with p % stride == offset (one writer of
  // `stride`) in `order`, as chunks of at most `chunk` events; batch_max is
  // the engine's (kEngine). kEngine with a stride: the writer's share of each
  // chunk the engine makes of every partition, about chunk / stride events
  // (a sink over several connections splits its chunks by entity id
  // instead).
  std::vector<Chunk> Chunks(Order order, uint32_t batch_max, uint32_t chunk, uint32_t offset = 0,
                            uint32_t stride = 1) const;

  const std::string& EntityId(uint64_t entity) const { return ids_[entity]; }
  // The event with event_id of partition p as the engine hands it to a sink
  // (a patch command), committed at committed_at_us.
  connectors::ChangeEvent ChangeEventAt(uint32_t p, uint64_t event_id, int64_t committed_at_us) const;
  // {"balance":N,"note":"...","owner":"o123"}: about 80 bytes, compact, keys
  // in order (as the writer's canonical JSON would store it).
  std::string State(uint64_t entity, uint32_t version) const;
  std::string Request(uint64_t entity, uint32_t version) const;  // the patch that produced it
  std::string CommandId(uint64_t entity, uint32_t version) const;
  // What the redis json format stores: {"_version":N,<members of the state>}.
  std::string RedisValue(uint64_t entity, uint32_t version) const;
  // The MySQL sink's columns owner, balance, note for this state (as FieldText gives them).
  void ViewColumns(uint64_t entity, uint32_t version, std::string& owner, std::string& balance,
                   std::string& note) const;

 private:
  uint64_t Balance(uint64_t entity, uint32_t version) const;
  std::string Note(uint64_t entity, uint32_t version) const;

  BacklogSpec spec_;
  std::vector<std::string> ids_;
  std::vector<std::vector<uint64_t>> members_;  // per partition, entity numbers in id order
};

struct LoadResult {
  uint64_t rows = 0;
  uint64_t statements = 0;
  double seconds = 0;
  std::vector<std::string> problems;  // from the checks afterwards
};
// Inserts the backlog into the (existing, empty) event tables with `threads`
// connections, `rows_per_insert` rows per autocommit INSERT.
Result<LoadResult> LoadBacklog(const sql::ConnectParams& mysql, const Backlog& backlog, uint32_t threads,
                               uint32_t rows_per_insert);

// Seconds from `start` to now.
double SecondsSince(Clock::time_point start);
// "done/total unit, rate/s now" for a ProgressLine; keeps the last sample
// in last_done/last_t for the next rate.
std::string RateText(uint64_t done, uint64_t total, double elapsed, uint64_t& last_done, double& last_t,
                     const char* unit);

struct WriteResult {
  uint64_t events = 0;
  double seconds = 0;        // wall time of the timed part
  double busy_seconds = 0;   // ApplyDirect: time inside Apply() only
  uint64_t applied = 0, stale = 0, rejected = 0;  // ApplyDirect
  double redis_us_per_event = -1;  // redis: server time in EVALSHA / SET per event
  std::vector<std::string> problems;
};

// SET <key of entity> <RedisValue> for every event, `pipeline` per round
// trip, in `order` (batch_max: the engine's, for Order::kEngine).
Result<WriteResult> RawRedisSets(const config::SinkConfig& sink, const Endpoint& redis, const Backlog& backlog,
                                 uint32_t pipeline, Backlog::Order order, uint32_t batch_max);

// Into `sink`'s table (dropped and re-created with the sink's shape): up to
// `rows_per_insert` rows per INSERT ... ON DUPLICATE KEY UPDATE, in `order`
// (Backlog::Chunks), over `threads` connections at once (connection t with
// the partitions p % threads == t; in the engine's order its share of each
// chunk, about rows_per_insert / threads rows).
Result<WriteResult> RawMysqlUpserts(const config::Config& config, const config::SinkConfig& sink,
                                    const Backlog& backlog, uint32_t rows_per_insert, uint32_t threads,
                                    Backlog::Order order);

// sink.Apply() over the backlog in the engine's order (Order::kEngine),
// chunks of sink.batch_max.
// The sink comes from the public MakeSink; `servers` is where the benchmark
// empties the view before it starts.
Result<WriteResult> ApplyDirect(const config::Config& config, const config::SinkConfig& sink, const ViewServers& servers,
                                const Backlog& backlog);

}  // namespace sluice::bench
