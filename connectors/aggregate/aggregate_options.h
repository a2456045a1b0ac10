// The aggregate sink type (docs/views.md, "Aggregate views"): its options,
// the keys an aggregate sink accepts, how `config check --print` shows them,
// and the factory. An aggregate sink's `code:` (required) turns each event
// into operations on the tables declared here, which the sink creates in the
// view's MySQL database and keeps exactly once (aggregate_sink.h).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "connectors/builtin_sink_types.h"

namespace sluice::connectors::aggregate {

struct AggregateColumn {
  std::string name;      // [A-Za-z_][A-Za-z0-9_]{0,63}
  std::string sql_type;  // upper case, one of the types IsAggregateColumnType accepts
};

// One table of the view: its key columns (the primary key) and the columns
// the operations set or add to.
struct AggregateTable {
  std::string name;
  std::vector<AggregateColumn> key;      // at least one
  std::vector<AggregateColumn> columns;  // at least one
};

struct AggregateSinkOptions {
  std::string database;  // empty: the main storage database
  std::vector<AggregateTable> tables;
};

// BIGINT, INT, DECIMAL(p,s), DOUBLE, VARCHAR(n), DATE, DATETIME(6)...: the
// column types a declaration may use (upper-cased `type` in *normalized).
// Keys may not be TEXT, JSON or DOUBLE.
bool IsAggregateColumnType(std::string_view type, bool key, std::string* normalized);

// A column type in one spelling for comparing a declared type with a live
// table's information_schema COLUMN_TYPE: lower case, no integer display
// width, no space after a comma, DATETIME(0) as DATETIME and JSON as
// LONGTEXT (MariaDB's JSON). `BIGINT` and `bigint(20)` are both "bigint",
// `DECIMAL(18, 2)` and `decimal(18,2)` both "decimal(18,2)".
std::string CanonicalColumnType(std::string_view type);

BuiltinSinkType AggregateSinkType();

}  // namespace sluice::connectors::aggregate
