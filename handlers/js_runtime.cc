#include "handlers/js_runtime.h"

#include <js/Array.h>
#include <js/CallAndConstruct.h>
#include <js/CompilationAndEvaluation.h>
#include <js/Conversions.h>
#include <js/ErrorReport.h>
#include <js/Exception.h>
#include <js/GCAPI.h>
#include <js/GlobalObject.h>
#include <js/JSON.h>
#include <js/Promise.h>
#include <js/PropertyAndElement.h>
#include <js/Realm.h>
#include <js/SourceText.h>
#include <js/String.h>
#include <jsapi.h>
#include <jsfriendapi.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/names.h"
#include "handlers/js_thread_engine.h"
#include "handlers/js_values.h"

namespace sluice::handlers {
namespace {

const JSClass kGlobalClass = {"global", JSCLASS_GLOBAL_FLAGS, &JS::DefaultGlobalClassOps, nullptr, nullptr, nullptr};

// Runs before each file: what would make handlers non-deterministic.
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
  // What the garbage collector's timing could make observable.
  delete global.WeakRef;
  delete global.FinalizationRegistry;
})(globalThis);
)JS";

// lazy(object, name, text): makes object[name] the value of the JSON text,
// parsed when first read (CallJson's lazy members: what view code seldom
// reads costs no parse). It keeps its own JSON.parse and defineProperty, so
// that a file that replaces them changes nothing here.
constexpr std::string_view kLazyMember = R"JS(
(function () {
  'use strict';
  const parse = JSON.parse;
  const define = Object.defineProperty;
  return function lazy(object, name, text) {
    define(object, name, {
      configurable: true, enumerable: true,
      get() {
        const value = parse(text);
        define(object, name, {value: value, writable: true, enumerable: true, configurable: true});
        return value;
      },
      set(value) {
        define(object, name, {value: value, writable: true, enumerable: true, configurable: true});
      }
    });
  };
})()
)JS";

// many(fn, events, names, texts, times, now, settle, failed, blob, lazy):
// CallJsonMany's run in one call; `lazy` is kLazyMember's function. `events`
// is a JSON array of the calls' arguments, `names` one of the lazy members'
// names, `times` the Date of each call, which `now` (a native) sets. The
// lazy members' JSON texts are substrings of `blob`: `texts` is a flat JSON
// array of (start, length) in UTF-16 units per member per call (start -1:
// the member is null), which costs no escaping and no copy. After each call
// `settle` (a native) runs the promise jobs it queued, as a call alone does,
// before the next call. Returns an object with what call i returned at
// index i (promises and all; the caller turns them into JSON), or `failed`
// where it threw. Everything it uses is taken before the file runs, and fn
// is called with `this` null, as a call alone is (sloppy code sees the
// global object).
constexpr std::string_view kMany = R"JS(
(function () {
  'use strict';
  const parse = JSON.parse;
  const create = Object.create;
  const call = Function.prototype.call.bind(Function.prototype.call);
  const substring = Function.prototype.call.bind(String.prototype.substring);
  return function many(fn, events, names, texts, times, now, settle, failed, blob, lazy) {
    const list = parse(events);
    const members = parse(names);
    const spans = parse(texts);
    const at = parse(times);
    const m = members.length;
    const out = create(null);
    for (let i = 0; i < list.length; i++) {
      const event = list[i];
      for (let k = 0; k < m; k++) {
        const start = spans[2 * (i * m + k)];
        if (start < 0) {
          event[members[k]] = null;
        } else {
          lazy(event, members[k], substring(blob, start, start + spans[2 * (i * m + k) + 1]));
        }
      }
      now(at[i]);
      try {
        out[i] = call(fn, null, event);
        settle();
      } catch (e) {
        out[i] = failed;
      }
    }
    return out;
  };
})()
)JS";

// kMany's `settle`: the promise jobs queued so far, run now (a pending
// exception, or a stop at a limit, fails the call that queued them).
bool SettleNative(JSContext* cx, unsigned argc, JS::Value* vp) {
  JS::CallArgs args = JS::CallArgsFromVp(argc, vp);
  js::RunJobs(cx);
  if (JS_IsExceptionPending(cx)) return false;
  args.rval().setUndefined();
  return true;
}

