// kafka_bench's modes about partitions changing hands (issue 24, item 4a):
// the kafka sink alone (a producer per source partition when transactional,
// the default; the config may say transactional: false),
// holding every partition of the sink's entity, with one event of each
// partition applied at a time (entity "t<p>", the next version). Both check
// the topic at the end: per key the versions 1..N in order, none repeated.
//
//   takeover  takes half of the partitions over again (new tokens) and then
//          applies one event to each partition, ROUNDS times each way,
//          alternating: as the engine does now (the sink stays open;
//          TakeOver() makes the producers of the partitions taken) and as it
//          did before (Close(), Open(), TakeOver(); every producer made
//          again). Reports the medians.
//   release   another engine takes half of the partitions: the sink is told
//          (Sink::Released, the engine now) or not (the engine before: their
//          producers stay until producer_idle), and then applies one event
//          to each partition it kept; ROUNDS times each way, alternating,
//          the half taken back (TakeOver, one event each) after each round.
//          Reports the medians of the Released() call and of the next batch
//          of the partitions kept, and the process's threads and RSS with
//          every producer open and after the release.
#pragma once

#include <cstdint>
#include <string>

#include "config/config.h"

namespace sluice::bench {

struct OwnershipArgs {
  std::string mode;  // "takeover" or "release"
  uint32_t rounds = 3;
  bool kv = false;
};

// Runs the mode on `sink` (a kafka sink of cfg); the exit code (0 done and
// verified, 1 failed or not verified).
int RunOwnership(const OwnershipArgs& a, const config::Config& cfg, const config::SinkConfig& sink);

}  // namespace sluice::bench
