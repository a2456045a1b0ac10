// JsRuntime: one entity type's handler file (or one sink's view code) loaded
// into its own SpiderMonkey 102 realm, with a per-call CPU-time limit and a
// memory limit (DESIGN 3.3, docs/handlers.md). Handlers may use ES2020.
//
// A handler file defines one top-level function per command:
//
//   function deposit(state, request, ctx) { state.balance += request.amount; return {balance: state.balance}; }
//
// (or `const deposit = (state, request, ctx) => {...}`). Call() runs one
// command: `state` is a copy of the entity's current state that the function
// changes in place, `request` the command's JSON body and `ctx` =
// {command_id, version, exists, now}. The new state and the return value (the
// response; an async function's settled value) come back as JSON. A thrown
// value rejects the command. Functions whose names start with '_' are
// private helpers, not commands.
//
// Determinism: Date.now() and `new Date()` return ctx.now (the batch's fixed
// timestamp), local time is UTC, Math.random() throws, and the global object
// and the top-level `let`/`const`/class bindings are frozen after the file's
// top level ran, so a handler cannot keep state in a global between calls.
//
// Limits: a call that uses more than `timeout` of CPU time on its thread is
// interrupted (a process-wide watchdog thread reads the calling thread's CPU
// clock and requests SpiderMonkey's interrupt; the interrupt cannot be caught
// by try/catch); a call whose realm's garbage-collected heap outgrows
// `memory_bytes` is stopped (see docs/handlers.md for what is counted).
// Either way the call reports kTimeout or kOutOfMemory and the realm is thrown
// away and rebuilt from the file, so nothing a runaway call left behind
// survives it.
//
// Threads: a JsRuntime is used by one thread at a time, but that thread may
// change. SpiderMonkey has one JSContext per thread (made at the thread's
// first runtime, destroyed when the thread exits) and a realm belongs to the
// context that made it: a runtime called on another thread than the one that
// built its realm rebuilds it there (so Create() on one thread and Call() on
// another costs one extra load), and a runtime destroyed on another thread
// leaves its realm for the owning thread to release. Separate runtimes share
// nothing but the thread's context.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/json.h"
#include "core/status.h"

namespace sluice::handlers {

struct JsLimits {
  std::chrono::milliseconds timeout{50};  // CPU time per call, and for the file's top level
  size_t memory_bytes = size_t{16} << 20;  // the realm's GC heap, built-ins included (docs/handlers.md)
  uint32_t max_json_depth = 100;            // of the state and response a call returns (core/json.h)
};

// What a file holds, which decides what its top-level functions must be.
enum class JsPurpose : uint8_t {
  kHandlers,  // command handlers: each function a command name, never a built-in command's
  kViewCode,  // view code (DESIGN 4.4): functions the sink calls by name (filter, transform, ...)
};

// The third argument of every handler call.
struct JsContext {
  std::string command_id;
  uint64_t version = 0;  // the entity's version before this command (0: no events yet)
  bool exists = false;   // false before the first command and after a delete
  int64_t now_ms = 0;    // the batch's fixed timestamp, milliseconds since the Unix epoch
};

struct JsOutcome {
  enum class Kind {
    kApplied,        // state and response hold the result
    kRejected,       // the handler threw; message is what it threw
    kTimeout,        // stopped at the time limit
    kOutOfMemory,    // stopped at the memory limit
    kInvalidResult,  // the state or response could not be turned into JSON (e.g. a cycle)
  };
  Kind kind = Kind::kRejected;
  Json state;
  Json response;
  std::string message;
};

// What CallJson returned: kApplied with the value as JSON text ("null" for
// undefined), or another kind with a message ("file:LINE: Error: ..." for a
// thrown error).
struct JsValueOutcome {
  JsOutcome::Kind kind = JsOutcome::Kind::kRejected;
  std::string json;
  std::string message;
};

class JsRuntime {
 public:
  // Compiles `source` (called `file` in messages: "file:LINE: SyntaxError: ...")
  // and runs its top level under `limits`. InvalidArgument when the file does
  // not compile, throws at its top level, runs out of time or memory, or
  // defines no command.
  // A file of view code may define any top-level functions, and must define one.
  static Result<std::unique_ptr<JsRuntime>> Create(std::string file, std::string source, JsLimits limits,
                                                   JsPurpose purpose = JsPurpose::kHandlers);

  ~JsRuntime();
  JsRuntime(const JsRuntime&) = delete;
  JsRuntime& operator=(const JsRuntime&) = delete;

  // The command names the file defines, sorted.
  const std::vector<std::string>& commands() const { return commands_; }
  bool HasCommand(std::string_view name) const;

