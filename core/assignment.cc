#include "core/assignment.h"

#include <algorithm>

#include "core/partitioner.h"

namespace sluice {

std::map<uint32_t, std::string> Assign(const std::string& scope, const std::string& type, uint32_t partitions,
                                       const std::vector<std::string>& members) {
  std::map<uint32_t, std::string> out;
  if (members.empty()) return out;
  // Each member holds `floor` partitions, and `extra` of them one more.
  const size_t floor = partitions / members.size();
  const size_t extra = partitions % members.size();
  size_t above = 0;  // members holding floor + 1
  std::map<std::string, size_t> load;
  std::vector<std::pair<uint32_t, const std::string*>> ranked(members.size());
  for (uint32_t p = 0; p < partitions; ++p) {
    const std::string suffix = std::string(1, '\0') + scope + '\0' + type + '\0' + std::to_string(p);
    for (size_t m = 0; m < members.size(); ++m) {
      ranked[m] = {static_cast<uint32_t>(Murmur2(members[m] + suffix)), &members[m]};
    }
    // Highest weight first; equal weights by name, so every member ranks alike.
    std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : *a.second > *b.second;
    });
    for (const auto& [weight, member] : ranked) {
      size_t& held = load[*member];
      if (held < floor || (held == floor && above < extra)) {
        if (held == floor) ++above;
        ++held;
        out[p] = *member;
        break;
      }
    }
  }
  return out;
}

}  // namespace sluice
