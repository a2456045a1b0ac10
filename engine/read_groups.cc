#include "engine/read_groups.h"

#include <algorithm>

namespace sluice::engine {

std::vector<ReadGroup> BacklogReadGroups(std::span<const uint32_t> backlogged, uint32_t batch_max) {
  std::vector<ReadGroup> groups;
  const size_t group_max = std::max<size_t>(1, std::min<size_t>(kBacklogGroupMax, batch_max));
  const size_t n = (backlogged.size() + group_max - 1) / group_max;
  groups.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const auto first = backlogged.begin() + static_cast<std::ptrdiff_t>(i * backlogged.size() / n);
    const auto last = backlogged.begin() + static_cast<std::ptrdiff_t>((i + 1) * backlogged.size() / n);
    const auto size = static_cast<uint32_t>(last - first);
    groups.push_back(ReadGroup{{first, last}, std::max<uint32_t>(1, batch_max / size)});
  }
  return groups;
}

}  // namespace sluice::engine
