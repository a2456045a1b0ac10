#include "connectors/aggregate/aggregate_ops.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <regex>
#include <utility>

#include "sql/connection.h"

namespace sluice::connectors::aggregate {
namespace {

std::string Short(const Json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 60) + "..." : s;
}

// A decimal number as text: [-+]digits[.digits][(e|E)[-+]digits], the form
// of JSON numbers and of the decimal strings an `add` may carry.
struct DecimalText {
  bool negative = false;
  std::string digits;     // without leading zeros ("" for 0)
  int64_t exponent = 0;   // the value is digits * 10^exponent
};

std::optional<DecimalText> ParseDecimalText(std::string_view t) {
  DecimalText d;
  size_t i = 0;
  const auto digit = [&] { return i < t.size() && t[i] >= '0' && t[i] <= '9'; };
  if (i < t.size() && (t[i] == '-' || t[i] == '+')) d.negative = t[i++] == '-';
  bool any = false;
  for (; digit(); ++i, any = true) d.digits += t[i];
  if (i < t.size() && t[i] == '.') {
    for (++i; digit(); ++i, any = true) {
      d.digits += t[i];
      --d.exponent;
    }
  }
  if (!any) return std::nullopt;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    bool negative = false;
    if (i < t.size() && (t[i] == '-' || t[i] == '+')) negative = t[i++] == '-';
    if (!digit()) return std::nullopt;
    int64_t e = 0;
    for (; digit(); ++i) e = std::min<int64_t>(e * 10 + (t[i] - '0'), 1'000'000);
    d.exponent += negative ? -e : e;
  }
  if (i != t.size()) return std::nullopt;
  d.digits.erase(0, d.digits.find_first_not_of('0') == std::string::npos ? d.digits.size()
                                                                         : d.digits.find_first_not_of('0'));
  return d;
}

enum class Scaled : uint8_t { kOk, kInexact, kTooLarge };

// `d` in units of 10^-scale. Digits past the scale are refused (kInexact)
// or, with `round`, rounded half away from zero as MySQL stores a DECIMAL.
Scaled ToScaled(DecimalText d, int scale, bool round, __int128* out) {
  int64_t shift = d.exponent + scale;
  bool up = false;
  if (shift < 0) {
    const size_t drop = static_cast<size_t>(-shift);
    const size_t keep = drop >= d.digits.size() ? 0 : d.digits.size() - drop;
    const std::string_view gone = std::string_view(d.digits).substr(keep);
    if (gone.find_first_not_of('0') != std::string_view::npos) {
      if (!round) return Scaled::kInexact;
      up = drop <= d.digits.size() && gone.front() >= '5';
    }
    d.digits.resize(keep);
    shift = 0;
  }
  if (!d.digits.empty() && static_cast<int64_t>(d.digits.size()) + shift > 38) return Scaled::kTooLarge;
  __int128 v = 0;
  for (char c : d.digits) v = v * 10 + (c - '0');
  for (int64_t i = 0; i < shift && v != 0; ++i) v *= 10;
  if (up) v += 1;
  *out = d.negative ? -v : v;
  return Scaled::kOk;
}

std::string ScaledText(__int128 v, int scale) {
  unsigned __int128 u = v < 0 ? -static_cast<unsigned __int128>(v) : static_cast<unsigned __int128>(v);
  std::string digits;
  do {
    digits += static_cast<char>('0' + static_cast<int>(u % 10));
    u /= 10;
  } while (u != 0);
  while (digits.size() <= static_cast<size_t>(scale)) digits += '0';
  std::reverse(digits.begin(), digits.end());
  if (scale > 0) digits.insert(digits.size() - static_cast<size_t>(scale), ".");
  return v < 0 ? "-" + digits : digits;
}

// A JSON number or string as decimal text (a double in its shortest form,
// as JavaScript's JSON.stringify wrote it).
std::string NumberText(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  return v.dump();
}