  // Runs command `name` (one of commands()). `state` must be a JSON object.
  JsOutcome Call(std::string_view name, const Json& state, const Json& request, const JsContext& ctx);

  // Calls function `name` (one of commands()) with one argument, the value
  // of the JSON text `arg` (which the caller built, so it is valid JSON), with
  // Date at `now_ms`; the same limits as Call(). A returned value that JSON
  // cannot encode (a cycle, a BigInt) is kInvalidResult; undefined, a
  // function or a symbol come back as "null".
  JsValueOutcome CallJson(std::string_view name, std::string_view arg, int64_t now_ms);
  // The same, where `arg` is a JSON object and each (member, text) of `lazy`
  // is one more member of it: the value of the JSON text, parsed only when
  // the function first reads it (null when the text is empty). What view
  // code seldom reads (the request, the response, the state before) then
  // costs no parse.
  JsValueOutcome CallJsonLazy(std::string_view name, std::string_view arg,
                              std::span<const std::pair<std::string_view, std::string_view>> lazy, int64_t now_ms);

  // One call of CallJsonMany: CallJsonLazy's arguments.
  struct LazyArg {
    std::string_view arg;
    std::span<const std::pair<std::string_view, std::string_view>> lazy;
    int64_t now_ms = 0;
  };
  // CallJsonLazy on each of `args`, in order, with what each returns at the
  // same index, in as few entries into JavaScript as the limits allow: a run
  // of calls is one call of a helper that loops over them under the time
  // and memory limits of ONE call, each call with its own Date and `this`
  // null, the promise jobs it queued run before the next call, and a
  // promise it returned settled by them. A function's first call is alone;
  // its runs then grow while they stay within an eighth of the time limit
  // by the CPU time its calls took. A call that throws, returns a promise
  // that rejects or stays pending, or returns what JSON cannot encode, a
  // call whose lazy texts are not UTF-8, and every call of a run stopped at
  // a limit, is made again alone (CallJsonLazy), so its outcome and message
  // are CallJsonLazy's; code that keeps state in globals then sees that
  // argument twice. Every call's lazy members must have the names of the
  // first's, in the same order (else each is called alone).
  std::vector<JsValueOutcome> CallJsonMany(std::string_view name, std::span<const LazyArg> args);

  // Realms rebuilt after a limit was hit (for tests and stats).
  uint64_t rebuilds() const { return rebuilds_; }
  // CallJsonMany: runs answered in one entry, and calls of runs made again alone.
  uint64_t runs() const { return runs_; }
  uint64_t calls_again() const { return calls_again_; }

 private:
  struct Heap;
  JsRuntime(std::string file, std::string source, JsLimits limits, JsPurpose purpose);
  // Builds a fresh realm from the file on the calling thread; fills
  // commands_ the first time.
  Status Load();
  // Whose words a call's failure is told in: Call()'s (the handler of a
  // command, handler_timeout) or CallJson()'s ("file: name()", file:LINE).
  enum class Wording : uint8_t { kCommand, kFunction };
  // The one way Call() and CallJsonLazy() run a function of the file, and so
  // the one place the limits are enforced (js_runtime.cc): loads the realm on
  // the calling thread if need be, has `args_of` build the arguments, calls
  // function `name` with Date at `now_ms` under limits_, and has `encode` turn
  // what it returned into text; a call stopped at a limit rebuilds the realm.
  // Returns the outcome's kind; `message` says why when it is not kApplied.
  // With `many`, what is called is kMany (CallJsonMany's run), with the
  // function as its first argument (args_of leaves that one to it).
  template <typename ArgsOf, typename Encode>
  JsOutcome::Kind CallFunction(Wording wording, std::string_view name, int64_t now_ms, ArgsOf&& args_of,
                               Encode&& encode, std::string* message, bool many = false);
  // One run of CallJsonMany: every call of `args` in one call of kMany;
  // fills out[i] for the calls it could answer, and returns which it could not.
  std::vector<size_t> RunMany(std::string_view name, std::span<const LazyArg> args, JsValueOutcome* out);

  const std::string file_;
  const std::string source_;
  const JsLimits limits_;
  const JsPurpose purpose_;
  std::unique_ptr<Heap> heap_;
  std::vector<std::string> commands_;
  std::map<std::string, size_t, std::less<>> run_lengths_;  // CallJsonMany's calls per run, per function
  uint64_t runs_ = 0, calls_again_ = 0;  // CallJsonMany's calls per run, adapted to the time each took
  uint64_t rebuilds_ = 0;
};

}  // namespace sluice::handlers
