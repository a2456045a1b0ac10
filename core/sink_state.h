// What a sink is doing, as the sync engine's pull loop keeps it, saves it in
// sluice_offsets, shows it in `sluice status` and exports it as
// sluice_engine_sink_state; the writer's push path uses running and backoff.
//
//   running  applying (or waiting for events)
//   backoff  its server failed: the same events are applied again after a
//            capped, growing delay
//   paused   by an operator; kept across a restart
//   stopped  needs a fix: misconfigured, or a rejection with on_error: stop
//
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace sluice {

enum class SinkState : uint8_t { kRunning, kBackoff, kPaused, kStopped };
inline constexpr size_t kSinkStates = 4;

// "running", "backoff", "paused", "stopped".
std::string_view SinkStateName(SinkState s);
// Running and paused count as healthy (readiness, sluice_engine_sink_healthy).
inline bool SinkStateHealthy(SinkState s) { return s == SinkState::kRunning || s == SinkState::kPaused; }
// The state of a name SinkStateName gives; nullopt for any other text.
std::optional<SinkState> SinkStateFromName(std::string_view name);

}  // namespace sluice
