// A well-formed plugin whose sink type does not declare SLUICE_CAP_CAN_PUSH:
// `push: true` on it is a configuration error. Its sink accepts everything
// and stores nothing (it is never opened by the tests).
#include <sluice/plugin_sdk.h>

namespace {
using sluice::plugin_sdk::Status;

class PullOnly : public sluice::plugin_sdk::Sink {
 public:
  Status Configure(const sluice::plugin_sdk::SinkContext&) override { return Status::Ok(); }
  Status Open() override { return Status::Ok(); }
  Status Apply(std::span<const sluice::plugin_sdk::Event>, std::span<sluice::plugin_sdk::EventResult>) override {
    return Status::Ok();
  }
};
}  // namespace

SLUICE_PLUGIN("no_push", "1.0.0", sluice::plugin_sdk::SinkType<PullOnly>("pull_only", SLUICE_CAP_POINT_VIEW))
