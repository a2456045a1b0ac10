// The redis sink's class, shared by the files that implement it (private to
// this folder; everyone else goes through MakeRedisSink in redis_sink.h).
//
// The implementation is split by concern, as RocksDB splits DBImpl:
//   redis_sink.cc          the factory, the constructor, the options it
//                          reads, the connection and its commands, Health
//   redis_sink_apply.cc    Apply and Repair: the batch through the version
//                          check script (version_check.lua)
//   redis_sink_verify.cc   Verify (the whole view), VerifyEntities and ScanViewIds
//   redis_sink_rebuild.cc  the rebuild shadow: clearing it, switching it in
//
// Threads: as every Sink, one thread at a time per instance (see sink.h).
#pragma once

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"
#include "connectors/redis/key_template.h"
#include "connectors/redis/redis_cluster.h"
#include "connectors/redis/redis_connection.h"
#include "connectors/redis/redis_options.h"
#include "connectors/redis/redis_sink.h"
#include "connectors/redis/redis_url.h"
#include "connectors/redis/reply_error.h"
#include "connectors/redis/view_value.h"
#include "connectors/sink.h"

namespace sluice::connectors::redis {

// The text of version_check.lua, compiled in at build time (see
// sluice_embed_text in cmake/SluiceModule.cmake): the version check and
// write of a run of events. Its arguments and replies are described there.
extern const std::string_view kVersionCheckScript;

// Events per EVALSHA: enough to share the call's cost, few enough that one
// call blocks Redis for well under a millisecond.
inline constexpr size_t kEventsPerCall = 100;
inline constexpr size_t kVerifyChunk = 1000;
// Rounds of one batch (redoing NOSCRIPT, redirections, failed calls) before it fails.
inline constexpr int kMaxRounds = 6;
// The script's ARGV[5] (see version_check.lua).
inline constexpr const char* kGuardNewer = ">";
inline constexpr const char* kGuardNotOlder = "=";
inline constexpr const char* kGuardAny = "!";

// TLS writes with write(2) (OpenSSL's socket BIO), so a peer that closed the connection raises
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

inline std::string_view ReplyText(const redisReply& r) { return {r.str, r.len}; }

using ErrorClass = ReplyErrorClass;

inline ErrorClass Classify(std::string_view err) { return ClassifyReplyError(err); }

class RedisSink final : public Sink {
 public:
  // redis_sink.cc
  RedisSink(const config::SinkConfig& cfg, RedisEndpoint endpoint, KeyTemplate keys, RedisConnectionLimits limits);
  const std::string& name() const override { return cfg_.name; }
  Capabilities capabilities() const override;
  Status Open() override;
  Status Health() override;
  void Close() override { DropConnections(); }
  Result<std::unique_ptr<Sink>> MakeRebuildShadow() const override;

  // redis_sink_apply.cc
  ApplyResult Apply(std::span<const ChangeEvent> events) override;
  ApplyResult Repair(std::span<const ChangeEvent> events, RepairGuard repair_guard) override;

  // redis_sink_verify.cc
  Status VerifyEntities(std::span<const EntitySnapshot> truth, std::vector<Difference>& differences) override;
  Status ScanViewIds(size_t page, const std::function<Status(std::span<const std::string> ids)>& each) override;
  Status Verify(const std::vector<EntitySnapshot>& truth, std::vector<Difference>& differences) override;

  // redis_sink_rebuild.cc
  Status PromoteRebuildShadow() override;

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
  // One EVALSHA: the sendable_ events [begin, end), all of one hash slot
  // in a cluster; `server` is where it was sent, `ask` a cluster's one-off
  // redirection (ASKING goes first).
  struct Call {
    Call(size_t b, size_t e, uint16_t s = 0) : begin(b), end(e), slot(s) {}
    size_t begin;
    size_t end;
    uint16_t slot;
    RedisConnection* server = nullptr;
    std::optional<Redirect> ask;
  };

