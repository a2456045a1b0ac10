#include "engine/before_states.h"

#include <map>
#include <unordered_map>
#include <utility>

namespace sluice::engine {

void BeforeStates::Keep(const connectors::ChangeEvent& e) {
  Kept* k = latest_.Find(e.entity_id);
  if (k == nullptr) k = &latest_.Put(e.entity_id, Kept{});
  k->version = e.version;
  k->exists = !e.deleted;
  if (e.deleted) {
    k->state.clear();
  } else {
    k->state.assign(e.state);  // reuses the entity's buffer
  }
}

Status BeforeStates::Fill(sql::EventLog& log, const std::string& type, uint32_t partition,
                          std::vector<connectors::ChangeEvent>& events) {
  // Per entity, the index of its latest event so far in this batch.
  std::unordered_map<std::string_view, size_t> last_in_batch;
  last_in_batch.reserve(events.size());
  std::vector<size_t> missing;  // events whose state before must be read
  for (size_t i = 0; i < events.size(); ++i) {
    connectors::ChangeEvent& e = events[i];
    e.before.clear();
    const auto prev = last_in_batch.find(e.entity_id);
    if (e.version <= 1) {
      // A creation: nothing before it.
    } else if (prev != last_in_batch.end() && events[prev->second].version + 1 == e.version) {
      const connectors::ChangeEvent& p = events[prev->second];
      if (!p.deleted) e.before = p.state;
      ++stats_.from_batch;
    } else if (const Kept* kept = latest_.Find(e.entity_id); kept != nullptr && kept->version + 1 == e.version) {
      if (kept->exists) e.before = kept->state;
      ++stats_.from_cache;
    } else {
      missing.push_back(i);
    }
    last_in_batch.insert_or_assign(std::string_view(events[i].entity_id), i);
  }
  if (!missing.empty()) {
    std::vector<std::pair<std::string, uint64_t>> keys;
    keys.reserve(missing.size());
    for (size_t i : missing) keys.emplace_back(events[i].entity_id, events[i].version - 1);
    ++stats_.reads;
    ASSIGN_OR_RETURN(std::vector<sql::EventRow> rows, log.AtVersions(type, partition, keys));
    std::map<std::pair<std::string_view, uint64_t>, sql::EventRow*> found;
    for (auto& r : rows) found[{r.entity_id, r.version}] = &r;
    for (size_t i : missing) {
      connectors::ChangeEvent& e = events[i];
      const auto it = found.find({e.entity_id, e.version - 1});
      if (it == found.end()) {
        return Internal("the event before " + type + "/" + e.entity_id + " version " + std::to_string(e.version) +
                        " (event " + std::to_string(e.event_id) + " of partition " + std::to_string(partition) +
                        ") is not in storage");
      }
      if (!it->second->deleted) e.before = it->second->state;
      ++stats_.from_storage;
    }
  }
  for (const auto& [id, i] : last_in_batch) Keep(events[i]);
  return Status::Ok();
}

}  // namespace sluice::engine
