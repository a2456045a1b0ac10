// A header-only C++ SDK over the sluice plugin C ABI (<sluice/plugin.h>).
//
// A plugin author writes a class derived from sluice::plugin_sdk::Sink and
// names it in one macro:
//
//   class MySink : public sluice::plugin_sdk::Sink {
//    public:
//     Status Configure(const SinkContext& ctx) override;   // check options
//     Status Open() override;                              // connect
//     Status Apply(std::span<const Event> events,
//                  std::span<EventResult> results) override;
//     Status Flush() override;                             // optional: a sink that buffers
//     Status Scan(const RowCallback& each) override;       // optional
//     // Optional, for `sluice rebuild` (ABI 1.1): both or neither.
//     Status MakeRebuildShadow(MySink& shadow) const;
//     Status PromoteRebuildShadow();
//   };
//   SLUICE_PLUGIN("my_plugin", "1.0.0",
//                 sluice::plugin_sdk::SinkType<MySink>("my_sink", SLUICE_CAP_POINT_VIEW));
//
// (SLUICE_PLUGIN_WITH_HOOKS adds plugin-wide init and shutdown code.)
//
// The SDK turns each C call into a call on the object, converts borrowed C
// strings to std::string_view (valid only during the call: copy what you
// keep), keeps the last error message alive as the ABI requires, and stops
// every exception at the boundary (reported as SLUICE_INTERNAL).
//
// Build the plugin with -fvisibility=hidden (CMake: CXX_VISIBILITY_PRESET
// hidden) and link it with the version script <sluice/plugin.map>: the
// visibility flag alone still exports the C++ standard library's template
// instantiations (docs/connectors.md, "Build it").
//
// Apply()'s arrays: the SDK declares this build's sizeof(sluice_event) and
// sizeof(sluice_event_result) in each sink type (ABI 1.2), so the host lays
// them out for it whatever ABI minor either side was built with.
//
// Threads: as in plugin.h. One thread at a time calls a given Sink object;
// the Host functions may be called from any thread.
#pragma once

#include <sluice/plugin.h>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::plugin_sdk {

// What the caller should do about a failure (see sluice_status).
enum class Code : int {
  kOk = SLUICE_OK,
  kUnavailable = SLUICE_UNAVAILABLE,
  kMisconfigured = SLUICE_MISCONFIGURED,
  kInvalidOptions = SLUICE_INVALID_OPTIONS,
  kUnsupported = SLUICE_UNSUPPORTED,
  kInternal = SLUICE_INTERNAL,
};

// A result code and, on failure, a message for the operator.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }
  static Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
  static Status Misconfigured(std::string m) { return {Code::kMisconfigured, std::move(m)}; }
  static Status InvalidOptions(std::string m) { return {Code::kInvalidOptions, std::move(m)}; }
  static Status Unsupported(std::string m) { return {Code::kUnsupported, std::move(m)}; }
  static Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }
  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// One committed event; every view is borrowed for the Apply() call.
struct Event {
  std::string_view entity_type;
  uint32_t partition = 0;
  uint64_t event_id = 0;
  std::string_view entity_id;
  uint64_t version = 0;
  bool deleted = false;
  std::string_view state;  // JSON text; empty when deleted
  std::string_view command_name;
  std::string_view command_id;
  int64_t committed_at_us = 0;
  // ABI 1.3, for a sink type declared with SLUICE_CAP_FULL_EVENTS (empty
  // otherwise): the command's request and response, and the state before the
  // event (JSON text; empty when the entity did not exist before it).
  std::string_view request;
  std::string_view response;
  std::string_view before;
};

enum class Outcome : uint32_t {
  kApplied = SLUICE_APPLIED,
  kStale = SLUICE_STALE,
  kRejected = SLUICE_REJECTED,
};

// One per event; starts as kApplied. Set reason when rejecting.
struct EventResult {
  Outcome outcome = Outcome::kApplied;
  std::string reason;
};

// One entity as the view holds it (for Scan).
struct Row {
  std::string_view entity_id;
  uint64_t version = 0;
  bool deleted = false;     // a tombstone
  std::string_view state;   // JSON text; empty for a tombstone
};