  // redis_sink.cc: the options the write and check paths read, the
  // connection and its commands.
  const RedisSinkOptions& options() const;  // cfg_'s
  const std::vector<config::FieldMapping>& hash_fields() const;
  bool values_expire() const;
  bool connected() const { return conn_ != nullptr || (cluster_ && cluster_->has_map()); }
  RedisTransport Transport(const std::string& host, uint16_t port) const;
  Status Connect();
  Result<std::unique_ptr<RedisConnection>> OpenServer(const RedisTransport& t, const std::string& label);
  Result<std::pair<std::string, uint16_t>> AskSentinels(const RedisTransport& base);
  Status LoadScript(RedisConnection& c);
  void DropConnections();
  // The servers the view's keys are on (the server, or the cluster's
  // masters) and the one that holds a key; both connect when needed.
  Result<std::vector<RedisConnection*>> Servers();
  Result<RedisConnection*> ServerFor(std::string_view key);
  // The key that remembers a delete of `key`: beside it, in its slot.
  std::string TombstoneKey(std::string_view key) const {
    return cluster_ ? SameSlotKey(key, kTombstoneSuffix) : std::string(key) + std::string(kTombstoneSuffix);
  }
  // WAIT for options().wait_replicas replicas to hold what was written.
  Status WaitForReplicas();
  Status ServerError(std::string_view command, std::string_view err);
  Status ReplyStatus(std::string_view command, std::string_view err) const;
  Status ConnectionLost(const Status& why);
  static Result<ReplyPtr> RunOn(RedisConnection& c, const std::vector<std::string_view>& args);
  Result<ReplyPtr> Command(const std::vector<std::string_view>& args);  // on conn_
  // SCAN of every server for `pattern`, a reply's keys at a time. `page` may
  // write through this sink: the server is looked up again before each SCAN
  // (a write that meets a failover or a broken connection replaces
  // connections; a SCAN cursor is the server's, so a new connection to the
  // same server carries on).
  Status ScanKeys(const std::string& pattern, const std::function<Status(const std::vector<std::string>&)>& page);
  Status Route(std::string_view key, int argc, const char* const* argv, const size_t* lens);
  Result<ReplyPtr> NextRouted();
  Result<std::vector<ReplyPtr>> PipelinePerKey(const char* command, const std::vector<std::string>& keys,
                                               const std::function<std::string(const std::string&)>& to = {});

  // redis_sink_apply.cc
  void AddFixed(std::string_view s) { args_.push_back(Arg{s.data(), 0, s.size()}); }
  // Adds the arena text from `offset` to its end as one argument.
  void AddArena(size_t offset) { args_.push_back(Arg{nullptr, offset, arena_.size() - offset}); }
  bool BuildEvent(const ChangeEvent& e, std::string& reason);
  void AppendDigits(uint64_t n);
  void AppendNumber(uint64_t n);
  bool AddJsonValue(const ChangeEvent& e, std::string& reason);
  bool AddHashFields(const ChangeEvent& e, std::string& reason);
  ApplyResult ApplyBatch(std::span<const ChangeEvent> events);
  void GroupBySlot();
  Status SendCall(Call& call);
  // What ReadReplies found must happen before the calls in redo_ go again.
  struct Redo {
    std::vector<RedisConnection*> reload;  // servers that lost the script (NOSCRIPT)
    bool moved = false;                    // a cluster's slots moved: learn them again
  };
  Status ReadReplies(std::vector<EventResult>& results, Redo& redo);
  void AssembleCall(const Call& call);
  bool KeysRepeat(const Call& call);  // does a value key come more than once among the call's events?

  // redis_sink_verify.cc
  Status VerifyAll(const std::vector<EntitySnapshot>& truth, std::vector<Difference>& differences);
  Status CheckEntities(std::span<const EntitySnapshot> truth, std::vector<Difference>& differences);
  static std::optional<uint64_t> ParseVersion(std::string_view text);
  std::optional<uint64_t> ValueVersion(const redisReply& value) const;
  void CompareOne(const EntitySnapshot& s, const std::string& key, const redisReply& reply,
                  std::vector<Difference>& differences);
  static std::string VersionDetail(std::string_view view, uint64_t storage);
  void CompareJson(const EntitySnapshot& s, const std::string& key, const redisReply& reply,
                   std::vector<Difference>& differences);
  void CompareHash(const EntitySnapshot& s, const std::string& key, const redisReply& reply,
                   std::vector<Difference>& differences);
  Status FindExtraKeys(const std::vector<EntitySnapshot>& truth, std::vector<Difference>& differences);

  // redis_sink_rebuild.cc
  Status PrepareShadowKeys();
  Status DropLiveKeysNotRebuilt();
  Status RenameShadowKeysOntoLive();

  const config::SinkConfig cfg_;
  const RedisEndpoint endpoint_;
  const KeyTemplate keys_;
  const RedisConnectionLimits limits_;
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
  std::unique_ptr<RedisConnection> conn_;  // a standalone server (or a sentinel's master); null when not connected
  std::unique_ptr<RedisCluster> cluster_;  // a cluster's masters, for a redis-cluster:// url
  std::string sha_;                        // the script's (the same on every server)
  std::vector<RedisConnection*> routed_;   // Route/NextRouted: the server of each command queued
  size_t routed_next_ = 0;

  // Reused by every Apply so that a warm sink allocates almost nothing per batch.
  std::string arena_;
  std::string compare_buffer_;  // CompareJson: the value Apply() writes
  std::vector<Arg> args_;            // per sendable event: keys (2), version, delete flag, count, payload
  std::vector<Sendable> sendable_;   // events that passed BuildEvent, in batch order
  std::vector<Call> calls_;          // this round's EVALSHA calls
  std::vector<Call> redo_;           // the next round's
  std::vector<const char*> argv_;    // one assembled call
  std::vector<size_t> lens_;
  std::vector<uint16_t> slots_;      // in a cluster, the slot of each sendable_ event
  char numkeys_[24] = {};
  std::vector<std::string_view> call_keys_;  // KeysRepeat's
  HashFields fields_;
  const char* guard_ = kGuardNewer;  // the script's guard for the call being made
};

}  // namespace sluice::connectors::redis
