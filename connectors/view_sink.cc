#include "connectors/view_sink.h"

#include <algorithm>
#include <utility>

namespace sluice::connectors {

ViewSink::ViewSink(const config::SinkConfig& sink, std::vector<Destination> destinations, std::unique_ptr<ViewCode> code)
    : entity_type_(sink.entity),
      destinations_(std::move(destinations)),
      code_(std::move(code)),
      ahead_(*code_, "sink " + sink.name),
      log_(destinations_.front().sink->capabilities().verifies_history) {
  for (const Destination& d : destinations_) record_keys_.push_back(d.sink->capabilities().record_keys);
  code_config_.name = sink.name;
  code_config_.entity = sink.entity;
  code_config_.code = sink.code;
  code_config_.code_origin = sink.code_origin;
}

Result<std::unique_ptr<Sink>> ViewSink::Wrap(const config::SinkConfig& sink, std::string_view routes_to,
                                          std::vector<Destination> destinations) {
  ASSIGN_OR_RETURN(auto code, ViewCode::LoadFor(sink, ViewCode::Purpose::kShape));
  RETURN_IF_ERROR(CheckRoutes(sink, routes_to, *code));
  // The sink's own destination, then one per route but the own one.
  const auto others = std::count_if(sink.routes.begin(), sink.routes.end(),
                                    [&](const std::string& r) { return r != destinations.front().name; });
  if (destinations.size() != 1 + static_cast<size_t>(others)) {
    return InvalidArgument("sink " + sink.name + ": routes need a sink made for each of them");
  }
  return std::unique_ptr<Sink>(new ViewSink(sink, std::move(destinations), std::move(code)));
}

Result<std::unique_ptr<Sink>> ViewSink::Wrap(const config::SinkConfig& sink, std::unique_ptr<Sink> inner) {
  std::vector<Destination> destinations;
  destinations.push_back({std::string(), std::move(inner)});
  return Wrap(sink, std::string_view(), std::move(destinations));
}

Status ViewSink::CheckRoutes(const config::SinkConfig& sink, std::string_view routes_to, const ViewCode& code) {
  if (!sink.routes.empty() && !code.routes()) {
    return InvalidArgument("sink " + sink.name + ": routes are declared but " + code.file() +
                           " defines no route(event) to pick one of them");
  }
  if (code.routes() && routes_to.empty()) {
    return InvalidArgument("sink " + sink.name + ": " + code.file() + " defines route(event), but a " + sink.type +
                           " sink has no destinations to route to");
  }
  return Status::Ok();
}

Capabilities ViewSink::capabilities() const {
  Capabilities c = own().capabilities();
  c.full_events = true;
  // The anti-entropy and `verify --repair` see only the latest state of an
  // entity, not the request, response and state before its code may read:
  // they could "repair" a row into another shape than its event made. They
  // leave a view with code alone; `sluice verify` still compares it.
  c.entity_checks = false;
  c.overwrite = false;
  c.record_keys = false;  // what the code sets; nothing a caller may set
  c.prepares = true;      // the code runs ahead, on the engine's reader thread
  return c;
}

template <class F>
Status ViewSink::ForEachDestination(F&& each) {
  for (Destination& d : destinations_) {
    Status st = each(*d.sink);
    if (!st.ok()) {
      return destinations_.size() == 1 ? st : st.WithContext("destination " + d.name);
    }
  }
  return Status::Ok();
}

Status ViewSink::Open() {
  return ForEachDestination([](Sink& s) { return s.Open(); });
}

Status ViewSink::Flush() {
  return ForEachDestination([](Sink& s) { return s.Flush(); });
}

Status ViewSink::Health() {
  return ForEachDestination([](Sink& s) { return s.Health(); });
}

void ViewSink::Close() {
  for (Destination& d : destinations_) d.sink->Close();
}

Status ViewSink::PromoteRebuildShadow() {
  return ForEachDestination([](Sink& s) { return s.PromoteRebuildShadow(); });
}

namespace {

// The event as the inner sink gets it: everything but what only view code
// reads (request, response, the state before), which would only be copied.
ChangeEvent ForInnerSink(const ChangeEvent& e) {
  ChangeEvent out;
  out.entity_type = e.entity_type;
  out.partition = e.partition;
  out.event_id = e.event_id;
  out.entity_id = e.entity_id;
  out.version = e.version;
  out.deleted = e.deleted;
  out.command_name = e.command_name;
  out.command_id = e.command_id;
  out.committed_at_us = e.committed_at_us;
  return out;
}

// A versioned delete of e's entity at e's version.
ChangeEvent DeleteOf(const ChangeEvent& e) {
  ChangeEvent out = ForInnerSink(e);
  out.deleted = true;
  return out;
}

}  // namespace

Result<size_t> ViewSink::RouteOf(ViewCode& code, const ChangeEvent& e, ViewCode::Routed* routed) {
  *routed = code.Route(e);
  switch (routed->kind) {
    case ViewCode::Routed::Kind::kError:
      return InvalidArgument(routed->error.empty() ? "route() failed" : routed->error);
    case ViewCode::Routed::Kind::kOwn:
      return size_t{0};
    case ViewCode::Routed::Kind::kTo:
      for (size_t d = 0; d < destinations_.size(); ++d) {
        if (destinations_[d].name == routed->to) return d;
      }
      break;
  }
  std::string known;
  for (const Destination& d : destinations_) {
    if (!d.name.empty()) known += (known.empty() ? "" : ", ") + d.name;
  }
  return InvalidArgument(code.file() + ": route() returned '" + routed->to + "' for " + e.entity_type + "/" +
                         e.entity_id + " version " + std::to_string(e.version) +
                         ", which is not one of the sink's destinations (" + known + ")");
}

std::optional<size_t> ViewSink::RouteBefore(ViewCode& code, const ChangeEvent& e) {
  if (e.before.empty()) return std::nullopt;
  ChangeEvent was = ForInnerSink(e);
  was.deleted = false;
  was.state = e.before;
  was.request = e.request;
  was.response = e.response;
  ViewCode::Routed routed;
  auto d = RouteOf(code, was, &routed);
  if (!d.ok()) return std::nullopt;
  return *d;
}

ViewSink::Planned ViewSink::PlanOne(ViewCode& code, const ChangeEvent& e) {
  Planned p;
  ViewCode::Shaped shaped = code.Shape(e);
  if (shaped.kind == ViewCode::Shaped::Kind::kError) {
    p.rejected = shaped.error.empty() ? "view code failed" : "view code: " + shaped.error;
    return p;
  }
  const bool absent = shaped.kind == ViewCode::Shaped::Kind::kAbsent;
  p.out = absent ? DeleteOf(e) : ForInnerSink(e);
  if (!absent) p.out.state = std::move(shaped.document);
  if (!code.routes()) return p;
  if (absent && !log_) {
    // A point view holds the entity in at most one destination: gone from all.
    for (size_t d = 1; d < destinations_.size(); ++d) p.deletes.push_back(d);
    return p;
  }
  ViewCode::Routed routed;
  auto to = RouteOf(code, e, &routed);
  if (!to.ok()) {
    p.rejected = "view code: " + to.status().message();
    return p;
  }
  p.to = *to;
  if (!routed.key.empty() || !routed.headers.empty()) {
    if (!record_keys_[p.to]) {
      p.rejected = "view code: " + code.file() + ": route() set a key or headers, which a " +
                   "sink of this type does not write (kafka records have them)";
      return p;
    }
    p.out.record_key = std::move(routed.key);
    p.out.record_headers = std::move(routed.headers);
  }
  if (!log_ && !e.before.empty()) {
    // Moved: out of where it was, at this version. Where it was unknown
    // (the code fails on the state before): out of every other destination.
    const std::optional<size_t> was = RouteBefore(code, e);
    if (was != p.to) {
      for (size_t d = 0; d < destinations_.size(); ++d) {
        if (d != p.to && (!was || d == *was)) p.deletes.push_back(d);
      }
    }
  }
  return p;
}

void ViewSink::Prepare(std::span<ChangeEvent> events) {
  ahead_.Prepare(events, [this](ViewCode& code, const ChangeEvent& e) {
    return std::make_shared<const Planned>(PlanOne(code, e));
  });
}

ViewSink::Plan ViewSink::PlanEvents(std::span<const ChangeEvent> events) {
  Plan plan;
  plan.events.resize(destinations_.size());
  plan.writes.resize(destinations_.size());
  plan.rejected.assign(events.size(), std::string());
  if (destinations_.size() == 1) plan.events[0].reserve(events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    const auto* prepared = dynamic_cast<const Planned*>(events[i].prepared.get());
    Planned now;
    if (prepared == nullptr) {
      now = PlanOne(*code_, events[i]);
      prepared = &now;
    }
    if (!prepared->rejected.empty()) {
      plan.rejected[i] = prepared->rejected;
      continue;
    }
    for (size_t d : prepared->deletes) {
      plan.events[d].push_back(DeleteOf(events[i]));
      plan.writes[d].push_back({i, false});
    }
    plan.events[prepared->to].push_back(prepared == &now ? std::move(now.out) : prepared->out);
    plan.writes[prepared->to].push_back({i, true});
  }
  return plan;
}

template <class F>
ApplyResult ViewSink::ApplyPlanned(std::span<const ChangeEvent> events, F&& apply) {
  Plan plan = PlanEvents(events);
  ApplyResult out;
  out.results.resize(events.size());
  std::vector<std::string> moved_out(events.size());  // a delete that moves the entity out was rejected
  for (size_t d = 0; d < destinations_.size(); ++d) {
    if (plan.events[d].empty()) continue;
    ApplyResult r = apply(*destinations_[d].sink, std::span<const ChangeEvent>(plan.events[d]));
    if (!r.status.ok()) {
      if (destinations_.size() > 1) r.status = r.status.WithContext("destination " + destinations_[d].name);
      return r;
    }
    if (r.results.size() != plan.events[d].size()) {
      r.status = Internal("sink " + name() + ": destination " + destinations_[d].name + " answered " +
                          std::to_string(r.results.size()) + " results for " + std::to_string(plan.events[d].size()) +
                          " events");
      r.results.clear();
      return r;
    }
    for (size_t k = 0; k < r.results.size(); ++k) {
      const Plan::Write& w = plan.writes[d][k];
      if (w.own) {
        out.results[w.event] = std::move(r.results[k]);
      } else if (r.results[k].outcome == Outcome::kRejected) {
        moved_out[w.event] = "removing it from " + destinations_[d].name + ": " + r.results[k].reason;
      }
    }
  }
  for (size_t i = 0; i < events.size(); ++i) {
    if (!plan.rejected[i].empty()) {
      out.results[i] = EventResult{Outcome::kRejected, std::move(plan.rejected[i])};
    } else if (!moved_out[i].empty() && out.results[i].outcome != Outcome::kRejected) {
      out.results[i] = EventResult{Outcome::kRejected, std::move(moved_out[i])};
    }
  }
  return out;
}

ApplyResult ViewSink::Apply(std::span<const ChangeEvent> events) {
  return ApplyPlanned(events, [](Sink& s, std::span<const ChangeEvent> part) { return s.Apply(part); });
}

ApplyResult ViewSink::Repair(std::span<const ChangeEvent> events, RepairGuard guard) {
  return ApplyPlanned(events, [guard](Sink& s, std::span<const ChangeEvent> part) { return s.Repair(part, guard); });
}

std::vector<std::vector<EntitySnapshot>> ViewSink::ShapeTruth(std::span<const EntitySnapshot> truth) {
  std::vector<std::vector<EntitySnapshot>> out(destinations_.size());
  for (const EntitySnapshot& s : truth) {
    EntitySnapshot shaped = s;
    size_t to = 0;
    if (!s.deleted) {
      ChangeEvent e;
      e.entity_type = entity_type_;
      e.entity_id = s.entity_id;
      e.version = s.version;
      e.state = s.state;
      ViewCode::Shaped r = code_->Shape(e);
      ViewCode::Routed routed;
      Result<size_t> d = code_->routes() ? RouteOf(*code_, e, &routed) : Result<size_t>(size_t{0});
      if (r.kind == ViewCode::Shaped::Kind::kDocument && d.ok()) {
        shaped.state = std::move(r.document);
        to = *d;
      } else {
        // Not in the view (or the code fails on it, and the event is a dead letter).
        shaped.deleted = true;
        shaped.state.clear();
      }
    }
    if (shaped.deleted) {
      for (auto& part : out) part.push_back(shaped);  // absent everywhere
    } else {
      out[to].push_back(std::move(shaped));
    }
  }
  return out;
}

Status ViewSink::Verify(const std::vector<EntitySnapshot>& truth, std::vector<Difference>& differences) {
  std::vector<std::vector<EntitySnapshot>> parts = ShapeTruth(truth);
  size_t d = 0;
  return ForEachDestination([&](Sink& s) { return s.Verify(parts[d++], differences); });
}

Status ViewSink::VerifyEntities(std::span<const EntitySnapshot> truth, std::vector<Difference>& differences) {
  std::vector<std::vector<EntitySnapshot>> parts = ShapeTruth(truth);
  size_t d = 0;
  return ForEachDestination([&](Sink& s) { return s.VerifyEntities(parts[d++], differences); });
}

Status ViewSink::VerifyHistory(const std::vector<ChangeEvent>& history, std::vector<Difference>& differences) {
  Plan plan = PlanEvents(history);
  size_t d = 0;
  return ForEachDestination([&](Sink& s) {
    std::vector<ChangeEvent> own;
    for (size_t k = 0; k < plan.events[d].size(); ++k) {
      if (plan.writes[d][k].own) own.push_back(std::move(plan.events[d][k]));
    }
    ++d;
    return s.VerifyHistory(own, differences);
  });
}

Result<std::unique_ptr<Sink>> ViewSink::MakeRebuildShadow() const {
  std::vector<Destination> shadows;
  for (const Destination& d : destinations_) {
    ASSIGN_OR_RETURN(auto shadow, d.sink->MakeRebuildShadow());
    shadows.push_back({d.name, std::move(shadow)});
  }
  ASSIGN_OR_RETURN(auto code, ViewCode::LoadFor(code_config_, ViewCode::Purpose::kShape));
  return std::unique_ptr<Sink>(new ViewSink(code_config_, std::move(shadows), std::move(code)));
}

}  // namespace sluice::connectors