// kMany's `now`: Date for the next call of the run.
bool SetNowNative(JSContext* cx, unsigned argc, JS::Value* vp) {
  (void)cx;
  JS::CallArgs args = JS::CallArgsFromVp(argc, vp);
  SetFixedNow(args.get(0).isNumber() ? args.get(0).toNumber() : 0);
  args.rval().setUndefined();
  return true;
}

// The object that evaluating `source` (one of the helpers above) gives.
bool HelperObject(JSContext* cx, const char* file, std::string_view source, JS::MutableHandleObject out) {
  JS::CompileOptions options(cx);
  options.setFileAndLine(file, 1);
  JS::SourceText<mozilla::Utf8Unit> text;
  JS::RootedValue value(cx);
  if (!text.init(cx, source.data(), source.size(), JS::SourceOwnership::Borrowed) ||
      !JS::Evaluate(cx, options, text, &value) || !value.isObject()) {
    return false;
  }
  out.set(&value.toObject());
  return true;
}

// A function object of a native.
bool NativeObject(JSContext* cx, JSNative native, unsigned args, const char* name, JS::MutableHandleObject out) {
  JSFunction* f = JS_NewFunction(cx, native, args, 0, name);
  if (f == nullptr) return false;
  out.set(JS_GetFunctionObject(f));
  return true;
}

// The deepest state or request a handler is given: what ParseJson ever
// builds (SpiderMonkey's JSON.parse has no limit of its own).
constexpr uint32_t kMaxJsonDepth = kMaxJsonDepthCap;

}  // namespace

struct JsRuntime::Heap {
  std::shared_ptr<Realm> realm;

  ~Heap() { Drop(); }

  // Gives the realm up: released now on its own thread, else left for that
  // thread to release (or already released, if the thread has exited).
  void Drop() {
    if (realm == nullptr) return;
    ThreadEngine* engine = ThreadEngine::IfStarted();
    if (engine != nullptr && realm->owner == engine->token()) {
      engine->Release(realm);
    } else {
      realm->abandoned.store(true, std::memory_order_release);
      realm->owner->abandoned_realms.store(true, std::memory_order_release);
    }
    realm.reset();
  }

