#include "connectors/aggregate/aggregate_options.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <regex>
#include <utility>

#include "connectors/aggregate/aggregate_sink.h"

namespace sluice::connectors::aggregate {
namespace {

using config::Field;

std::string Upper(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::toupper(c); });
  return out;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

class AggregateKeys : public config::SinkOptionsRead {
 public:
  AggregateKeys(config::SinkOptionReader& reader, config::SinkConfig& sink) : r_(reader), sink_(sink) {}

  std::vector<config::SinkOptionKey> Keys() override {
    return {
        {"database", false, [this](const Field& f) { ReadDatabaseName(f); }},
        {"tables", true,
         [this](const Field& f) {
           tables_key_ = r_.Keep(f);
           r_.ForEachEntry(f, [this](const Field& t) { ReadTable(t); });
         }},
    };
  }

  void Check(const Field& at) override {
    if (sink_.code.empty()) {
      r_.Problem(at, "an aggregate sink needs code: a JavaScript file whose aggregate(event) returns the "
                     "operations on its tables (docs/views.md)");
    }
    if (tables_key_ && o().tables.empty()) r_.Problem(*tables_key_, "must declare at least one table");
  }

  // Sinks that write the same table (an aggregate view fed by several entity
  // types) must declare it alike.
  static void CheckTables(const config::Config& config,
                          const std::vector<std::pair<size_t, config::SinkOptionsRead*>>& sinks) {
    std::map<std::string, std::pair<const config::SinkConfig*, const AggregateTable*>> seen;
    for (const auto& [index, read] : sinks) {
      const auto& keys = static_cast<const AggregateKeys&>(*read);
      const config::SinkConfig& sink = config.sinks[index];
      const AggregateSinkOptions& o = sink.Options<AggregateSinkOptions>();
      // The view's tables, offsets and lease checks share one transaction:
      // on the storage server of the entity type (docs/deployment.md#storage-servers).
      const std::string& server = config.ServerOf(sink.entity, 0);
      bool one_server = true;
      if (const auto e = config.entities.find(sink.entity); e != config.entities.end()) {
        for (uint32_t p = 1; p < e->second.partitions; ++p) one_server = one_server && config.ServerOf(sink.entity, p) == server;
      }
      if (!one_server && keys.tables_key_) {
        keys.r_.Problem(*keys.tables_key_, "an aggregate view's entity type must be stored on one server, and entities." +
                                               sink.entity + " spans several (docs/deployment.md#storage-servers)");
      }
      const config::MysqlConfig* on = config.FindServer(server);
      const std::string database = o.database.empty() ? (on ? on->database : config.mysql.database) : o.database;
      for (const AggregateTable& t : o.tables) {
        // Tables of one name on two servers are two tables.
        const std::string qualified = server + "/" + Lower(database + "." + t.name);
        const auto [it, inserted] = seen.emplace(qualified, std::pair(&sink, &t));
        if (inserted || !keys.tables_key_) continue;
        const AggregateTable& other = *it->second.second;
        const auto same = [](const std::vector<AggregateColumn>& a, const std::vector<AggregateColumn>& b) {
          return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](const auto& x, const auto& y) {
                   return Lower(x.name) == Lower(y.name) && x.sql_type == y.sql_type;
                 });
        };
        if (!same(t.key, other.key) || !same(t.columns, other.columns)) {
          keys.r_.Problem(*keys.tables_key_, "table " + database + "." + t.name + " is declared differently by sink " +
                                                 config::QuoteValue(it->second.first->name) +
                                                 "; sinks that feed one table must declare it alike");
        }
      }
    }
  }

 private:
  void ReadDatabaseName(const Field& f) {
    constexpr std::string_view kExpected = "a name matching [A-Za-z0-9_]{1,64}";
    const auto text = r_.PlainScalar(f, kExpected);
    if (!text) return;
    if (!config::IsDatabaseName(*text)) return r_.Expected(f, kExpected, *text);
    o().database = *text;
  }

  void ReadTable(const Field& t) {
    AggregateTable table;
    table.name = config::FieldKey(t);
    const std::string lower = Lower(table.name);
    if (!config::IsIdentifier(table.name)) {
      return r_.KeyProblem(t, "table names must match [A-Za-z_][A-Za-z0-9_]{0,63}");
    }
    if (lower.rfind("ev_", 0) == 0 || lower.rfind("sluice_", 0) == 0) {
      return r_.KeyProblem(t, "table names starting with ev_ or sluice_ are reserved for sluice's own tables");
    }
    bool has_key = false, has_columns = false;
    std::map<std::string, bool> names;
    r_.ForEachEntry(t, [&](const Field& part) {
      const std::string& which = config::FieldKey(part);
      if (which != "key" && which != "columns") {
        return r_.KeyProblem(part, "unknown key; a table has `key` (its primary key columns) and `columns`");
      }
      auto& list = which == "key" ? table.key : table.columns;
      (which == "key" ? has_key : has_columns) = true;
      r_.ForEachEntry(part, [&](const Field& col) {
        AggregateColumn c;
        c.name = config::FieldKey(col);
        if (!config::IsIdentifier(c.name)) {
          return r_.KeyProblem(col, "column names must match [A-Za-z_][A-Za-z0-9_]{0,63}");
        }
        if (!names.emplace(Lower(c.name), true).second) return r_.KeyProblem(col, "column appears twice");
        const auto type = r_.PlainScalar(col, "a column type such as BIGINT, DECIMAL(20,2) or VARCHAR(64)");
        if (!type) return;
        if (!IsAggregateColumnType(*type, which == "key", &c.sql_type)) {
          return r_.Expected(col,
                             which == "key" ? "a key column type: [TINY|SMALL|BIG]INT [UNSIGNED], DECIMAL(p,s), "
                                              "VARCHAR(n), VARBINARY(n), CHAR(n), DATE or DATETIME[(n)]"
                                            : "a column type: [TINY|SMALL|BIG]INT [UNSIGNED], DECIMAL(p,s), DOUBLE, "
                                              "VARCHAR(n), VARBINARY(n), CHAR(n), DATE, DATETIME[(n)], TEXT or JSON",
                             *type);
        }
        list.push_back(std::move(c));
      });
    });
    if (!has_key || table.key.empty()) return r_.Problem(t, "needs `key`: at least one primary key column");
    if (!has_columns || table.columns.empty()) return r_.Problem(t, "needs `columns`: at least one column");
    o().tables.push_back(std::move(table));
  }

  AggregateSinkOptions& o() { return sink_.MutableOptions<AggregateSinkOptions>(); }

  config::SinkOptionReader& r_;
  config::SinkConfig& sink_;
  std::shared_ptr<const Field> tables_key_;
};

