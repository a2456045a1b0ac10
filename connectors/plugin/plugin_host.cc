#include "connectors/plugin/plugin_host.h"

#include <dlfcn.h>
#include <sluice/plugin.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <tuple>

#include "connectors/builtin_sink_types.h"
#include "core/json.h"
#include "core/log.h"

namespace sluice::connectors::plugin {
namespace {

// The last field of each struct this host reads, to check struct_size.
constexpr size_t kPluginFieldsEnd = offsetof(sluice_plugin, sink_types) + sizeof(void*);
constexpr size_t kSinkTypeFieldsEnd = offsetof(sluice_sink_type, last_error) + sizeof(void*);
// ABI 1.1's optional rebuild hooks: read only when struct_size covers them.
constexpr size_t kSinkTypeRebuildEnd = offsetof(sluice_sink_type, promote_rebuild_shadow) + sizeof(void*);
// ABI 1.2's strides of apply()'s arrays, likewise.
constexpr size_t kSinkTypeStridesEnd = offsetof(sluice_sink_type, event_result_size) + sizeof(uint32_t);
// sizeof(sluice_event) and sizeof(sluice_event_result) as ABI 1.0 and 1.1
// declared them: the strides a plugin built for them walks apply()'s arrays
// with (it declares none).
constexpr size_t kEventSizeV1_1 = offsetof(sluice_event, committed_at_us) + sizeof(int64_t);
constexpr size_t kEventResultSizeV1_1 = offsetof(sluice_event_result, reason) + sizeof(sluice_str);
// The end of the fields of a scan row this host reads (all of ABI 1.0).
constexpr size_t kRowFieldsEnd = offsetof(sluice_row, state) + sizeof(sluice_str);
// A stride past this is a corrupt descriptor, not a bigger struct.
constexpr size_t kMaxStride = 64 * 1024;

// The strides a sink type's apply() walks its arrays with (ABI 1.2), or why
// they are unusable.
struct Strides {
  size_t event = kEventSizeV1_1;
  size_t result = kEventResultSizeV1_1;
};
Result<Strides> StridesOf(const sluice_sink_type& t) {
  Strides s;
  if (t.struct_size < kSinkTypeStridesEnd) return s;
  if (t.event_size != 0) s.event = t.event_size;
  if (t.event_result_size != 0) s.result = t.event_result_size;
  if (s.event < kEventSizeV1_1 || s.event > kMaxStride || s.event % alignof(sluice_event) != 0 ||
      s.result < kEventResultSizeV1_1 || s.result > kMaxStride || s.result % alignof(sluice_event_result) != 0) {
    return FailedPrecondition("event_size " + std::to_string(t.event_size) + " or event_result_size " +
                              std::to_string(t.event_result_size) +
                              " is not a struct size (at least the ABI 1.0 size, a multiple of its alignment)");
  }
  return s;
}

// Sink type i of a descriptor. The array is laid out with the plugin's
// sizeof(sluice_sink_type), which is smaller for a plugin built for ABI 1.0
// than for this host; the first element's struct_size tells it.
const sluice_sink_type* SinkTypeAt(const sluice_plugin& d, size_t i) {
  const size_t stride = d.sink_types[0].struct_size;
  return reinterpret_cast<const sluice_sink_type*>(reinterpret_cast<const char*>(d.sink_types) + i * stride);
}

struct Library;

// One sink type of one library.
struct TypeEntry {
  Library* library = nullptr;
  const sluice_sink_type* type = nullptr;
};

// One loaded library; its address is the context of its host callbacks.
struct Library {
  std::string path;
  std::string origin;
  std::string label;  // "plugin library PATH (listed at ORIGIN)" for messages
  const sluice_plugin* descriptor = nullptr;
  sluice_host_api api{};
  Status load_status;  // a failed load is remembered and reported again
  LoadedPluginInfo info;
  bool initialized = false;  // init() succeeded: shutdown() is owed
  // Under Host::life_mu: sink instances alive, and whether shutdown() ran.
  int live_sinks = 0;
  bool shut_down = false;
};

// What plugins reported through counter_add/gauge_set.
struct MetricKey {
  std::string name;
  std::string plugin;
  std::string sink;
  bool operator<(const MetricKey& o) const {
    return std::tie(name, plugin, sink) < std::tie(o.name, o.plugin, o.sink);
  }
};

// Process-wide state; never destroyed, because plugin code may call back
// into it until the very end of the process.
struct Host {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<Library>> libraries;  // by path
  std::map<std::string, TypeEntry> types;                      // by type name
  bool ending = false;  // ShutdownPlugins() ran: no more loads or sinks
  // Guards Library::live_sinks, shut_down and `ending` as sinks see it. Not
  // mu: a sink may be destroyed while mu is held (CheckPlugins).
  std::mutex life_mu;
  bool shutdown_requested = false;
  std::mutex metrics_mu;
  std::map<MetricKey, uint64_t> counters;
  std::map<MetricKey, double> gauges;
};

Host& TheHost() {
  static Host* host = new Host();  // intentionally leaked, see Host
  return *host;
}

std::string_view View(sluice_str s) { return {s.data != nullptr ? s.data : "", s.size}; }
sluice_str Str(std::string_view s) { return {s.data(), s.size()}; }

const char* SafeText(const char* s) { return s != nullptr ? s : "(no message)"; }

// [a-z_][a-z0-9_]*, as Prometheus allows (without ':' and upper case).
bool IsMetricName(std::string_view n) {
  if (n.empty() || n.size() > 100 || (n[0] >= '0' && n[0] <= '9')) return false;
  return std::all_of(n.begin(), n.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; });
}

bool IsTypeName(std::string_view n) {
  if (n.empty() || n.size() > 32 || n[0] < 'a' || n[0] > 'z') return false;
  return std::all_of(n.begin(), n.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; });
}

