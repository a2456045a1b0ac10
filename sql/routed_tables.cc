#include "sql/routed_tables.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "sql/mariadb_tables.h"

namespace sluice::sql {
namespace {

using Layout = std::shared_ptr<const StorageLayout>;

// Every server the type's partitions may be on: those its placement names,
// main when it has none.
std::vector<size_t> TypeServers(const StorageLayout& layout, const std::string& type) {
  const auto it = layout.placement.find(type);
  if (it == layout.placement.end() || it->second.empty()) return {0};
  return layout.ServersOf(type, static_cast<uint32_t>(it->second.size()));
}

// Objects of one kind, one per server, made on first use.
template <typename T>
class PerServer {
 public:
  PerServer(const std::vector<std::shared_ptr<Storage>>& servers, std::unique_ptr<T> (Storage::*open)())
      : servers_(servers), open_(open), objects_(servers.size()) {}
  T& At(size_t server) {
    if (!objects_[server]) objects_[server] = ((*servers_[server]).*open_)();
    return *objects_[server];
  }
  // The objects made so far.
  template <typename F>
  void ForEachMade(F&& f) const {
    for (const auto& o : objects_) {
      if (o) f(*o);
    }
  }

 private:
  const std::vector<std::shared_ptr<Storage>> servers_;  // keeps them alive as long as this
  std::unique_ptr<T> (Storage::*const open_)();
  std::vector<std::unique_ptr<T>> objects_;
};

// Splits keyed items by the server of their partition.
template <typename Item, typename PartitionOf>
std::map<size_t, std::vector<Item>> ByServer(const StorageLayout& layout, const std::string& type,
                                             const std::vector<Item>& items, PartitionOf partition_of) {
  std::map<size_t, std::vector<Item>> out;
  for (const Item& item : items) out[layout.ServerOf(type, partition_of(item))].push_back(item);
  return out;
}

template <typename V>
std::map<size_t, std::map<uint32_t, V>> MapByServer(const StorageLayout& layout, const std::string& type,
                                                    const std::map<uint32_t, V>& rows) {
  std::map<size_t, std::map<uint32_t, V>> out;
  for (const auto& [p, v] : rows) out[layout.ServerOf(type, p)].emplace(p, v);
  return out;
}

class RoutedAppend : public EventAppend {
 public:
  RoutedAppend(size_t server, std::unique_ptr<EventAppend> inner) : server_(server), inner_(std::move(inner)) {}
  bool TryAdd(const NewEvent& event, size_t max_bytes) override { return inner_->TryAdd(event, max_bytes); }
  size_t rows() const override { return inner_->rows(); }
  size_t server() const override { return server_; }
  EventAppend& inner() { return *inner_; }

 private:
  const size_t server_;
  const std::unique_ptr<EventAppend> inner_;
};

class RoutedEventLog : public EventLog {
 public:
  RoutedEventLog(Layout layout, const std::vector<std::shared_ptr<Storage>>& servers)
      : layout_(std::move(layout)), logs_(servers, &Storage::OpenEventLog) {}

  // False only when every session it opened broke: a reader serving
  // several servers keeps serving those that answer (a call to a server
  // whose session broke opens a new one itself).
  bool healthy() const override {
    bool made = false;
    bool any_healthy = false;
    logs_.ForEachMade([&](const EventLog& log) {
      made = true;
      any_healthy = any_healthy || log.healthy();
    });
    return !made || any_healthy;
  }
  Status Open() override {
    Status first = Status::Ok();
    bool any_healthy = false;
    bool made = false;
    logs_.ForEachMade([&](EventLog& log) {
      made = true;
      if (!log.healthy()) {
        if (Status st = log.Open(); !st.ok()) {
          if (first.ok()) first = st;
          return;
        }
      }
      any_healthy = true;
    });
    return !made || any_healthy ? Status::Ok() : first;
  }