// Returns false to stop the scan early.
using RowCallback = std::function<bool(const Row&)>;

// What a sink is told about itself when it is configured.
struct SinkContext {
  std::string sink_name;
  std::string entity_type;
  std::string options_json;  // a JSON object of the sink's own YAML keys
  std::string config_dir;    // for relative paths in the options
};

// The host's callbacks. Usable after the host called init (always true
// inside a Sink's methods); calls before that do nothing.
class Host {
 public:
  static void Log(sluice_log_level level, std::string_view message) {
    if (const auto* h = api()) h->log(h->context, level, Str(message));
  }
  // name: [a-z_][a-z0-9_]* ending in _total; named sluice_plugin_<name> by the host,
  // served on /metrics with labels plugin and sink.
  static void CounterAdd(std::string_view name, std::string_view sink, uint64_t delta) {
    if (const auto* h = api()) h->counter_add(h->context, Str(name), Str(sink), delta);
  }
  static void GaugeSet(std::string_view name, std::string_view sink, double value) {
    if (const auto* h = api()) h->gauge_set(h->context, Str(name), Str(sink), value);
  }
  static int64_t NowMicros() {
    const auto* h = api();
    return h != nullptr ? h->now_us(h->context) : 0;
  }
  static int64_t MonotonicMicros() {
    const auto* h = api();
    return h != nullptr ? h->monotonic_us(h->context) : 0;
  }

  // Set once by the SDK's init; not for plugin code.
  static const sluice_host_api*& api() {
    static const sluice_host_api* host = nullptr;
    return host;
  }

 private:
  static sluice_str Str(std::string_view s) { return {s.data(), s.size()}; }
};

// The base class of a plugin sink. The SDK default-constructs it, then calls
// Configure() (also from `sluice config check`: only check and keep the
// options there), then Open(), Apply()..., Flush() now and then, Close().
//
// Durability: an outcome Apply() reports is an acknowledgement that holds
// once the next Flush() returned ok (see "Durability" in plugin.h). A sink
// that writes through keeps the default Flush(). A sink that buffers writes
// its buffer in Flush(), may drop it in Close(), answers kStale only for
// versions that are durable or in its buffer, and learns in Open() what the
// view holds from what is durable: the host applies again whatever a failed
// Flush() (or a crash) may have lost.
//
// Rebuild (optional): a class T that also defines
//   Status MakeRebuildShadow(T& shadow) const;  // set up a default-constructed
//                                              // T to write a fresh view
//   Status PromoteRebuildShadow();              // on the shadow: make it live
// can be rebuilt (see sluice_sink_type.make_rebuild_shadow for the contract);
// SinkType<T> finds them at compile time. The shadow is not Configure()d.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual Status Configure(const SinkContext& context) = 0;
  virtual Status Open() = 0;
  // results.size() == events.size(); see sluice_sink_type.apply.
  virtual Status Apply(std::span<const Event> events, std::span<EventResult> results) = 0;
  // Makes what this instance acknowledged since the last Flush() durable.
  virtual Status Flush() { return Status::Ok(); }
  virtual Status Health() { return Status::Ok(); }
  virtual Status Scan(const RowCallback& /*each*/) {
    return Status::Unsupported("this sink cannot list its rows");
  }
  virtual void Close() {}
};

namespace internal {

// Whether T offers the optional rebuild hooks.
template <typename T>
concept Rebuildable = requires(const T& live, T& shadow) {
  { live.MakeRebuildShadow(shadow) } -> std::same_as<Status>;
  { shadow.PromoteRebuildShadow() } -> std::same_as<Status>;
};

inline std::string& PluginError() {
  static std::string message;
  return message;
}

inline int Fail(std::string* slot, const Status& s) {
  *slot = s.message().empty() ? "unknown error" : s.message();
  return static_cast<int>(s.code());
}

inline std::string_view View(sluice_str s) { return {s.data != nullptr ? s.data : "", s.size}; }

// Runs f (returning Status) with exceptions turned into kInternal.
template <typename F>
int Guard(std::string* error_slot, F&& f) {
  try {
    const Status s = f();
    if (s.ok()) return SLUICE_OK;
    return Fail(error_slot, s);
  } catch (const std::exception& e) {
    return Fail(error_slot, Status::Internal(std::string("exception: ") + e.what()));
  } catch (...) {
    return Fail(error_slot, Status::Internal("unknown exception"));
  }
}

// The C side of one sink instance.
template <typename T>
struct Instance {
  T sink;
  std::string error;
  std::vector<Event> events;
  std::vector<EventResult> results;
};

template <typename T>
struct Adapter {
  static Instance<T>* Self(void* p) { return static_cast<Instance<T>*>(p); }

