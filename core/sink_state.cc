#include "core/sink_state.h"

namespace sluice {

std::string_view SinkStateName(SinkState s) {
  switch (s) {
    case SinkState::kRunning: return "running";
    case SinkState::kBackoff: return "backoff";
    case SinkState::kPaused: return "paused";
    case SinkState::kStopped: return "stopped";
  }
  return "stopped";
}

std::optional<SinkState> SinkStateFromName(std::string_view name) {
  for (size_t i = 0; i < kSinkStates; ++i) {
    if (SinkStateName(static_cast<SinkState>(i)) == name) return static_cast<SinkState>(i);
  }
  return std::nullopt;
}

}  // namespace sluice
