#include "connectors/redis/redis_sink.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <charconv>
#include <exception>
#include <functional>
#include <optional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "connectors/redis/key_template.h"
#include "connectors/redis/redis_url.h"
#include "connectors/redis/reply_error.h"
#include "connectors/redis/view_value.h"
#include "core/json.h"

namespace sluice::connectors::redis {
namespace {

// The version check and write of a run of events, atomic per call because
// Redis runs a script alone. One call carries up to kEventsPerCall events:
// the per-call cost of EVALSHA (and of a round of RESP parsing) is then
// shared.
//   ARGV[1] 'j' (json string) or 'h' (hash)   ARGV[2] value ttl in ms, '0': none
//   ARGV[3] tombstone ttl in ms, '0': none     ARGV[4] the tombstone key suffix
//   ARGV[5] the guard: '>' writes a newer version only (Apply), '=' also the
//           same version (Repair kNotOlder), '!' any version (Repair kAny,
//           where a delete of version 0 removes the value and the tombstone)
//   json: KEYS = one value key per event; then per event in ARGV its version,
//         or minus its version for a delete, and the value unless a delete.
//         The fewer arguments the cheaper the call: Redis turns each into a
//         Lua string before the script runs. A tombstone key is the value
//         key plus the suffix, built only for the keys that need one.
//   hash: KEYS = per event its value key, then its tombstone key; then per
//         event in ARGV its version, '1' for a delete else '0', n, and n
//         field/value arguments.
// Returns one element per event: 1 applied, 0 stale (the view holds this
// version or a newer one, in the value or in the tombstone), or an error for
// that event alone (a key of another type). Such a key is never written. Only
// a failure of the server (OOM, a replica turned read-only) makes the whole
// call fail; what the call wrote before it stays, as in any retry.
//
// json runs the whole call as a handful of commands instead of two or three
// per event: one MGET of every value key; for the keys without a value, one
// EXISTS (a key of another type: MGET gives nil for it, EXISTS counts it, and
// only then is each such key looked at alone) and one MGET of their
// tombstones; the decisions in event order on those versions; then the final
// state of each key written: one DEL (values of deleted entities, tombstones
// of re-created ones) and one MSET (values and tombstones), or a SET with PX
// per key when a TTL is set. The rule "a value exists => no tombstone" holds
// after every call, so a value key that exists means its tombstone is absent.
// hash keeps one HGET + GET per event (HSET goes in slices of 200 arguments,
// far below Lua's stack limit for unpack).
constexpr std::string_view kVersionCheckScript = R"lua(
local fmt, ttl, tttl, suffix, guard = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local wrongtype = {err = 'WRONGTYPE Operation against a key holding the wrong kind of value'}
local out = {}
local a = 6
local function kept(v, cur)
  if guard == '>' then return v <= cur end
  if guard == '=' then return v < cur end
  return false
end
if fmt == 'j' then
  local n = #KEYS
  local vkeys, ver, vers, del, val = KEYS, {}, {}, {}, {}  -- vkeys: the value keys, one per event
  for e = 1, n do
    local v = ARGV[a]
    if string.byte(v, 1) == 45 then
      del[e] = true
      vers[e] = string.sub(v, 2)
      a = a + 1
    else
      del[e] = false
      vers[e] = v
      val[e] = ARGV[a + 1]
      a = a + 2
    end
    ver[e] = tonumber(vers[e])
  end
  local got = redis.call('MGET', unpack(vkeys))
  local cur, hasval, hastomb, bad = {}, {}, {}, {}
  local mkeys, mtombs = {}, {}
  for e = 1, n do
    local k = vkeys[e]
    if cur[k] == nil then
      local s = got[e]
      if s then
        cur[k] = tonumber(string.match(s, '^{"_version":(%d+)')) or 0
        hasval[k] = true
      else
        cur[k] = 0
        mkeys[#mkeys + 1] = k
        mtombs[#mtombs + 1] = k .. suffix
      end
    end
  end
  if #mkeys > 0 then
    if redis.call('EXISTS', unpack(mkeys)) > 0 then
      for i = 1, #mkeys do
        if redis.call('EXISTS', mkeys[i]) == 1 then bad[mkeys[i]] = true end
      end
    end
    local t = redis.call('MGET', unpack(mtombs))
    for i = 1, #mkeys do
      if t[i] then
        local tv = tonumber(t[i]) or 0
        if tv > cur[mkeys[i]] then cur[mkeys[i]] = tv end
        hastomb[mkeys[i]] = true
      end
    end
  end
  local last, order = {}, {}
  for e = 1, n do
    local k = vkeys[e]
    if bad[k] then
      out[e] = wrongtype
    elseif kept(ver[e], cur[k]) then
      out[e] = 0
    else
      cur[k] = ver[e]
      if last[k] == nil then order[#order + 1] = k end
      last[k] = e
      out[e] = 1
    end
  end
  local dels, sets = {}, {}
  local function put(key, value, px)
    if px ~= '0' then
      redis.call('SET', key, value, 'PX', px)
    else
      sets[#sets + 1] = key
      sets[#sets + 1] = value
    end
  end
  for i = 1, #order do
    local k = order[i]
    local e = last[k]
    local tomb = k .. suffix
    if del[e] then
      if hasval[k] then dels[#dels + 1] = k end
      if ver[e] == 0 and guard == '!' then
        dels[#dels + 1] = tomb
      else
        put(tomb, vers[e], tttl)
      end
    else
      if hastomb[k] or guard == '!' then dels[#dels + 1] = tomb end
      put(k, val[e], ttl)
    end
  end
  if #dels > 0 then redis.call('DEL', unpack(dels)) end
  if #sets > 0 then redis.call('MSET', unpack(sets)) end
  return out
end
for e = 1, #KEYS / 2 do
  local key, tomb = KEYS[2 * e - 1], KEYS[2 * e]
  local ver, del, n = ARGV[a], ARGV[a + 1] == '1', tonumber(ARGV[a + 2])
  local p = a + 3
  a = p + n
  local v = tonumber(ver)
  local cur, t, res = 0, false, nil
  local s = redis.pcall('HGET', key, '_version')
  if type(s) == 'table' then
    res = s
  else
    if s then cur = tonumber(s) or 0 end
    t = redis.pcall('GET', tomb)
    if type(t) == 'table' then res = t end
  end
  if res == nil then
    if t then
      local tv = tonumber(t) or 0
      if tv > cur then cur = tv end
    end
    if kept(v, cur) then
      res = 0
    elseif del then
      redis.call('DEL', key)
      if v == 0 and guard == '!' then
        redis.call('DEL', tomb)
      elseif tttl ~= '0' then
        redis.call('SET', tomb, ver, 'PX', tttl)
      else
        redis.call('SET', tomb, ver)
      end
      res = 1
    else
      redis.call('DEL', key)
      local last = a - 1
      local j = math.min(p + 199, last)
      redis.call('HSET', key, '_version', ver, unpack(ARGV, p, j))
      p = j + 1
      while p <= last do
        j = math.min(p + 199, last)
        redis.call('HSET', key, unpack(ARGV, p, j))
        p = j + 1
      end
      if ttl ~= '0' then redis.call('PEXPIRE', key, ttl) end
      if t then redis.call('DEL', tomb) end
      res = 1
    end
  end
  out[e] = res
end
return out
)lua";

// Events per EVALSHA: enough to share the call's cost, few enough that one
// call blocks Redis for well under a millisecond.
constexpr size_t kEventsPerCall = 100;
constexpr size_t kVerifyChunk = 1000;
// The script's ARGV[5] (see kVersionCheckScript).
constexpr const char* kGuardNewer = ">";
constexpr const char* kGuardNotOlder = "=";
constexpr const char* kGuardAny = "!";

struct ContextFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ContextPtr = std::unique_ptr<redisContext, ContextFree>;
using ReplyPtr = std::unique_ptr<redisReply, ReplyFree>;

// hiredis writes with write(2), so a peer that closed the connection raises
// SIGPIPE, which kills a process that has not ignored it. While a public
// method runs, SIGPIPE is blocked for this thread and any instance of it that
// our writes raised is consumed; EPIPE then surfaces as a connection error.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~SigpipeGuard() {
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        timespec zero{};
        sigtimedwait(&pipe_, nullptr, &zero);
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
  bool was_pending_ = false;
};

timeval ToTimeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

std::string_view ReplyText(const redisReply& r) { return {r.str, r.len}; }

using ErrorClass = ReplyErrorClass;

ErrorClass Classify(std::string_view err) { return ClassifyReplyError(err); }

class RedisSink final : public Sink {
 public:
  RedisSink(const config::SinkConfig& cfg, RedisEndpoint endpoint, KeyTemplate keys, RedisSinkOptions options)
      : cfg_(cfg),
        endpoint_(std::move(endpoint)),
        keys_(std::move(keys)),
        options_(options),
        hash_(cfg.redis.format == config::RedisSinkConfig::Format::kHash),
        ttl_ms_(std::to_string(std::max<int64_t>(0, cfg.redis.ttl.count()))),
        tombstone_ttl_ms_(std::to_string(std::max<int64_t>(0, cfg.redis.tombstone_ttl.count()))),
        where_("sink '" + cfg.name + "' (redis " + endpoint_.Describe() + ")") {}

  const std::string& name() const override { return cfg_.name; }

  Capabilities capabilities() const override {
    Capabilities c;
    c.can_push = true;
    c.entity_checks = true;
    c.overwrite = true;
    return c;
  }

  Status Open() override {
    SigpipeGuard guard;
    try {
      RETURN_IF_ERROR(Connect());
      return PrepareShadowKeys();
    } catch (const std::exception& e) {
      ctx_.reset();
      return Internal(where_ + ": " + e.what());
    }
  }

  ApplyResult Apply(std::span<const ChangeEvent> events) override {
    SigpipeGuard guard;
    try {
      guard_ = kGuardNewer;
      return ApplyBatch(events);
    } catch (const std::exception& e) {
      ctx_.reset();
      return ApplyResult{Internal(where_ + ": " + e.what()), {}};
    }
  }

  Status Health() override {
    SigpipeGuard guard;
    try {
      if (!ctx_) return Connect();
      const char* argv[] = {"PING"};
      size_t lens[] = {4};
      Result<ReplyPtr> reply = Command(1, argv, lens);
      if (!reply.ok()) return reply.status();
      if ((*reply)->type == REDIS_REPLY_ERROR) return ServerError("PING", ReplyText(**reply));
      return Status::Ok();
    } catch (const std::exception& e) {
      ctx_.reset();
      return Internal(where_ + ": " + e.what());
    }
  }

  void Close() override { ctx_.reset(); }

  Status VerifyEntities(std::span<const EntitySnapshot> truth, std::vector<Difference>& differences) override {
    SigpipeGuard guard;
    try {
      return CheckEntities(truth, differences);
    } catch (const std::exception& e) {
      ctx_.reset();
      return Internal(where_ + ": verify: " + e.what());
    }
  }

  // The same script as Apply, with the guard relaxed (see kVersionCheckScript).
  ApplyResult Repair(std::span<const ChangeEvent> events, RepairGuard repair_guard) override {
    SigpipeGuard guard;
    try {
      guard_ = repair_guard == RepairGuard::kAny ? kGuardAny : kGuardNotOlder;
      return ApplyBatch(events);
    } catch (const std::exception& e) {
      ctx_.reset();
      return ApplyResult{Internal(where_ + ": " + e.what()), {}};
    }
  }

  Status Verify(const std::vector<EntitySnapshot>& truth, std::vector<Difference>& differences) override {
    SigpipeGuard guard;
    try {
      return VerifyAll(truth, differences);
    } catch (const std::exception& e) {
      ctx_.reset();
      return Internal(where_ + ": verify: " + e.what());
    }
  }

  // The shadow writes the same keys under a prefix (ShadowKeyPrefix), so it
  // never touches a live key and the two SCAN patterns never meet.
  Result<std::unique_ptr<Sink>> MakeRebuildShadow() const override {
    if (keys_.literal_prefix().empty()) {
      return FailedPrecondition(where_ + ": cannot be rebuilt: the key template '" + cfg_.redis.key +
                                "' starts with {id}, so no prefix keeps the rebuilt keys apart from the live ones; "
                                "start the template with a literal such as '{type}:', or use `sluice rewind --sink " +
                                cfg_.name + " --to beginning`");
    }
    const std::string prefix = ShadowKeyPrefix(keys_.literal_prefix());
    config::SinkConfig shadow_cfg = cfg_;
    shadow_cfg.redis.key = prefix + cfg_.redis.key;
    ASSIGN_OR_RETURN(KeyTemplate keys, KeyTemplate::Parse(shadow_cfg.redis.key, cfg_.entity));
    auto shadow = std::make_unique<RedisSink>(shadow_cfg, endpoint_, std::move(keys), options_);
    shadow->live_keys_ = keys_;
    shadow->shadow_prefix_ = prefix;
    shadow->where_ = where_ + " (rebuild, keys " + prefix + "...)";
    return std::unique_ptr<Sink>(std::move(shadow));
  }

  // Runs while the live sink is paused. First drops the live keys with no
  // rebuilt counterpart (the entity is gone, or the key is damage), then
  // RENAMEs every shadow key onto its live key: atomic per key, TTLs carried
  // over, but not for the view as a whole (see README.md).
  Status PromoteRebuildShadow() override {
    if (!live_keys_) return Sink::PromoteRebuildShadow();
    SigpipeGuard guard;
    try {
      if (!ctx_) RETURN_IF_ERROR(Connect());
      RETURN_IF_ERROR(PrepareShadowKeys());  // a replay of no events never opened it
      Status st = DropLiveKeysNotRebuilt();
      if (st.ok()) st = RenameShadowKeysOntoLive();
      if (!st.ok()) {
        return Status(st.code(), st.message() + " (the switch-over stopped part way: keys already renamed hold the "
                                                "rebuilt data, the others the old data, both at versions that only "
                                                "move forward; run the rebuild again to finish)");
      }
      return Status::Ok();
    } catch (const std::exception& e) {
      ctx_.reset();
      return Internal(where_ + ": switching the rebuilt keys in: " + e.what());
    }
  }

 private:
  // One argument of a pipelined command: a constant that outlives the batch
  // (`fixed`) or a range of arena_, which may move while the batch is built.
  struct Arg {
    const char* fixed;
    size_t offset;
    size_t size;
  };
  // An event that goes to Redis: its index in the batch and its arguments.
  struct Sendable {
    size_t event;
    size_t first_arg;
    size_t arg_count;
  };
  // One EVALSHA: the sendable_ events [begin, end).
  struct Call {
    size_t begin;
    size_t end;
  };

  Status Connect() {
    ctx_.reset();
    ContextPtr c(redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port, ToTimeval(options_.connect_timeout)));
    if (!c) return Unavailable(where_ + ": cannot allocate a connection");
    if (c->err) return Unavailable(where_ + ": cannot connect: " + c->errstr);
    if (redisSetTimeout(c.get(), ToTimeval(options_.io_timeout)) != REDIS_OK) {
      return Unavailable(where_ + ": cannot set the io timeout: " + c->errstr);
    }
    redisEnableKeepAlive(c.get());  // best effort: a dead peer is still caught by the io timeout
    ctx_ = std::move(c);

    if (!endpoint_.password.empty()) {
      std::vector<std::string_view> args = {"AUTH"};
      if (!endpoint_.username.empty()) args.push_back(endpoint_.username);
      args.push_back(endpoint_.password);
      Result<ReplyPtr> reply = Command(args);
      if (!reply.ok()) return reply.status();
      if ((*reply)->type == REDIS_REPLY_ERROR) {
        std::string err(ReplyText(**reply));
        ctx_.reset();
        if (Classify(err) == ErrorClass::kUnavailable) return Unavailable(where_ + ": AUTH: " + err);
        return FailedPrecondition(where_ + ": redis refused AUTH (" + err +
                                  "): fix the user and password in the sink url, as "
                                  "redis://[user]:PASSWORD@host:port/db");
      }
    }
    if (endpoint_.db != 0) {
      std::string db = std::to_string(endpoint_.db);
      Result<ReplyPtr> reply = Command({"SELECT", db});
      if (!reply.ok()) return reply.status();
      if ((*reply)->type == REDIS_REPLY_ERROR) {
        std::string err(ReplyText(**reply));
        ctx_.reset();
        if (Classify(err) != ErrorClass::kEvent) return ServerError("SELECT", err);
        return FailedPrecondition(where_ + ": redis refused SELECT " + db + " (" + err +
                                  "): fix the database number in the sink url");
      }
    }
    // The name shows the sink in CLIENT LIST; a refusal (ACL) is harmless and ignored.
    Result<ReplyPtr> named = Command({"CLIENT", "SETNAME", "sluice:" + cfg_.name});
    if (!named.ok()) return named.status();
    return LoadScript();
  }

  Status LoadScript() {
    Result<ReplyPtr> reply = Command({"SCRIPT", "LOAD", kVersionCheckScript});
    if (!reply.ok()) return reply.status();
    const redisReply& r = **reply;
    if (r.type == REDIS_REPLY_ERROR) return ServerError("SCRIPT LOAD", ReplyText(r));
    if (r.type != REDIS_REPLY_STRING) {
      ctx_.reset();
      return Internal(where_ + ": SCRIPT LOAD gave no sha");
    }
    sha_.assign(r.str, r.len);
    return Status::Ok();
  }

  // A status for an error reply to a connection-level command; drops the
  // connection, since the caller gives up on it.
  Status ServerError(std::string_view command, std::string_view err) {
    ctx_.reset();
    std::string what = where_ + ": " + std::string(command) + ": " + std::string(err);
    if (Classify(err) == ErrorClass::kUnavailable) return Unavailable(what);
    return FailedPrecondition(what + ": " + MisconfigurationAdvice(err));
  }

  // The connection failed (refused, reset, timed out): forget it.
  Status ConnectionLost() {
    std::string why = ctx_ ? std::string(ctx_->errstr) : std::string("not connected");
    if (why == "Resource temporarily unavailable") {
      why = "no answer within the io timeout of " + std::to_string(options_.io_timeout.count()) + " ms";
    }
    ctx_.reset();
    return Unavailable(where_ + ": connection lost: " + why);
  }

  Result<ReplyPtr> Command(int argc, const char** argv, const size_t* lens) {
    if (!ctx_) return ConnectionLost();
    void* raw = redisCommandArgv(ctx_.get(), argc, argv, lens);
    if (raw == nullptr) return ConnectionLost();
    return ReplyPtr(static_cast<redisReply*>(raw));
  }

  Result<ReplyPtr> Command(const std::vector<std::string_view>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (auto a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    return Command(static_cast<int>(args.size()), argv.data(), lens.data());
  }

  void AddFixed(std::string_view s) { args_.push_back(Arg{s.data(), 0, s.size()}); }
  // Adds the arena text from `offset` to its end as one argument.
  void AddArena(size_t offset) { args_.push_back(Arg{nullptr, offset, arena_.size() - offset}); }

  // Appends the script arguments of one event to args_/arena_ in the
  // layout of its format (see kVersionCheckScript): the key(s) first, then
  // the rest. False with `reason` when the event cannot be written (nothing
  // appended).
  bool BuildEvent(const ChangeEvent& e, std::string& reason) {
    if (!e.entity_type.empty() && e.entity_type != cfg_.entity) {
      reason = "event of entity type '" + e.entity_type + "' given to a sink of type '" + cfg_.entity + "'";
      return false;
    }
    const size_t args_mark = args_.size();
    const size_t arena_mark = arena_.size();
    size_t off = arena_.size();
    keys_.AppendKey(arena_, e.entity_id);
    AddArena(off);
    if (!hash_) {
      off = arena_.size();
      if (e.deleted) arena_ += '-';
      AppendDigits(e.version);
      AddArena(off);
      if (e.deleted || AddJsonValue(e, reason)) return true;
      args_.resize(args_mark);
      arena_.resize(arena_mark);
      return false;
    }
    off = arena_.size();
    keys_.AppendKey(arena_, e.entity_id);
    arena_ += kTombstoneSuffix;
    AddArena(off);
    AppendNumber(e.version);
    AddFixed(e.deleted ? "1" : "0");
    const size_t count_arg = args_.size();
    AddFixed("0");
    if (!e.deleted) {
      if (!AddHashFields(e, reason)) {
        args_.resize(args_mark);
        arena_.resize(arena_mark);
        return false;
      }
      const size_t payload = args_.size() - count_arg - 1;
      if (payload == 1) {
        args_[count_arg] = Arg{"1", 0, 1};
      } else if (payload > 1) {
        AppendNumber(payload);
        args_[count_arg] = args_.back();
        args_.pop_back();
      }
    }
    return true;
  }

  // Appends n in decimal to the arena.
  void AppendDigits(uint64_t n) {
    char digits[24];
    auto [end, ec] = std::to_chars(digits, digits + sizeof digits, n);
    (void)ec;  // 24 chars always hold a uint64_t
    arena_.append(digits, end);
  }
  // Appends n in decimal to the arena as one argument.
  void AppendNumber(uint64_t n) {
    const size_t off = arena_.size();
    AppendDigits(n);
    AddArena(off);
  }

  bool AddJsonValue(const ChangeEvent& e, std::string& reason) {
    if (HasVersionMember(e.state)) {
      reason = "the state has a top-level member \"_version\", which the redis json format reserves";
      return false;
    }
    size_t off = arena_.size();
    if (!AppendVersionedJson(arena_, e.state, e.version)) {
      reason = e.state.empty() ? "a non-delete event without a state" : "the state is not a JSON object";
      return false;
    }
    AddArena(off);
    return true;
  }

  bool AddHashFields(const ChangeEvent& e, std::string& reason) {
    Result<Json> state = ParseJson(e.state);
    if (!state.ok()) {
      reason = "the state is not valid JSON: " + state.status().message();
      return false;
    }
    if (!HashFieldsOf(*state, cfg_.redis.fields, fields_, reason)) return false;
    for (const auto& [field, value] : fields_) {
      size_t off = arena_.size();
      arena_ += field;
      AddArena(off);
      off = arena_.size();
      arena_ += value;
      AddArena(off);
    }
    return true;
  }

  ApplyResult ApplyBatch(std::span<const ChangeEvent> events) {
    ApplyResult out;
    if (events.empty()) return out;
    if (!ctx_) {
      Status s = Connect();
      if (!s.ok()) return ApplyResult{s, {}};
    }
    out.results.assign(events.size(), EventResult{});

    // The first round sends each call as soon as its events are built, so
    // that Redis runs one call while the next is being built.
    arena_.clear();
    args_.clear();
    sendable_.clear();
    calls_.clear();
    size_t call_begin = 0;
    for (size_t i = 0; i < events.size(); ++i) {
      const size_t first = args_.size();
      std::string reason;
      if (BuildEvent(events[i], reason)) {
        sendable_.push_back(Sendable{i, first, args_.size() - first});
      } else {
        out.results[i] = EventResult{Outcome::kRejected, std::move(reason)};
      }
      const bool last = i + 1 == events.size();
      if (sendable_.size() > call_begin && (sendable_.size() - call_begin == kEventsPerCall || last)) {
        calls_.push_back(Call{call_begin, sendable_.size()});
        call_begin = sendable_.size();
        if (Status s = SendCall(calls_.back()); !s.ok()) return ApplyResult{s, {}};
      }
    }

    // Later rounds redo calls that met NOSCRIPT (the script cache was
    // flushed: load it again, once per batch) and, one event per call, the
    // events of a call that failed as a whole, to find the one to reject. A
    // redone event that had been applied before the failure comes back stale.
    bool reloaded = false;
    for (int round = 0; !calls_.empty(); ++round) {
      if (round == 4) {
        ctx_.reset();
        return ApplyResult{Internal(where_ + ": the batch did not settle after 4 rounds"), {}};
      }
      bool noscript = false;
      Status s;
      for (size_t c = 0; round > 0 && c < calls_.size() && s.ok(); ++c) s = SendCall(calls_[c]);
      if (s.ok()) s = ReadReplies(out.results, noscript);
      if (!s.ok()) return ApplyResult{s, {}};
      if (noscript) {
        if (reloaded) {
          ctx_.reset();
          return ApplyResult{Unavailable(where_ + ": the script vanished from redis twice in one batch"), {}};
        }
        s = LoadScript();
        if (!s.ok()) return ApplyResult{s, {}};
        reloaded = true;
      }
      calls_.swap(redo_);
    }
    return out;
  }

  // Queues one EVALSHA for the events of `call` and writes it to the socket
  // at once (without waiting for any reply).
  Status SendCall(const Call& call) {
    AssembleCall(call);
    if (redisAppendCommandArgv(ctx_.get(), static_cast<int>(argv_.size()), argv_.data(), lens_.data()) != REDIS_OK) {
      return ConnectionLost();
    }
    int done = 0;
    if (redisBufferWrite(ctx_.get(), &done) != REDIS_OK) return ConnectionLost();
    return Status::Ok();
  }

  // Reads one reply per call of calls_ into results; calls to make again go
  // to redo_.
  Status ReadReplies(std::vector<EventResult>& results, bool& noscript) {
    redo_.clear();
    for (const Call& call : calls_) {
      void* raw = nullptr;
      if (redisGetReply(ctx_.get(), &raw) != REDIS_OK || raw == nullptr) return ConnectionLost();
      ReplyPtr reply(static_cast<redisReply*>(raw));
      const size_t count = call.end - call.begin;
      if (reply->type == REDIS_REPLY_ARRAY && reply->elements == count) {
        for (size_t k = 0; k < count; ++k) {
          const redisReply& r = *reply->element[k];
          EventResult& result = results[sendable_[call.begin + k].event];
          if (r.type == REDIS_REPLY_INTEGER && (r.integer == 1 || r.integer == 0)) {
            result = EventResult{r.integer == 1 ? Outcome::kApplied : Outcome::kStale, {}};
          } else if (r.type != REDIS_REPLY_ERROR) {
            result = EventResult{Outcome::kRejected, "redis: unexpected reply from the version check script"};
          } else if (ErrorClass c = Classify(ReplyText(r)); c == ErrorClass::kEvent || c == ErrorClass::kNoScript) {
            result = EventResult{Outcome::kRejected, "redis: " + std::string(ReplyText(r))};
          } else {
            return ServerError("EVALSHA", ReplyText(r));  // the rest of the pipeline is unread: drop it
          }
        }
        continue;
      }
      std::string err = reply->type == REDIS_REPLY_ERROR ? std::string(ReplyText(*reply))
                                                          : "unexpected reply from the version check script";
      switch (reply->type == REDIS_REPLY_ERROR ? Classify(err) : ErrorClass::kEvent) {
        case ErrorClass::kNoScript:
          noscript = true;
          redo_.push_back(call);
          break;
        case ErrorClass::kEvent:
          if (count == 1) {
            results[sendable_[call.begin].event] = EventResult{Outcome::kRejected, "redis: " + err};
          } else {
            for (size_t k = call.begin; k < call.end; ++k) redo_.push_back(Call{k, k + 1});
          }
          break;
        case ErrorClass::kUnavailable:
        case ErrorClass::kMisconfigured:
          return ServerError("EVALSHA", err);
      }
    }
    return Status::Ok();
  }

  // Fills argv_/lens_ with one EVALSHA for the events of `call`.
  void AssembleCall(const Call& call) {
    argv_.clear();
    lens_.clear();
    auto push = [this](const Arg& a) {
      argv_.push_back(a.fixed ? a.fixed : arena_.data() + a.offset);
      lens_.push_back(a.size);
    };
    const size_t keys_per_event = hash_ ? 2 : 1;
    auto [end, ec] = std::to_chars(numkeys_, numkeys_ + sizeof numkeys_, keys_per_event * (call.end - call.begin));
    (void)ec;  // 24 chars always hold a size_t
    push(Arg{"EVALSHA", 0, 7});
    push(Arg{sha_.data(), 0, sha_.size()});
    push(Arg{numkeys_, 0, static_cast<size_t>(end - numkeys_)});
    for (size_t k = call.begin; k < call.end; ++k) {
      for (size_t i = 0; i < keys_per_event; ++i) push(args_[sendable_[k].first_arg + i]);
    }
    push(Arg{hash_ ? "h" : "j", 0, 1});
    push(Arg{ttl_ms_.data(), 0, ttl_ms_.size()});
    push(Arg{tombstone_ttl_ms_.data(), 0, tombstone_ttl_ms_.size()});
    push(Arg{kTombstoneSuffix.data(), 0, kTombstoneSuffix.size()});
    push(Arg{guard_, 0, 1});
    for (size_t k = call.begin; k < call.end; ++k) {
      const Sendable& ev = sendable_[k];
      for (size_t i = ev.first_arg + keys_per_event; i < ev.first_arg + ev.arg_count; ++i) push(args_[i]);
    }
  }

  // Calls page(keys) for every page of SCAN MATCH pattern (a key may come
  // twice, as SCAN promises only that a key present throughout comes once).
  Status ScanKeys(const std::string& pattern, const std::function<Status(const std::vector<std::string>&)>& page) {
    std::string cursor = "0";
    std::vector<std::string> keys;
    do {
      Result<ReplyPtr> reply = Command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
      if (!reply.ok()) return reply.status();
      const redisReply& r = **reply;
      if (r.type == REDIS_REPLY_ERROR) return ServerError("SCAN", ReplyText(r));
      if (r.type != REDIS_REPLY_ARRAY || r.elements != 2 || r.element[0]->type != REDIS_REPLY_STRING ||
          r.element[1]->type != REDIS_REPLY_ARRAY) {
        ctx_.reset();
        return Internal(where_ + ": unexpected reply to SCAN");
      }
      cursor.assign(r.element[0]->str, r.element[0]->len);
      keys.clear();
      const redisReply& found = *r.element[1];
      for (size_t k = 0; k < found.elements; ++k) keys.emplace_back(ReplyText(*found.element[k]));
      if (!keys.empty()) RETURN_IF_ERROR(page(keys));
    } while (cursor != "0");
    return Status::Ok();
  }

  // Sends one `command key [to]` per key in one pipeline (`to` maps a key to
  // the second argument, for RENAME) and returns the replies in order.
  Result<std::vector<ReplyPtr>> PipelinePerKey(const char* command, const std::vector<std::string>& keys,
                                               const std::function<std::string(const std::string&)>& to = {}) {
    std::vector<std::string> second;
    for (const std::string& key : keys) {
      if (to) second.push_back(to(key));
      const char* argv[] = {command, key.data(), to ? second.back().data() : nullptr};
      size_t lens[] = {std::char_traits<char>::length(command), key.size(), to ? second.back().size() : 0};
      if (redisAppendCommandArgv(ctx_.get(), to ? 3 : 2, argv, lens) != REDIS_OK) return ConnectionLost();
    }
    std::vector<ReplyPtr> replies;
    for (size_t i = 0; i < keys.size(); ++i) {
      void* raw = nullptr;
      if (redisGetReply(ctx_.get(), &raw) != REDIS_OK || raw == nullptr) return ConnectionLost();
      replies.emplace_back(static_cast<redisReply*>(raw));
    }
    return replies;
  }

  // A shadow's first Open(): deletes the keys an abandoned rebuild left.
  Status PrepareShadowKeys() {
    if (!live_keys_ || shadow_prepared_) return Status::Ok();
    RETURN_IF_ERROR(ScanKeys(keys_.ScanPattern(), [this](const std::vector<std::string>& page) -> Status {
      std::vector<std::string> ours;
      for (const std::string& key : page) {
        if (keys_.IsViewKey(key)) ours.push_back(key);
      }
      ASSIGN_OR_RETURN(auto replies, PipelinePerKey("DEL", ours));
      for (const ReplyPtr& r : replies) {
        if (r->type == REDIS_REPLY_ERROR) return ServerError("DEL", ReplyText(*r));
      }
      return Status::Ok();
    }));
    shadow_prepared_ = true;
    return Status::Ok();
  }

  // Deletes every live key of the view (value or tombstone, by the live
  // template) whose shadow key does not exist. Keys the template's pattern
  // matches but that are not of its form are left alone.
  Status DropLiveKeysNotRebuilt() {
    return ScanKeys(live_keys_->ScanPattern(), [this](const std::vector<std::string>& page) -> Status {
      std::vector<std::string> live;
      for (const std::string& key : page) {
        if (live_keys_->IsViewKey(key)) live.push_back(key);
      }
      std::vector<std::string> shadow;
      for (const std::string& key : live) shadow.push_back(shadow_prefix_ + key);
      ASSIGN_OR_RETURN(auto exists, PipelinePerKey("EXISTS", shadow));
      std::vector<std::string> orphans;
      for (size_t i = 0; i < live.size(); ++i) {
        if (exists[i]->type == REDIS_REPLY_ERROR) return ServerError("EXISTS", ReplyText(*exists[i]));
        if (exists[i]->type == REDIS_REPLY_INTEGER && exists[i]->integer == 0) orphans.push_back(live[i]);
      }
      ASSIGN_OR_RETURN(auto deleted, PipelinePerKey("DEL", orphans));
      for (const ReplyPtr& r : deleted) {
        if (r->type == REDIS_REPLY_ERROR) return ServerError("DEL", ReplyText(*r));
      }
      return Status::Ok();
    });
  }

  Status RenameShadowKeysOntoLive() {
    return ScanKeys(keys_.ScanPattern(), [this](const std::vector<std::string>& page) -> Status {
      std::vector<std::string> ours;
      for (const std::string& key : page) {
        if (keys_.IsViewKey(key)) ours.push_back(key);
      }
      ASSIGN_OR_RETURN(auto renamed, PipelinePerKey("RENAME", ours, [this](const std::string& key) {
                         return key.substr(shadow_prefix_.size());
                       }));
      for (const ReplyPtr& r : renamed) {
        // A key met twice by SCAN, or a tombstone that expired meanwhile, is gone already.
        if (r->type == REDIS_REPLY_ERROR && ReplyText(*r) != "ERR no such key") return ServerError("RENAME", ReplyText(*r));
      }
      return Status::Ok();
    });
  }

  Status VerifyAll(const std::vector<EntitySnapshot>& truth, std::vector<Difference>& differences) {
    if (!ctx_) RETURN_IF_ERROR(Connect());
    std::vector<std::string> keys;
    for (size_t begin = 0; begin < truth.size(); begin += kVerifyChunk) {
      const size_t end = std::min(truth.size(), begin + kVerifyChunk);
      keys.clear();
      for (size_t i = begin; i < end; ++i) {
        const EntitySnapshot& s = truth[i];
        keys.push_back(keys_.Key(s.entity_id));
        const char* cmd = s.deleted ? "EXISTS" : hash_ ? "HGETALL" : "GET";
        const char* argv[] = {cmd, keys.back().data()};
        size_t lens[] = {std::char_traits<char>::length(cmd), keys.back().size()};
        if (redisAppendCommandArgv(ctx_.get(), 2, argv, lens) != REDIS_OK) return ConnectionLost();
      }
      for (size_t i = begin; i < end; ++i) {
        void* raw = nullptr;
        if (redisGetReply(ctx_.get(), &raw) != REDIS_OK || raw == nullptr) return ConnectionLost();
        ReplyPtr reply(static_cast<redisReply*>(raw));
        const std::string& key = keys[i - begin];
        if (reply->type == REDIS_REPLY_ERROR) {
          std::string_view err = ReplyText(*reply);
          if (Classify(err) != ErrorClass::kEvent) return ServerError("verify", err);
          differences.push_back({Difference::Kind::kContentMismatch, truth[i].entity_id,
                                 "reading key '" + key + "' failed: " + std::string(err)});
          continue;
        }
        CompareOne(truth[i], key, *reply, differences);
      }
    }
    return FindExtraKeys(truth, differences);
  }

  // VerifyEntities: per entity, its value and its tombstone in one pipeline
  // (2 commands per entity, one round trip per kVerifyChunk entities).
  Status CheckEntities(std::span<const EntitySnapshot> truth, std::vector<Difference>& differences) {
    if (!ctx_) RETURN_IF_ERROR(Connect());
    std::vector<std::string> keys;
    for (size_t begin = 0; begin < truth.size(); begin += kVerifyChunk) {
      const size_t end = std::min(truth.size(), begin + kVerifyChunk);
      keys.clear();
      for (size_t i = begin; i < end; ++i) {
        keys.push_back(keys_.Key(truth[i].entity_id));
        const std::string tomb = keys.back() + std::string(kTombstoneSuffix);
        const char* cmd = hash_ ? "HGETALL" : "GET";
        const char* argv[] = {cmd, keys.back().data()};
        size_t lens[] = {std::char_traits<char>::length(cmd), keys.back().size()};
        if (redisAppendCommandArgv(ctx_.get(), 2, argv, lens) != REDIS_OK) return ConnectionLost();
        const char* targv[] = {"GET", tomb.data()};
        size_t tlens[] = {3, tomb.size()};
        if (redisAppendCommandArgv(ctx_.get(), 2, targv, tlens) != REDIS_OK) return ConnectionLost();
      }
      for (size_t i = begin; i < end; ++i) {
        ReplyPtr replies[2];
        for (ReplyPtr& r : replies) {
          void* raw = nullptr;
          if (redisGetReply(ctx_.get(), &raw) != REDIS_OK || raw == nullptr) return ConnectionLost();
          r.reset(static_cast<redisReply*>(raw));
        }
        const EntitySnapshot& s = truth[i];
        const std::string& key = keys[i - begin];
        const redisReply& value = *replies[0];
        const redisReply& tomb = *replies[1];
        if (value.type == REDIS_REPLY_ERROR || tomb.type == REDIS_REPLY_ERROR) {
          std::string_view err = ReplyText(value.type == REDIS_REPLY_ERROR ? value : tomb);
          if (Classify(err) != ErrorClass::kEvent) return ServerError("verify", err);
          differences.push_back({Difference::Kind::kContentMismatch, s.entity_id,
                                 "reading key '" + key + "' failed: " + std::string(err)});
          continue;
        }
        const bool absent = value.type == REDIS_REPLY_NIL || (value.type == REDIS_REPLY_ARRAY && value.elements == 0);
        if (s.deleted) {
          if (!absent) {
            differences.push_back({Difference::Kind::kExtra, s.entity_id,
                                   s.version == 0 ? "the view has key '" + key + "' of an entity storage has no events for"
                                                  : "storage deleted the entity at version " +
                                                        std::to_string(s.version) + " but the view still has key '" +
                                                        key + "'",
                                   ValueVersion(value)});
          }
          continue;
        }
        if (absent) {
          // With a ttl the key may have expired, as it is meant to.
          if (cfg_.redis.ttl.count() > 0) continue;
          std::optional<uint64_t> tomb_version;
          if (tomb.type == REDIS_REPLY_STRING) tomb_version = ParseVersion(ReplyText(tomb));
          differences.push_back({Difference::Kind::kMissing, s.entity_id,
                                 "the view has no key '" + key + "'" +
                                     (tomb_version ? " (its tombstone has version " + std::to_string(*tomb_version) + ")"
                                                   : std::string()) +
                                     "; storage has version " + std::to_string(s.version),
                                 tomb_version});
          continue;
        }
        if (hash_) {
          CompareHash(s, key, value, differences);
        } else {
          CompareJson(s, key, value, differences);
        }
      }
    }
    return Status::Ok();
  }

  static std::optional<uint64_t> ParseVersion(std::string_view text) {
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
    return v;
  }

  // The version a value key holds (json: its leading "_version" member, hash:
  // its _version field), or nullopt.
  std::optional<uint64_t> ValueVersion(const redisReply& value) const {
    if (value.type == REDIS_REPLY_STRING) {
      constexpr std::string_view kPrefix = "{\"_version\":";
      std::string_view text = ReplyText(value);
      if (!text.starts_with(kPrefix)) return std::nullopt;
      text.remove_prefix(kPrefix.size());
      return ParseVersion(text.substr(0, text.find_first_not_of("0123456789")));
    }
    if (value.type == REDIS_REPLY_ARRAY) {
      for (size_t k = 0; k + 1 < value.elements; k += 2) {
        if (ReplyText(*value.element[k]) == kVersionMember) return ParseVersion(ReplyText(*value.element[k + 1]));
      }
    }
    return std::nullopt;
  }

  void CompareOne(const EntitySnapshot& s, const std::string& key, const redisReply& reply,
                  std::vector<Difference>& differences) {
    if (s.deleted) {
      if (reply.type == REDIS_REPLY_INTEGER && reply.integer != 0) {
        differences.push_back({Difference::Kind::kExtra, s.entity_id,
                               "storage deleted the entity at version " + std::to_string(s.version) +
                                   " but the view still has key '" + key + "'"});
      }
      return;
    }
    const bool absent = reply.type == REDIS_REPLY_NIL || (reply.type == REDIS_REPLY_ARRAY && reply.elements == 0);
    if (absent) {
      differences.push_back({Difference::Kind::kMissing, s.entity_id,
                             "the view has no key '" + key + "'; storage has version " + std::to_string(s.version)});
      return;
    }
    if (hash_) {
      CompareHash(s, key, reply, differences);
    } else {
      CompareJson(s, key, reply, differences);
    }
  }

  static std::string VersionDetail(std::string_view view, uint64_t storage) {
    return "the view has version " + std::string(view) + ", storage has " + std::to_string(storage);
  }

  void CompareJson(const EntitySnapshot& s, const std::string& key, const redisReply& reply,
                   std::vector<Difference>& differences) {
    if (reply.type != REDIS_REPLY_STRING) {
      differences.push_back({Difference::Kind::kContentMismatch, s.entity_id, "key '" + key + "' is not a string"});
      return;
    }
    Json view = ParseJsonOrDiscarded(std::string_view(reply.str, reply.len));
    if (view.is_discarded() || !view.is_object()) {
      differences.push_back(
          {Difference::Kind::kContentMismatch, s.entity_id, "key '" + key + "' does not hold a JSON object"});
      return;
    }
    auto version = view.find(kVersionMember);
    if (version == view.end() || !version->is_number_unsigned()) {
      differences.push_back({Difference::Kind::kVersionMismatch, s.entity_id,
                             VersionDetail(version == view.end() ? "none" : version->dump(), s.version)});
      return;
    }
    if (version->get<uint64_t>() != s.version) {
      differences.push_back({Difference::Kind::kVersionMismatch, s.entity_id,
                             VersionDetail(std::to_string(version->get<uint64_t>()), s.version),
                             version->get<uint64_t>()});
      return;
    }
    view.erase(std::string(kVersionMember));
    Result<Json> expected = ParseJson(s.state);
    if (!expected.ok()) {
      differences.push_back({Difference::Kind::kContentMismatch, s.entity_id,
                             "storage's state is not valid JSON: " + expected.status().message(), s.version});
      return;
    }
    if (view != *expected) {
      Json patch = Json::diff(view, *expected);
      std::string where = patch.empty() ? "" : patch[0].value("path", "");
      differences.push_back({Difference::Kind::kContentMismatch, s.entity_id,
                             "same version " + std::to_string(s.version) + ", content differs at '" + where + "'",
                             s.version});
    }
  }

  void CompareHash(const EntitySnapshot& s, const std::string& key, const redisReply& reply,
                   std::vector<Difference>& differences) {
    if (reply.type != REDIS_REPLY_ARRAY || reply.elements % 2 != 0) {
      differences.push_back({Difference::Kind::kContentMismatch, s.entity_id, "key '" + key + "' is not a hash"});
      return;
    }
    std::map<std::string, std::string, std::less<>> view;
    for (size_t k = 0; k + 1 < reply.elements; k += 2) {
      view.emplace(ReplyText(*reply.element[k]), ReplyText(*reply.element[k + 1]));
    }
    auto version = view.find(kVersionMember);
    if (version == view.end()) {
      differences.push_back({Difference::Kind::kVersionMismatch, s.entity_id, VersionDetail("none", s.version)});
      return;
    }
    uint64_t v = 0;
    const std::string& vt = version->second;
    auto [end, ec] = std::from_chars(vt.data(), vt.data() + vt.size(), v);
    if (ec != std::errc() || end != vt.data() + vt.size() || v != s.version) {
      const bool parsed = ec == std::errc() && end == vt.data() + vt.size();
      differences.push_back({Difference::Kind::kVersionMismatch, s.entity_id, VersionDetail(vt, s.version),
                             parsed ? std::optional<uint64_t>(v) : std::nullopt});
      return;
    }
    view.erase(version);
    Result<Json> state = ParseJson(s.state);
    std::string reason;
    HashFields fields;
    if (!state.ok() || !HashFieldsOf(*state, cfg_.redis.fields, fields, reason)) {
      differences.push_back({Difference::Kind::kContentMismatch, s.entity_id,
                             "storage's state cannot be mapped: " + (state.ok() ? reason : state.status().message()),
                             s.version});
      return;
    }
    std::map<std::string, std::string, std::less<>> expected(fields.begin(), fields.end());
    if (view == expected) return;
    std::string detail;
    for (const auto& [field, value] : expected) {
      auto it = view.find(field);
      if (it == view.end()) {
        detail = "the view lacks field '" + field + "'";
      } else if (it->second != value) {
        detail = "field '" + field + "' differs";
      }
      if (!detail.empty()) break;
    }
    if (detail.empty()) {
      for (const auto& [field, value] : view) {
        if (!expected.contains(field)) {
          detail = "the view has an extra field '" + field + "'";
          break;
        }
      }
    }
    differences.push_back({Difference::Kind::kContentMismatch, s.entity_id,
                           "same version " + std::to_string(s.version) + ", " + detail, s.version});
  }

  // Keys of this template whose entity storage does not know at all (entities
  // it knows were checked one by one above).
  Status FindExtraKeys(const std::vector<EntitySnapshot>& truth, std::vector<Difference>& differences) {
    std::unordered_set<std::string_view> known;
    known.reserve(truth.size());
    for (const auto& s : truth) known.insert(s.entity_id);
    std::unordered_set<std::string> reported;
    return ScanKeys(keys_.ScanPattern(), [&](const std::vector<std::string>& page) -> Status {
      for (const std::string& key : page) {
        if (key.ends_with(kTombstoneSuffix)) continue;
        std::optional<std::string_view> id = keys_.IdOf(key);
        if (!id || known.contains(*id) || !reported.emplace(*id).second) continue;
        differences.push_back({Difference::Kind::kExtra, std::string(*id),
                               "the view has key '" + key + "' of an entity storage has no events for"});
      }
      return Status::Ok();
    });
  }

  const config::SinkConfig cfg_;
  const RedisEndpoint endpoint_;
  const KeyTemplate keys_;
  const RedisSinkOptions options_;
  const bool hash_;
  const std::string ttl_ms_;
  const std::string tombstone_ttl_ms_;
  std::string where_;  // "sink 'x' (redis host:port/db)" for messages; no password
  // Set on a rebuild shadow: the live sink's keys, the prefix that turns a
  // live key into this shadow's key, and whether the first Open() has deleted
  // what an abandoned rebuild left.
  std::optional<KeyTemplate> live_keys_;
  std::string shadow_prefix_;
  bool shadow_prepared_ = false;
  ContextPtr ctx_;           // null when not connected
  std::string sha_;

  // Reused by every Apply so that a warm sink allocates almost nothing per batch.
  std::string arena_;
  std::vector<Arg> args_;            // per sendable event: keys (2), version, delete flag, count, payload
  std::vector<Sendable> sendable_;   // events that passed BuildEvent, in batch order
  std::vector<Call> calls_;          // this round's EVALSHA calls
  std::vector<Call> redo_;           // the next round's
  std::vector<const char*> argv_;    // one assembled call
  std::vector<size_t> lens_;
  char numkeys_[24] = {};
  HashFields fields_;
  const char* guard_ = kGuardNewer;  // the script's guard for the call being made
};

}  // namespace

Result<std::unique_ptr<Sink>> MakeRedisSink(const config::SinkConfig& sink, const config::Config& global) {
  return MakeRedisSink(sink, global, RedisSinkOptions{});
}

Result<std::unique_ptr<Sink>> MakeRedisSink(const config::SinkConfig& sink, const config::Config&,
                                            const RedisSinkOptions& options) {
  const std::string where = "sink '" + sink.name + "'";
  Result<RedisEndpoint> endpoint = ParseRedisUrl(sink.redis.url);
  if (!endpoint.ok()) return endpoint.status().WithContext(where);
  Result<KeyTemplate> keys = KeyTemplate::Parse(sink.redis.key, sink.entity);
  if (!keys.ok()) return keys.status().WithContext(where);
  for (const auto& f : sink.redis.fields) {
    if (f.name == kVersionMember) return InvalidArgument(where + ": the hash field name _version is reserved");
  }
  // Redis refuses expiry times that overflow when added to now; far below that.
  constexpr int64_t kMaxTtlMs = int64_t{1} << 45;  // about 1100 years
  for (auto ttl : {sink.redis.ttl, sink.redis.tombstone_ttl}) {
    if (ttl.count() < 0 || ttl.count() > kMaxTtlMs) {
      return InvalidArgument(where + ": ttl and tombstone_ttl must be from 0 to " + std::to_string(kMaxTtlMs) + " ms");
    }
  }
  if (options.connect_timeout.count() <= 0 || options.io_timeout.count() <= 0) {
    return InvalidArgument(where + ": redis timeouts must be positive");
  }
  return std::unique_ptr<Sink>(
      std::make_unique<RedisSink>(sink, std::move(endpoint).value(), std::move(keys).value(), options));
}

}  // namespace sluice::connectors::redis
