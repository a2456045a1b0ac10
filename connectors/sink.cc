#include "connectors/sink.h"

#include "core/json.h"

namespace sluice::connectors {

std::string_view DifferenceKindName(Difference::Kind kind) {
  switch (kind) {
    case Difference::Kind::kMissing: return "missing";
    case Difference::Kind::kExtra: return "extra";
    case Difference::Kind::kVersionMismatch: return "version_mismatch";
    case Difference::Kind::kContentMismatch: return "content_mismatch";
    case Difference::Kind::kPhantom: return "phantom";
    case Difference::Kind::kDuplicate: return "duplicate";
    case Difference::Kind::kOutOfOrder: return "out_of_order";
  }
  return "unknown";
}

Status Sink::VerifyHistory(HistoryPages&, std::vector<Difference>&) {
  return FailedPrecondition("sink " + name() + " has no record-by-record check; verify compares its latest rows");
}

Result<std::unique_ptr<Sink>> Sink::MakeRebuildShadow() const {
  return FailedPrecondition("sink " + name() +
                            " cannot be rebuilt: its type has no way to swap a fresh view in atomically; "
                            "`sluice rewind --sink " + name() +
                            " --to beginning` re-applies every event instead (the version check keeps newer data)");
}

Status Sink::VerifyEntities(std::span<const EntitySnapshot>, std::vector<Difference>&) {
  return FailedPrecondition("sink " + name() + " cannot compare single entities (its type has no entity checks); "
                            "`sluice verify --sink " + name() + "` compares the whole view");
}

Status Sink::ScanViewIds(size_t, const std::function<Status(std::span<const std::string>)>&) {
  return FailedPrecondition("sink " + name() + " cannot list its entities (its type has no entity checks); "
                            "`sluice verify --sink " + name() + "` compares the whole view");
}

void Sink::Send(std::span<const ChangeEvent>) {}

ApplyResult Sink::Receive() {
  return ApplyResult{Internal("sink " + name() + " does not pipeline (Capabilities::pipeline is 1): call Apply()"), {}};
}

ApplyResult Sink::Repair(std::span<const ChangeEvent>, RepairGuard guard) {
  return ApplyResult{FailedPrecondition("sink " + name() + " cannot " +
                                        (guard == RepairGuard::kAny ? "overwrite rows whatever their version"
                                                                    : "repair single entities")),
                     {}};
}

Status Sink::PromoteRebuildShadow() { return FailedPrecondition("sink " + name() + " is not a rebuild shadow"); }

std::optional<std::string> FieldText(const nlohmann::json& state, const std::string& pointer) {
  nlohmann::json::json_pointer ptr;
  try {
    ptr = nlohmann::json::json_pointer(pointer);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // validated in config; defensive only
  }
  if (!state.contains(ptr)) return std::nullopt;
  const auto& v = state.at(ptr);
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) return v.get<std::string>();
  return CanonicalJson(v);
}

}  // namespace sluice::connectors