  static int Create(const sluice_sink_config* config, void** out) {
    *out = nullptr;
    return Guard(&PluginError(), [&]() -> Status {
      auto instance = std::make_unique<Instance<T>>();
      SinkContext context{std::string(View(config->sink_name)),
                          std::string(View(config->entity_type)),
                          std::string(View(config->options_json)),
                          std::string(View(config->config_dir))};
      Status s = instance->sink.Configure(context);
      if (s.ok()) *out = instance.release();
      return s;
    });
  }

  static int Open(void* p) {
    return Guard(&Self(p)->error, [&] { return Self(p)->sink.Open(); });
  }

  static int Apply(void* p, const sluice_event* events, size_t count,
                   sluice_event_result* results) {
    Instance<T>* self = Self(p);
    return Guard(&self->error, [&]() -> Status {
      self->events.clear();
      self->events.reserve(count);
      for (size_t i = 0; i < count; ++i) {
        const sluice_event& e = events[i];
        self->events.push_back(Event{View(e.entity_type), e.partition, e.event_id,
                                     View(e.entity_id), e.version, e.deleted != 0,
                                     View(e.state), View(e.command_name), View(e.command_id),
                                     e.committed_at_us, View(e.request), View(e.response), View(e.before)});
      }
      self->results.assign(count, EventResult{});
      Status s = self->sink.Apply(std::span<const Event>(self->events),
                                  std::span<EventResult>(self->results));
      if (!s.ok()) return s;
      // Reasons stay in self->results until the next call, as the ABI asks.
      for (size_t i = 0; i < count; ++i) {
        results[i].outcome = static_cast<uint32_t>(self->results[i].outcome);
        results[i].reason = {self->results[i].reason.data(), self->results[i].reason.size()};
      }
      return s;
    });
  }

  static int Flush(void* p) {
    return Guard(&Self(p)->error, [&] { return Self(p)->sink.Flush(); });
  }

  static int Health(void* p) {
    return Guard(&Self(p)->error, [&] { return Self(p)->sink.Health(); });
  }

  static int Scan(void* p, sluice_row_fn fn, void* fn_context) {
    return Guard(&Self(p)->error, [&] {
      return Self(p)->sink.Scan([&](const Row& row) {
        const sluice_row c{sizeof(sluice_row), {row.entity_id.data(), row.entity_id.size()},
                           row.version, static_cast<uint8_t>(row.deleted ? 1 : 0),
                           {row.state.data(), row.state.size()}};
        return fn(fn_context, &c) == 0;
      });
    });
  }

  static void Close(void* p) {
    try {
      Self(p)->sink.Close();
    } catch (...) {
      // Close cannot fail across the ABI; the sink is being dropped anyway.
    }
  }

  static int MakeRebuildShadow(void* p, void** out) {
    *out = nullptr;
    return Guard(&Self(p)->error, [&]() -> Status {
      auto shadow = std::make_unique<Instance<T>>();
      const T& live = Self(p)->sink;
      Status s = live.MakeRebuildShadow(shadow->sink);
      if (s.ok()) *out = shadow.release();
      return s;
    });
  }

  static int PromoteRebuildShadow(void* p) {
    return Guard(&Self(p)->error, [&] { return Self(p)->sink.PromoteRebuildShadow(); });
  }

  static void Destroy(void* p) { delete Self(p); }

