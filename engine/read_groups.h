// How a sink's reader splits the partitions that may hold a backlog into read
// statements (SinkRunner::ReadLoop): up to kBacklogGroupMax partitions share
// one statement of at most batch_max events, each partition limited to its
// share. A drain keeps its memory bound, and over many partitions with a
// little backlog each a pass costs a statement per 16 partitions, not one per
// partition. The benchmarks' raw baselines take the same order from here
// (bench/engine_bench_backlog.h, Backlog::Chunks).
//
// Threads: a pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace sluice::engine {

// A UNION ALL of 16 ordered, limited SELECTs costs MariaDB little more than
// one, and each partition's share of batch_max stays large enough that most
// partitions of a modest backlog are read to the end in one pass.
inline constexpr size_t kBacklogGroupMax = 16;

struct ReadGroup {
  std::vector<uint32_t> partitions;  // in the order given
  uint32_t limit = 0;                // events per partition, at least 1
};

// `backlogged` split into as few groups as kBacklogGroupMax allows (and at
// most batch_max partitions each, so that each reads at least one event), of
// sizes that differ by at most one, in order.
std::vector<ReadGroup> BacklogReadGroups(std::span<const uint32_t> backlogged, uint32_t batch_max);

}  // namespace sluice::engine
