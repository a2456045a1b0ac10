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
// Verify, VerifyEntities and Repair shape storage's latest states the same
// way (the code sees the latest event's state, with request, response and
// before null), so a view whose filter and transform depend only on the
// state verifies like a mirror. The sink's capabilities are its inner
// sink's, plus full_events, minus entity_checks and overwrite: the
// anti-entropy and `verify --repair`, which see only latest states, leave it
// alone (they could rewrite a row into another shape than its event made). A rebuild shadow wraps the inner sink's
// shadow with the code read again from its file: a changed definition is
// built into the shadow.
//
// Threads: as any Sink (one caller at a time).
#pragma once

#include <memory>
#include <string>

#include "connectors/sink.h"
#include "connectors/view_code.h"

namespace sluice::connectors {

class ViewSink : public Sink {
 public:
  ViewSink(std::string entity_type, std::unique_ptr<Sink> inner, std::unique_ptr<ViewCode> code);

  // Wraps `inner` with the code of sink.code; InvalidArgument when the code
  // does not load.
  static Result<std::unique_ptr<Sink>> Wrap(const config::SinkConfig& sink, std::unique_ptr<Sink> inner);

  const std::string& name() const override { return inner_->name(); }
  Capabilities capabilities() const override;
  Status Open() override { return inner_->Open(); }
  ApplyResult Apply(std::span<const ChangeEvent> events) override;
  Status Flush() override { return inner_->Flush(); }
  Status Health() override { return inner_->Health(); }
  void Close() override { inner_->Close(); }
  Status Verify(const std::vector<EntitySnapshot>& truth, std::vector<Difference>& differences) override;
  Status VerifyHistory(const std::vector<ChangeEvent>& history, std::vector<Difference>& differences) override;
  Status VerifyEntities(std::span<const EntitySnapshot> truth, std::vector<Difference>& differences) override;
  ApplyResult Repair(std::span<const ChangeEvent> events, RepairGuard guard) override;
  Result<std::unique_ptr<Sink>> MakeRebuildShadow() const override;
  Status PromoteRebuildShadow() override { return inner_->PromoteRebuildShadow(); }

 private:
  // The events as the inner sink gets them; kError ones are left out, their
  // rejection in `rejected` (index -> reason).
  std::vector<ChangeEvent> ShapeEvents(std::span<const ChangeEvent> events, std::vector<std::string>* rejected);
  std::vector<EntitySnapshot> ShapeTruth(std::span<const EntitySnapshot> truth);
  // Runs `apply` on the shaped events and merges its results with the rejections.
  template <class F>
  ApplyResult ApplyShaped(std::span<const ChangeEvent> events, F&& apply);

  const std::string entity_type_;
  std::unique_ptr<Sink> inner_;
  std::unique_ptr<ViewCode> code_;
};

}  // namespace sluice::connectors