  static const char* LastError(void* p) { return Self(p)->error.c_str(); }
};

// The end of the host callbacks ABI 1.0 has; a newer header may add more,
// which an older host does not have (and the SDK does not call).
inline constexpr size_t kHostApiFieldsEnd = offsetof(sluice_host_api, monotonic_us) + sizeof(void*);

inline int Init(const sluice_host_api* host) {
  if (host == nullptr || host->struct_size < kHostApiFieldsEnd || host->abi_major != SLUICE_PLUGIN_ABI_MAJOR) {
    PluginError() = "the host's callback table is missing or of another ABI version";
    return SLUICE_INTERNAL;
  }
  Host::api() = host;
  return SLUICE_OK;
}

inline void Shutdown() { Host::api() = nullptr; }

// init() and shutdown() of SLUICE_PLUGIN_WITH_HOOKS: the SDK's, around the
// plugin's own hooks (exceptions stopped at the boundary).
template <typename F>
int InitWith(const sluice_host_api* host, F&& on_init) {
  if (const int rc = Init(host); rc != SLUICE_OK) return rc;
  return Guard(&PluginError(), std::forward<F>(on_init));
}

template <typename F>
void ShutdownWith(F&& on_shutdown) {
  try {
    on_shutdown();
  } catch (...) {
    // shutdown() cannot fail across the ABI; the host is done with the plugin.
  }
  Shutdown();
}

inline const char* LastPluginError() { return PluginError().c_str(); }

}  // namespace internal

// The descriptor of sink type T under the YAML name `type_name`
// (a string literal: the pointer is kept).
template <typename T>
constexpr sluice_sink_type SinkType(const char* type_name, uint32_t capabilities) {
  using A = internal::Adapter<T>;
  sluice_sink_type t{sizeof(sluice_sink_type), type_name, capabilities,
                     &A::Create, &A::Open, &A::Apply, &A::Flush, &A::Health, &A::Scan,
                     &A::Close, &A::Destroy, &A::LastError, nullptr, nullptr,
                     sizeof(sluice_event), sizeof(sluice_event_result)};
  if constexpr (internal::Rebuildable<T>) {
    t.make_rebuild_shadow = &A::MakeRebuildShadow;
    t.promote_rebuild_shadow = &A::PromoteRebuildShadow;
  }
  return t;
}

}  // namespace sluice::plugin_sdk

// Defines the entry symbol: SLUICE_PLUGIN("name", "version", SinkType<A>(...), ...).
#define SLUICE_PLUGIN(plugin_name, plugin_version, ...)                                             \
  SLUICE_PLUGIN_WITH_HOOKS(plugin_name, plugin_version, [] { return ::sluice::plugin_sdk::Status::Ok(); }, \
                           [] {}, __VA_ARGS__)

// The same with plugin-wide hooks: on_init, a callable returning Status, runs
// in init() once the Host functions work (a failure refuses the library with
// its message); on_shutdown, returning void, runs in shutdown(): once, after
// every sink of the library was destroyed (plugin.h, "Shutdown"). E.g.
//   SLUICE_PLUGIN_WITH_HOOKS("my_plugin", "1.0.0", &StartClientLibrary, &StopClientLibrary,
//                            sluice::plugin_sdk::SinkType<MySink>("my_sink", SLUICE_CAP_POINT_VIEW))
#define SLUICE_PLUGIN_WITH_HOOKS(plugin_name, plugin_version, on_init, on_shutdown, ...)           \
  extern "C" __attribute__((visibility("default"))) const sluice_plugin* SLUICE_PLUGIN_ENTRY(       \
      void) {                                                                                      \
    static const sluice_sink_type kTypes[] = {__VA_ARGS__};                                        \
    static const sluice_plugin kPlugin = {                                                         \
        sizeof(sluice_plugin),                                                                     \
        SLUICE_PLUGIN_ABI_MAJOR,                                                                   \
        SLUICE_PLUGIN_ABI_MINOR,                                                                   \
        plugin_name,                                                                               \
        plugin_version,                                                                            \
        [](const sluice_host_api* host) { return ::sluice::plugin_sdk::internal::InitWith(host, on_init); }, \
        [] { ::sluice::plugin_sdk::internal::ShutdownWith(on_shutdown); },                        \
        &::sluice::plugin_sdk::internal::LastPluginError,                                          \
        sizeof(kTypes) / sizeof(kTypes[0]),                                                        \
        kTypes};                                                                                   \
    return &kPlugin;                                                                               \
  }
