#include "handlers/js_runtime.h"

#include <duktape.h>

#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/names.h"

namespace sluice::handlers {
namespace {

// The limit is on the CPU time the calling thread spends, not wall-clock
// time: a worker that the OS preempts on a busy machine must not fail
// handlers that did nothing wrong.
int64_t ThreadCpuNanos() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

int64_t MonotonicNanos() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// Per-heap bookkeeping: Duktape hands it to the allocator and to the
// execution-timeout check as the heap's udata.
//
// The timeout is checked from three places, so that it holds whatever a
// handler calls: the bytecode executor (every 1Ki instructions, a patch of
// ours in handlers/CMakeLists.txt), the regular expression matcher (every
// 64Ki steps, also ours) and the allocator (every 16th allocation, which is
// what native functions that build strings or arrays keep doing; every
// large one). Reading
// the thread's CPU clock costs a system call (about 0.5-1 us here), so
// Expired() reads it only when the wall clock (vDSO, about 30 ns) shows that
// enough time has passed for the budget to be used up: CPU time never runs
// faster than wall time.
struct Guard {
  size_t used = 0;
  size_t limit = 0;
  bool refused = false;    // an allocation was refused since the last Arm()
  bool armed = false;      // a call (or the file's top level) is running
  bool timed_out = false;  // the deadline passed since the last Arm()
  int64_t deadline_ns = 0;  // in ThreadCpuNanos() of the armed thread
  int64_t next_cpu_read_ns = 0;  // in MonotonicNanos(): no need to read the CPU clock before
  uint32_t allocations = 0;

  void Arm(std::chrono::milliseconds timeout) {
    refused = false;
    timed_out = false;
    deadline_ns = ThreadCpuNanos() + std::chrono::nanoseconds(timeout).count();
    next_cpu_read_ns = 0;
    armed = true;
  }

  // True once the armed call has used its CPU budget (and from then on).
  bool Expired() {
    if (!armed) return false;
    if (timed_out) return true;
    const int64_t wall = MonotonicNanos();
    if (wall < next_cpu_read_ns) return false;
    const int64_t left = deadline_ns - ThreadCpuNanos();
    if (left <= 0) {
      timed_out = true;
      return true;
    }
    next_cpu_read_ns = wall + left;
    return false;
  }