  Result<uint64_t> Head(const std::string& type, uint32_t partition) override {
    return Of(type, partition).Head(type, partition);
  }
  Result<std::map<uint32_t, uint64_t>> Heads(const std::string& type,
                                             const std::vector<uint32_t>& partitions) override {
    std::map<uint32_t, uint64_t> out;
    for (const auto& [server, part] : ByServer(*layout_, type, partitions, [](uint32_t p) { return p; })) {
      ASSIGN_OR_RETURN(auto heads, logs_.At(server).Heads(type, part));
      out.merge(heads);
    }
    return out;
  }
  Result<std::map<uint32_t, double>> SecondsSinceCommit(
      const std::string& type, const std::vector<std::pair<uint32_t, uint64_t>>& events) override {
    std::map<uint32_t, double> out;
    for (const auto& [server, part] : ByServer(*layout_, type, events, [](const auto& e) { return e.first; })) {
      ASSIGN_OR_RETURN(auto since, logs_.At(server).SecondsSinceCommit(type, part));
      out.merge(since);
    }
    return out;
  }
  Result<std::map<uint32_t, std::vector<EventRow>>> ReadAfter(
      const std::string& type, const std::vector<std::pair<uint32_t, uint64_t>>& from, uint32_t limit,
      Columns columns) override {
    std::map<uint32_t, std::vector<EventRow>> out;
    for (const auto& [server, part] : ByServer(*layout_, type, from, [](const auto& f) { return f.first; })) {
      ASSIGN_OR_RETURN(auto rows, logs_.At(server).ReadAfter(type, part, limit, columns));
      out.merge(rows);
    }
    return out;
  }
  Result<std::vector<EventRow>> AtVersions(const std::string& type, uint32_t partition,
                                           const std::vector<std::pair<std::string, uint64_t>>& keys) override {
    return Of(type, partition).AtVersions(type, partition, keys);
  }
  Result<std::vector<EventRow>> LatestOf(const std::string& type, uint32_t partition,
                                         const std::vector<std::string>& ids) override {
    return Of(type, partition).LatestOf(type, partition, ids);
  }
  Result<std::vector<EventRow>> LatestAfter(const std::string& type, uint32_t partition, const std::string& after_id,
                                            uint32_t limit) override {
    return Of(type, partition).LatestAfter(type, partition, after_id, limit);
  }
  Result<std::map<std::string, uint64_t>> LatestVersions(const std::string& type, uint32_t partition,
                                                         const std::vector<std::string>& ids) override {
    return Of(type, partition).LatestVersions(type, partition, ids);
  }
  Result<std::vector<EventRow>> ByIds(const std::string& type, uint32_t partition,
                                      const std::vector<uint64_t>& event_ids) override {
    return Of(type, partition).ByIds(type, partition, event_ids);
  }
  Result<std::vector<EventRow>> History(const std::string& type, uint32_t partition, const std::string& entity_id,
                                        uint64_t after_version, uint32_t limit) override {
    return Of(type, partition).History(type, partition, entity_id, after_version, limit);
  }
  Result<std::vector<EventRow>> FindCommands(
      const std::string& type, uint32_t partition,
      const std::vector<std::pair<std::string, std::string>>& commands) override {
    return Of(type, partition).FindCommands(type, partition, commands);
  }
  std::unique_ptr<EventAppend> NewAppend(const std::string& type, uint32_t partition) override {
    const size_t server = layout_->ServerOf(type, partition);
    return std::make_unique<RoutedAppend>(server, logs_.At(server).NewAppend(type, partition));
  }
  Status Append(EventAppend& append) override {
    auto* routed = dynamic_cast<RoutedAppend*>(&append);
    if (routed == nullptr) return Internal("an append not made by this event log");
    return logs_.At(routed->server()).Append(routed->inner());
  }
  Status Stage(EventAppend& append) override {
    auto* routed = dynamic_cast<RoutedAppend*>(&append);
    if (routed == nullptr) return Internal("an append not made by this event log");
    if (staged_ && *staged_ != routed->server()) {
      Rollback();
      return Internal("appends of two servers staged in one transaction");
    }
    const size_t server = routed->server();
    staged_.reset();
    RETURN_IF_ERROR(logs_.At(server).Stage(routed->inner()));
    staged_ = server;
    return Status::Ok();
  }
  Status Commit() override {
    if (!staged_) return Status::Ok();
    const size_t server = *staged_;
    staged_.reset();
    return logs_.At(server).Commit();
  }
  void Rollback() override {
    if (!staged_) return;
    const size_t server = *staged_;
    staged_.reset();
    logs_.At(server).Rollback();
  }

 private:
  EventLog& Of(const std::string& type, uint32_t partition) { return logs_.At(layout_->ServerOf(type, partition)); }

  const Layout layout_;
  PerServer<EventLog> logs_;
  std::optional<size_t> staged_;  // the server of the staged append
};

class RoutedOffsetTable : public OffsetTable {
 public:
  RoutedOffsetTable(Layout layout, const std::vector<std::shared_ptr<Storage>>& servers)
      : layout_(std::move(layout)), tables_(servers, &Storage::OpenOffsets) {}

