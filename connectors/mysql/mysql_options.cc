#include "connectors/mysql/mysql_options.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "connectors/mysql/mysql_sink.h"

namespace sluice::connectors::mysql {
namespace {

using config::Field;

std::string ToLower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

// One mysql sink's keys while it is read.
class MysqlKeys : public config::SinkOptionsRead {
 public:
  MysqlKeys(config::SinkOptionReader& reader, config::SinkConfig& sink) : r_(reader), sink_(sink) {}

  std::vector<config::SinkOptionKey> Keys() override {
    return {
        {"table", true,
         [this](const Field& f) {
           if (ReadTableName(f)) table_key_ = r_.Keep(f);
         }},
        {"database", false, [this](const Field& f) { ReadDatabaseName(f); }},
        {"columns", true,
         [this](const Field& f) { r_.ReadMappings(f, config::MappingKind::kMysqlColumn, &o().columns); }},
        {"auto_create", false, [this](const Field& f) { r_.ReadBool(f, &o().auto_create); }},
        {"connections", false, [this](const Field& f) { r_.ReadUint(f, 1, 64, &o().connections); }},
        {"version_cache", false, [this](const Field& f) { r_.ReadUint(f, 0, 10000000, &o().version_cache); }},
    };
  }

  // No two mysql sinks write the same table (in the database they name, or
  // storage.mysql.database).
  static void CheckTables(const config::Config& config, const std::vector<std::pair<size_t, config::SinkOptionsRead*>>& sinks) {
    std::map<std::string, std::pair<std::string, int>> tables;  // db.table (lower) -> sink, line
    for (const auto& [index, read] : sinks) {
      const auto& keys = static_cast<const MysqlKeys&>(*read);
      if (!keys.table_key_) continue;
      const config::SinkConfig& sink = config.sinks[index];
      const MysqlSinkOptions& m = sink.Options<MysqlSinkOptions>();
      const std::string database = m.database.empty() ? config.mysql.database : m.database;
      const std::string qualified = database + "." + m.table;
      const auto [it, inserted] =
          tables.emplace(ToLower(qualified), std::pair(sink.name, config::FieldLine(*keys.table_key_)));
      if (!inserted) {
        keys.r_.Problem(*keys.table_key_, "table " + qualified + " is already written by sink " +
                                              config::QuoteValue(it->second.first) + " (line " +
                                              std::to_string(it->second.second) + ")");
      }
    }
  }

 private:
  bool ReadTableName(const Field& f) {
    constexpr std::string_view kExpected = "a table name matching [A-Za-z_][A-Za-z0-9_]{0,63}";
    const auto text = r_.PlainScalar(f, kExpected);
    if (!text) return false;
    if (!config::IsIdentifier(*text)) {
      r_.Expected(f, kExpected, *text);
      return false;
    }
    const std::string lower = ToLower(*text);
    if (lower.rfind("ev_", 0) == 0 || lower.rfind("sluice_", 0) == 0) {
      r_.Problem(f,
                 "table names starting with ev_ or sluice_ are reserved for sluice's own tables, "
                 "got " + config::QuoteValue(*text));
      return false;
    }
    o().table = *text;
    return true;
  }

  void ReadDatabaseName(const Field& f) {
    constexpr std::string_view kExpected = "a name matching [A-Za-z0-9_]{1,64}";
    const auto text = r_.PlainScalar(f, kExpected);
    if (!text) return;
    if (!config::IsDatabaseName(*text)) return r_.Expected(f, kExpected, *text);
    o().database = *text;
  }

  // The sink's options, made when one of its keys is read (SinkType::read).
  MysqlSinkOptions& o() { return sink_.MutableOptions<MysqlSinkOptions>(); }

  config::SinkOptionReader& r_;
  config::SinkConfig& sink_;
  std::shared_ptr<const Field> table_key_;  // `table`, when it was valid
};

void PrintMysqlSink(const config::SinkConfig& sink, config::SinkOptionPrinter& out) {
  const MysqlSinkOptions& m = sink.Options<MysqlSinkOptions>();
  out.Value("table", m.table);
  if (!m.database.empty()) out.Value("database", m.database);
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> columns;
  for (const config::FieldMapping& c : m.columns) {
    columns.push_back({c.name, {{"pointer", c.pointer}, {"type", c.sql_type}}});
  }
  out.FlowMappings("columns", columns);
  out.Value("auto_create", m.auto_create);
  out.Value("connections", uint64_t{m.connections});
  out.Value("version_cache", uint64_t{m.version_cache});
}

}  // namespace

BuiltinSinkType MysqlSinkType() {
  config::SinkType t;
  t.name = "mysql";
  t.can_push = true;
  t.read = [](config::SinkOptionReader& reader, config::SinkConfig* sink) -> std::unique_ptr<config::SinkOptionsRead> {
    return std::make_unique<MysqlKeys>(reader, *sink);
  };
  t.print = PrintMysqlSink;
  t.check_file = MysqlKeys::CheckTables;
  return {std::move(t), [](const config::SinkConfig& sink, const config::Config& global) {
            return MakeMysqlSink(sink, global);
          }};
}

}  // namespace sluice::connectors::mysql