// ---- host callbacks ----

void HostLog(void* context, sluice_log_level level, sluice_str message) {
  const auto* lib = static_cast<const Library*>(context);
  LogLevel l = LogLevel::kInfo;
  switch (level) {
    case SLUICE_LOG_DEBUG: l = LogLevel::kDebug; break;
    case SLUICE_LOG_INFO: l = LogLevel::kInfo; break;
    case SLUICE_LOG_WARN: l = LogLevel::kWarn; break;
    case SLUICE_LOG_ERROR: l = LogLevel::kError; break;
  }
  const std::string text = "plugin " + lib->info.name + ": " + std::string(View(message));
  // Errors are rate-limited per plugin so that a failing plugin cannot flood the log.
  if (l >= LogLevel::kWarn) {
    LogRateLimited(l, "plugin." + lib->info.name, text);
  } else {
    Log(l, text);
  }
}

void HostCounterAdd(void* context, sluice_str name, sluice_str sink, uint64_t delta) {
  const auto* lib = static_cast<const Library*>(context);
  const std::string_view n = View(name);
  if (!IsMetricName(n) || !n.ends_with("_total")) {
    LogRateLimited(LogLevel::kWarn, "plugin.metric." + lib->info.name,
                   "plugin " + lib->info.name + ": counter name must match [a-z_][a-z0-9_]* and end in _total; ignored");
    return;
  }
  Host& host = TheHost();
  std::lock_guard lock(host.metrics_mu);
  host.counters[MetricKey{std::string(n), lib->info.name, std::string(View(sink))}] += delta;
}

void HostGaugeSet(void* context, sluice_str name, sluice_str sink, double value) {
  const auto* lib = static_cast<const Library*>(context);
  const std::string_view n = View(name);
  if (!IsMetricName(n) || n.ends_with("_total")) {
    LogRateLimited(LogLevel::kWarn, "plugin.metric." + lib->info.name,
                   "plugin " + lib->info.name + ": gauge name must match [a-z_][a-z0-9_]* and not end in _total; ignored");
    return;
  }
  Host& host = TheHost();
  std::lock_guard lock(host.metrics_mu);
  host.gauges[MetricKey{std::string(n), lib->info.name, std::string(View(sink))}] = value;
}