  bool OnThisThread() const {
    ThreadEngine* engine = ThreadEngine::IfStarted();
    return realm != nullptr && engine != nullptr && realm->owner == engine->token();
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
  ThreadEngine* engine = ThreadEngine::Current();
  if (engine == nullptr) return InvalidArgument(file_ + ": the JavaScript engine (SpiderMonkey) could not be started");
  engine->SweepAbandoned();
  JSContext* cx = engine->cx();
  auto heap = std::make_unique<Heap>();
  heap->realm = engine->NewRealm(limits_.memory_bytes);
  Realm& realm = *heap->realm;

  JS::RealmOptions options;
  options.creationOptions().setNewCompartmentAndZone();
  JS::RootedObject global(cx, JS_NewGlobalObject(cx, &kGlobalClass, nullptr, JS::FireOnNewGlobalHook, options));
  if (global == nullptr) {
    JS_ClearPendingException(cx);
    return InvalidArgument(file_ + ": the JavaScript realm could not be created");
  }
  realm.global.emplace(cx, global);
  JSAutoRealm in_realm(cx, global);
  CallGuard guard(*engine, realm, limits_.timeout, 0);
  auto fail = [&](std::string what) {
    guard.Stop();
    JS_ClearPendingException(cx);
    if (guard.stopped_by_limit()) DropQueuedJobs(*engine);
    if (guard.timed_out()) what += " (stopped at the handler_timeout of " + std::to_string(limits_.timeout.count()) + "ms)";
    if (guard.out_of_memory()) what += " (the heap reached handler_memory, " + std::to_string(limits_.memory_bytes) + " bytes)";
    return InvalidArgument(std::move(what));
  };
  JS::RootedValue thrown(cx);
  if (!JS::InitRealmStandardClasses(cx) || !Evaluate(cx, "prelude.js", kPrelude)) {
    return fail(file_ + ": the handler prelude failed to run");
  }
  {
    // The helpers, made before the file runs (so the file cannot change what they use).
    JS::RootedObject lazy(cx), many(cx), set_now(cx), settle(cx);
    if (!HelperObject(cx, "lazy.js", kLazyMember, &lazy) || !HelperObject(cx, "many.js", kMany, &many) ||
        !NativeObject(cx, SetNowNative, 1, "now", &set_now) || !NativeObject(cx, SettleNative, 0, "settle", &settle)) {
      return fail(file_ + ": the handler prelude failed to run");
    }
    realm.lazy_member.emplace(cx, lazy);
    realm.many.emplace(cx, many);
    realm.set_now.emplace(cx, set_now);
    realm.settle.emplace(cx, settle);
  }
  // The top level's promise jobs run now, within its limits.
  if (!Evaluate(cx, file_.c_str(), source_) || (js::RunJobs(cx), JS_IsExceptionPending(cx))) {
    if (!TakeException(cx, &thrown)) return fail(file_ + ": the file's top level was stopped");
    return fail(file_ + ":" + [&] {
      const unsigned line = ErrorLine(cx, thrown);
      return line > 0 ? std::to_string(line) + ": " : std::string(" ");
    }() + ThrownMessage(cx, thrown, /*name_plain_error=*/true));
  }

  // The commands: the global object's own enumerable functions, and the
  // functions top-level `const` (or `let`) declarations hold, not starting
  // with '_'.
  JS::RootedValueVector found(cx);
  std::vector<std::string> found_names;
  std::string problems;
  auto consider = [&](JS::HandleObject holder) -> bool {
    JS::Rooted<JS::IdVector> ids(cx, JS::IdVector(cx));
    if (!JS_Enumerate(cx, holder, &ids)) return false;
    for (size_t i = 0; i < ids.length(); ++i) {
      if (!ids[i].isString()) continue;
      JS::RootedString key(cx, ids[i].toString());
      const std::string name = ToUtf8(cx, key);
      JS::RootedValue v(cx);
      if (!JS_GetPropertyById(cx, holder, ids[i], &v)) return false;
      const bool is_function = v.isObject() && JS_ObjectIsFunction(&v.toObject());
      if (!is_function || name.empty() || name[0] == '_') continue;
      if (purpose_ == JsPurpose::kHandlers && !IsValidCommandName(name)) {
        problems += "\n" + file_ + ": function '" + name +
                    "' is not a valid command name ([a-z][a-z0-9_]*, at most 64 bytes); "
                    "start helper functions with '_'";
        continue;
      }
      if (purpose_ == JsPurpose::kHandlers &&
          (name == "create" || name == "put" || name == "patch" || name == "delete")) {
        problems += "\n" + file_ + ": function '" + name + "' would hide the built-in command of that name";
        continue;
      }
      if (!found.append(v)) return false;
      found_names.push_back(name);
    }
    return true;
  };
  // Top-level `let` and class bindings live in the global lexical
  // environment, not on the global object: frozen too, so that they cannot
  // carry state between calls either.
  JS::RootedObject lexical(cx, JS_GlobalLexicalEnvironment(global));
  if (!consider(global) || (lexical != nullptr && !consider(lexical))) {
    return fail(file_ + ": could not list the file's functions");
  }
  if (lexical != nullptr && !JS_FreezeObject(cx, lexical)) return fail(file_ + ": could not freeze the top-level bindings");
  if (!problems.empty()) return fail(problems.substr(1));
  if (found_names.empty()) {
    if (purpose_ == JsPurpose::kViewCode) {
      return fail(file_ + ": defines no function (view code defines top-level functions such as "
                          "`function transform(event) {...}`)");
    }
    return fail(file_ + ": defines no command (a command is a top-level function such as "
                        "`function deposit(state, request, ctx) {...}`)");
  }
  std::vector<size_t> order(found_names.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return found_names[a] < found_names[b]; });
  std::vector<std::string> names;
  JS::RootedObject table(cx, JS::NewArrayObject(cx, order.size()));
  if (table == nullptr) return fail(file_ + ": could not list the file's functions");
  for (size_t i = 0; i < order.size(); ++i) {
    names.push_back(found_names[order[i]]);
    if (!JS_SetElement(cx, table, static_cast<uint32_t>(i), found[order[i]])) {
      return fail(file_ + ": could not list the file's functions");
    }
  }
  if (!Evaluate(cx, "freeze.js", "Object.freeze(globalThis);")) {
    JS::RootedValue why(cx);
    TakeException(cx, &why);
    return fail(file_ + ": could not freeze the global object: " + ThrownMessage(cx, why));
  }
  guard.Stop();
  if (guard.stopped_by_limit()) return fail(file_ + ": the file's top level was stopped");
  realm.functions.emplace(cx, table);
  realm.names = names;
  if (commands_.empty()) commands_ = std::move(names);
  heap_ = std::move(heap);
  return Status::Ok();
}

