// ViewSink: any sink with view code (connectors/view_code.h). MakeSink wraps
// the sink of a config whose `code:` names a file: each event goes through
// the code first, and the sink gets what it made of it:
//
//   a document      the event with its state replaced by the document, at
//                   the event's version (the sink's own mapping, columns,
//                   fields or key template, applies to the document)
//   not in the view the event as a delete at its version: the sink removes
//                   the entity's row and keeps its tombstone, so an older
//                   event never brings it back and a later match does
//   an error        a rejection of that event alone (a dead letter), with
//                   the code's message; the rest of the batch goes on
//
// Routing: a sink with `routes:` has one destination per route (its topic or
// index; a sink of its type made for it) besides its own, and the code's
// route(event) picks one for each event. A log (kafka) writes each event
// where its route says. A point view (elasticsearch) keeps each entity in
// one place: when the route of the state before differs from the event's,
// the old destination gets a versioned delete at the event's version, and a
// delete, or an entity that leaves the view, is a versioned delete in every
// destination. An event is applied when its destination applied it, and
// rejected when any of its writes was.
//
// Verify, VerifyEntities and Repair shape storage's latest states the same
// way (the code sees the latest event's state, with request, response and
// before null), so a view whose filter, transform and route depend only on
// the state verifies like a mirror. The sink's capabilities are its inner
// sink's, plus full_events, minus entity_checks and overwrite: the
// anti-entropy and `verify --repair`, which see only latest states, leave it
// alone (they could rewrite a row into another shape than its event made). A
// rebuild shadow wraps the destinations' shadows with the code read again
// from its file: a changed definition is built into the shadow.
//
// Threads: as any Sink (one caller at a time), except that Prepare (the
// engine's preparer, with the pool's workers) may run while Apply runs: it uses
// its own runtimes of the code and reads only what never changes.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "connectors/sink.h"
#include "connectors/view_code.h"
#include "connectors/view_code_pool.h"

namespace sluice::connectors {

class ViewSink : public Sink {
 public:
  // Where events go: the sink's own destination (first; `name` is its topic
  // or index, or empty) and one per route.
  struct Destination {
    std::string name;
    std::unique_ptr<Sink> sink;
  };

  // `code` (of sink.code) runs on Apply's thread; Prepare makes a pool of
  // runtimes of the same text at its first call (CodeAhead): a JavaScript
  // runtime is kept on one thread.
  ViewSink(const config::SinkConfig& sink, std::vector<Destination> destinations, std::unique_ptr<ViewCode> code);

  // Wraps `destinations` (the sink's own first, then one per sink.routes
  // other than the own one) with the code of sink.code; `routes_to` is the
  // type's (config::SinkType). InvalidArgument when the code does not load or
  // does not fit the routes (CheckRoutes).
  static Result<std::unique_ptr<Sink>> Wrap(const config::SinkConfig& sink, std::string_view routes_to,
                                            std::vector<Destination> destinations);
  // The same for a sink without routes.
  static Result<std::unique_ptr<Sink>> Wrap(const config::SinkConfig& sink, std::unique_ptr<Sink> inner);
  // Routes need route(event) in the code, and route(event) needs a type with
  // destinations (`routes_to`, empty when it has none).
  static Status CheckRoutes(const config::SinkConfig& sink, std::string_view routes_to, const ViewCode& code);

  const std::string& name() const override { return own().name(); }
  Capabilities capabilities() const override;
  Status Open() override;
  ApplyResult Apply(std::span<const ChangeEvent> events) override;
  // Runs the code on each event (the engine's preparer thread, and the pool's
  // workers beside it); Apply then writes what it made.
  void Prepare(std::span<ChangeEvent> events) override;
  Status Flush() override;
  Status Health() override;
  Status TakeOver(const TakenOver& taken) override;
  // Each destination's.
  void Idle() override;
  void Released(std::span<const uint32_t> partitions) override;
  void Close() override;
  Status Verify(const std::vector<EntitySnapshot>& truth, std::vector<Difference>& differences) override;
  Status VerifyHistory(HistoryPages& history, std::vector<Difference>& differences) override;
  Status VerifyEntities(std::span<const EntitySnapshot> truth, std::vector<Difference>& differences) override;
  ApplyResult Repair(std::span<const ChangeEvent> events, RepairGuard guard) override;
  Result<std::unique_ptr<Sink>> MakeRebuildShadow() const override;
  Status PromoteRebuildShadow() override;

 private:
  // What each destination gets of a batch: its events, and for each the
  // index of the event it came from and whether it is that event's own write
  // (else a versioned delete that moves the entity out).
  class PlannedHistory;
  struct Plan {
    struct Write {
      size_t event = 0;
      bool own = true;
    };
    std::vector<std::vector<ChangeEvent>> events;  // per destination
    std::vector<std::vector<Write>> writes;        // per destination, beside events
    std::vector<std::string> rejected;             // per event: why, or empty
  };
  // What the code made of one event: rejected, or `out` for destination
  // `to` and a versioned delete for each of `deletes` (a move, or a delete
  // everywhere). Made by Prepare ahead of Apply, or by Apply itself.
  struct Planned : PreparedEvent {
    std::string rejected;  // why the event is refused; empty: it is not
    size_t to = 0;
    ChangeEvent out;
    std::vector<size_t> deletes;
  };
  Sink& own() const { return *destinations_.front().sink; }
  // What the code makes of each event (one entry into the code per run of
  // events, ViewCode's *Many): plans[i] for events[i].
  std::vector<Planned> PlanMany(ViewCode& code, ViewCode::Events events);
  // Shapes and routes `events` (those Prepare did not).
  Plan PlanEvents(std::span<const ChangeEvent> events);
  // The destination route() picked for e: its index, or an error.
  Result<size_t> DestinationOf(const ViewCode& code, const ViewCode::Routed& routed, const ChangeEvent& e) const;
  // Runs `apply` on each destination's part of the plan and merges the results.
  template <class F>
  ApplyResult ApplyPlanned(std::span<const ChangeEvent> events, F&& apply);
  // Storage's latest states as the view should hold them, per destination.
  std::vector<std::vector<EntitySnapshot>> ShapeTruth(std::span<const EntitySnapshot> truth);
  template <class F>
  Status ForEachDestination(F&& each);

  const std::string entity_type_;
  std::vector<Destination> destinations_;
  std::unique_ptr<ViewCode> code_;
  config::SinkConfig code_config_;  // name, code and code_origin: what a rebuild shadow loads
  CodeAhead ahead_;                 // Prepare's (the preparer's), of code_'s text
  const bool log_;  // the destinations are logs (every event where its route says; no moves)
  std::vector<bool> record_keys_;  // per destination: it writes record keys and headers (kafka)
};

}  // namespace sluice::connectors