int64_t HostNowUs(void*) {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t HostMonotonicUs(void*) {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---- loading ----

// Fills lib (under the host mutex); returns why it cannot be used.
Status Load(Library& lib, Host& host) {
  struct stat st {};
  if (::stat(lib.path.c_str(), &st) != 0) {
    return InvalidArgument(lib.label + ": file not found (" + std::strerror(errno) + ")");
  }
  if (!S_ISREG(st.st_mode)) return InvalidArgument(lib.label + ": not a regular file");
  // RTLD_LOCAL: two plugins' symbols never interpose each other.
  void* handle = ::dlopen(lib.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return InvalidArgument(lib.label + ": cannot load: " + SafeText(::dlerror()));
  }
  ::dlerror();
  void* symbol = ::dlsym(handle, SLUICE_PLUGIN_ENTRY_SYMBOL);
  if (symbol == nullptr) {
    ::dlclose(handle);
    return InvalidArgument(lib.label + ": not a sluice plugin: it does not export the entry symbol " +
                           SLUICE_PLUGIN_ENTRY_SYMBOL +
                           " (define it with SLUICE_PLUGIN(...) from <sluice/plugin_sdk.h>)");
  }
  const auto entry = reinterpret_cast<sluice_plugin_entry_fn>(symbol);
  const sluice_plugin* d = entry();
  if (d == nullptr) {
    ::dlclose(handle);
    return InvalidArgument(lib.label + ": " + SLUICE_PLUGIN_ENTRY_SYMBOL + " returned no descriptor");
  }
  const std::string abi = std::to_string(d->abi_major) + "." + std::to_string(d->abi_minor);
  if (d->abi_major != SLUICE_PLUGIN_ABI_MAJOR) {
    ::dlclose(handle);
    return FailedPrecondition(lib.label + ": built for plugin ABI " + abi + ", but this sluice speaks ABI " +
                              std::to_string(SLUICE_PLUGIN_ABI_MAJOR) + ".x; rebuild the plugin against this "
                              "sluice's include/sluice/plugin.h");
  }
  if (d->struct_size < kPluginFieldsEnd || d->init == nullptr || d->last_error == nullptr ||
      (d->sink_type_count > 0 && d->sink_types == nullptr)) {
    ::dlclose(handle);
    return FailedPrecondition(lib.label + ": malformed plugin descriptor (struct_size " +
                              std::to_string(d->struct_size) + ", or a required function is missing)");
  }
  // From here on the library stays loaded: init may start threads.
  lib.descriptor = d;
  lib.info.path = lib.path;
  lib.info.name = d->name != nullptr ? d->name : std::filesystem::path(lib.path).stem().string();
  lib.info.version = d->version != nullptr ? d->version : "";
  lib.info.abi_major = d->abi_major;
  lib.info.abi_minor = d->abi_minor;

  std::vector<std::string> problems;
  std::vector<std::string> names;
  if (d->sink_type_count > 0 && d->sink_types[0].struct_size < kSinkTypeFieldsEnd) {
    ::dlclose(handle);
    return FailedPrecondition(lib.label + ": malformed plugin descriptor (sink type struct_size " +
                              std::to_string(d->sink_types[0].struct_size) + ")");
  }
  for (size_t i = 0; i < d->sink_type_count; ++i) {
    const sluice_sink_type& t = *SinkTypeAt(*d, i);
    const std::string name = t.type_name != nullptr ? t.type_name : "";
    if (t.struct_size < kSinkTypeFieldsEnd || t.create == nullptr || t.open == nullptr || t.apply == nullptr ||
        t.close == nullptr || t.destroy == nullptr || t.last_error == nullptr) {
      problems.push_back("sink type #" + std::to_string(i) + " '" + name +
                         "' is malformed (struct_size, or a required function is missing)");
    } else if (auto strides = StridesOf(t); !strides.ok()) {
      problems.push_back("sink type '" + name + "' is malformed: " + strides.status().message());
    } else if (!IsTypeName(name)) {
      problems.push_back("sink type name '" + name + "' must match [a-z][a-z0-9_]{0,31}");
    } else if (IsBuiltinSinkType(name)) {
      problems.push_back("sink type '" + name + "' clashes with the built-in sink type of that name");
    } else if (auto it = host.types.find(name); it != host.types.end()) {
      problems.push_back("sink type '" + name + "' is already provided by " + it->second.library->path);
    } else if (std::find(names.begin(), names.end(), name) != names.end()) {
      problems.push_back("sink type '" + name + "' is declared twice");
    } else {
      names.push_back(name);
    }
  }
  if (!problems.empty()) {
    std::string text;
    for (const auto& p : problems) text += (text.empty() ? "" : "; ") + p;
    return FailedPrecondition(lib.label + ": " + text);
  }

  lib.api = sluice_host_api{sizeof(sluice_host_api), SLUICE_PLUGIN_ABI_MAJOR, SLUICE_PLUGIN_ABI_MINOR, &lib,
                            &HostLog, &HostCounterAdd, &HostGaugeSet, &HostNowUs, &HostMonotonicUs};
  if (const int rc = d->init(&lib.api); rc != SLUICE_OK) {
    return FailedPrecondition(lib.label + ": plugin init failed: " + SafeText(d->last_error()));
  }
  lib.initialized = true;
  for (size_t i = 0; i < d->sink_type_count; ++i) {
    const sluice_sink_type* t = SinkTypeAt(*d, i);
    host.types[t->type_name] = TypeEntry{&lib, t};
  }
  lib.info.sink_types = std::move(names);
  return Status::Ok();
}

Result<const Library*> LoadLocked(Host& host, const std::string& raw_path, const std::string& origin) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(raw_path, ec);
  const std::string path = (ec ? std::filesystem::path(raw_path) : p).lexically_normal().string();
  auto it = host.libraries.find(path);
  if (it == host.libraries.end()) {
    if (host.ending) {
      return FailedPrecondition((origin.empty() ? "" : origin + ": ") + "plugin library " + path +
                                ": not loaded, the process has shut its plugins down");
    }
    auto lib = std::make_unique<Library>();
    lib->path = path;
    lib->origin = origin;
    lib->label = (origin.empty() ? "" : origin + ": ") + "plugin library " + path;
    lib->load_status = Load(*lib, host);
    it = host.libraries.emplace(path, std::move(lib)).first;
  }
  if (!it->second->load_status.ok()) return it->second->load_status;
  return static_cast<const Library*>(it->second.get());
}

Status LoadAllLocked(Host& host, const config::Config& config) {
  std::string problems;
  for (const config::PluginConfig& p : config.plugins) {
    auto lib = LoadLocked(host, p.path, p.origin);
    if (!lib.ok()) problems += (problems.empty() ? "" : "\n") + lib.status().message();
  }
  if (!problems.empty()) return FailedPrecondition(problems);
  return Status::Ok();
}

Status FromPlugin(int rc, std::string message) {
  switch (rc) {
    case SLUICE_OK: return Status::Ok();
    case SLUICE_UNAVAILABLE: return Unavailable(std::move(message));
    case SLUICE_MISCONFIGURED: return FailedPrecondition(std::move(message));
    case SLUICE_INVALID_OPTIONS: return InvalidArgument(std::move(message));
    case SLUICE_UNSUPPORTED: return FailedPrecondition(std::move(message));
    default: return Internal(std::move(message));
  }
}

// Calls a library's shutdown() (once), outside every host lock.
void CallShutdown(Library& lib) {
  if (lib.descriptor->shutdown != nullptr) lib.descriptor->shutdown();
}

// A plugin's sink behind the internal Sink interface. Counts itself among
// its library's live sinks, so that shutdown() waits for the last one.
class PluginSink final : public Sink {
 public:
  PluginSink(std::string name, TypeEntry entry, void* handle)
      : name_(std::move(name)), entry_(entry), handle_(handle) {
    // Checked when the library was loaded.
    const auto strides = StridesOf(*entry_.type);
    if (strides.ok()) strides_ = *strides;
    Host& host = TheHost();
    std::lock_guard lock(host.life_mu);
    ++entry_.library->live_sinks;
  }

  ~PluginSink() override {
    if (open_) entry_.type->close(handle_);
    entry_.type->destroy(handle_);
    Host& host = TheHost();
    bool last = false;
    {
      std::lock_guard lock(host.life_mu);
      Library& lib = *entry_.library;
      last = --lib.live_sinks == 0 && host.shutdown_requested && !lib.shut_down;
      if (last) lib.shut_down = true;
    }
    if (last) CallShutdown(*entry_.library);
  }

  const std::string& name() const override { return name_; }

  Capabilities capabilities() const override {
    // SLUICE_CAP_POINT_VIEW and SLUICE_CAP_KEEPS_OFFSETS stay in the ABI for
    // plugins that set them, but the host has no use for them.
    Capabilities c;
    c.can_push = (entry_.type->capabilities & SLUICE_CAP_CAN_PUSH) != 0;
    c.full_events = (entry_.type->capabilities & SLUICE_CAP_FULL_EVENTS) != 0;
    return c;
  }

  Status Open() override {
    const Status s = Call(entry_.type->open(handle_));
    open_ = s.ok();
    return s;
  }

  ApplyResult Apply(std::span<const ChangeEvent> events) override {
    // Both arrays are laid out with the plugin's strides (ABI 1.2): each
    // event gets the fields both sides know and zeroes past them; of each
    // result only the fields both sides know are read.
    const size_t event_bytes = std::min(strides_.event, sizeof(sluice_event));
    const size_t result_bytes = std::min(strides_.result, sizeof(sluice_event_result));
    std::byte* ev = Zeroed(events_, events.size() * strides_.event);
    std::byte* res = Zeroed(results_, events.size() * strides_.result);
    for (size_t i = 0; i < events.size(); ++i) {
      const ChangeEvent& e = events[i];
      const sluice_event c{static_cast<uint32_t>(event_bytes), Str(e.entity_type), e.partition, e.event_id,
                           Str(e.entity_id), e.version, static_cast<uint8_t>(e.deleted ? 1 : 0),
                           Str(e.state), Str(e.command_name), Str(e.command_id), e.committed_at_us,
                           Str(e.request), Str(e.response), Str(e.before)};
      std::memcpy(ev + i * strides_.event, &c, event_bytes);
    }
    ApplyResult out;
    out.status = Call(entry_.type->apply(handle_, reinterpret_cast<const sluice_event*>(ev), events.size(),
                                         reinterpret_cast<sluice_event_result*>(res)));
    if (!out.status.ok()) return out;
    out.results.reserve(events.size());
    for (size_t i = 0; i < events.size(); ++i) {
      sluice_event_result r{};
      std::memcpy(&r, res + i * strides_.result, result_bytes);
      switch (r.outcome) {
        case SLUICE_APPLIED: out.results.push_back({Outcome::kApplied, ""}); break;
        case SLUICE_STALE: out.results.push_back({Outcome::kStale, ""}); break;
        case SLUICE_REJECTED: {
          std::string reason(View(r.reason));
          if (reason.empty()) reason = "rejected by the plugin without a reason";
          out.results.push_back({Outcome::kRejected, std::move(reason)});
          break;
        }
        default:
          // Never guess that an event was applied.
          out.status = Internal(Prefix() + "the plugin returned an unknown outcome " + std::to_string(r.outcome));
          out.results.clear();
          return out;
      }
    }
    return out;
  }

  Status Flush() override {
    // A closed sink holds nothing to flush: close() may drop what it buffered.
    if (entry_.type->flush == nullptr || !open_) return Status::Ok();
    return Call(entry_.type->flush(handle_));
  }

  Status Health() override {
    if (entry_.type->health == nullptr) return Status::Ok();
    return Call(entry_.type->health(handle_));
  }

  void Close() override {
    if (open_) entry_.type->close(handle_);
    open_ = false;
  }

  Status Verify(const std::vector<EntitySnapshot>& truth, std::vector<Difference>& differences) override {
    ASSIGN_OR_RETURN(auto rows, Scan());
    std::map<std::string_view, const EntitySnapshot*> view;
    for (const EntitySnapshot& row : rows) view[row.entity_id] = &row;
    std::map<std::string_view, bool> known;
    for (const EntitySnapshot& s : truth) {
      known[s.entity_id] = true;
      auto it = view.find(s.entity_id);
      const EntitySnapshot* v = it == view.end() || it->second->deleted ? nullptr : it->second;
      if (s.deleted) {
        if (v != nullptr) {
          differences.push_back({Difference::Kind::kExtra, s.entity_id,
                                 "storage deleted the entity at version " + std::to_string(s.version) +
                                     " but the view holds version " + std::to_string(v->version)});
        }
        continue;
      }
      if (v == nullptr) {
        differences.push_back({Difference::Kind::kMissing, s.entity_id,
                               "the view does not hold it; storage has version " + std::to_string(s.version)});
      } else if (v->version != s.version) {
        differences.push_back({Difference::Kind::kVersionMismatch, s.entity_id,
                               "the view has version " + std::to_string(v->version) + ", storage has " +
                                   std::to_string(s.version)});
      } else if (!SameJson(v->state, s.state)) {
        differences.push_back({Difference::Kind::kContentMismatch, s.entity_id,
                               "same version " + std::to_string(s.version) + " but another state"});
      }
    }
    for (const EntitySnapshot& row : rows) {
      if (row.deleted || known.count(row.entity_id) != 0) continue;
      differences.push_back({Difference::Kind::kExtra, row.entity_id,
                             "the view holds version " + std::to_string(row.version) +
                                 " of an entity storage does not have"});
    }
    return Status::Ok();
  }

  Result<std::unique_ptr<Sink>> MakeRebuildShadow() const override {
    const sluice_sink_type& t = *entry_.type;
    if (t.struct_size < kSinkTypeRebuildEnd) {
      return FailedPrecondition(Prefix() + "cannot be rebuilt: the plugin was built for plugin ABI " +
                                AbiVersion() + ", which has no rebuild hooks; rebuild it against this sluice's "
                                "include/sluice/plugin.h (ABI " + std::to_string(SLUICE_PLUGIN_ABI_MAJOR) + "." +
                                std::to_string(SLUICE_PLUGIN_ABI_MINOR) + ") and implement make_rebuild_shadow and "
                                "promote_rebuild_shadow, or use `sluice rewind --sink " + name_ +
                                " --to beginning`");
    }
    if (t.make_rebuild_shadow == nullptr || t.promote_rebuild_shadow == nullptr) {
      return FailedPrecondition(Prefix() + "cannot be rebuilt: sink type '" + t.type_name +
                                "' does not implement the optional rebuild hooks (make_rebuild_shadow, "
                                "promote_rebuild_shadow); `sluice rewind --sink " + name_ +
                                " --to beginning` re-applies every event instead");
    }
    void* shadow = nullptr;
    RETURN_IF_ERROR(Call(t.make_rebuild_shadow(handle_, &shadow)));
    if (shadow == nullptr) return Internal(Prefix() + "make_rebuild_shadow returned no sink");
    auto made = std::make_unique<PluginSink>(name_, entry_, shadow);
    made->shadow_ = true;
    return std::unique_ptr<Sink>(std::move(made));
  }

  Status PromoteRebuildShadow() override {
    if (!shadow_) return Sink::PromoteRebuildShadow();
    if (!open_) RETURN_IF_ERROR(Open());  // a replay of no events never opened it
    return Call(entry_.type->promote_rebuild_shadow(handle_));
  }

  // Every row the plugin reports, tombstones included.
  Result<std::vector<EntitySnapshot>> Scan() {
    if (entry_.type->scan == nullptr) {
      return FailedPrecondition(Prefix() + "sink type '" + entry_.type->type_name +
                                "' cannot list its rows (no scan function), so it cannot be verified");
    }
    struct Scanned {
      std::vector<EntitySnapshot> rows;
      uint32_t bad_size = 0;  // a row too small for the fields read here: stop
    } scanned;
    auto each = [](void* ctx, const sluice_row* row) -> int {
      auto* out = static_cast<Scanned*>(ctx);
      if (row == nullptr || row->struct_size < kRowFieldsEnd) {
        out->bad_size = row == nullptr ? 1 : std::max<uint32_t>(row->struct_size, 1);
        return 1;
      }
      out->rows.push_back(
          {std::string(View(row->entity_id)), row->version, row->deleted != 0, std::string(View(row->state))});
      return 0;
    };
    RETURN_IF_ERROR(Call(entry_.type->scan(handle_, each, &scanned)));
    if (scanned.bad_size != 0) {
      return Internal(Prefix() + "scan reported a row whose struct_size " + std::to_string(scanned.bad_size) +
                      " is smaller than sluice_row of ABI 1.0");
    }
    return std::move(scanned.rows);
  }

 private:
  static bool SameJson(const std::string& a, const std::string& b) {
    auto ja = ParseJson(a);
    auto jb = ParseJson(b);
    return ja.ok() && jb.ok() && *ja == *jb;
  }

  std::string Prefix() const { return "sink '" + name_ + "' (plugin " + entry_.library->info.name + "): "; }
  std::string AbiVersion() const {
    return std::to_string(entry_.library->info.abi_major) + "." + std::to_string(entry_.library->info.abi_minor);
  }

  Status Call(int rc) const {
    if (rc == SLUICE_OK) return Status::Ok();
    return FromPlugin(rc, Prefix() + SafeText(entry_.type->last_error(handle_)));
  }

  // The first `bytes` of `buffer` (grown as needed, aligned for any struct), zeroed.
  static std::byte* Zeroed(std::vector<std::max_align_t>& buffer, size_t bytes) {
    buffer.resize(std::max<size_t>(buffer.size(), (bytes + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t)));
    auto* p = reinterpret_cast<std::byte*>(buffer.data());
    std::memset(p, 0, bytes);
    return p;
  }

  std::string name_;
  TypeEntry entry_;
  void* handle_;
  Strides strides_;
  bool open_ = false;
  bool shadow_ = false;  // made by make_rebuild_shadow
  std::vector<std::max_align_t> events_;   // apply()'s events, at the plugin's stride
  std::vector<std::max_align_t> results_;  // apply()'s results, at the plugin's stride
};

// Creates a plugin sink under the host mutex (create() calls are serialised,
// which keeps the plugin-wide last_error() meaningful).
Result<std::unique_ptr<PluginSink>> CreateLocked(Host& host, const config::SinkConfig& sink,
                                                 const config::Config& global) {
  if (host.ending) {
    return FailedPrecondition(sink.origin + ": sink '" + sink.name + "': the process has shut its plugins down");
  }
  auto it = host.types.find(sink.type);
  if (it == host.types.end()) {
    std::string known;
    for (const auto& [name, entry] : host.types) known += (known.empty() ? "" : ", ") + name;
    return InvalidArgument(sink.origin + ": sink '" + sink.name + "': sink type '" + sink.type +
                           "' is not built in and no listed plugin provides it (plugin types: " +
                           (known.empty() ? "none" : known) + ")");
  }
  const TypeEntry entry = it->second;
  const std::string config_dir = std::filesystem::path(global.path).parent_path().string();
  const sluice_sink_config c{sizeof(sluice_sink_config), Str(sink.name), Str(sink.entity),
                             Str(sink.plugin.options_json), Str(config_dir)};
  void* handle = nullptr;
  const int rc = entry.type->create(&c, &handle);
  if (rc != SLUICE_OK || handle == nullptr) {
    const std::string why = SafeText(entry.library->descriptor->last_error());
    return FromPlugin(rc == SLUICE_OK ? SLUICE_INTERNAL : rc,
                      sink.origin + ": sink '" + sink.name + "' (plugin " + entry.library->info.name + "): " + why);
  }
  auto made = std::make_unique<PluginSink>(sink.name, entry, handle);
  if (sink.push.enabled && !made->capabilities().can_push) {
    return InvalidArgument(sink.origin + ": sink '" + sink.name + "': push: true, but the plugin sink type '" +
                           sink.type + "' cannot be pushed to (it does not declare SLUICE_CAP_CAN_PUSH)");
  }
  return made;
}

}  // namespace

