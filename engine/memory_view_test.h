// A point view in memory for the engine's unit tests: what VerifyEntities
// and Verify compare, Repair (and, when allowed, Apply) write. Used by
// anti_entropy_test.cc and view_repair_test.cc; one thread at a time.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "connectors/sink.h"

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

  connectors::ApplyResult Repair(std::span<const connectors::ChangeEvent> events,
                                 connectors::RepairGuard guard) override {
    if (!overwrite) {
      EXPECT_EQ(guard, connectors::RepairGuard::kNotOlder);
    }
    repair_guards.push_back(guard);
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

}  // namespace sluice::engine
