// A point view in memory for the engine's unit tests: what VerifyEntities
// and Verify compare, Repair (and, when allowed, Apply) write, ScanViewIds
// lists. Used by anti_entropy_test.cc, view_compare_test.cc and
// view_repair_test.cc; one thread at a time. MemoryStorageViewTest adds
// the event tables in memory it is compared with.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "config/config.h"
#include "connectors/sink.h"
#include "core/partitioner.h"
#include "sql/memory_tables.h"

namespace sluice::engine {

class MemoryView : public connectors::Sink {
 public:
  struct Row {
    uint64_t version = 0;
    bool deleted = false;
    std::string state;
  };
  std::map<std::string, Row> rows;
  std::vector<std::vector<std::string>> repair_calls;  // ids per Repair call
  std::vector<connectors::RepairGuard> repair_guards;  // the guard of each Repair call
  std::map<std::string, std::string> refuse;            // id -> reason
  int verify_calls = 0;
  int scan_pages = 0;
  std::vector<char> calls;  // in order: 'v' VerifyEntities, 'r' Repair, 's' a ScanViewIds page
  size_t largest_check = 0;  // the most entities one VerifyEntities call was given
  bool overwrite = false;      // capabilities().overwrite: Repair(kAny) allowed
  bool apply_allowed = false;  // the anti-entropy never calls Apply; a repair re-applies with it

  const std::string& name() const override { return name_; }
  connectors::Capabilities capabilities() const override {
    connectors::Capabilities c;
    c.entity_checks = true;
    c.overwrite = overwrite;
    return c;
  }
  Status Open() override { return Status::Ok(); }
  connectors::ApplyResult Apply(std::span<const connectors::ChangeEvent> events) override {
    if (!apply_allowed) return {Internal("the anti-entropy must not call Apply"), {}};
    connectors::ApplyResult r;
    for (const connectors::ChangeEvent& e : events) r.results.push_back({Write(e, false), {}});
    return r;
  }
  Status Health() override { return Status::Ok(); }
  void Close() override {}

  // The whole view against the truth: VerifyEntities, and rows of entities
  // the truth does not name.
  Status Verify(const std::vector<connectors::EntitySnapshot>& truth,
                std::vector<connectors::Difference>& out) override {
    std::set<std::string> named;
    for (const auto& s : truth) named.insert(s.entity_id);
    RETURN_IF_ERROR(VerifyEntities(truth, out));
    for (const auto& [id, row] : rows) {
      if (!named.count(id) && !row.deleted) {
        out.emplace_back(connectors::Difference::Kind::kExtra, id, "live", row.version);
      }
    }
    return Status::Ok();
  }

  Status VerifyEntities(std::span<const connectors::EntitySnapshot> truth,
                        std::vector<connectors::Difference>& out) override {
    using Kind = connectors::Difference::Kind;
    ++verify_calls;
    calls.push_back('v');
    largest_check = std::max(largest_check, truth.size());
    for (const connectors::EntitySnapshot& s : truth) {
      const auto it = rows.find(s.entity_id);
      const bool live = it != rows.end() && !it->second.deleted;
      const std::optional<uint64_t> view =
          it == rows.end() ? std::nullopt : std::optional<uint64_t>(it->second.version);
      if (s.deleted) {
        if (live) out.emplace_back(Kind::kExtra, s.entity_id, "live", view);
      } else if (!live) {
        out.emplace_back(Kind::kMissing, s.entity_id, "absent", view);
      } else if (it->second.version != s.version) {
        out.emplace_back(Kind::kVersionMismatch, s.entity_id, "version", view);
      } else if (it->second.state != s.state) {
        out.emplace_back(Kind::kContentMismatch, s.entity_id, "content", view);
      }
    }
    return Status::Ok();
  }

  // The live rows' ids, `page` at a time; scan_pages counts the calls.
  Status ScanViewIds(size_t page, const std::function<Status(std::span<const std::string>)>& each) override {
    std::vector<std::string> ids;
    for (const auto& [id, row] : rows) {
      if (!row.deleted) ids.push_back(id);
    }
    for (size_t begin = 0; begin < ids.size(); begin += page) {
      ++scan_pages;
      calls.push_back('s');
      RETURN_IF_ERROR(each(std::span<const std::string>(ids).subspan(begin, std::min(page, ids.size() - begin))));
    }
    return Status::Ok();
  }

  connectors::ApplyResult Repair(std::span<const connectors::ChangeEvent> events,
                                 connectors::RepairGuard guard) override {
    if (!overwrite) {
      EXPECT_EQ(guard, connectors::RepairGuard::kNotOlder);
    }
    repair_guards.push_back(guard);
    calls.push_back('r');
    connectors::ApplyResult r;
    auto& ids = repair_calls.emplace_back();
    for (const connectors::ChangeEvent& e : events) {
      ids.push_back(e.entity_id);
      if (refuse.count(e.entity_id)) {
        r.results.push_back({connectors::Outcome::kRejected, refuse[e.entity_id]});
        continue;
      }
      r.results.push_back({Write(e, guard == connectors::RepairGuard::kAny), {}});
    }
    return r;
  }

 private:
  // Writes the event's row unless the view holds a newer version (or `any`).
  connectors::Outcome Write(const connectors::ChangeEvent& e, bool any) {
    Row& row = rows[e.entity_id];
    if (!any && row.version > e.version) return connectors::Outcome::kStale;
    if (any && e.version == 0) {
      rows.erase(e.entity_id);  // a removal: storage has no events for it
      return connectors::Outcome::kApplied;
    }
    row = Row{e.version, e.deleted, e.deleted ? "" : e.state};
    return connectors::Outcome::kApplied;
  }

  std::string name_ = "memory";
};

// A MemoryView of sink "cache" on entity type "account" and the in-memory
// event tables it is compared with.
class MemoryStorageViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sink_.name = "cache";
    sink_.entity = "account";
  }

  // Stores the next version of each of `ids` (deleting the entity when
  // `deleted`), one append per partition.
  void Store(const std::vector<std::string>& ids, bool deleted = false) {
    std::map<uint32_t, std::unique_ptr<sql::EventAppend>> appends;
    std::vector<std::string> texts;
    texts.reserve(ids.size() * 2);  // NewEvent points into them
    for (const std::string& id : ids) {
      const uint32_t p = PartitionOf(id, partitions_);
      auto& append = appends[p];
      if (!append) append = log_->NewAppend("account", p);
      sql::NewEvent e;
      e.event_id = ++heads_[p];
      e.entity_id = id;
      e.version = ++versions_[id];
      e.command_id = texts.emplace_back("c" + std::to_string(p) + "-" + std::to_string(e.event_id));
      e.command_name = "put";
      e.deleted = deleted;
      if (!deleted) e.state = texts.emplace_back(R"({"v":)" + std::to_string(e.version) + "}");
      ASSERT_TRUE(append->TryAdd(e, SIZE_MAX));
    }
    for (auto& [p, append] : appends) ASSERT_TRUE(log_->Append(*append).ok());
  }

  uint32_t partitions_ = 2;
  std::map<uint32_t, uint64_t> heads_;
  std::map<std::string, uint64_t> versions_;
  std::shared_ptr<sql::MemoryStorage> storage_ = sql::MemoryStorage::Create();
  std::unique_ptr<sql::EventLog> log_ = storage_->OpenEventLog();
  config::SinkConfig sink_;
  MemoryView view_;
};

}  // namespace sluice::engine
