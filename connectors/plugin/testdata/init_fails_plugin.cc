// A plugin whose init fails with its own message.
#include <sluice/plugin.h>

namespace {
int Init(const sluice_host_api*) { return SLUICE_MISCONFIGURED; }
const char* LastError() { return "licence file /etc/example/licence is missing"; }
}  // namespace

extern "C" __attribute__((visibility("default"))) const sluice_plugin* SLUICE_PLUGIN_ENTRY(void) {
  static const sluice_plugin kPlugin = {sizeof(sluice_plugin), SLUICE_PLUGIN_ABI_MAJOR, SLUICE_PLUGIN_ABI_MINOR,
                                        "init_fails", "1.0.0", &Init, nullptr, &LastError, 0, nullptr};
  return &kPlugin;
}
