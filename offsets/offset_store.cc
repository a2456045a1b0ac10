#include "offsets/offset_store.h"

#include "sql/mariadb_tables.h"

namespace sluice::offsets {

OffsetStore::OffsetStore(sql::ConnectParams params)
    : table_(sql::MariaDbStorage(std::move(params)).OpenOffsets()) {}

OffsetStore::OffsetStore(std::unique_ptr<sql::OffsetTable> table) : table_(std::move(table)) {}

Result<std::map<uint32_t, PartitionProgress>> OffsetStore::Load(const std::string& sink, const std::string& type) {
  return table_->Load(sink, type);
}

Status OffsetStore::Save(const std::string& sink, const std::string& type,
                         const std::map<uint32_t, PartitionProgress>& progress) {
  return table_->Save(sink, type, progress);
}

Result<std::set<uint32_t>> OffsetStore::SaveFenced(const std::string& sink, const std::string& type,
                                                   const std::map<uint32_t, PartitionProgress>& progress,
                                                   const sql::Fence& fence) {
  return table_->SaveFenced(sink, type, progress, fence);
}

Status OffsetStore::Rewind(const std::string& sink, const std::string& type, std::optional<uint32_t> partition,
                           uint64_t event_id, uint32_t partitions) {
  ASSIGN_OR_RETURN(auto current, Load(sink, type));
  std::map<uint32_t, PartitionProgress> changed;
  for (uint32_t p = 0; p < partitions; ++p) {
    if (partition && *partition != p) continue;
    PartitionProgress progress = current.count(p) ? current[p] : PartitionProgress{};
    progress.event_id = event_id;
    changed[p] = progress;
  }
  return Save(sink, type, changed);
}

Status OffsetStore::Delete(const std::string& sink, const std::string& type) { return table_->Delete(sink, type); }

}  // namespace sluice::offsets
