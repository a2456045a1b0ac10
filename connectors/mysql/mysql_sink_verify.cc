#include "connectors/mysql/mysql_sink_impl.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/json.h"

namespace sluice::connectors::mysql {
namespace {

// Rows per query when Verify reads the view, to bound memory.
constexpr size_t kVerifyChunkRows = 5000;
// Longest value quoted in a Verify difference.
constexpr size_t kDetailValueBytes = 60;

// Equal texts, or two spellings of one number (a DECIMAL or INT column gives
// back its own form of the JSON number it stored).
bool SameValue(const std::optional<std::string>& view, const std::optional<std::string>& want) {
  if (view.has_value() != want.has_value()) return false;
  if (!view || *view == *want) return true;
  double a = 0;
  double b = 0;
  const auto ra = std::from_chars(view->data(), view->data() + view->size(), a);
  const auto rb = std::from_chars(want->data(), want->data() + want->size(), b);
  return ra.ec == std::errc() && rb.ec == std::errc() && ra.ptr == view->data() + view->size() &&
         rb.ptr == want->data() + want->size() && std::isfinite(a) && a == b;
}

std::string Shown(const std::optional<std::string>& v) {
  if (!v) return "NULL";
  if (v->size() <= kDetailValueBytes) return "'" + *v + "'";
  return "'" + v->substr(0, kDetailValueBytes) + "...' (" + std::to_string(v->size()) + " bytes)";
}

}  // namespace

void MysqlSink::CompareRow(const EntitySnapshot* snap, const sql::Row& row,
                           std::vector<Difference>& differences) const {
  const auto& columns = options().columns;
  if (row.size() < 3 + columns.size() || !row[0]) return;
  const std::string& id = *row[0];
  const uint64_t version = ParseUint(row[1]).value_or(0);
  const bool deleted = row[2].value_or("0") != "0";
  const auto add = [&](Difference::Kind kind, std::string detail) {
    differences.push_back(Difference{kind, id, std::move(detail), version});
  };
  const bool unknown = snap == nullptr || (snap->deleted && snap->version == 0);
  if (unknown || snap->deleted) {
    if (deleted) return;  // a tombstone: invisible, and fine
    add(Difference::Kind::kExtra, "view has a live row at version " + std::to_string(version) +
                                      (unknown ? ", storage has no such entity"
                                               : ", storage deleted it at version " + std::to_string(snap->version)));
    return;
  }
  if (deleted) {
    add(Difference::Kind::kMissing, "view has a tombstone at version " + std::to_string(version) +
                                        ", storage has version " + std::to_string(snap->version));
    return;
  }
  if (version != snap->version) {
    add(Difference::Kind::kVersionMismatch,
        "view has version " + std::to_string(version) + ", storage has " + std::to_string(snap->version));
    return;
  }
  auto state = ParseJson(snap->state);
  if (!state.ok()) {
    add(Difference::Kind::kContentMismatch, "storage state is not valid JSON: " + state.status().message());
    return;
  }
  std::string detail;
  for (size_t c = 0; c < columns.size(); ++c) {
    std::optional<std::string> expected;
    try {
      expected = FieldText(*state, columns[c].pointer);
    } catch (const std::exception&) {
      expected = std::nullopt;
    }
    if (SameValue(row[3 + c], expected)) continue;
    if (!detail.empty()) detail += "; ";
    detail += "column " + columns[c].name + ": view has " + Shown(row[3 + c]) + ", storage has " + Shown(expected);
  }
  if (!detail.empty()) add(Difference::Kind::kContentMismatch, std::move(detail));
}

Status MysqlSink::Verify(const std::vector<EntitySnapshot>& truth, std::vector<Difference>& differences) {
  RETURN_IF_ERROR(EnsureOpen());
  struct Expected {
    const EntitySnapshot* snapshot = nullptr;
    bool seen = false;
  };
  std::unordered_map<std::string_view, Expected> want;
  want.reserve(truth.size());
  for (const EntitySnapshot& s : truth) want[s.entity_id] = Expected{&s, false};

  RETURN_IF_ERROR(KeysetPages(verify_select_, kVerifyChunkRows, "reading the view", [&](std::vector<sql::Row>& rows) {
    for (const sql::Row& row : rows) {
      if (row.empty() || !row[0]) continue;
      const auto it = want.find(*row[0]);
      if (it != want.end()) it->second.seen = true;
      CompareRow(it == want.end() ? nullptr : it->second.snapshot, row, differences);
    }
    return Status::Ok();
  }));
  for (const EntitySnapshot& s : truth) {
    if (s.deleted) continue;
    const Expected& e = want[s.entity_id];
    if (e.snapshot == &s && !e.seen) {
      differences.push_back(Difference{Difference::Kind::kMissing, s.entity_id,
                                       "no row in the view, storage has version " + std::to_string(s.version)});
    }
  }
  return Status::Ok();
}

Status MysqlSink::KeysetPages(const std::string& select, size_t page, std::string_view doing,
                              const std::function<Status(std::vector<sql::Row>& rows)>& each) {
  page = std::max<size_t>(1, page);
  std::string last;
  for (bool first = true;; first = false) {
    std::string q = select;
    if (!first) {
      q += " WHERE `id` > ";
      conn_->AppendQuoted(q, last);
    }
    q += " ORDER BY `id` LIMIT " + std::to_string(page);
    auto rows = conn_->Query(q);
    if (!rows.ok()) return Fail(rows.status(), doing);
    if (rows->empty()) return Status::Ok();
    const bool full = rows->size() >= page;
    if (!rows->back().empty() && rows->back()[0]) last = *rows->back()[0];
    RETURN_IF_ERROR(each(*rows));
    if (!full) return Status::Ok();
  }
}

// Tombstones are read and left out here: a filter in the statement would
// let one statement read every tombstone of a view of mostly deleted
// entities.
Status MysqlSink::ScanViewIds(size_t page, const std::function<Status(std::span<const std::string> ids)>& each) {
  RETURN_IF_ERROR(EnsureOpen());
  std::vector<std::string> ids;
  return KeysetPages(ids_select_, page, "reading the view's ids", [&](std::vector<sql::Row>& rows) -> Status {
    ids.clear();
    for (sql::Row& row : rows) {
      if (row.size() >= 2 && row[0] && row[1].value_or("0") == "0") ids.push_back(std::move(*row[0]));
    }
    return ids.empty() ? Status::Ok() : each(ids);
  });
}

Status MysqlSink::VerifyEntities(std::span<const EntitySnapshot> truth, std::vector<Difference>& differences) {
  RETURN_IF_ERROR(EnsureOpen());
  for (size_t begin = 0; begin < truth.size(); begin += kVerifyChunkRows) {
    const size_t end = std::min(truth.size(), begin + kVerifyChunkRows);
    std::unordered_map<std::string_view, const EntitySnapshot*> want;
    std::string q = verify_select_ + " FORCE INDEX (PRIMARY) WHERE `id` IN (";
    for (size_t i = begin; i < end; ++i) {
      if (i > begin) q += ',';
      conn_->AppendQuoted(q, truth[i].entity_id);
      want[truth[i].entity_id] = &truth[i];
    }
    q += ')';
    auto rows = conn_->Query(q);
    if (!rows.ok()) return Fail(rows.status(), "reading the view");
    std::unordered_set<std::string> seen;
    for (const sql::Row& row : *rows) {
      if (row.empty() || !row[0]) continue;
      const auto it = want.find(*row[0]);
      if (it == want.end()) continue;
      seen.insert(*row[0]);
      CompareRow(it->second, row, differences);
    }
    for (size_t i = begin; i < end; ++i) {
      const EntitySnapshot& s = truth[i];
      if (s.deleted || seen.contains(s.entity_id)) continue;
      differences.push_back(Difference{Difference::Kind::kMissing, s.entity_id,
                                       "no row in the view, storage has version " + std::to_string(s.version)});
    }
  }
  return Status::Ok();
}

}  // namespace sluice::connectors::mysql
