#include "connectors/aggregate/aggregate_ops.h"

#include <cstdlib>
#include <utility>

#include "sql/connection.h"

namespace sluice::connectors::aggregate {
namespace {

std::string Short(const Json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 60) + "..." : s;
}

Json Sum(const Json& a, const Json& b) {
  if (a.is_number_integer() && b.is_number_integer()) return a.get<int64_t>() + b.get<int64_t>();
  if (a.is_number_unsigned() && b.is_number_unsigned()) return a.get<uint64_t>() + b.get<uint64_t>();
  if ((a.is_number_integer() || a.is_number_unsigned()) && (b.is_number_integer() || b.is_number_unsigned())) {
    return a.get<int64_t>() + b.get<int64_t>();
  }
  return a.get<double>() + b.get<double>();
}

// A value as SQL text: numbers as numbers, strings quoted, booleans 1/0,
// null NULL, objects and arrays as quoted JSON.
void AppendValue(std::string& out, const Json& v, const std::function<void(std::string&, std::string_view)>& quote) {
  switch (v.type()) {
    case Json::value_t::null: out += "NULL"; return;
    case Json::value_t::boolean: out += v.get<bool>() ? "1" : "0"; return;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float: out += v.dump(); return;
    case Json::value_t::string: quote(out, v.get_ref<const std::string&>()); return;
    default: quote(out, v.dump()); return;
  }
}

}  // namespace

Result<std::vector<Op>> ParseOps(std::string_view json, const AggregateSinkOptions& options) {
  auto parsed = ParseJson(json);
  if (!parsed.ok()) return InvalidArgument("aggregate() returned a value that is not valid JSON: " + parsed.status().message());
  std::vector<Op> out;
  if (parsed->is_null()) return out;
  if (!parsed->is_array()) return InvalidArgument("aggregate() must return an array of operations (or null), got " + Short(*parsed));
  for (const Json& j : *parsed) {
    const std::string where = "operation " + Short(j);
    if (!j.is_object()) return InvalidArgument(where + ": must be an object {table, key, add | set | delete}");
    Op op;
    const auto table = j.find("table");
    if (table == j.end() || !table->is_string()) return InvalidArgument(where + ": needs `table`, the name of a declared table");
    const std::string& name = table->get_ref<const std::string&>();
    size_t t = 0;
    while (t < options.tables.size() && options.tables[t].name != name) ++t;
    if (t == options.tables.size()) return InvalidArgument(where + ": table '" + name + "' is not declared in the sink's tables");
    op.table = t;
    const AggregateTable& decl = options.tables[t];
    const auto key = j.find("key");
    if (key == j.end() || !key->is_object()) return InvalidArgument(where + ": needs `key`, an object of the table's key columns");
    for (const AggregateColumn& k : decl.key) {
      const auto v = key->find(k.name);
      if (v == key->end() || v->is_null()) return InvalidArgument(where + ": the key lacks column '" + k.name + "'");
      if (!v->is_string() && !v->is_number()) return InvalidArgument(where + ": key column '" + k.name + "' must be a string or a number");
      op.key.push_back(*v);
    }
    if (key->size() != decl.key.size()) return InvalidArgument(where + ": the key has columns the table's key does not");
    int kinds = 0;
    for (const char* kind : {"add", "set", "delete"}) kinds += j.contains(kind) ? 1 : 0;
    if (kinds != 1) return InvalidArgument(where + ": needs exactly one of `add`, `set` and `delete`");
    if (j.contains("delete")) {
      if (j["delete"] != true) return InvalidArgument(where + ": `delete` must be true");
      op.kind = Op::Kind::kDelete;
    } else {
      const bool add = j.contains("add");
      op.kind = add ? Op::Kind::kAdd : Op::Kind::kSet;
      const Json& values = j[add ? "add" : "set"];
      if (!values.is_object() || values.empty()) {
        return InvalidArgument(where + ": `" + (add ? "add" : "set") + "` must be an object of columns");
      }
      for (auto it = values.begin(); it != values.end(); ++it) {
        size_t c = 0;
        while (c < decl.columns.size() && decl.columns[c].name != it.key()) ++c;
        if (c == decl.columns.size()) {
          return InvalidArgument(where + ": column '" + it.key() + "' is not declared in table '" + name + "'");
        }
        if (add && !it.value().is_number()) return InvalidArgument(where + ": `add` of '" + it.key() + "' must be a number");
        op.values.emplace_back(c, it.value());
      }
    }
    out.push_back(std::move(op));
  }
  return out;
}

