// connectors::HistoryPages over events already in memory: what a log sink's
// VerifyHistory reads in tests, and wherever the events are at hand.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "connectors/sink.h"

namespace sluice::connectors {

class EventsHistory final : public HistoryPages {
 public:
  // `events` in any order: each partition's are given in event_id order.
  EventsHistory(std::vector<ChangeEvent> events, uint32_t partitions) : partitions_(partitions) {
    for (ChangeEvent& e : events) by_partition_[e.partition].push_back(std::move(e));
    for (auto& [p, list] : by_partition_) {
      std::stable_sort(list.begin(), list.end(),
                       [](const ChangeEvent& a, const ChangeEvent& b) { return a.event_id < b.event_id; });
    }
  }

  uint32_t partitions() const override { return partitions_; }

  Result<std::vector<ChangeEvent>> Next(uint32_t partition, uint32_t limit) override {
    std::vector<ChangeEvent> page;
    const auto it = by_partition_.find(partition);
    if (it == by_partition_.end()) return page;
    size_t& at = at_[partition];
    while (at < it->second.size() && page.size() < std::max<uint32_t>(1, limit)) page.push_back(it->second[at++]);
    largest_page_ = std::max(largest_page_, page.size());
    return page;
  }

  Result<std::vector<ChangeEvent>> Of(uint32_t partition, const std::vector<uint64_t>& event_ids) override {
    std::vector<ChangeEvent> found;
    const auto it = by_partition_.find(partition);
    if (it == by_partition_.end()) return found;
    for (const ChangeEvent& e : it->second) {
      if (std::find(event_ids.begin(), event_ids.end(), e.event_id) != event_ids.end()) found.push_back(e);
    }
    ++lookups_;
    return found;
  }

  void Rewind() override {
    at_.clear();
    ++rewinds_;
  }

  // What the comparison asked for (tests).
  size_t largest_page() const { return largest_page_; }
  int lookups() const { return lookups_; }
  int rewinds() const { return rewinds_; }

 private:
  const uint32_t partitions_;
  std::map<uint32_t, std::vector<ChangeEvent>> by_partition_;
  std::map<uint32_t, size_t> at_;
  size_t largest_page_ = 0;
  int lookups_ = 0;
  int rewinds_ = 0;
};

}  // namespace sluice::connectors
