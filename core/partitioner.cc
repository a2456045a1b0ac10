#include "core/partitioner.h"

namespace sluice {

int32_t Murmur2(std::string_view bytes) {
  const uint32_t seed = 0x9747b28c;
  const uint32_t m = 0x5bd1e995;
  const int r = 24;
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  const uint32_t length = static_cast<uint32_t>(bytes.size());
  uint32_t h = seed ^ length;
  const uint32_t length4 = length / 4;
  for (uint32_t i = 0; i < length4; ++i) {
    const uint32_t i4 = i * 4;
    // Little-endian word, independent of the host's byte order.
    uint32_t k = static_cast<uint32_t>(data[i4]) | (static_cast<uint32_t>(data[i4 + 1]) << 8) |
                 (static_cast<uint32_t>(data[i4 + 2]) << 16) | (static_cast<uint32_t>(data[i4 + 3]) << 24);
    k *= m;
    k ^= k >> r;
    k *= m;
    h *= m;
    h ^= k;
  }
  const uint32_t tail = length4 * 4;
  switch (length % 4) {
    case 3: h ^= static_cast<uint32_t>(data[tail + 2]) << 16; [[fallthrough]];
    case 2: h ^= static_cast<uint32_t>(data[tail + 1]) << 8; [[fallthrough]];
    case 1:
      h ^= static_cast<uint32_t>(data[tail]);
      h *= m;
  }
  h ^= h >> 13;
  h *= m;
  h ^= h >> 15;
  return static_cast<int32_t>(h);
}

uint32_t PartitionOf(std::string_view entity_id, uint32_t partitions) {
  const uint32_t positive = static_cast<uint32_t>(Murmur2(entity_id)) & 0x7fffffffu;
  return positive % partitions;
}

}  // namespace sluice