Result<LoadedPluginInfo> LoadPluginLibrary(const std::string& path, const std::string& origin) {
  Host& host = TheHost();
  std::lock_guard lock(host.mu);
  ASSIGN_OR_RETURN(const Library* lib, LoadLocked(host, path, origin));
  return lib->info;
}

Status CheckPlugins(const config::Config& config) {
  Host& host = TheHost();
  std::lock_guard lock(host.mu);
  std::string problems;
  if (Status s = LoadAllLocked(host, config); !s.ok()) problems = s.message();
  for (const config::SinkConfig& sink : config.sinks) {
    if (IsBuiltinSinkType(sink.type)) continue;
    auto made = CreateLocked(host, sink, config);
    if (!made.ok()) problems += (problems.empty() ? "" : "\n") + made.status().message();
  }
  if (!problems.empty()) return InvalidArgument(problems);
  return Status::Ok();
}

bool IsPluginSinkType(const std::string& type) {
  Host& host = TheHost();
  std::lock_guard lock(host.mu);
  return host.types.count(type) != 0;
}

Result<std::unique_ptr<Sink>> MakePluginSink(const config::SinkConfig& sink, const config::Config& global) {
  Host& host = TheHost();
  std::lock_guard lock(host.mu);
  RETURN_IF_ERROR(LoadAllLocked(host, global));
  ASSIGN_OR_RETURN(auto made, CreateLocked(host, sink, global));
  return std::unique_ptr<Sink>(std::move(made));
}