bool JsRuntime::HasCommand(std::string_view name) const {
  return std::binary_search(commands_.begin(), commands_.end(), name);
}

namespace {

// The function `name` of a loaded realm.
bool FunctionOf(JSContext* cx, const Realm& realm, std::string_view name, JS::MutableHandleValue fn) {
  auto it = std::lower_bound(realm.names.begin(), realm.names.end(), name);
  if (it == realm.names.end() || *it != name) return false;
  JS::RootedObject table(cx, *realm.functions);
  return JS_GetElement(cx, table, static_cast<uint32_t>(it - realm.names.begin()), fn);
}

}  // namespace

template <typename ArgsOf, typename Encode>
JsOutcome::Kind JsRuntime::CallFunction(Wording wording, std::string_view name, int64_t now_ms, ArgsOf&& args_of,
                                        Encode&& encode, std::string* message, bool many) {
  const bool command = wording == Wording::kCommand;
  // Who failed, as the message names it.
  auto who = [&] {
    return command ? "the handler of '" + std::string(name) + "'" : file_ + ": " + std::string(name) + "()";
  };
  if (heap_ == nullptr || !heap_->OnThisThread()) {
    // First call on this thread, or a rebuild that failed earlier (it can
    // only fail on limits the file met before).
    if (Status st = Load(); !st.ok()) {
      *message = (command ? std::string("the handler") : file_) + " could not be reloaded: " + st.message();
      return JsOutcome::Kind::kOutOfMemory;
    }
  }
  ThreadEngine& engine = *ThreadEngine::IfStarted();
  engine.SweepAbandoned();
  JSContext* cx = engine.cx();
  Realm& realm = *heap_->realm;
  bool returned = false;
  bool threw = false;
  bool timed_out = false;
  bool out_of_memory = false;
  // Everything that roots a JavaScript value of the call ends with this
  // block, so that a rebuild after a limit can collect the old realm. The
  // arguments and the result stay rooted until the heap was checked.
  {
    JS::RootedObject global(cx, *realm.global);
    JSAutoRealm in_realm(cx, global);
    CallGuard guard(engine, realm, limits_.timeout, now_ms);
    JS::RootedValue thrown(cx);
    JS::RootedValueVector args(cx);
    JS::RootedValue fn(cx);
    JS::RootedValue ret(cx);
    // With `many`, kMany is called with the function as its first argument.
    JS::RootedValue callee(cx);
    bool ok = FunctionOf(cx, realm, name, &fn) && args_of(cx, realm, &args);
    if (ok && many) {
      ok = args.length() > 0;
      if (ok) args[0].set(fn);
      callee.setObject(**realm.many);
    } else {
      callee.set(fn);
    }
    ok = ok && JS_CallFunctionValue(cx, nullptr, callee, args, &ret) && SettleValue(cx, &ret);
    if (ok) {
      returned = true;
      ok = encode(cx, &args, &ret);
    }
    if (!ok) threw = TakeException(cx, &thrown);
    if (ok && !CheckRealmMemory(cx, realm)) guard.MarkOutOfMemory();
    if (threw) *message = command ? ThrownMessage(cx, thrown) : LocatedMessage(cx, thrown, file_);
    guard.Stop();
    timed_out = guard.timed_out();
    out_of_memory = guard.out_of_memory();
  }
  if (timed_out || out_of_memory) {
    // Whatever the call caught or kept, the realm is rebuilt from the file.
    const std::string ms = std::to_string(limits_.timeout.count());
    const std::string limit =
        timed_out ? (command ? "handler_timeout (" + ms + "ms)" : "its time limit (" + ms + "ms of CPU)")
                  : (command ? "handler_memory (" : "its memory limit (") + std::to_string(limits_.memory_bytes) + " bytes)";
    *message = who() + (timed_out ? " ran longer than " : " needed more than ") + limit + " and was stopped";
    ++rebuilds_;
    DropQueuedJobs(engine);
    heap_.reset();
    // What the runaway call left is collected now, not during the next call.
    JS_GC(cx);
    if (Status st = Load(); !st.ok()) heap_.reset();
    return timed_out ? JsOutcome::Kind::kTimeout : JsOutcome::Kind::kOutOfMemory;
  }
  if (!returned || threw) {
    if (!threw) *message = command ? std::string("the call was stopped") : who() + " was stopped";
    if (returned) {
      *message = (command ? std::string("the state or response is not JSON-serialisable: ")
                          : who() + " returned a value JSON cannot encode: ") +
                 *message;
    }
    return returned ? JsOutcome::Kind::kInvalidResult : JsOutcome::Kind::kRejected;
  }
  return JsOutcome::Kind::kApplied;
}