// A sum on a column that is not exact (DOUBLE, text...): integers while they
// fit an int64, else doubles.
Json FloatSum(const Json& a, const Json& b) {
  int64_t sum = 0;
  if (a.is_number_integer() && b.is_number_integer() && !a.is_number_unsigned() && !b.is_number_unsigned() &&
      !__builtin_add_overflow(a.get<int64_t>(), b.get<int64_t>(), &sum)) {
    return sum;
  }
  return a.get<double>() + b.get<double>();
}

// A string value as a number for FloatSum (0 when it is no number, as MySQL converts it).
Json AsNumber(const Json& v) {
  if (!v.is_string()) return v;
  const std::string& text = v.get_ref<const std::string&>();
  char* end = nullptr;
  const double d = std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size() ? d : 0.0;
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
    // Said only when something is wrong: dumping every operation would cost
    // more than checking it.
    const auto where = [&j] { return "operation " + Short(j); };
    if (!j.is_object()) return InvalidArgument(where() + ": must be an object {table, key, add | set | delete}");
    Op op;
    const auto table = j.find("table");
    if (table == j.end() || !table->is_string()) return InvalidArgument(where() + ": needs `table`, the name of a declared table");
    const std::string& name = table->get_ref<const std::string&>();
    size_t t = 0;
    while (t < options.tables.size() && options.tables[t].name != name) ++t;
    if (t == options.tables.size()) return InvalidArgument(where() + ": table '" + name + "' is not declared in the sink's tables");
    op.table = t;
    const AggregateTable& decl = options.tables[t];
    const auto key = j.find("key");
    if (key == j.end() || !key->is_object()) return InvalidArgument(where() + ": needs `key`, an object of the table's key columns");
    for (const AggregateColumn& k : decl.key) {
      const auto v = key->find(k.name);
      if (v == key->end() || v->is_null()) return InvalidArgument(where() + ": the key lacks column '" + k.name + "'");
      if (!v->is_string() && !v->is_number()) return InvalidArgument(where() + ": key column '" + k.name + "' must be a string or a number");
      op.key.push_back(*v);
    }
    if (key->size() != decl.key.size()) return InvalidArgument(where() + ": the key has columns the table's key does not");
    int kinds = 0;
    for (const char* kind : {"add", "set", "delete"}) kinds += j.contains(kind) ? 1 : 0;
    if (kinds != 1) return InvalidArgument(where() + ": needs exactly one of `add`, `set` and `delete`");
    if (j.contains("delete")) {
      if (j["delete"] != true) return InvalidArgument(where() + ": `delete` must be true");
      op.kind = Op::Kind::kDelete;
    } else {
      const bool add = j.contains("add");
      op.kind = add ? Op::Kind::kAdd : Op::Kind::kSet;
      const Json& values = j[add ? "add" : "set"];
      if (!values.is_object() || values.empty()) {
        return InvalidArgument(where() + ": `" + (add ? "add" : "set") + "` must be an object of columns");
      }
      for (auto it = values.begin(); it != values.end(); ++it) {
        size_t c = 0;
        while (c < decl.columns.size() && decl.columns[c].name != it.key()) ++c;
        if (c == decl.columns.size()) {
          return InvalidArgument(where() + ": column '" + it.key() + "' is not declared in table '" + name + "'");
        }
        if (add && !it.value().is_number() &&
            !(it.value().is_string() && ParseDecimalText(it.value().get_ref<const std::string&>()))) {
          return InvalidArgument(where() + ": `add` of '" + it.key() + "' must be a number or a decimal string");
        }
        op.values.emplace_back(c, it.value());
      }
    }
    out.push_back(std::move(op));
  }
  return out;
}

