#include "connectors/view_sink.h"

#include <utility>

namespace sluice::connectors {

ViewSink::ViewSink(std::string entity_type, std::unique_ptr<Sink> inner, std::unique_ptr<ViewCode> code)
    : entity_type_(std::move(entity_type)), inner_(std::move(inner)), code_(std::move(code)) {}

Result<std::unique_ptr<Sink>> ViewSink::Wrap(const config::SinkConfig& sink, std::unique_ptr<Sink> inner) {
  ASSIGN_OR_RETURN(auto code, ViewCode::LoadFor(sink, ViewCode::Purpose::kShape));
  return std::unique_ptr<Sink>(new ViewSink(sink.entity, std::move(inner), std::move(code)));
}

Capabilities ViewSink::capabilities() const {
  Capabilities c = inner_->capabilities();
  c.full_events = true;
  // The anti-entropy and `verify --repair` see only the latest state of an
  // entity, not the request, response and state before its code may read:
  // they could "repair" a row into another shape than its event made. They
  // leave a view with code alone; `sluice verify` still compares it.
  c.entity_checks = false;
  c.overwrite = false;
  return c;
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

}  // namespace

std::vector<ChangeEvent> ViewSink::ShapeEvents(std::span<const ChangeEvent> events, std::vector<std::string>* rejected) {
  std::vector<ChangeEvent> out;
  out.reserve(events.size());
  rejected->assign(events.size(), std::string());
  for (size_t i = 0; i < events.size(); ++i) {
    ViewCode::Shaped shaped = code_->Shape(events[i]);
    switch (shaped.kind) {
      case ViewCode::Shaped::Kind::kError:
        (*rejected)[i] = "view code: " + shaped.error;
        if ((*rejected)[i].empty()) (*rejected)[i] = "view code failed";
        continue;
      case ViewCode::Shaped::Kind::kAbsent: {
        ChangeEvent& e = out.emplace_back(ForInnerSink(events[i]));
        e.deleted = true;
        break;
      }
      case ViewCode::Shaped::Kind::kDocument: {
        ChangeEvent& e = out.emplace_back(ForInnerSink(events[i]));
        e.state = std::move(shaped.document);
        break;
      }
    }
  }
  return out;
}

template <class F>
ApplyResult ViewSink::ApplyShaped(std::span<const ChangeEvent> events, F&& apply) {
  std::vector<std::string> rejected;
  const std::vector<ChangeEvent> shaped = ShapeEvents(events, &rejected);
  ApplyResult inner;
  if (!shaped.empty()) {
    inner = apply(std::span<const ChangeEvent>(shaped));
    if (!inner.status.ok()) return inner;
    if (inner.results.size() != shaped.size()) return inner;  // the loop reports the broken contract
  }
  ApplyResult out;
  out.results.resize(events.size());
  size_t next = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    if (!rejected[i].empty()) {
      out.results[i] = EventResult{Outcome::kRejected, std::move(rejected[i])};
    } else {
      out.results[i] = std::move(inner.results[next++]);
    }
  }
  return out;
}

ApplyResult ViewSink::Apply(std::span<const ChangeEvent> events) {
  return ApplyShaped(events, [&](std::span<const ChangeEvent> shaped) { return inner_->Apply(shaped); });
}

ApplyResult ViewSink::Repair(std::span<const ChangeEvent> events, RepairGuard guard) {
  return ApplyShaped(events, [&](std::span<const ChangeEvent> shaped) { return inner_->Repair(shaped, guard); });
}

std::vector<EntitySnapshot> ViewSink::ShapeTruth(std::span<const EntitySnapshot> truth) {
  std::vector<EntitySnapshot> out;
  out.reserve(truth.size());
  for (const EntitySnapshot& s : truth) {
    EntitySnapshot& shaped = out.emplace_back(s);
    if (s.deleted) continue;
    ChangeEvent e;
    e.entity_type = entity_type_;
    e.entity_id = s.entity_id;
    e.version = s.version;
    e.state = s.state;
    ViewCode::Shaped r = code_->Shape(e);
    if (r.kind == ViewCode::Shaped::Kind::kDocument) {
      shaped.state = std::move(r.document);
    } else {
      // Not in the view (or the code fails on it, and the event is a dead letter).
      shaped.deleted = true;
      shaped.state.clear();
    }
  }
  return out;
}

Status ViewSink::Verify(const std::vector<EntitySnapshot>& truth, std::vector<Difference>& differences) {
  return inner_->Verify(ShapeTruth(truth), differences);
}

Status ViewSink::VerifyEntities(std::span<const EntitySnapshot> truth, std::vector<Difference>& differences) {
  const std::vector<EntitySnapshot> shaped = ShapeTruth(truth);
  return inner_->VerifyEntities(shaped, differences);
}

Status ViewSink::VerifyHistory(const std::vector<ChangeEvent>& history, std::vector<Difference>& differences) {
  std::vector<std::string> rejected;
  return inner_->VerifyHistory(ShapeEvents(history, &rejected), differences);
}

Result<std::unique_ptr<Sink>> ViewSink::MakeRebuildShadow() const {
  ASSIGN_OR_RETURN(auto shadow, inner_->MakeRebuildShadow());
  ASSIGN_OR_RETURN(auto code, ViewCode::Load(code_->file()));
  return std::unique_ptr<Sink>(new ViewSink(entity_type_, std::move(shadow), std::move(code)));
}

}  // namespace sluice::connectors
