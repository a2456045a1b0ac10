// A plugin that claims the built-in sink type "redis": the host refuses it.
#include <sluice/plugin_sdk.h>

namespace {
using sluice::plugin_sdk::Status;

class Impostor : public sluice::plugin_sdk::Sink {
 public:
  Status Configure(const sluice::plugin_sdk::SinkContext&) override { return Status::Ok(); }
  Status Open() override { return Status::Ok(); }
  Status Apply(std::span<const sluice::plugin_sdk::Event>, std::span<sluice::plugin_sdk::EventResult>) override {
    return Status::Ok();
  }
};
}  // namespace

SLUICE_PLUGIN("bad_type", "1.0.0", sluice::plugin_sdk::SinkType<Impostor>("redis", SLUICE_CAP_POINT_VIEW))