  // Called on every allocation: refuses them all once the call timed out.
  // Large blocks are checked each time: a handler that doubles a string
  // makes few allocations, each costly to fill.
  bool AllocationExpired(size_t size) {
    if (!armed) return false;
    if (timed_out) return true;
    return ((++allocations & 15) == 0 || size >= kLargeAllocation) && Expired();
  }
  static constexpr size_t kLargeAllocation = 64 * 1024;
};

// Every block carries its size in front so that frees and reallocs can be
// accounted; 16 bytes keep the payload max-aligned.
constexpr size_t kHeader = 16;

void* GuardedAlloc(void* udata, duk_size_t size) {
  auto* g = static_cast<Guard*>(udata);
  if (size == 0) return nullptr;
  if (g->AllocationExpired(size)) return nullptr;
  if (g->used + size > g->limit) {
    g->refused = true;
    return nullptr;
  }
  auto* p = static_cast<unsigned char*>(std::malloc(kHeader + size));
  if (p == nullptr) return nullptr;
  std::memcpy(p, &size, sizeof size);
  g->used += size;
  return p + kHeader;
}

void GuardedFree(void* udata, void* ptr) {
  if (ptr == nullptr) return;
  auto* g = static_cast<Guard*>(udata);
  auto* p = static_cast<unsigned char*>(ptr) - kHeader;
  size_t size = 0;
  std::memcpy(&size, p, sizeof size);
  g->used -= size;
  std::free(p);
}

void* GuardedRealloc(void* udata, void* ptr, duk_size_t size) {
  if (ptr == nullptr) return GuardedAlloc(udata, size);
  if (size == 0) {
    GuardedFree(udata, ptr);
    return nullptr;
  }
  auto* g = static_cast<Guard*>(udata);
  auto* p = static_cast<unsigned char*>(ptr) - kHeader;
  size_t old = 0;
  std::memcpy(&old, p, sizeof old);
  if (size > old && g->AllocationExpired(size)) return nullptr;
  if (size > old && g->used + (size - old) > g->limit) {
    g->refused = true;
    return nullptr;
  }
  auto* q = static_cast<unsigned char*>(std::realloc(p, kHeader + size));
  if (q == nullptr) return nullptr;
  std::memcpy(q, &size, sizeof size);
  g->used = g->used - old + size;
  return q + kHeader;
}

// Duktape calls this only from inside protected calls; reaching it means a
// bug in this file, not in a handler.
void Fatal(void*, const char* msg) {
  std::fprintf(stderr, "sluice: fatal JavaScript engine error: %s\n", msg ? msg : "(no message)");
  std::abort();
}

// The fixed timestamp Date sees on this thread (one runtime per thread).
thread_local double t_now_ms = 0;

// Runs before the handler file: what would make a handler non-deterministic.
constexpr std::string_view kPrelude = R"JS(
(function (global) {
  'use strict';
  Object.defineProperty(Math, 'random', {
    value: function random() {
      throw new Error('Math.random() is not allowed: handlers and view code must be deterministic ' +
                      '(derive values from the request or ctx)');
    },
    writable: false, enumerable: false, configurable: false
  });
})(this);
)JS";

// The message of a thrown value: Error objects as "message" (plain Error) or
// "Name: message"; anything else as String(value).
std::string ThrownMessage(duk_context* ctx, duk_idx_t idx) {
  idx = duk_normalize_index(ctx, idx);
  std::string out;
  if (duk_is_error(ctx, idx)) {
    duk_get_prop_string(ctx, idx, "name");
    const char* name = duk_is_string(ctx, -1) ? duk_get_string(ctx, -1) : "Error";
    duk_get_prop_string(ctx, idx, "message");
    const char* message = duk_is_string(ctx, -1) ? duk_get_string(ctx, -1) : "";
    if (std::strcmp(name, "Error") != 0) {
      out = name;
      out += ": ";
    }
    out += message;
    duk_pop_2(ctx);
  } else {
    duk_dup(ctx, idx);
    out = duk_safe_to_string(ctx, -1);
    duk_pop(ctx);
  }
  return out;
}

// "file:LINE: message" for an error thrown while loading the file.
std::string LoadError(duk_context* ctx, const std::string& file) {
  std::string out = file;
  if (duk_is_error(ctx, -1)) {
    duk_get_prop_string(ctx, -1, "lineNumber");
    if (duk_is_number(ctx, -1)) out += ":" + std::to_string(static_cast<long long>(duk_get_number(ctx, -1)));
    duk_pop(ctx);
  }
  std::string what = ThrownMessage(ctx, -1);
  if (duk_is_error(ctx, -1)) {
    duk_get_prop_string(ctx, -1, "name");
    const bool plain = duk_is_string(ctx, -1) && std::strcmp(duk_get_string(ctx, -1), "Error") == 0;
    duk_pop(ctx);
    if (plain) what = "Error: " + what;
  }
  return out + ": " + what;
}

// Arguments of one protected call. Only plain data: Duktape unwinds errors
// with longjmp, so the unsafe functions below own no C++ objects.
struct CallArgs {
  const char* name;
  size_t name_len;
  const Json* state;
  const Json* request;
  const JsContext* jctx;
  bool returned;  // the handler returned (an error after this is in encoding)
};

// The nesting JSON.parse accepts in Duktape (DUK_USE_JSON_DEC_RECLIMIT), and
// the most ParseJson ever builds.
constexpr int kMaxJsonDepth = static_cast<int>(kMaxJsonDepthCap);

// Pushes v as the value JSON.parse would make of its text, without the text:
// the same doubles (a number's text round-trips to the same double), the same
// keys in the same order. Runs inside a protected call: no object with a
// destructor lives across a Duktape call here (nlohmann's iterators and the
// references it hands out are trivially destructible).
void PushJson(duk_context* ctx, const Json& v, int depth) {
  if (depth > kMaxJsonDepth) (void)duk_range_error(ctx, "the state or request is nested too deeply");
  // A C function is only promised a few value-stack slots; each level holds one.
  duk_require_stack(ctx, 2);
  switch (v.type()) {
    case Json::value_t::boolean: duk_push_boolean(ctx, v.get<bool>()); return;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float: duk_push_number(ctx, v.get<double>()); return;
    case Json::value_t::string: {
      const std::string& s = v.get_ref<const std::string&>();
      duk_push_lstring(ctx, s.data(), s.size());
      return;
    }
    case Json::value_t::array: {
      duk_push_array(ctx);
      duk_uarridx_t i = 0;
      for (auto it = v.begin(); it != v.end(); ++it) {
        PushJson(ctx, *it, depth + 1);
        duk_put_prop_index(ctx, -2, i++);
      }
      return;
    }
    case Json::value_t::object: {
      duk_push_object(ctx);
      for (auto it = v.begin(); it != v.end(); ++it) {
        PushJson(ctx, it.value(), depth + 1);
        const std::string& key = it.key();
        duk_put_prop_lstring(ctx, -2, key.data(), key.size());
      }
      return;
    }
    case Json::value_t::null:
    case Json::value_t::binary:
    case Json::value_t::discarded: break;
  }
  duk_push_null(ctx);
}

// [] -> [state_json, response_json]
duk_ret_t CallUnsafe(duk_context* ctx, void* udata) {
  auto* a = static_cast<CallArgs*>(udata);
  PushJson(ctx, *a->state, 0);                              // [state]
  duk_get_global_lstring(ctx, a->name, a->name_len);        // [state fn]
  duk_dup(ctx, 0);                                          // [state fn state]
  PushJson(ctx, *a->request, 0);                            // [state fn state request]
  duk_push_object(ctx);
  duk_push_lstring(ctx, a->jctx->command_id.data(), a->jctx->command_id.size());
  duk_put_prop_string(ctx, -2, "command_id");
  duk_push_number(ctx, static_cast<double>(a->jctx->version));
  duk_put_prop_string(ctx, -2, "version");
  duk_push_boolean(ctx, a->jctx->exists);
  duk_put_prop_string(ctx, -2, "exists");
  duk_push_number(ctx, static_cast<double>(a->jctx->now_ms));
  duk_put_prop_string(ctx, -2, "now");                     // [state fn state request ctx]
  duk_call(ctx, 3);                                         // [state ret]
  a->returned = true;
  if (duk_is_undefined(ctx, -1)) {
    duk_pop(ctx);
    duk_push_null(ctx);
  }
  duk_json_encode(ctx, 0);
  duk_json_encode(ctx, 1);
  return 2;
}

// Arguments of a CallJson protected call (plain data, as CallArgs).
struct CallJsonArgs {
  const char* name;
  size_t name_len;
  const char* arg;
  size_t arg_len;
  bool returned;
};

// [] -> [result_json]
duk_ret_t CallJsonUnsafe(duk_context* ctx, void* udata) {
  auto* a = static_cast<CallJsonArgs*>(udata);
  duk_get_global_lstring(ctx, a->name, a->name_len);  // [fn]
  duk_push_lstring(ctx, a->arg, a->arg_len);
  duk_json_decode(ctx, -1);                            // [fn arg]
  duk_call(ctx, 1);                                    // [ret]
  a->returned = true;
  if (duk_is_undefined(ctx, -1) || duk_is_function(ctx, -1)) {
    duk_pop(ctx);
    duk_push_null(ctx);
  }
  duk_json_encode(ctx, -1);
  return 1;
}

// "file:LINE: message" for an error a call threw, when the error knows its line.
std::string CallError(duk_context* ctx, duk_idx_t idx, const std::string& file) {
  idx = duk_normalize_index(ctx, idx);
  std::string where;
  if (duk_is_error(ctx, idx)) {
    duk_get_prop_string(ctx, idx, "lineNumber");
    if (duk_is_number(ctx, -1)) where = file + ":" + std::to_string(static_cast<long long>(duk_get_number(ctx, -1))) + ": ";
    duk_pop(ctx);
  }
  std::string what = ThrownMessage(ctx, idx);
  if (duk_is_error(ctx, idx)) {
    duk_get_prop_string(ctx, idx, "name");
    const bool plain = duk_is_string(ctx, -1) && std::strcmp(duk_get_string(ctx, -1), "Error") == 0;
    duk_pop(ctx);
    if (plain) what = "Error: " + what;
  }
  return where + what;
}

// [] -> [] ; the file's top level, then freezes the global object.
duk_ret_t FreezeGlobalUnsafe(duk_context* ctx, void*) {
  duk_eval_string_noresult(ctx, "Object.freeze(this);");
  return 0;
}

}  // namespace

}  // namespace sluice::handlers

