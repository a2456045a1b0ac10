// A minimal, well-formed SDK plugin with one sink type that accepts
// everything and stores nothing, built twice (see ../CMakeLists.txt):
//   test_plugin_bad_type  claims the built-in type "redis": the host refuses it
//   test_plugin_no_push   type "pull_only" without SLUICE_CAP_CAN_PUSH: push: true on it is an error
#include <sluice/plugin_sdk.h>

namespace {
using sluice::plugin_sdk::Status;

class Minimal : public sluice::plugin_sdk::Sink {
 public:
  Status Configure(const sluice::plugin_sdk::SinkContext&) override { return Status::Ok(); }
  Status Open() override { return Status::Ok(); }
  Status Apply(std::span<const sluice::plugin_sdk::Event>, std::span<sluice::plugin_sdk::EventResult>) override {
    return Status::Ok();
  }
};
}  // namespace

SLUICE_PLUGIN("minimal", "1.0.0", sluice::plugin_sdk::SinkType<Minimal>(TEST_SINK_TYPE, SLUICE_CAP_POINT_VIEW))