JsOutcome JsRuntime::Call(std::string_view name, const Json& state, const Json& request, const JsContext& jctx) {
  JsOutcome out;
  if (!HasCommand(name)) {
    out.kind = JsOutcome::Kind::kRejected;
    out.message = "no handler for command '" + std::string(name) + "'";
    return out;
  }
  if (JsonDepth(state) > kMaxJsonDepth || JsonDepth(request) > kMaxJsonDepth) {
    out.kind = JsOutcome::Kind::kRejected;
    out.message = "the state or request is nested too deeply";
    return out;
  }
  const std::string state_text = state.dump(-1, ' ', false, Json::error_handler_t::replace);
  const std::string request_text = request.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::string new_state;
  std::string response;
  // (state, request, ctx); the state, changed in place, and the response come back.
  auto args_of = [&](JSContext* cx, const Realm&, JS::MutableHandleValueVector args) {
    if (!args.resize(3) || !ParseText(cx, state_text, args[0]) || !ParseText(cx, request_text, args[1])) return false;
    JS::RootedObject c(cx, JS_NewPlainObject(cx));
    JS::RootedString id(cx, JS_NewStringCopyUTF8N(cx, JS::UTF8Chars(jctx.command_id.data(), jctx.command_id.size())));
    if (c == nullptr || id == nullptr || !JS_DefineProperty(cx, c, "command_id", id, JSPROP_ENUMERATE) ||
        !JS_DefineProperty(cx, c, "version", static_cast<double>(jctx.version), JSPROP_ENUMERATE) ||
        !JS_DefineProperty(cx, c, "exists", jctx.exists, JSPROP_ENUMERATE) ||
        !JS_DefineProperty(cx, c, "now", static_cast<double>(jctx.now_ms), JSPROP_ENUMERATE)) {
      return false;
    }
    args[2].setObject(*c);
    return true;
  };
  auto encode = [&](JSContext* cx, JS::MutableHandleValueVector args, JS::MutableHandleValue ret) {
    if (ret.isUndefined()) ret.setNull();
    return Stringify(cx, args[0], &new_state) && Stringify(cx, ret, &response);
  };
  out.kind = CallFunction(Wording::kCommand, name, jctx.now_ms, args_of, encode, &out.message);
  if (out.kind != JsOutcome::Kind::kApplied) return out;
  auto parsed_state = ParseJson(new_state.empty() ? std::string_view("null") : std::string_view(new_state),
                                limits_.max_json_depth);
  auto parsed_response = ParseJson(response.empty() ? std::string_view("null") : std::string_view(response),
                                   limits_.max_json_depth);
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
  out.message.clear();
  out.state = std::move(parsed_state).value();
  out.response = std::move(parsed_response).value();
  return out;
}

JsValueOutcome JsRuntime::CallJson(std::string_view name, std::string_view arg, int64_t now_ms) {
  return CallJsonLazy(name, arg, {}, now_ms);
}