OpFold::OpFold(const AggregateSinkOptions& options, std::string suffix)
    : options_(options), suffix_(std::move(suffix)) {
  static const std::regex kDecimal(R"(^DECIMAL\(([0-9]+), ?([0-9]+)\)$)");
  for (const AggregateTable& t : options_.tables) {
    auto& columns = exact_.emplace_back();
    for (const AggregateColumn& c : t.columns) {
      std::optional<Exact> e;
      std::smatch m;
      const std::string& type = c.sql_type;
      const bool is_unsigned = type.size() > 9 && type.compare(type.size() - 9, 9, " UNSIGNED") == 0;
      const std::string base = is_unsigned ? type.substr(0, type.size() - 9) : type;
      int bits = base == "TINYINT" ? 8 : base == "SMALLINT" ? 16 : base == "INT" ? 32 : base == "BIGINT" ? 64 : 0;
      if (bits > 0) {
        e = Exact{};
        const __int128 one = 1;
        e->min = is_unsigned ? 0 : -(one << (bits - 1));
        e->max = is_unsigned ? (one << bits) - 1 : (one << (bits - 1)) - 1;
      } else if (std::regex_match(type, m, kDecimal)) {
        // Beyond 38 digits an __int128 cannot count: the fold then holds 38.
        const int precision = std::min(std::stoi(m[1].str()), 38);
        e = Exact{};
        e->scale = std::stoi(m[2].str());
        e->max = 1;
        for (int i = 0; i < precision; ++i) e->max *= 10;
        e->max -= 1;
        e->min = -e->max;
      }
      columns.push_back(e);
    }
  }
}

Status OpFold::AddTo(size_t table, size_t c, const Json& v, bool present, Column& column, bool earlier) const {
  const AggregateTable& t = options_.tables[table];
  const AggregateColumn& decl = t.columns[c];
  const std::optional<Exact>& exact = exact_[table][c];
  if (!exact) {
    const Json n = AsNumber(v);
    if (!present) {
      column = Column{};
      column.value = n;
    } else if (column.set && column.value.is_null()) {
      column.value = n;  // NULL + n counts from 0, as COALESCE does in SQL
    } else if (column.set && column.value.is_string()) {
      // A number set as text, then added to: MySQL would convert the text;
      // a text that is no number counts as 0 there too.
      column.value = FloatSum(AsNumber(column.value), n);
    } else if (column.set && !column.value.is_number()) {
      column.value = n;  // a boolean, object or array set, then added to: counts as 0
    } else {
      column.value = FloatSum(column.value, n);
    }
    return Status::Ok();
  }
  const std::string what = "`add` of '" + decl.name + "' in table " + t.name;
  const auto beyond = [&](const std::string& why) {
    return earlier ? ResourceExhausted(why) : InvalidArgument(why);
  };
  const std::string text = NumberText(v);
  const std::optional<DecimalText> d = ParseDecimalText(text);
  if (!d) return InvalidArgument(what + " is " + text + ", not a number");
  __int128 n = 0;
  switch (ToScaled(*d, exact->scale, false, &n)) {
    case Scaled::kInexact:
      return InvalidArgument(what + " is " + text + ", which " + decl.sql_type + " cannot hold exactly (" +
                             std::to_string(exact->scale) + " decimals): round it in the code, or pass it as a "
                             "decimal string");
    case Scaled::kTooLarge: n = exact->max + 1; break;
    case Scaled::kOk: break;
  }
  if (n < exact->min || n > exact->max) return InvalidArgument(what + " is " + text + ", beyond what " + decl.sql_type + " holds");
  if (!present) {
    column = Column{};
    column.exact = true;
    column.scaled = n;
    return Status::Ok();
  }
  if (!column.exact) {
    // A set, then added to: the set value as MySQL stores it (rounded to the
    // scale); NULL, a text that is no number, a boolean, object or array count as 0.
    __int128 base = 0;
    if (column.value.is_number() || column.value.is_string()) {
      const std::string set = NumberText(column.value);
      if (const auto sd = ParseDecimalText(set)) {
        if (ToScaled(*sd, exact->scale, true, &base) != Scaled::kOk || base < exact->min || base > exact->max) {
          return beyond("'" + decl.name + "' in table " + t.name + " was set to " + set + ", beyond what " +
                        decl.sql_type + " holds");
        }
      }
    }
    column.exact = true;
    column.value = Json();
    column.scaled = base;
  }
  __int128 sum = 0;
  if (__builtin_add_overflow(column.scaled, n, &sum) || sum < exact->min || sum > exact->max) {
    return beyond("the adds to '" + decl.name + "' in table " + t.name + " sum beyond what " + decl.sql_type +
                  " holds");
  }
  column.scaled = sum;
  return Status::Ok();
}

