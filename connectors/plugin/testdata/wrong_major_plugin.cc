// A plugin built for a future ABI major version: the host must refuse it
// before calling anything but the entry function.
#include <sluice/plugin.h>

namespace {
int Init(const sluice_host_api*) { return SLUICE_INTERNAL; }  // never reached
const char* LastError() { return "init must not be called"; }
}  // namespace

extern "C" __attribute__((visibility("default"))) const sluice_plugin* SLUICE_PLUGIN_ENTRY(void) {
  static const sluice_plugin kPlugin = {sizeof(sluice_plugin), SLUICE_PLUGIN_ABI_MAJOR + 1, 0, "from_the_future",
                                        "9.0.0", &Init, nullptr, &LastError, 0, nullptr};
  return &kPlugin;
}