JsValueOutcome JsRuntime::CallJsonLazy(std::string_view name, std::string_view arg,
                                       std::span<const std::pair<std::string_view, std::string_view>> lazy,
                                       int64_t now_ms) {
  JsValueOutcome out;
  if (!HasCommand(name)) {
    out.message = file_ + ": defines no function '" + std::string(name) + "'";
    return out;
  }
  std::string json;
  auto args_of = [&](JSContext* cx, const Realm& realm, JS::MutableHandleValueVector args) {
    if (!args.resize(1) || !ParseText(cx, arg, args[0])) return false;
    if (lazy.empty()) return true;
    // Each lazy member: null when its text is empty, else parsed on first read.
    if (!args[0].isObject()) return false;
    JS::RootedObject object(cx, &args[0].toObject());
    JS::RootedValue helper(cx, JS::ObjectValue(**realm.lazy_member));
    for (const auto& [member, text] : lazy) {
      const std::string key(member);
      if (text.empty()) {
        if (!JS_SetProperty(cx, object, key.c_str(), JS::NullHandleValue)) return false;
        continue;
      }
      JS::RootedValueArray<3> lazy_args(cx);
      lazy_args[0].setObject(*object);
      JS::RootedString key_string(cx, JS_NewStringCopyN(cx, key.data(), key.size()));
      JS::RootedString text_string(cx, NewString(cx, text));
      if (key_string == nullptr || text_string == nullptr) return false;
      lazy_args[1].setString(key_string);
      lazy_args[2].setString(text_string);
      JS::RootedValue ignored(cx);
      if (!JS_CallFunctionValue(cx, nullptr, helper, lazy_args, &ignored)) return false;
    }
    return true;
  };
  // What JSON.stringify would leave out (undefined, a function, a symbol) is null.
  auto encode = [&](JSContext* cx, JS::MutableHandleValueVector, JS::MutableHandleValue ret) {
    if (ret.isUndefined() || ret.isSymbol() || (ret.isObject() && JS_ObjectIsFunction(&ret.toObject()))) {
      ret.setNull();
    }
    return Stringify(cx, ret, &json);
  };
  out.kind = CallFunction(Wording::kFunction, name, now_ms, args_of, encode, &out.message);
  if (out.kind == JsOutcome::Kind::kApplied) out.json = json.empty() ? "null" : std::move(json);
  return out;
}

std::vector<JsValueOutcome> JsRuntime::CallJsonMany(std::string_view name, std::span<const LazyArg> args) {
  std::vector<JsValueOutcome> out(args.size());
  // A run takes at most this share of the time limit (by the CPU time the
  // last calls of this function took), and at most kMaxRun calls. The first
  // call is alone: nothing is known of its cost yet.
  constexpr size_t kMaxRun = 256;
  const double budget_ns = std::chrono::duration<double, std::nano>(limits_.timeout).count() / 8;
  auto it = run_lengths_.find(name);
  if (it == run_lengths_.end()) it = run_lengths_.emplace(std::string(name), 1).first;
  size_t& length = it->second;
  size_t i = 0;
  while (i < args.size()) {
    const size_t run = std::min(args.size() - i, length);
    timespec before{}, after{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &before);
    std::vector<size_t> alone;
    if (run == 1) {
      alone.push_back(0);
    } else {
      alone = RunMany(name, args.subspan(i, run), out.data() + i);
      if (alone.size() < run) ++runs_;
    }
    if (run > 1) calls_again_ += alone.size();
    for (const size_t k : alone) {
      const LazyArg& a = args[i + k];
      out[i + k] = CallJsonLazy(name, a.arg, a.lazy, a.now_ms);
    }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &after);
    const double took_ns = (after.tv_sec - before.tv_sec) * 1e9 + (after.tv_nsec - before.tv_nsec);
    const double per_call = std::max(took_ns / static_cast<double>(run), 1.0);
    if (run > 1 && alone.size() == run) {
      length = std::max<size_t>(1, length / 2);  // stopped at a limit, or nothing came back
    } else if (per_call * static_cast<double>(length * 2) <= budget_ns) {
      length = std::min(kMaxRun, length * 2);
    } else if (per_call * static_cast<double>(length) > budget_ns) {
      length = std::clamp<size_t>(static_cast<size_t>(budget_ns / per_call), 1, kMaxRun);
    }
    i += run;
  }
  return out;
}