Result<std::vector<EntitySnapshot>> ScanPluginSink(Sink& sink) {
  auto* plugin_sink = dynamic_cast<PluginSink*>(&sink);
  if (plugin_sink == nullptr) return InvalidArgument("sink '" + sink.name() + "' is not a plugin sink");
  return plugin_sink->Scan();
}

void ShutdownPlugins() {
  Host& host = TheHost();
  std::vector<Library*> owed;
  {
    std::lock_guard lock(host.mu);
    host.ending = true;
    for (auto& [path, lib] : host.libraries) {
      if (lib->initialized) owed.push_back(lib.get());
    }
  }
  std::vector<Library*> now;
  {
    std::lock_guard lock(host.life_mu);
    host.shutdown_requested = true;
    for (Library* lib : owed) {
      if (lib->shut_down) continue;
      if (lib->live_sinks > 0) {
        Log(LogLevel::kWarn, "plugin " + lib->info.name + ": " + std::to_string(lib->live_sinks) +
                                 " sink(s) still alive at shutdown; its shutdown() waits for the last one");
        continue;
      }
      lib->shut_down = true;
      now.push_back(lib);
    }
  }
  for (Library* lib : now) CallShutdown(*lib);
}

std::vector<prometheus::MetricFamily> PluginMetricFamilies() {
  Host& host = TheHost();
  std::lock_guard lock(host.metrics_mu);
  // Counter names end in _total and gauge names never do, so the two maps
  // never name one family twice.
  std::vector<prometheus::MetricFamily> out;
  auto add = [&out](const MetricKey& k, prometheus::MetricType type, double value) {
    const std::string name = "sluice_plugin_" + k.name;
    if (out.empty() || out.back().name != name) {
      out.push_back(prometheus::MetricFamily{
          name, std::string("Reported by sink plugins through the host's ") +
                    (type == prometheus::MetricType::Counter ? "counter_add" : "gauge_set") + " callback.",
          type, {}});
    }
    prometheus::ClientMetric m;
    m.label = {{"plugin", k.plugin}, {"sink", k.sink}};
    (type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value) = value;
    out.back().metric.push_back(std::move(m));
  };
  for (const auto& [k, v] : host.counters) add(k, prometheus::MetricType::Counter, static_cast<double>(v));
  for (const auto& [k, v] : host.gauges) add(k, prometheus::MetricType::Gauge, v);
  return out;
}

}  // namespace sluice::connectors::plugin