void OpFold::Add(const std::vector<Op>& ops) {
  for (const Op& op : ops) {
    std::string id = std::to_string(op.table);
    for (const Json& k : op.key) id += '\x1f' + k.dump();
    Row& row = rows_[id];
    if (row.key.empty()) {
      row.table = op.table;
      row.key = op.key;
    }
    switch (op.kind) {
      case Op::Kind::kDelete:
        row.reset = true;
        row.written = false;
        row.columns.clear();
        break;
      case Op::Kind::kSet:
        row.written = true;
        for (const auto& [c, v] : op.values) row.columns[c] = Column{true, v};
        break;
      case Op::Kind::kAdd:
        row.written = true;
        for (const auto& [c, v] : op.values) {
          auto it = row.columns.find(c);
          if (it == row.columns.end()) {
            row.columns[c] = Column{false, v};
          } else if (it->second.set && it->second.value.is_null()) {
            it->second.value = v;  // NULL + n counts from 0, as COALESCE does in SQL
          } else if (it->second.set && it->second.value.is_string()) {
            // A number set as text, then added to: MySQL would convert the
            // text; a text that is no number counts as 0 there too.
            const std::string& text = it->second.value.get_ref<const std::string&>();
            char* end = nullptr;
            const double base = std::strtod(text.c_str(), &end);
            const bool number = !text.empty() && end == text.c_str() + text.size();
            it->second.value = Sum(Json(number ? base : 0.0), v);
          } else if (it->second.set && !it->second.value.is_number()) {
            it->second.value = v;  // a boolean, object or array set, then added to: counts as 0
          } else {
            it->second.value = Sum(it->second.value, v);
          }
        }
        break;
    }
  }
}

std::vector<std::string> OpFold::Statements(const std::function<void(std::string&, std::string_view)>& quote) const {
  std::vector<std::string> out;
  // Rows deleted in the batch: gone before what the batch writes to them.
  for (const auto& [id, row] : rows_) {
    if (!row.reset) continue;
    const AggregateTable& t = options_.tables[row.table];
    std::string s = "DELETE FROM " + sql::QuoteIdent(t.name + suffix_) + " WHERE ";
    for (size_t k = 0; k < t.key.size(); ++k) {
      if (k > 0) s += " AND ";
      s += sql::QuoteIdent(t.key[k].name) + "=";
      AppendValue(s, row.key[k], quote);
    }
    out.push_back(std::move(s));
  }
  // The rest, one statement per table and shape ("s3,a5": column 3 set, 5 added).
  std::map<std::pair<size_t, std::string>, std::vector<const Row*>> groups;
  for (const auto& [id, row] : rows_) {
    if (!row.written) continue;
    std::string shape;
    for (const auto& [c, col] : row.columns) shape += (col.set ? "s" : "a") + std::to_string(c) + ",";
    groups[{row.table, shape}].push_back(&row);
  }
  for (const auto& [which, rows] : groups) {
    const AggregateTable& t = options_.tables[which.first];
    const Row& first = *rows.front();
    std::string s = "INSERT INTO " + sql::QuoteIdent(t.name + suffix_) + " (";
    for (size_t k = 0; k < t.key.size(); ++k) s += (k ? "," : "") + sql::QuoteIdent(t.key[k].name);
    for (const auto& [c, col] : first.columns) s += "," + sql::QuoteIdent(t.columns[c].name);
    s += ") VALUES ";
    for (size_t r = 0; r < rows.size(); ++r) {
      s += r ? ",(" : "(";
      for (size_t k = 0; k < t.key.size(); ++k) {
        if (k) s += ',';
        AppendValue(s, rows[r]->key[k], quote);
      }
      for (const auto& [c, col] : rows[r]->columns) {
        s += ',';
        AppendValue(s, col.value, quote);
      }
      s += ')';
    }
    s += " ON DUPLICATE KEY UPDATE ";
    bool comma = false;
    for (const auto& [c, col] : first.columns) {
      const std::string name = sql::QuoteIdent(t.columns[c].name);
      if (comma) s += ',';
      comma = true;
      s += name + (col.set ? "=VALUES(" + name + ")" : "=COALESCE(" + name + ",0)+VALUES(" + name + ")");
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace sluice::connectors::aggregate
