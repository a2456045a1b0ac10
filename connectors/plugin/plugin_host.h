// The host side of sink plugins (include/sluice/plugin.h): loads the shared
// libraries a config lists under `plugins:`, checks their ABI version, and
// adapts their sink types to the internal Sink interface (connectors/sink.h)
// so that `type: <plugin type>` works like a built-in sink everywhere
// (engine, verify, push).
//
// Libraries are loaded once per process (by path) and never unloaded: sink
// instances and host callbacks may refer to them until exit. ShutdownPlugins()
// at the end of main() calls each plugin's shutdown() once. Every error
// names the library and where the config listed it:
//   file not found, not a loadable library (dlerror), no entry symbol,
//   another ABI major version, a malformed descriptor, init failed (with the
//   plugin's own message), a sink type provided twice or clashing with a
//   built-in one.
//
// Threads: every function here is thread-safe (one process-wide mutex guards
// loading and the type table). A PluginSink follows the Sink contract: one
// thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <prometheus/metric_family.h>

#include "config/config.h"
#include "connectors/sink.h"
#include "core/status.h"

namespace sluice::connectors::plugin {

// What a loaded library declared, for messages and `sluice config check`.
struct LoadedPluginInfo {
  std::string path;
  std::string name;       // the plugin's own name
  std::string version;    // the plugin's own version
  uint16_t abi_major = 0;
  uint16_t abi_minor = 0;
  std::vector<std::string> sink_types;
};

// Loads one library (or returns the already loaded one). `origin` is where
// the config listed it ("file:line:col"), or empty.
Result<LoadedPluginInfo> LoadPluginLibrary(const std::string& path, const std::string& origin = "");

// Loads every library of config.plugins, then creates (and destroys at once)
// every sink whose type is not built in, so that an unknown type, a plugin
// type that cannot push but has push: true, or options the plugin refuses
// are reported now, each prefixed by the sink's origin. All problems are
// reported together, one per line.
Status CheckPlugins(const config::Config& config);

// Whether a loaded plugin provides `type`.
bool IsPluginSinkType(const std::string& type);

// Builds the sink for a config whose type a plugin provides (loading the
// config's plugins first when needed). Not yet opened.
Result<std::unique_ptr<Sink>> MakePluginSink(const config::SinkConfig& sink, const config::Config& global);

// Every row a plugin sink reports through its scan function, tombstones
// included (for the conformance kit); an error for other sinks or when the
// plugin has no scan function.
Result<std::vector<EntitySnapshot>> ScanPluginSink(Sink& sink);

// Calls shutdown() once for every loaded library whose init() succeeded:
// now for a library none of whose sinks is alive, otherwise when its last
// sink is destroyed (logged: a sink outliving main() is a bug). Afterwards no
// library is loaded and no plugin sink is made (FailedPrecondition). For the
// end of main(), once every sink is gone; calling it again does nothing.
void ShutdownPlugins();

// Counters and gauges the plugins reported through the host callbacks, as
// Prometheus families sluice_plugin_<name> with labels plugin and sink, one
// series per (plugin, sink), sorted by name. The metrics module serves them
// on /metrics (metrics::Registry::AddCollector). Thread-safe.
std::vector<prometheus::MetricFamily> PluginMetricFamilies();

}  // namespace sluice::connectors::plugin