std::vector<size_t> JsRuntime::RunMany(std::string_view name, std::span<const LazyArg> args, JsValueOutcome* out) {
  std::vector<size_t> all(args.size());
  for (size_t k = 0; k < args.size(); ++k) all[k] = k;
  if (!HasCommand(name)) return all;
  const auto lazy_names = args[0].lazy;
  // The lazy texts, one after the other in `blob`, each at its offset in
  // UTF-16 units. A text JS_NewStringCopyUTF8N refuses fails a call alone:
  // so it must here.
  std::string events = "[", names = "[", texts = "[", times = "[", blob;
  size_t units = 0;
  for (size_t m = 0; m < lazy_names.size(); ++m) {
    if (m > 0) names += ',';
    AppendJsonString(names, lazy_names[m].first);
  }
  names += ']';
  for (size_t k = 0; k < args.size(); ++k) {
    const LazyArg& a = args[k];
    if (a.lazy.size() != lazy_names.size()) return all;
    if (k > 0) {
      events += ',';
      times += ',';
    }
    events += a.arg;
    times += std::to_string(a.now_ms);
    for (size_t m = 0; m < a.lazy.size(); ++m) {
      if (a.lazy[m].first != lazy_names[m].first) return all;
      const std::string_view text = a.lazy[m].second;
      if (texts.size() > 1) texts += ',';
      if (text.empty()) {
        texts += "-1,0";
        continue;
      }
      const std::optional<size_t> length = Utf16Length(text);
      if (!length) return all;
      texts += std::to_string(units) + "," + std::to_string(*length);
      units += *length;
      blob += text;
    }
  }
  events += ']';
  texts += ']';
  times += ']';
  // What each call returned, as CallJsonLazy would encode it; nullopt: call it alone.
  std::vector<std::optional<std::string>> answers(args.size());
  auto args_of = [&](JSContext* cx, const Realm& realm, JS::MutableHandleValueVector v) {
    if (!v.resize(10)) return false;
    const std::string_view parts[] = {events, names, texts, times};
    for (size_t p = 0; p < 4; ++p) {
      JSString* s = NewString(cx, parts[p]);
      if (s == nullptr) return false;
      v[p + 1].setString(s);
    }
    v[5].setObject(**realm.set_now);
    v[6].setObject(**realm.settle);
    JSObject* failed = JS_NewPlainObject(cx);
    if (failed == nullptr) return false;
    v[7].setObject(*failed);
    JSString* all_texts = NewString(cx, blob);
    if (all_texts == nullptr) return false;
    v[8].setString(all_texts);
    v[9].setObject(**realm.lazy_member);
    return true;
  };
  auto encode = [&](JSContext* cx, JS::MutableHandleValueVector v, JS::MutableHandleValue ret) {
    if (!ret.isObject()) return true;  // answers stay empty: every call alone
    JS::RootedObject results(cx, &ret.toObject());
    JS::RootedObject failed(cx, &v[7].toObject());
    JS::RootedValue r(cx);
    for (size_t k = 0; k < args.size(); ++k) {
      if (!JS_GetElement(cx, results, static_cast<uint32_t>(k), &r)) return false;
      if (r.isObject() && &r.toObject() == failed) continue;
      if (r.isObject()) {
        JS::RootedObject obj(cx, &r.toObject());
        if (JS::IsPromiseObject(obj)) {
          // Settled by its jobs (kMany's settle); rejected or pending: alone, for the message.
          if (JS::GetPromiseState(obj) != JS::PromiseState::Fulfilled) continue;
          r.set(JS::GetPromiseResult(obj));
        }
      }
      if (r.isUndefined() || r.isSymbol() || (r.isObject() && JS_ObjectIsFunction(&r.toObject()))) {
        answers[k] = "null";
        continue;
      }
      // A toJSON sees the Date of its own call.
      SetFixedNow(static_cast<double>(args[k].now_ms));
      std::string text;
      if (!Stringify(cx, &r, &text)) {
        JS_ClearPendingException(cx);  // a cycle, a BigInt: alone, for the message
        continue;
      }
      answers[k] = text.empty() ? "null" : std::move(text);
    }
    return true;
  };
  std::string message;
  if (CallFunction(Wording::kFunction, name, args[0].now_ms, args_of, encode, &message, /*many=*/true) !=
      JsOutcome::Kind::kApplied) {
    return all;
  }
  std::vector<size_t> alone;
  for (size_t k = 0; k < args.size(); ++k) {
    if (!answers[k]) {
      alone.push_back(k);
      continue;
    }
    out[k].kind = JsOutcome::Kind::kApplied;
    out[k].json = std::move(*answers[k]);
    out[k].message.clear();
  }
  return alone;
}

}  // namespace sluice::handlers
