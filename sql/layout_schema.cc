#include "sql/layout_schema.h"

#include <chrono>
#include <map>
#include <optional>

namespace sluice::sql {

namespace {

constexpr const char* kServerDdl =
    "CREATE TABLE IF NOT EXISTS sluice_server ("
    "id TINYINT UNSIGNED NOT NULL PRIMARY KEY,"
    "name VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL"
    ") ENGINE=InnoDB";
constexpr const char* kPlacementDdl =
    "CREATE TABLE IF NOT EXISTS sluice_placement ("
    "entity_type VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    "first_partition INT UNSIGNED NOT NULL,"
    "last_partition INT UNSIGNED NOT NULL,"
    "server VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    "PRIMARY KEY (entity_type, first_partition)"
    ") ENGINE=InnoDB";
constexpr const char* kMovingDoc = "docs/deployment.md#moving-partitions-between-servers";

using Names = std::vector<std::string>;  // the server of each partition

std::string Label(const StorageLayout& layout, size_t server) {
  const StorageServer& s = layout.servers.at(server);
  const std::string where = s.params.socket.empty() ? s.params.host + ":" + std::to_string(s.params.port)
                                                    : s.params.socket;
  return "storage server " + s.name + " (" + where + ", database " + s.params.database + ")";
}

Result<std::unique_ptr<Connection>> Connect(const StorageLayout& layout, size_t server, bool select_database) {
  ConnectParams p = layout.servers.at(server).params;
  if (!select_database) p.database.clear();
  auto conn = Connection::Open(p);
  if (!conn.ok()) return conn.status().WithContext(Label(layout, server));
  return std::move(*conn);
}

std::string Qualified(const std::string& database, const std::string& table) {
  return QuoteIdent(database) + "." + QuoteIdent(table);
}

Result<bool> HasTable(Connection& c, const std::string& database, const std::string& table) {
  std::string q = "SELECT 1 FROM information_schema.tables WHERE table_schema=";
  c.AppendQuoted(q, database);
  q += " AND table_name=";
  c.AppendQuoted(q, table);
  ASSIGN_OR_RETURN(auto rows, c.Query(q));
  return !rows.empty();
}

// The name the database records for its server; nullopt when it records none.
Result<std::optional<std::string>> RecordedName(Connection& c, const std::string& database) {
  ASSIGN_OR_RETURN(bool has, HasTable(c, database, "sluice_server"));
  if (!has) return std::optional<std::string>();
  ASSIGN_OR_RETURN(auto rows, c.Query("SELECT name FROM " + Qualified(database, "sluice_server") + " WHERE id=1"));
  if (rows.empty() || !rows[0][0]) return std::optional<std::string>();
  return std::optional<std::string>(*rows[0][0]);
}

// The placement main records, by type (server of each partition). A type
// registered before placements were recorded is every partition on main.
Result<std::map<std::string, Names>> RecordedPlacement(Connection& c, const std::string& database) {
  std::map<std::string, Names> out;
  ASSIGN_OR_RETURN(bool types, HasTable(c, database, "sluice_entity_types"));
  if (!types) return out;
  ASSIGN_OR_RETURN(auto registered,
                   c.Query("SELECT entity_type, partitions FROM " + Qualified(database, "sluice_entity_types")));
  for (const auto& r : registered) out[r[0].value_or("")] = Names(std::stoul(r[1].value_or("0")), "main");
  ASSIGN_OR_RETURN(bool placed, HasTable(c, database, "sluice_placement"));
  if (!placed) return out;
  ASSIGN_OR_RETURN(auto rows, c.Query("SELECT entity_type, first_partition, last_partition, server FROM " +
                                      Qualified(database, "sluice_placement")));
  std::map<std::string, Names> recorded;
  for (const auto& r : rows) {
    Names& names = recorded[r[0].value_or("")];
    const uint32_t first = std::stoul(r[1].value_or("0"));
    const uint32_t last = std::stoul(r[2].value_or("0"));
    if (names.size() <= last) names.resize(last + 1);
    for (uint32_t p = first; p <= last; ++p) names[p] = r[3].value_or("");
  }
  for (auto& [type, names] : recorded) out[type] = std::move(names);
  return out;
}

// Each type's partition count as the database registered it.
Result<std::map<std::string, uint32_t>> RegisteredCounts(Connection& c, const std::string& database) {
  std::map<std::string, uint32_t> out;
  ASSIGN_OR_RETURN(bool has, HasTable(c, database, "sluice_entity_types"));
  if (!has) return out;
  ASSIGN_OR_RETURN(auto rows,
                   c.Query("SELECT entity_type, partitions FROM " + Qualified(database, "sluice_entity_types")));
  for (const auto& r : rows) out[r[0].value_or("")] = static_cast<uint32_t>(std::stoul(r[1].value_or("0")));
  return out;
}

// The engines and writers whose heartbeat is younger than `within`, as
// "engine e1, writer w2"; empty when none.
Result<std::string> LiveMembers(Connection& c, const std::string& database, std::chrono::milliseconds within) {
  ASSIGN_OR_RETURN(bool has, HasTable(c, database, "sluice_members"));
  if (!has) return std::string();
  ASSIGN_OR_RETURN(auto rows, c.Query("SELECT member_group, member FROM " + Qualified(database, "sluice_members") +
                                      " WHERE heartbeat_at > NOW(6) - INTERVAL " +
                                      std::to_string(within.count() * 1000) + " MICROSECOND ORDER BY 1, 2"));
  std::string live;
  for (const auto& r : rows) live += (live.empty() ? "" : ", ") + r[0].value_or("") + " " + r[1].value_or("");
  return live;
}

Names Wanted(const StorageLayout& layout, const EntityTypeSpec& t) {
  Names names;
  for (uint32_t p = 0; p < t.partitions; ++p) names.push_back(layout.servers.at(layout.ServerOf(t.name, p)).name);
  return names;
}

std::string DescribeNames(const Names& names) {
  std::string d;
  for (size_t p = 0; p < names.size();) {
    size_t last = p;
    while (last + 1 < names.size() && names[last + 1] == names[p]) ++last;
    d += (d.empty() ? "" : ", ") + std::to_string(p) + (last != p ? "-" + std::to_string(last) : "") + " on " + names[p];
    p = last + 1;
  }
  return d;
}

// The specs of the partitions server `server` holds.
std::vector<EntityTypeSpec> SpecsOn(const StorageLayout& layout, const std::vector<EntityTypeSpec>& types,
                                    size_t server) {
  std::vector<EntityTypeSpec> out;
  for (const EntityTypeSpec& t : types) {
    EntityTypeSpec here{t.name, t.partitions, {}};
    for (uint32_t p = 0; p < t.partitions; ++p) {
      if (layout.ServerOf(t.name, p) == server) here.here.push_back(p);
    }
    if (!here.here.empty()) out.push_back(std::move(here));
  }
  return out;
}

Status MovedRefusal(const EntityTypeSpec& t, const Names& recorded, const Names& wanted) {
  return FailedPrecondition("entity type '" + t.name + "' is stored " + DescribeNames(recorded) +
                            " (as `sluice init` recorded it) but the config places it " + DescribeNames(wanted) +
                            ": moving partitions between servers is a migration (" + kMovingDoc +
                            "); after copying the tables, run `sluice init --accept-moves`");
}

Result<uint64_t> HeadOn(Connection& c, const std::string& database, const std::string& table) {
  ASSIGN_OR_RETURN(auto rows, c.Query("SELECT COALESCE(MAX(event_id),0) FROM " + Qualified(database, table)));
  return static_cast<uint64_t>(std::stoull(rows.at(0).at(0).value_or("0")));
}

std::optional<size_t> IndexOf(const StorageLayout& layout, const std::string& name) {
  for (size_t i = 0; i < layout.servers.size(); ++i) {
    if (layout.servers[i].name == name) return i;
  }
  return std::nullopt;
}

// A moved partition's table must be on its new server, with at least the
// events its old server has (when that server is still in the layout).
Status CheckMove(const StorageLayout& layout, std::vector<std::unique_ptr<Connection>>& conns, const std::string& type,
                 uint32_t p, const std::string& from, const std::string& to) {
  const std::string table = EventTableName(type, p);
  const size_t dst = *IndexOf(layout, to);
  const std::string& dst_db = layout.servers[dst].params.database;
  ASSIGN_OR_RETURN(bool there, HasTable(*conns[dst], dst_db, table));
  if (!there) {
    return FailedPrecondition("partition " + std::to_string(p) + " of '" + type + "' moves from " + from + " to " + to +
                              " but " + Label(layout, dst) + " has no table " + table + ": copy it first (" +
                              kMovingDoc + ")");
  }
  const auto src = IndexOf(layout, from);
  if (!src) return Status::Ok();  // the old server left the config: nothing to compare with
  const std::string& src_db = layout.servers[*src].params.database;
  ASSIGN_OR_RETURN(bool was, HasTable(*conns[*src], src_db, table));
  if (!was) return Status::Ok();
  ASSIGN_OR_RETURN(uint64_t old_head, HeadOn(*conns[*src], src_db, table));
  ASSIGN_OR_RETURN(uint64_t new_head, HeadOn(*conns[dst], dst_db, table));
  if (new_head < old_head) {
    return FailedPrecondition("partition " + std::to_string(p) + " of '" + type + "' moves from " + from + " to " + to +
                              " but its table there ends at event " + std::to_string(new_head) + " and on " + from +
                              " at " + std::to_string(old_head) + ": copy it again with every writer stopped (" +
                              kMovingDoc + ")");
  }
  return Status::Ok();
}

Status CheckNames(const StorageLayout& layout, std::vector<std::unique_ptr<Connection>>& conns, bool must_exist) {
  for (size_t i = 0; i < layout.servers.size(); ++i) {
    ASSIGN_OR_RETURN(auto name, RecordedName(*conns[i], layout.servers[i].params.database));
    if (name && *name != layout.servers[i].name) {
      return FailedPrecondition(Label(layout, i) + " holds the tables of storage server '" + *name +
                                "': two servers' settings are swapped, or point at the same database");
    }
    if (!name && must_exist) {
      return FailedPrecondition(Label(layout, i) + " is not set up; run `sluice init --config FILE`");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Connection>> ConnectServer(const StorageLayout& layout, size_t server) {
  return Connect(layout, server, true);
}

Result<LayoutInitReport> InitLayout(const StorageLayout& layout, const std::vector<EntityTypeSpec>& types,
                                    bool accept_moves, std::chrono::milliseconds live_within) {
  std::vector<std::unique_ptr<Connection>> conns;
  for (size_t i = 0; i < layout.servers.size(); ++i) {
    ASSIGN_OR_RETURN(auto c, Connect(layout, i, false));
    conns.push_back(std::move(c));
  }
  RETURN_IF_ERROR(CheckNames(layout, conns, false));
  // Everything is checked on every server before anything is created.
  for (size_t i = 0; i < layout.servers.size(); ++i) {
    ASSIGN_OR_RETURN(auto counts, RegisteredCounts(*conns[i], layout.servers[i].params.database));
    for (const EntityTypeSpec& t : types) {
      const auto it = counts.find(t.name);
      if (it != counts.end() && it->second != t.partitions) {
        const Status st = PartitionCountMismatch(t, it->second);
        return layout.single() ? st : st.WithContext(Label(layout, i));
      }
    }
  }
  LayoutInitReport report;
  const std::string& main_db = layout.main().database;
  ASSIGN_OR_RETURN(auto recorded, RecordedPlacement(*conns[0], main_db));
  std::vector<const EntityTypeSpec*> to_record;  // types whose placement is new or moves
  for (const EntityTypeSpec& t : types) {
    const auto it = recorded.find(t.name);
    const Names wanted = Wanted(layout, t);
    if (it == recorded.end()) {
      to_record.push_back(&t);
      continue;
    }
    if (it->second.size() != t.partitions) {
      return PartitionCountMismatch(t, static_cast<uint32_t>(it->second.size()));
    }
    if (it->second == wanted) continue;
    if (!accept_moves) return MovedRefusal(t, it->second, wanted);
    for (uint32_t p = 0; p < t.partitions; ++p) {
      if (it->second[p] == wanted[p]) continue;
      RETURN_IF_ERROR(CheckMove(layout, conns, t.name, p, it->second[p], wanted[p]));
      report.moved.push_back("partition " + std::to_string(p) + " of " + t.name + ": " + it->second[p] + " -> " +
                             wanted[p]);
    }
    to_record.push_back(&t);
  }
  if (!report.moved.empty()) {
    // A writer still running would append to a moved table's old copy.
    ASSIGN_OR_RETURN(const std::string live, LiveMembers(*conns[0], main_db, live_within));
    if (!live.empty()) {
      return FailedPrecondition("partitions move to other servers but " + live +
                                " still run; stop every writer and engine first (" + kMovingDoc + ")");
    }
  }
  for (size_t i = 0; i < layout.servers.size(); ++i) {
    const StorageServer& s = layout.servers[i];
    auto made = InitSchema(*conns[i], s.params.database, SpecsOn(layout, types, i));
    if (!made.ok()) return layout.single() ? made.status() : made.status().WithContext(Label(layout, i));
    Connection& c = *conns[i];
    RETURN_IF_ERROR(c.Execute(kServerDdl).status());
    std::string ins = "INSERT IGNORE INTO sluice_server (id, name) VALUES (1,";
    c.AppendQuoted(ins, s.name);
    RETURN_IF_ERROR(c.Execute(ins + ")").status());
    report.servers.push_back({s.name, s.params.database, *made});
  }
  RETURN_IF_ERROR(CheckNames(layout, conns, true));  // another init may have named one meanwhile
  Connection& main = *conns[0];
  RETURN_IF_ERROR(main.Execute(kPlacementDdl).status());
  if (to_record.empty()) return report;
  // One transaction for every type that changed; two inits at once (two
  // `serve`s starting) may deadlock on it: the loser tries again.
  Status st = Status::Ok();
  for (int attempt = 0; attempt < 5; ++attempt) {
    RETURN_IF_ERROR(main.Execute("BEGIN").status());
    st = [&]() -> Status {
      for (const EntityTypeSpec* t : to_record) {
        std::string del = "DELETE FROM sluice_placement WHERE entity_type=";
        main.AppendQuoted(del, t->name);
        RETURN_IF_ERROR(main.Execute(del).status());
        std::string ins = "INSERT INTO sluice_placement (entity_type, first_partition, last_partition, server) VALUES ";
        bool first = true;
        for (const PlacedRange& r : layout.Ranges(t->name, t->partitions)) {
          ins += first ? "(" : ",(";
          first = false;
          main.AppendQuoted(ins, t->name);
          ins += "," + std::to_string(r.first) + "," + std::to_string(r.last) + ",";
          main.AppendQuoted(ins, layout.servers[r.server].name);
          ins += ")";
        }
        if (!first) RETURN_IF_ERROR(main.Execute(ins).status());
      }
      return main.Execute("COMMIT").status();
    }();
    if (st.ok()) break;
    (void)main.Execute("ROLLBACK");
    if (st.code() != StatusCode::kAborted) break;
  }
  RETURN_IF_ERROR(st);
  return report;
}

Status CheckLayout(const StorageLayout& layout, const std::vector<EntityTypeSpec>& types) {
  std::vector<std::unique_ptr<Connection>> conns;
  for (size_t i = 0; i < layout.servers.size(); ++i) {
    ASSIGN_OR_RETURN(auto c, Connect(layout, i, true));
    ASSIGN_OR_RETURN(bool set_up, HasTable(*c, layout.servers[i].params.database, "sluice_entity_types"));
    if (!set_up) {
      const Status st = FailedPrecondition("the database has no sluice schema; run `sluice init --config FILE`");
      return layout.single() ? st : st.WithContext(Label(layout, i));
    }
    conns.push_back(std::move(c));
  }
  // A database set up before servers had names is main's, when main is all there is.
  RETURN_IF_ERROR(CheckNames(layout, conns, !layout.single()));
  // The placement first: a moved partition's table is missing where the
  // config looks for it, and the move is what to report.
  ASSIGN_OR_RETURN(auto recorded, RecordedPlacement(*conns[0], layout.main().database));
  for (const EntityTypeSpec& t : types) {
    const auto it = recorded.find(t.name);
    if (it == recorded.end()) {
      return FailedPrecondition("entity type '" + t.name + "' is not set up; run `sluice init --config FILE`");
    }
    if (it->second.size() != t.partitions) {
      return PartitionCountMismatch(t, static_cast<uint32_t>(it->second.size()));
    }
    if (const Names wanted = Wanted(layout, t); it->second != wanted) return MovedRefusal(t, it->second, wanted);
  }
  for (size_t i = 0; i < layout.servers.size(); ++i) {
    if (Status st = CheckSchema(*conns[i], SpecsOn(layout, types, i)); !st.ok()) {
      return layout.single() ? st : st.WithContext(Label(layout, i));
    }
  }
  return Status::Ok();
}

}  // namespace sluice::sql
