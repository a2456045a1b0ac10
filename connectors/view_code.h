// ViewCode: a sink's view code (DESIGN 4.4, docs/views.md), the JavaScript
// file a sink's `code:` key names, run on each event before the sink writes
// it. The file defines any of:
//
//   filter(event)     truthy: the entity belongs in the view; falsy: it does
//                     not, and the sink removes it as a versioned delete
//   transform(event)  the document the sink writes in place of the state
//                     (an object); null or undefined: not in the view
//   route(event)      where the sink writes it: a name of the sink's
//                     `routes` (a topic, an index), or null for the sink's
//                     own; or an object {to, key, headers} that also sets a
//                     kafka record's key (a string) and headers (an object
//                     of strings)
//
// `event` is the whole event (EventJson): type, id, version, event_id,
// partition, command, command_id, request, response, state (null when
// deleted), before (the state before; null on creation), deleted,
// committed_at (ISO 8601, UTC) and committed_at_ms. A deleted entity leaves
// the view without calling either function.
//
// Errors (a throw, the time or memory limit, a value of the wrong shape) are
// the event's: the sink dead-letters it and goes on.
//
// Threads: one caller at a time (a sink's applier, or one thread of its
// ViewCodePool); each instance has its own JavaScript heap.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "connectors/sink.h"
#include "core/status.h"
#include "handlers/js_runtime.h"

namespace sluice::connectors {

// The event as view code sees it: one JSON object, built from the event's
// JSON texts without parsing them.
std::string EventJson(const ChangeEvent& e);

class ViewCode {
 public:
  // What the file is for, which decides the functions it must define.
  enum class Purpose : uint8_t {
    kShape,      // filter and/or transform (a point view, a log)
    kAggregate,  // aggregate(event): the operations of an aggregate view
  };
  // Reads and compiles `file`; InvalidArgument ("file:LINE: ...") when it
  // cannot be read, does not compile, or lacks the functions of `purpose`.
  static Result<std::unique_ptr<ViewCode>> Load(const std::string& file, handlers::JsLimits limits = {},
                                                Purpose purpose = Purpose::kShape);
  // The code of `sink` (its `code:` file); InvalidArgument as
  // "sink NAME: FILE:LINE: ... (code at ORIGIN)".
  static Result<std::unique_ptr<ViewCode>> LoadFor(const config::SinkConfig& sink, Purpose purpose);
  // Another runtime of the same text (not read from the file again: the file
  // may have changed since), for another thread.
  Result<std::unique_ptr<ViewCode>> Again() const;

  // What the code made of one event.
  struct Shaped {
    enum class Kind : uint8_t {
      kDocument,  // write `document` (JSON text of an object) at the event's version
      kAbsent,    // the entity is not in the view: a versioned delete
      kError,     // the code failed on this event: `error` says why (dead-letter it)
    };
    Kind kind = Kind::kDocument;
    std::string document;
    std::string error;
  };
  Shaped Shape(const ChangeEvent& e);

  // What route(event) picked for one event.
  struct Routed {
    enum class Kind : uint8_t {
      kOwn,    // the sink's own destination
      kTo,     // `to`, which the caller checks against the sink's routes
      kError,  // the code failed or returned something else: `error` says why
    };
    Kind kind = Kind::kOwn;
    std::string to;
    std::string key;  // a kafka record's key; empty: the entity id
    std::vector<std::pair<std::string, std::string>> headers;
    std::string error;
  };
  // The code defines route(event).
  bool routes() const { return route_; }

  // Many events at once, out[i] for events[i]: the code is entered once per
  // run of events, not once per event (handlers::JsRuntime::CallJsonMany),
  // with the answers and errors of one call each.
  using Events = std::span<const ChangeEvent* const>;
  std::vector<Shaped> ShapeMany(Events events);
  // What route(event) picked for each.
  std::vector<Routed> RouteMany(Events events);
  // kAggregate: what aggregate(event) returned for each, as JSON text.
  std::vector<handlers::JsValueOutcome> AggregateMany(Events events);

  const std::string& file() const { return file_; }

 private:
  ViewCode(std::string file, std::string text, handlers::JsLimits limits, Purpose purpose,
           std::unique_ptr<handlers::JsRuntime> runtime);
  static Result<std::unique_ptr<ViewCode>> FromSource(const std::string& file, std::string text,
                                                      handlers::JsLimits limits, Purpose purpose);

  // Calls `function` with each event; request, response and before are
  // parsed only if the code reads them.
  std::vector<handlers::JsValueOutcome> CallMany(std::string_view function, Events events);
  // What route() returned for e, checked.
  Routed RoutedOf(handlers::JsValueOutcome r, const ChangeEvent& e) const;

  const std::string file_;
  const std::string text_;  // the file as it was read
  const handlers::JsLimits limits_;
  const Purpose purpose_;
  std::unique_ptr<handlers::JsRuntime> runtime_;
  bool filter_ = false, transform_ = false, route_ = false;
};

}  // namespace sluice::connectors