Status OpFold::Add(const std::vector<Op>& ops) {
  const bool earlier = !rows_.empty();
  // Copies of the rows the event writes, kept only if all of it fits.
  std::map<std::string, Row> touched;
  for (const Op& op : ops) {
    std::string id = std::to_string(op.table);
    for (const Json& k : op.key) id += '\x1f' + k.dump();
    auto at = touched.find(id);
    if (at == touched.end()) {
      const auto live = rows_.find(id);
      if (live != rows_.end()) {
        at = touched.emplace(id, live->second).first;
      } else {
        at = touched.emplace(id, Row{}).first;
        at->second.table = op.table;
        at->second.key = op.key;
      }
    }
    Row& row = at->second;
    switch (op.kind) {
      case Op::Kind::kDelete:
        row.reset = true;
        row.written = false;
        row.columns.clear();
        break;
      case Op::Kind::kSet:
        row.written = true;
        for (const auto& [c, v] : op.values) {
          Column& column = row.columns[c] = Column{};
          column.set = true;
          column.value = v;
        }
        break;
      case Op::Kind::kAdd:
        row.written = true;
        for (const auto& [c, v] : op.values) {
          const auto it = row.columns.find(c);
          const bool present = it != row.columns.end();
          Column& column = present ? it->second : row.columns[c];
          RETURN_IF_ERROR(AddTo(op.table, c, v, present, column, earlier));
        }
        break;
    }
  }
  for (auto& [id, row] : touched) rows_[id] = std::move(row);
  return Status::Ok();
}

std::vector<std::string> MultiRowStatements(std::string_view head, const std::vector<std::string>& rows,
                                            std::string_view tail, size_t max_bytes) {
  std::vector<std::string> out;
  std::string s;
  for (const std::string& row : rows) {
    if (!s.empty() && s.size() + 1 + row.size() + tail.size() > max_bytes) {
      out.push_back(std::move(s.append(tail)));
      s.clear();
    }
    if (s.empty()) {
      s.reserve(std::min(max_bytes, head.size() + row.size() + tail.size()));
      s.append(head);
    } else {
      s += ',';
    }
    s += row;
  }
  if (!s.empty()) out.push_back(std::move(s.append(tail)));
  return out;
}

std::vector<std::string> OpFold::Statements(const std::function<void(std::string&, std::string_view)>& quote,
                                            size_t max_bytes) const {
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
    std::string head = "INSERT INTO " + sql::QuoteIdent(t.name + suffix_) + " (";
    for (size_t k = 0; k < t.key.size(); ++k) head += (k ? "," : "") + sql::QuoteIdent(t.key[k].name);
    for (const auto& [c, col] : first.columns) head += "," + sql::QuoteIdent(t.columns[c].name);
    head += ") VALUES ";
    std::vector<std::string> tuples;
    tuples.reserve(rows.size());
    for (const Row* row : rows) {
      std::string& v = tuples.emplace_back("(");
      for (size_t k = 0; k < t.key.size(); ++k) {
        if (k) v += ',';
        AppendValue(v, row->key[k], quote);
      }
      for (const auto& [c, col] : row->columns) {
        v += ',';
        if (col.exact) {
          v += ScaledText(col.scaled, exact_[which.first][c]->scale);
        } else {
          AppendValue(v, col.value, quote);
        }
      }
      v += ')';
    }
    std::string tail = " ON DUPLICATE KEY UPDATE ";
    bool comma = false;
    for (const auto& [c, col] : first.columns) {
      const std::string name = sql::QuoteIdent(t.columns[c].name);
      if (comma) tail += ',';
      comma = true;
      tail += name + (col.set ? "=VALUES(" + name + ")" : "=COALESCE(" + name + ",0)+VALUES(" + name + ")");
    }
    for (std::string& s : MultiRowStatements(head, tuples, tail, max_bytes)) out.push_back(std::move(s));
  }
  return out;
}

}  // namespace sluice::connectors::aggregate