void PrintAggregateSink(const config::SinkConfig& sink, config::SinkOptionPrinter& out) {
  const AggregateSinkOptions& o = sink.Options<AggregateSinkOptions>();
  if (!o.database.empty()) out.Value("database", o.database);
  std::vector<std::pair<std::string, config::SinkOptionPrinter::FlowMappingList>> tables;
  for (const AggregateTable& t : o.tables) {
    std::vector<std::pair<std::string, std::string>> key, columns;
    for (const auto& c : t.key) key.push_back({c.name, c.sql_type});
    for (const auto& c : t.columns) columns.push_back({c.name, c.sql_type});
    tables.push_back({t.name, {{"key", std::move(key)}, {"columns", std::move(columns)}}});
  }
  out.NestedFlowMappings("tables", tables);
}

}  // namespace

bool IsAggregateColumnType(std::string_view type, bool key, std::string* normalized) {
  static const std::regex kValue(
      R"(^((TINYINT|SMALLINT|INT|BIGINT)( UNSIGNED)?|DECIMAL\([0-9]{1,2}, ?[0-9]{1,2}\)|DOUBLE|VARCHAR\([0-9]{1,4}\)|VARBINARY\([0-9]{1,4}\)|CHAR\([0-9]{1,3}\)|DATE|DATETIME(\([0-6]\))?|TEXT|JSON)$)");
  static const std::regex kKey(
      R"(^((TINYINT|SMALLINT|INT|BIGINT)( UNSIGNED)?|DECIMAL\([0-9]{1,2}, ?[0-9]{1,2}\)|VARCHAR\([0-9]{1,3}\)|VARBINARY\([0-9]{1,3}\)|CHAR\([0-9]{1,3}\)|DATE|DATETIME(\([0-6]\))?)$)");
  const std::string upper = Upper(type);
  if (!std::regex_match(upper, key ? kKey : kValue)) return false;
  *normalized = upper;
  return true;
}

std::string CanonicalColumnType(std::string_view type) {
  static const std::regex kSpaces(R"(\s+)");
  static const std::regex kCommaSpace(R"( ?, ?)");
  static const std::regex kDisplayWidth(R"(^(tinyint|smallint|mediumint|int|bigint) ?\([0-9]+\))");
  std::string t = std::regex_replace(Lower(type), kSpaces, " ");
  t = std::regex_replace(t, kCommaSpace, ",");
  t = std::regex_replace(t, kDisplayWidth, "$1");
  while (!t.empty() && t.back() == ' ') t.pop_back();
  while (!t.empty() && t.front() == ' ') t.erase(0, 1);
  if (t == "datetime(0)") return "datetime";
  if (t == "json") return "longtext";
  return t;
}

BuiltinSinkType AggregateSinkType() {
  config::SinkType t;
  t.name = "aggregate";
  t.can_push = false;
  t.runs_code = true;
  t.exactly_once = true;
  t.read = [](config::SinkOptionReader& reader, config::SinkConfig* sink) -> std::unique_ptr<config::SinkOptionsRead> {
    return std::make_unique<AggregateKeys>(reader, *sink);
  };
  t.print = PrintAggregateSink;
  t.check_file = AggregateKeys::CheckTables;
  return {std::move(t), [](const config::SinkConfig& sink, const config::Config& global) {
            return MakeAggregateSink(sink, global);
          }};
}

}  // namespace sluice::connectors::aggregate