  Result<std::map<uint32_t, OffsetRow>> Load(const std::string& sink, const std::string& type) override {
    std::map<uint32_t, OffsetRow> out;
    for (const size_t server : TypeServers(*layout_, type)) {
      ASSIGN_OR_RETURN(auto rows, tables_.At(server).Load(sink, type));
      // A row left on a server that no longer holds its partition (after a
      // move) is not this partition's progress.
      for (auto& [p, row] : rows) {
        if (layout_->ServerOf(type, p) == server) out[p] = std::move(row);
      }
    }
    return out;
  }
  Status Save(const std::string& sink, const std::string& type, const std::map<uint32_t, OffsetRow>& rows) override {
    Status first = Status::Ok();
    for (const auto& [server, part] : MapByServer(*layout_, type, rows)) {
      if (Status st = tables_.At(server).Save(sink, type, part); !st.ok() && first.ok()) first = st;
    }
    return first;
  }
  Status Delete(const std::string& sink, const std::string& type) override {
    for (const size_t server : TypeServers(*layout_, type)) RETURN_IF_ERROR(tables_.At(server).Delete(sink, type));
    return Status::Ok();
  }
  Result<std::set<uint32_t>> SaveFenced(const std::string& sink, const std::string& type,
                                        const std::map<uint32_t, OffsetRow>& rows, const Fence& fence) override {
    std::set<uint32_t> refused;
    Status first = Status::Ok();
    for (const auto& [server, part] : MapByServer(*layout_, type, rows)) {
      auto r = tables_.At(server).SaveFenced(sink, type, part, fence);
      if (!r.ok()) {
        if (first.ok()) first = r.status();
        continue;
      }
      refused.merge(*r);
    }
    if (!first.ok()) return first;
    return refused;
  }

 private:
  const Layout layout_;
  PerServer<OffsetTable> tables_;
};

class RoutedLeaseTable : public LeaseTable {
 public:
  RoutedLeaseTable(Layout layout, const std::vector<std::shared_ptr<Storage>>& servers)
      : layout_(std::move(layout)), tables_(servers, &Storage::OpenLeases) {}

  Result<std::map<uint32_t, uint64_t>> Acquire(const std::string& scope, const std::string& type,
                                               const std::vector<uint32_t>& partitions, const std::string& owner,
                                               std::chrono::milliseconds ttl,
                                               const std::map<uint32_t, uint64_t>& known) override {
    std::map<uint32_t, uint64_t> held;
    for (const auto& [server, part] : ByServer(*layout_, type, partitions, [](uint32_t p) { return p; })) {
      std::map<uint32_t, uint64_t> known_here;
      for (const uint32_t p : part) {
        if (const auto k = known.find(p); k != known.end()) known_here.insert(*k);
      }
      // All or nothing: an answer without a server's partitions would read
      // as "another owner holds them", and the caller would stop renewing
      // leases it may still be applying under.
      ASSIGN_OR_RETURN(auto got, tables_.At(server).Acquire(scope, type, part, owner, ttl, known_here));
      held.merge(got);
    }
    return held;
  }
  Status Release(const std::string& scope, const std::string& type, const std::map<uint32_t, uint64_t>& held,
                 const std::string& owner) override {
    Status first = Status::Ok();
    for (const auto& [server, part] : MapByServer(*layout_, type, held)) {
      if (Status st = tables_.At(server).Release(scope, type, part, owner); !st.ok() && first.ok()) first = st;
    }
    return first;
  }
  Result<std::vector<LeaseRow>> List(const std::string& scope) override {
    std::vector<LeaseRow> out;
    for (size_t s = 0; s < layout_->servers.size(); ++s) {
      ASSIGN_OR_RETURN(auto rows, tables_.At(s).List(scope));
      for (auto& r : rows) {
        if (layout_->ServerOf(r.entity_type, r.partition) == s) out.push_back(std::move(r));
      }
    }
    std::sort(out.begin(), out.end(), [](const LeaseRow& a, const LeaseRow& b) {
      return std::tie(a.scope, a.entity_type, a.partition) < std::tie(b.scope, b.entity_type, b.partition);
    });
    return out;
  }
  Result<std::vector<LeaseSpan>> History(const std::string& scope) override {
    std::vector<LeaseSpan> out;
    for (size_t s = 0; s < layout_->servers.size(); ++s) {
      ASSIGN_OR_RETURN(auto rows, tables_.At(s).History(scope));
      // Holds copied along with a moved partition are read from its server only.
      for (auto& r : rows) {
        if (layout_->ServerOf(r.entity_type, r.partition) == s) out.push_back(std::move(r));
      }
    }
    std::sort(out.begin(), out.end(), [](const LeaseSpan& a, const LeaseSpan& b) {
      return std::tie(a.scope, a.entity_type, a.partition, a.token) <
             std::tie(b.scope, b.entity_type, b.partition, b.token);
    });
    return out;
  }
  Result<bool> Claim(const std::string& group, const std::string& member) override {
    return tables_.At(0).Claim(group, member);
  }
  Status Heartbeat(const std::string& group, const std::string& member, const std::string& address) override {
    return tables_.At(0).Heartbeat(group, member, address);
  }
  Result<std::vector<MemberRow>> Members(const std::string& group, std::chrono::milliseconds ttl) override {
    return tables_.At(0).Members(group, ttl);
  }
  Status Leave(const std::string& group, const std::string& member) override {
    return tables_.At(0).Leave(group, member);
  }

