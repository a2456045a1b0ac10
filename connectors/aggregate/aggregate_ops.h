// The operations of an aggregate view (docs/views.md, "Aggregate views"):
// what aggregate(event) returns, checked against the declared tables, and
// folded per row so that a batch of events costs one statement per table
// and kind of write, not one per event. Pure: the statements are text for
// the sink to run in its transaction.
//
// aggregate(event) returns an array (or null: nothing) of
//   {table: "t", key: {k: v, ...}, add: {c: n, ...}}  adds n to column c (a missing row starts at 0);
//                                                     n is a number or a decimal string ("0.10")
//   {table: "t", key: {k: v, ...}, set: {c: v, ...}}  sets columns (creating the row)
//   {table: "t", key: {k: v, ...}, delete: true}      deletes the row
// with every key column of the table and only its declared columns.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "connectors/aggregate/aggregate_options.h"
#include "core/json.h"
#include "core/status.h"

namespace sluice::connectors::aggregate {

struct Op {
  enum class Kind : uint8_t { kAdd, kSet, kDelete };
  Kind kind = Kind::kAdd;
  size_t table = 0;                              // index in the options' tables
  std::vector<Json> key;                         // one value per key column, in declared order
  std::vector<std::pair<size_t, Json>> values;   // (column index, value); empty for kDelete
};

// The operations of one event; InvalidArgument saying what is wrong (for the
// event's dead letter) when the value is not such an array.
Result<std::vector<Op>> ParseOps(std::string_view json, const AggregateSinkOptions& options);

// Statements longer than this are split (MariaDB's default
// max_allowed_packet is 16 MiB, MySQL's 64 MiB; 1 MiB keeps well under both).
constexpr size_t kMaxStatementBytes = size_t{1} << 20;

// `head` + rows joined by commas + `tail`, as few statements as keep each
// within `max_bytes` (a row too long for the budget alone is a statement of
// its own). Every row is in exactly one statement; for rows that are
// independent (distinct keys) the statements may run in any order.
std::vector<std::string> MultiRowStatements(std::string_view head, const std::vector<std::string>& rows,
                                            std::string_view tail, size_t max_bytes = kMaxStatementBytes);

// Operations of many events folded per row, in event order: a delete resets
// the row (it is deleted, then written again if later operations write it),
// a set replaces a column's value and later adds add to it, adds to the same
// column sum up.
//
// Sums are exact on integer and DECIMAL(p,s) columns: a value is held as an
// integer count of 10^-s (an __int128), never as a double; DOUBLE and the
// other columns sum as doubles (integers as int64 while they fit).
//
// Threads: none of its own; one caller at a time.
class OpFold {
 public:
  // `suffix` follows every table name in the statements (a rebuild's shadow
  // tables: "__rebuild").
  explicit OpFold(const AggregateSinkOptions& options, std::string suffix = "");

  // Folds the operations of one event, all or nothing: on an error the fold
  // is as it was.
  //   InvalidArgument: the event itself is wrong (for its dead letter): an
  //     `add` whose value an integer or DECIMAL column cannot hold exactly
  //     (more decimals than the column's scale, beyond its range), or whose
  //     adds to one column sum beyond it.
  //   ResourceExhausted (only when the fold was not empty): the event's adds
  //     are fine, but their sum with the fold's earlier ones would not fit
  //     the column: run Statements() now, Clear(), and Add the event again
  //     (the rows then hold the earlier sum, and MySQL checks what the
  //     column finally holds).
  Status Add(const std::vector<Op>& ops);
  bool empty() const { return rows_.empty(); }
  size_t rows() const { return rows_.size(); }
  void Clear() { rows_.clear(); }

  // The statements that apply the fold: the DELETEs of reset rows, then
  // INSERT ... ON DUPLICATE KEY UPDATE per table and shape of write (which
  // columns are set, which added to), split so that none exceeds
  // `max_bytes` (unless one row alone does). `quote` appends a quoted string.
  std::vector<std::string> Statements(const std::function<void(std::string&, std::string_view)>& quote,
                                      size_t max_bytes = kMaxStatementBytes) const;

 private:
  struct Column {
    bool set = false;    // the value replaces the column's; else it is added
    bool exact = false;  // the value is `scaled` (an integer or DECIMAL column's sum), not `value`
    Json value;
    __int128 scaled = 0;  // in units of 10^-scale of the column
  };
  struct Row {
    size_t table = 0;
    std::vector<Json> key;
    bool reset = false;    // deleted in the batch (before what `columns` writes)
    bool written = false;  // written after the last delete
    std::map<size_t, Column> columns;
  };
  // The exact range of an integer or DECIMAL column, in units of 10^-scale.
  struct Exact {
    int scale = 0;
    __int128 min = 0, max = 0;
  };
  // Adds `v` to `column`, column `c` of `table` (`present`: written before
  // in the fold; `earlier`: the fold held other events' operations).
  Status AddTo(size_t table, size_t c, const Json& v, bool present, Column& column, bool earlier) const;

  const AggregateSinkOptions& options_;
  const std::string suffix_;
  std::vector<std::vector<std::optional<Exact>>> exact_;  // per table and column; none for DOUBLE, text...
  std::map<std::string, Row> rows_;  // by table and key
};

}  // namespace sluice::connectors::aggregate
