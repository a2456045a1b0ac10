#include "sql/layout.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

namespace sluice::sql {

StorageLayout StorageLayout::Single(ConnectParams params) {
  StorageLayout l;
  l.servers.push_back({"main", std::move(params)});
  return l;
}

size_t StorageLayout::ServerOf(const std::string& type, uint32_t partition) const {
  const auto it = placement.find(type);
  if (it == placement.end() || partition >= it->second.size()) return 0;
  return it->second[partition];
}

std::vector<size_t> StorageLayout::ServersOf(const std::string& type, uint32_t partitions) const {
  std::set<size_t> s;
  for (uint32_t p = 0; p < partitions; ++p) s.insert(ServerOf(type, p));
  return {s.begin(), s.end()};
}

std::vector<PlacedRange> StorageLayout::Ranges(const std::string& type, uint32_t partitions) const {
  std::vector<PlacedRange> out;
  for (uint32_t p = 0; p < partitions; ++p) {
    const size_t s = ServerOf(type, p);
    if (!out.empty() && out.back().server == s && out.back().last + 1 == p) {
      out.back().last = p;
    } else {
      out.push_back({p, p, s});
    }
  }
  return out;
}

std::string StorageLayout::Describe(const std::string& type, uint32_t partitions) const {
  const auto ranges = Ranges(type, partitions);
  if (ranges.size() <= 1) return "on " + servers.at(ranges.empty() ? 0 : ranges.front().server).name;
  std::string d;
  for (const PlacedRange& r : ranges) {
    d += (d.empty() ? "" : ", ") + std::to_string(r.first) +
         (r.last != r.first ? "-" + std::to_string(r.last) : std::string()) + " on " + servers.at(r.server).name;
  }
  return d;
}

}  // namespace sluice::sql
