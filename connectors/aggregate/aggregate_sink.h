// The aggregate sink: an aggregate view in MySQL, kept exactly once
// (DESIGN 4.4, docs/views.md "Aggregate views").
//
// Rows such as "total balance per owner" or "events per minute per command"
// combine many entities, so no entity version can guard them: applying an
// event twice would count it twice. The sink therefore keeps its own
// offsets beside its tables, in the view's database (sluice_vo_<sink>:
// entity type, partition -> last event_id), and applies each batch in ONE
// transaction that reads those offsets under a lock, writes the batch's
// operations and moves the offsets:
//
//   - an event at or below the stored offset of its partition was applied
//     (or rejected) by a committed transaction: it is stale, whatever the
//     engine's own offsets say after a crash, a rewind, or a second engine
//     running the same sink (the lock serializes them);
//   - a crash before the COMMIT loses the operations and the offsets
//     together; the engine reads the events again.
//
// Events the code fails on (a throw, a limit, operations that do not fit the
// declared tables, a value a column refuses) are rejected, and recorded in
// sluice_vr_<sink> in the same transaction: when the engine delivers such an
// event again, the code runs again, so the event is a dead letter again or,
// once the code is fixed, is applied then (also what `sluice deadletters
// retry` does) and leaves the table.
//
// A table whose columns are not the declared ones (a column's name or type,
// or the primary key: the definition changed) makes the sink wait (backoff,
// with a message naming the table, the column and both types, saying to
// rebuild) rather than fill new columns from part of the events.
//
// A batch's operations are folded per row (aggregate_ops.h: exact sums on
// integer and DECIMAL columns) and written in statements of at most
// kMaxStatementBytes each, all in the batch's transaction. A rebuild replays every
// event into shadow tables (<table>__rebuild, with their own offsets) made
// from the current definition and swaps them in, offsets included, with one
// RENAME TABLE.
//
// Several sinks may write the same tables (a view fed by several entity
// types); each keeps its own offsets, and their row changes commute (adds)
// or are last-writer-wins per column (sets). Such a view cannot be rebuilt
// yet.
//
// Threads: as any Sink (one caller at a time).
#pragma once

#include <memory>
#include <string>

#include "connectors/sink.h"

namespace sluice::connectors::aggregate {

Result<std::unique_ptr<Sink>> MakeAggregateSink(const config::SinkConfig& sink, const config::Config& global);

// The view's own offsets table of sink `sink` (entity_type, partition_id,
// event_id), in the view's database: what a drain benchmark or an operator
// reads to see how far the view is.
std::string AggregateOffsetsTable(const std::string& sink);

}  // namespace sluice::connectors::aggregate