extern "C" int sluice_duk_exec_timeout_check(void* udata) {
  auto* g = static_cast<sluice::handlers::Guard*>(udata);
  return g != nullptr && g->Expired() ? 1 : 0;
}

extern "C" double sluice_duk_date_now(void) { return sluice::handlers::t_now_ms; }

namespace sluice::handlers {

struct JsRuntime::Heap {
  Guard guard;
  duk_context* ctx = nullptr;
  ~Heap() {
    if (ctx != nullptr) duk_destroy_heap(ctx);
  }
};

JsRuntime::JsRuntime(std::string file, std::string source, JsLimits limits, JsPurpose purpose)
    : file_(std::move(file)), source_(std::move(source)), limits_(limits), purpose_(purpose) {}

JsRuntime::~JsRuntime() = default;

Result<std::unique_ptr<JsRuntime>> JsRuntime::Create(std::string file, std::string source, JsLimits limits,
                                                     JsPurpose purpose) {
  std::unique_ptr<JsRuntime> rt(new JsRuntime(std::move(file), std::move(source), limits, purpose));
  RETURN_IF_ERROR(rt->Load());
  return rt;
}

Status JsRuntime::Load() {
  heap_.reset();
  auto heap = std::make_unique<Heap>();
  heap->guard.limit = limits_.memory_bytes;
  heap->ctx = duk_create_heap(GuardedAlloc, GuardedRealloc, GuardedFree, &heap->guard, Fatal);
  if (heap->ctx == nullptr) {
    return InvalidArgument(file_ + ": the JavaScript heap could not be created within handler_memory (" +
                           std::to_string(limits_.memory_bytes) + " bytes)");
  }
  duk_context* ctx = heap->ctx;
  t_now_ms = 0;
  heap->guard.Arm(limits_.timeout);
  auto fail = [&](std::string what) {
    heap->guard.armed = false;
    if (heap->guard.timed_out) what += " (stopped at the handler_timeout of " + std::to_string(limits_.timeout.count()) + "ms)";
    if (heap->guard.refused) what += " (the heap reached handler_memory, " + std::to_string(limits_.memory_bytes) + " bytes)";
    return InvalidArgument(std::move(what));
  };
  if (duk_peval_lstring_noresult(ctx, kPrelude.data(), kPrelude.size()) != 0) {
    return fail(file_ + ": the handler prelude failed to run");
  }
  duk_push_lstring(ctx, file_.data(), file_.size());
  if (duk_pcompile_lstring_filename(ctx, 0, source_.data(), source_.size()) != 0) {
    return fail(LoadError(ctx, file_));
  }
  if (duk_pcall(ctx, 0) != DUK_EXEC_SUCCESS) return fail(LoadError(ctx, file_));
  duk_pop(ctx);

  // The commands: the global object's own enumerable functions not starting with '_'.
  std::vector<std::string> commands;
  std::string problems;
  duk_push_global_object(ctx);
  duk_enum(ctx, -1, DUK_ENUM_OWN_PROPERTIES_ONLY);
  while (duk_next(ctx, -1, 1)) {
    duk_size_t len = 0;
    const char* key = duk_get_lstring(ctx, -2, &len);
    const std::string name(key, len);
    if (duk_is_function(ctx, -1) && !name.empty() && name[0] != '_') {
      if (purpose_ == JsPurpose::kViewCode) {
        commands.push_back(name);
      } else if (!IsValidCommandName(name)) {
        problems += "\n" + file_ + ": function '" + name +
                    "' is not a valid command name ([a-z][a-z0-9_]*, at most 64 bytes); "
                    "start helper functions with '_'";
      } else if (name == "create" || name == "put" || name == "patch" || name == "delete") {
        problems += "\n" + file_ + ": function '" + name + "' would hide the built-in command of that name";
      } else {
        commands.push_back(name);
      }
    }
    duk_pop_2(ctx);
  }
  duk_pop_2(ctx);
  if (!problems.empty()) return fail(problems.substr(1));
  if (commands.empty()) {
    if (purpose_ == JsPurpose::kViewCode) {
      return fail(file_ + ": defines no function (view code defines top-level functions such as "
                          "`function transform(event) {...}`)");
    }
    return fail(file_ + ": defines no command (a command is a top-level function such as "
                        "`function deposit(state, request, ctx) {...}`)");
  }
  if (duk_safe_call(ctx, FreezeGlobalUnsafe, nullptr, 0, 1) != DUK_EXEC_SUCCESS) {
    return fail(file_ + ": could not freeze the global object: " + ThrownMessage(ctx, -1));
  }
  duk_pop(ctx);
  heap->guard.armed = false;
  std::sort(commands.begin(), commands.end());
  if (commands_.empty()) commands_ = std::move(commands);
  // Free what loading left behind, so that calls start from a clean count.
  duk_gc(ctx, 0);
  heap_ = std::move(heap);
  return Status::Ok();
}

bool JsRuntime::HasCommand(std::string_view name) const {
  return std::binary_search(commands_.begin(), commands_.end(), name);
}

JsOutcome JsRuntime::Call(std::string_view name, const Json& state, const Json& request, const JsContext& jctx) {
  JsOutcome out;
  if (!HasCommand(name)) {
    out.kind = JsOutcome::Kind::kRejected;
    out.message = "no handler for command '" + std::string(name) + "'";
    return out;
  }
  if (heap_ == nullptr) {
    // A rebuild failed earlier (it can only fail on limits the file met before).
    if (Status st = Load(); !st.ok()) {
      out.kind = JsOutcome::Kind::kOutOfMemory;
      out.message = "the handler could not be reloaded: " + st.message();
      return out;
    }
  }
  CallArgs args{name.data(), name.size(), &state, &request, &jctx, false};
  duk_context* ctx = heap_->ctx;
  Guard& guard = heap_->guard;
  t_now_ms = static_cast<double>(jctx.now_ms);
  guard.Arm(limits_.timeout);
  const duk_int_t rc = duk_safe_call(ctx, CallUnsafe, &args, 0, 2);
  guard.armed = false;
  if (guard.timed_out || guard.refused) {
    // Whatever the call caught or kept, the heap is rebuilt from the file.
    const bool timed_out = guard.timed_out;
    out.kind = timed_out ? JsOutcome::Kind::kTimeout : JsOutcome::Kind::kOutOfMemory;
    out.message = timed_out ? "the handler of '" + std::string(name) + "' ran longer than handler_timeout (" +
                                  std::to_string(limits_.timeout.count()) + "ms) and was stopped"
                            : "the handler of '" + std::string(name) + "' needed more than handler_memory (" +
                                  std::to_string(limits_.memory_bytes) + " bytes) and was stopped";
    ++rebuilds_;
    if (Status st = Load(); !st.ok()) heap_.reset();
    return out;
  }
  if (rc != DUK_EXEC_SUCCESS) {
    out.kind = args.returned ? JsOutcome::Kind::kInvalidResult : JsOutcome::Kind::kRejected;
    out.message = ThrownMessage(ctx, -2);  // the error, then padding up to nrets
    if (args.returned) out.message = "the state or response is not JSON-serialisable: " + out.message;
    duk_pop_2(ctx);
    return out;
  }
  duk_size_t state_len = 0;
  duk_size_t response_len = 0;
  const char* new_state = duk_get_lstring(ctx, -2, &state_len);
  const char* response = duk_get_lstring(ctx, -1, &response_len);
  auto parsed_state = ParseJson(std::string_view(new_state ? new_state : "null", new_state ? state_len : 4),
                                 limits_.max_json_depth);
  auto parsed_response = ParseJson(std::string_view(response ? response : "null", response ? response_len : 4),
                                    limits_.max_json_depth);
  duk_pop_2(ctx);
  if (!parsed_state.ok() || !parsed_response.ok() || !parsed_state->is_object()) {
    out.kind = JsOutcome::Kind::kInvalidResult;
    out.message = "the handler of '" + std::string(name) + "' left a state that is not a JSON object";
    if (!parsed_state.ok()) {
      out.message = "the handler of '" + std::string(name) + "' left a state that is not valid: " +
                    parsed_state.status().message();
    } else if (!parsed_response.ok()) {
      out.message = "the handler of '" + std::string(name) + "' returned a value that is not valid: " +
                    parsed_response.status().message();
    }
    return out;
  }
  out.kind = JsOutcome::Kind::kApplied;
  out.state = std::move(parsed_state).value();
  out.response = std::move(parsed_response).value();
  return out;
}

JsValueOutcome JsRuntime::CallJson(std::string_view name, std::string_view arg, int64_t now_ms) {
  JsValueOutcome out;
  if (!HasCommand(name)) {
    out.message = file_ + ": defines no function '" + std::string(name) + "'";
    return out;
  }
  if (heap_ == nullptr) {
    if (Status st = Load(); !st.ok()) {
      out.kind = JsOutcome::Kind::kOutOfMemory;
      out.message = file_ + " could not be reloaded: " + st.message();
      return out;
    }
  }
  CallJsonArgs args{name.data(), name.size(), arg.data(), arg.size(), false};
  duk_context* ctx = heap_->ctx;
  Guard& guard = heap_->guard;
  t_now_ms = static_cast<double>(now_ms);
  guard.Arm(limits_.timeout);
  const duk_int_t rc = duk_safe_call(ctx, CallJsonUnsafe, &args, 0, 1);
  guard.armed = false;
  if (guard.timed_out || guard.refused) {
    const bool timed_out = guard.timed_out;
    out.kind = timed_out ? JsOutcome::Kind::kTimeout : JsOutcome::Kind::kOutOfMemory;
    out.message = file_ + ": " + std::string(name) +
                  (timed_out ? "() ran longer than its time limit (" + std::to_string(limits_.timeout.count()) +
                                   "ms of CPU) and was stopped"
                             : "() needed more than its memory limit (" + std::to_string(limits_.memory_bytes) +
                                   " bytes) and was stopped");
    ++rebuilds_;
    if (Status st = Load(); !st.ok()) heap_.reset();
    return out;
  }
  if (rc != DUK_EXEC_SUCCESS) {
    out.kind = args.returned ? JsOutcome::Kind::kInvalidResult : JsOutcome::Kind::kRejected;
    out.message = CallError(ctx, -1, file_);
    if (args.returned) out.message = file_ + ": " + std::string(name) + "() returned a value JSON cannot encode: " + out.message;
    duk_pop(ctx);
    return out;
  }
  duk_size_t len = 0;
  const char* json = duk_get_lstring(ctx, -1, &len);
  out.kind = JsOutcome::Kind::kApplied;
  out.json.assign(json ? json : "null", json ? len : 4);
  duk_pop(ctx);
  return out;
}

}  // namespace sluice::handlers
