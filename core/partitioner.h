// The partition of an entity: stable across platforms, releases and languages.
//
//   partition = (murmur2(entity_id bytes) & 0x7fffffff) % partitions
//
// murmur2 is the 32-bit MurmurHash2 with seed 0x9747b28c exactly as Apache
// Kafka's Java client computes it (org.apache.kafka.common.utils.Utils.murmur2),
// so any Kafka client library can compute sluice partitions, and a Kafka topic
// with the same partition count keys entities to the same partition numbers.
// Test vectors: docs/partitioning.md and partitioner_test.cc. Pure functions,
// safe from any thread.
#pragma once

#include <cstdint>
#include <string_view>

namespace sluice {

// Kafka's murmur2 of the bytes, as the signed 32-bit value Java returns.
int32_t Murmur2(std::string_view bytes);

// The partition in [0, partitions) for an entity id; partitions must be > 0.
uint32_t PartitionOf(std::string_view entity_id, uint32_t partitions);

}  // namespace sluice