 private:
  const Layout layout_;
  PerServer<LeaseTable> tables_;
};


class RoutedArchiveTable : public ArchiveTable {
 public:
  RoutedArchiveTable(Layout layout, const std::vector<std::shared_ptr<Storage>>& servers)
      : layout_(std::move(layout)), tables_(servers, &Storage::OpenArchive) {}

  Result<bool> Lock(const std::string& type, uint32_t partition) override { return Of(type, partition).Lock(type, partition); }
  Status Unlock(const std::string& type, uint32_t partition) override { return Of(type, partition).Unlock(type, partition); }
  Result<std::vector<SegmentRecord>> Segments(const std::string& type, uint32_t partition) override {
    return Of(type, partition).Segments(type, partition);
  }
  Result<std::map<uint32_t, uint64_t>> Watermarks(const std::string& type,
                                                  const std::vector<uint32_t>& partitions) override {
    std::map<uint32_t, uint64_t> out;
    for (const auto& [server, part] : ByServer(*layout_, type, partitions, [](uint32_t p) { return p; })) {
      ASSIGN_OR_RETURN(auto got, tables_.At(server).Watermarks(type, part));
      out.merge(got);
    }
    return out;
  }
  Result<std::vector<HotRow>> PlanRows(const std::string& type, uint32_t partition, uint64_t after, uint64_t upto,
                                       uint64_t lookback) override {
    return Of(type, partition).PlanRows(type, partition, after, upto, lookback);
  }
  Result<std::vector<EventRow>> RowsBetween(const std::string& type, uint32_t partition, uint64_t after,
                                            uint64_t upto, uint64_t max_bytes) override {
    return Of(type, partition).RowsBetween(type, partition, after, upto, max_bytes);
  }
  Status Commit(const SegmentRecord& segment, const std::vector<uint64_t>& leaving) override {
    return Of(segment.entity_type, segment.partition).Commit(segment, leaving);
  }
  Result<HotTableSize> Size(const std::string& type, uint32_t partition) override {
    return Of(type, partition).Size(type, partition);
  }
  Result<uint64_t> TableBytes(const std::string& type, uint32_t partition) override {
    return Of(type, partition).TableBytes(type, partition);
  }

 private:
  ArchiveTable& Of(const std::string& type, uint32_t partition) {
    return tables_.At(layout_->ServerOf(type, partition));
  }

  const Layout layout_;
  PerServer<ArchiveTable> tables_;
};

}  // namespace

RoutedStorage::RoutedStorage(StorageLayout layout, std::vector<std::shared_ptr<Storage>> servers)
    : layout_(std::make_shared<const StorageLayout>(std::move(layout))), servers_(std::move(servers)) {}

std::unique_ptr<EventLog> RoutedStorage::OpenEventLog() { return std::make_unique<RoutedEventLog>(layout_, servers_); }
std::unique_ptr<OffsetTable> RoutedStorage::OpenOffsets() {
  return std::make_unique<RoutedOffsetTable>(layout_, servers_);
}
std::unique_ptr<DeadLetterTable> RoutedStorage::OpenDeadLetters() { return servers_.front()->OpenDeadLetters(); }
std::unique_ptr<LeaseTable> RoutedStorage::OpenLeases() { return std::make_unique<RoutedLeaseTable>(layout_, servers_); }
std::unique_ptr<ArchiveTable> RoutedStorage::OpenArchive() {
  return std::make_unique<RoutedArchiveTable>(layout_, servers_);
}

std::shared_ptr<Storage> OpenStorage(const StorageLayout& layout) {
  if (layout.single()) return std::make_shared<MariaDbStorage>(layout.main());
  std::vector<std::shared_ptr<Storage>> servers;
  for (const StorageServer& s : layout.servers) servers.push_back(std::make_shared<MariaDbStorage>(s.params));
  return std::make_shared<RoutedStorage>(layout, std::move(servers));
}

}  // namespace sluice::sql
