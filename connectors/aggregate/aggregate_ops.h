// The operations of an aggregate view (docs/views.md, "Aggregate views"):
// what aggregate(event) returns, checked against the declared tables, and
// folded per row so that a batch of events costs one statement per table
// and kind of write, not one per event. Pure: the statements are text for
// the sink to run in its transaction.
//
// aggregate(event) returns an array (or null: nothing) of
//   {table: "t", key: {k: v, ...}, add: {c: n, ...}}  adds n to column c (a missing row starts at 0)
//   {table: "t", key: {k: v, ...}, set: {c: v, ...}}  sets columns (creating the row)
//   {table: "t", key: {k: v, ...}, delete: true}      deletes the row
// with every key column of the table and only its declared columns.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
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

// Operations of many events folded per row, in event order: a delete resets
// the row (it is deleted, then written again if later operations write it),
// a set replaces a column's value and later adds add to it, adds to the same
// column sum up.
class OpFold {
 public:
  // `suffix` follows every table name in the statements (a rebuild's shadow
  // tables: "__rebuild").
  explicit OpFold(const AggregateSinkOptions& options, std::string suffix = "")
      : options_(options), suffix_(std::move(suffix)) {}

  void Add(const std::vector<Op>& ops);
  bool empty() const { return rows_.empty(); }
  size_t rows() const { return rows_.size(); }

  // The statements that apply the fold: the DELETEs of reset rows, then one
  // INSERT ... ON DUPLICATE KEY UPDATE per table and shape of write (which
  // columns are set, which added to). `quote` appends a quoted string.
  std::vector<std::string> Statements(const std::function<void(std::string&, std::string_view)>& quote) const;

 private:
  struct Column {
    bool set = false;  // the value replaces the column's; else it is added
    Json value;
  };
  struct Row {
    size_t table = 0;
    std::vector<Json> key;
    bool reset = false;    // deleted in the batch (before what `columns` writes)
    bool written = false;  // written after the last delete
    std::map<size_t, Column> columns;
  };
  const AggregateSinkOptions& options_;
  const std::string suffix_;
  std::map<std::string, Row> rows_;  // by table and key
};

}  // namespace sluice::connectors::aggregate
