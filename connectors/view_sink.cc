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
  c.pipeline = 1;         // Apply() runs the code's writes one chunk at a time
  for (const Destination& d : destinations_) {
    c.stays_open_at_takeover = c.stays_open_at_takeover && d.sink->capabilities().stays_open_at_takeover;
  }
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

Status ViewSink::TakeOver(const TakenOver& taken) {
  return ForEachDestination([&taken](Sink& s) { return s.TakeOver(taken); });
}

void ViewSink::Idle() {
  for (Destination& d : destinations_) d.sink->Idle();
}

void ViewSink::Released(std::span<const uint32_t> partitions) {
  for (Destination& d : destinations_) d.sink->Released(partitions);
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

Result<size_t> ViewSink::DestinationOf(const ViewCode& code, const ViewCode::Routed& routed,
                                       const ChangeEvent& e) const {
  switch (routed.kind) {
    case ViewCode::Routed::Kind::kError:
      return InvalidArgument(routed.error.empty() ? "route() failed" : routed.error);
    case ViewCode::Routed::Kind::kOwn:
      return size_t{0};
    case ViewCode::Routed::Kind::kTo:
      for (size_t d = 0; d < destinations_.size(); ++d) {
        if (destinations_[d].name == routed.to) return d;
      }
      break;
  }
  std::string known;
  for (const Destination& d : destinations_) {
    if (!d.name.empty()) known += (known.empty() ? "" : ", ") + d.name;
  }
  return InvalidArgument(code.file() + ": route() returned '" + routed.to + "' for " + e.entity_type + "/" +
                         e.entity_id + " version " + std::to_string(e.version) +
                         ", which is not one of the sink's destinations (" + known + ")");
}

std::vector<ViewSink::Planned> ViewSink::PlanMany(ViewCode& code, ViewCode::Events events) {
  std::vector<Planned> plans(events.size());
  std::vector<ViewCode::Shaped> shaped = code.ShapeMany(events);
  std::vector<size_t> routing;  // the events route() places
  for (size_t i = 0; i < events.size(); ++i) {
    const ChangeEvent& e = *events[i];
    Planned& p = plans[i];
    if (shaped[i].kind == ViewCode::Shaped::Kind::kError) {
      p.rejected = shaped[i].error.empty() ? "view code failed" : "view code: " + shaped[i].error;
      continue;
    }
    const bool absent = shaped[i].kind == ViewCode::Shaped::Kind::kAbsent;
    p.out = absent ? DeleteOf(e) : ForInnerSink(e);
    if (!absent) p.out.state = std::move(shaped[i].document);
    if (!code.routes()) continue;
    if (absent && !log_) {
      // A point view holds the entity in at most one destination: gone from all.
      for (size_t d = 1; d < destinations_.size(); ++d) p.deletes.push_back(d);
      continue;
    }
    routing.push_back(i);
  }
  if (routing.empty()) return plans;
  std::vector<const ChangeEvent*> picked;
  for (const size_t i : routing) picked.push_back(events[i]);
  std::vector<ViewCode::Routed> routed = code.RouteMany(picked);
  // Point views: events whose entity may have moved, and the state before
  // of each as an event of its own, to route where it was.
  std::vector<size_t> moving;
  std::vector<ChangeEvent> was;
  for (size_t k = 0; k < routing.size(); ++k) {
    const ChangeEvent& e = *events[routing[k]];
    Planned& p = plans[routing[k]];
    auto to = DestinationOf(code, routed[k], e);
    if (!to.ok()) {
      p.rejected = "view code: " + to.status().message();
      continue;
    }
    p.to = *to;
    if (!routed[k].key.empty() || !routed[k].headers.empty()) {
      if (!record_keys_[p.to]) {
        p.rejected = "view code: " + code.file() + ": route() set a key or headers, which a " +
                     "sink of this type does not write (kafka records have them)";
        continue;
      }
      p.out.record_key = std::move(routed[k].key);
      p.out.record_headers = std::move(routed[k].headers);
    }
    if (!log_ && !e.before.empty()) {
      moving.push_back(routing[k]);
      ChangeEvent& w = was.emplace_back(ForInnerSink(e));
      w.deleted = false;
      w.state = e.before;
      w.request = e.request;
      w.response = e.response;
    }
  }
  if (moving.empty()) return plans;
  picked.clear();
  for (const ChangeEvent& w : was) picked.push_back(&w);
  std::vector<ViewCode::Routed> before = code.RouteMany(picked);
  for (size_t k = 0; k < moving.size(); ++k) {
    Planned& p = plans[moving[k]];
    // Moved: out of where it was, at this version. Where it was unknown
    // (the code fails on the state before): out of every other destination.
    auto where = DestinationOf(code, before[k], was[k]);
    const bool known = where.ok();
    const size_t from = known ? *where : 0;
    if (known && from == p.to) continue;
    for (size_t d = 0; d < destinations_.size(); ++d) {
      if (d != p.to && (!known || d == from)) p.deletes.push_back(d);
    }
  }
  return plans;
}

void ViewSink::Prepare(std::span<ChangeEvent> events) {
  ahead_.Prepare(events,
                 [this](ViewCode& code, ViewCode::Events slice) { return CodeAhead::Shared(PlanMany(code, slice)); });
}

ViewSink::Plan ViewSink::PlanEvents(std::span<const ChangeEvent> events) {
  Plan plan;
  plan.events.resize(destinations_.size());
  plan.writes.resize(destinations_.size());
  plan.rejected.assign(events.size(), std::string());
  if (destinations_.size() == 1) plan.events[0].reserve(events.size());
  // What Prepare did not plan is planned here, all at once.
  std::vector<const ChangeEvent*> unprepared;
  std::vector<size_t> unprepared_at(events.size(), SIZE_MAX);
  for (size_t i = 0; i < events.size(); ++i) {
    if (dynamic_cast<const Planned*>(events[i].prepared.get()) == nullptr) {
      unprepared_at[i] = unprepared.size();
      unprepared.push_back(&events[i]);
    }
  }
  std::vector<Planned> now;
  if (!unprepared.empty()) now = PlanMany(*code_, unprepared);
  for (size_t i = 0; i < events.size(); ++i) {
    const bool mine = unprepared_at[i] != SIZE_MAX;
    Planned* planned = mine ? &now[unprepared_at[i]] : nullptr;
    const Planned* prepared = mine ? planned : static_cast<const Planned*>(events[i].prepared.get());
    if (!prepared->rejected.empty()) {
      plan.rejected[i] = prepared->rejected;
      continue;
    }
    for (size_t d : prepared->deletes) {
      plan.events[d].push_back(DeleteOf(events[i]));
      plan.writes[d].push_back({i, false});
    }
    plan.events[prepared->to].push_back(mine ? std::move(planned->out) : prepared->out);
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
  // The live entities as events of their latest state, shaped and routed at once.
  std::vector<ChangeEvent> live;
  std::vector<size_t> live_at(truth.size(), SIZE_MAX);
  for (size_t i = 0; i < truth.size(); ++i) {
    if (truth[i].deleted) continue;
    live_at[i] = live.size();
    ChangeEvent& e = live.emplace_back();
    e.entity_type = entity_type_;
    e.entity_id = truth[i].entity_id;
    e.version = truth[i].version;
    e.state = truth[i].state;
  }
  std::vector<const ChangeEvent*> picked;
  for (const ChangeEvent& e : live) picked.push_back(&e);
  std::vector<ViewCode::Shaped> shaped = code_->ShapeMany(picked);
  std::vector<ViewCode::Routed> routed;
  if (code_->routes()) routed = code_->RouteMany(picked);
  for (size_t i = 0; i < truth.size(); ++i) {
    EntitySnapshot s = truth[i];
    size_t to = 0;
    if (!s.deleted) {
      const size_t k = live_at[i];
      Result<size_t> d = code_->routes() ? DestinationOf(*code_, routed[k], live[k]) : Result<size_t>(size_t{0});
      if (shaped[k].kind == ViewCode::Shaped::Kind::kDocument && d.ok()) {
        s.state = std::move(shaped[k].document);
        to = *d;
      } else {
        // Not in the view (or the code fails on it, and the event is a dead letter).
        s.deleted = true;
        s.state.clear();
      }
    }
    if (s.deleted) {
      for (auto& part : out) part.push_back(s);  // absent everywhere
    } else {
      out[to].push_back(std::move(s));
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

// The history as destination `d` should hold it: each page planned by the
// code, and of it the events d got as their own write.
class ViewSink::PlannedHistory final : public HistoryPages {
 public:
  PlannedHistory(ViewSink& view, HistoryPages& history, size_t d) : view_(view), history_(history), d_(d) {}
  uint32_t partitions() const override { return history_.partitions(); }
  Result<std::vector<ChangeEvent>> Next(uint32_t partition, uint32_t limit) override {
    for (;;) {  // a page with none of d's events is not the end
      ASSIGN_OR_RETURN(std::vector<ChangeEvent> page, history_.Next(partition, limit));
      if (page.empty()) return page;
      std::vector<ChangeEvent> own = Own(page);
      if (!own.empty()) return own;
    }
  }
  Result<std::vector<ChangeEvent>> Of(uint32_t partition, const std::vector<uint64_t>& event_ids) override {
    ASSIGN_OR_RETURN(std::vector<ChangeEvent> events, history_.Of(partition, event_ids));
    return Own(events);
  }
  void Rewind() override { history_.Rewind(); }

 private:
  std::vector<ChangeEvent> Own(std::span<const ChangeEvent> events) {
    Plan plan = view_.PlanEvents(events);
    std::vector<ChangeEvent> own;
    for (size_t k = 0; k < plan.events[d_].size(); ++k) {
      if (plan.writes[d_][k].own) own.push_back(std::move(plan.events[d_][k]));
    }
    return own;
  }

  ViewSink& view_;
  HistoryPages& history_;
  const size_t d_;
};

Status ViewSink::VerifyHistory(HistoryPages& history, std::vector<Difference>& differences) {
  size_t d = 0;
  return ForEachDestination([&](Sink& s) {
    if (d > 0) history.Rewind();  // each destination's log from its first event
    PlannedHistory planned(*this, history, d++);
    return s.VerifyHistory(planned, differences);
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
