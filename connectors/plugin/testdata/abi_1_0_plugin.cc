// A plugin as built against plugin ABI 1.0, before the rebuild hooks: its
// sink type struct ends at last_error, so its array of two types has a
// smaller stride than this host's sluice_sink_type. The host must load both
// types, run them, and refuse to rebuild them.
#include <sluice/plugin.h>

#include <cstddef>

namespace {

// sluice_sink_type as ABI 1.0 declared it.
struct SinkTypeV1_0 {
  uint32_t struct_size;
  const char* type_name;
  uint32_t capabilities;
  int (*create)(const sluice_sink_config* config, void** sink);
  int (*open)(void* sink);
  int (*apply)(void* sink, const sluice_event* events, size_t count, sluice_event_result* results);
  int (*flush)(void* sink);
  int (*health)(void* sink);
  int (*scan)(void* sink, sluice_row_fn fn, void* fn_context);
  void (*close)(void* sink);
  void (*destroy)(void* sink);
  const char* (*last_error)(void* sink);
};
static_assert(sizeof(SinkTypeV1_0) == offsetof(sluice_sink_type, make_rebuild_shadow));

int instance;  // every sink is this one stateless object
int Create(const sluice_sink_config*, void** sink) {
  *sink = &instance;
  return SLUICE_OK;
}
int Open(void*) { return SLUICE_OK; }
// The host zeroes the results: every event counts as applied.
int Apply(void*, const sluice_event*, size_t, sluice_event_result*) { return SLUICE_OK; }
void Close(void*) {}
void Destroy(void*) {}
const char* LastError(void*) { return "no error"; }
int Init(const sluice_host_api*) { return SLUICE_OK; }
const char* PluginError() { return "no error"; }

const SinkTypeV1_0 kTypes[] = {
    {sizeof(SinkTypeV1_0), "old_a", SLUICE_CAP_POINT_VIEW, &Create, &Open, &Apply, nullptr, nullptr, nullptr, &Close,
     &Destroy, &LastError},
    {sizeof(SinkTypeV1_0), "old_b", SLUICE_CAP_POINT_VIEW, &Create, &Open, &Apply, nullptr, nullptr, nullptr, &Close,
     &Destroy, &LastError},
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const sluice_plugin* SLUICE_PLUGIN_ENTRY(void) {
  static const sluice_plugin kPlugin = {sizeof(sluice_plugin), 1, 0, "abi_1_0", "1.0.0", &Init, nullptr,
                                        &PluginError, 2, reinterpret_cast<const sluice_sink_type*>(kTypes)};
  return &kPlugin;
}
