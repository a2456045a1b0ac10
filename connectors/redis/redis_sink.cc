#include "connectors/redis/redis_sink.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "connectors/redis/key_template.h"
#include "connectors/redis/redis_options.h"
#include "connectors/redis/redis_sink_impl.h"
#include "connectors/redis/redis_url.h"
#include "connectors/redis/reply_error.h"
#include "connectors/redis/view_value.h"

namespace sluice::connectors::redis {
namespace {

timeval ToTimeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

}  // namespace

RedisSink::RedisSink(const config::SinkConfig& cfg, RedisEndpoint endpoint, KeyTemplate keys,
                     RedisConnectionLimits limits)
    : cfg_(cfg),
      endpoint_(std::move(endpoint)),
      keys_(std::move(keys)),
      limits_(limits),
      hash_(options().format == RedisSinkOptions::Format::kHash),
      ttl_ms_(std::to_string(std::max<int64_t>(0, options().ttl.count()))),
      tombstone_ttl_ms_(std::to_string(std::max<int64_t>(0, options().tombstone_ttl.count()))),
      where_("sink '" + cfg.name + "' (redis " + endpoint_.Describe() + ")") {}

// The options that the write and check paths read.
const RedisSinkOptions& RedisSink::options() const { return cfg_.Options<RedisSinkOptions>(); }
const std::vector<config::FieldMapping>& RedisSink::hash_fields() const { return options().fields; }
bool RedisSink::values_expire() const { return options().ttl.count() > 0; }

Capabilities RedisSink::capabilities() const {
  Capabilities c;
  c.can_push = true;
  c.entity_checks = true;
  c.overwrite = true;
  return c;
}

Status RedisSink::Open() {
  SigpipeGuard guard;
  try {
    RETURN_IF_ERROR(Connect());
    return PrepareShadowKeys();
  } catch (const std::exception& e) {
    ctx_.reset();
    return Internal(where_ + ": " + e.what());
  }
}

Status RedisSink::Health() {
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

// The shadow writes the same keys under a prefix (ShadowKeyPrefix), so it
// never touches a live key and the two SCAN patterns never meet.
Result<std::unique_ptr<Sink>> RedisSink::MakeRebuildShadow() const {
  if (keys_.literal_prefix().empty()) {
    return FailedPrecondition(where_ + ": cannot be rebuilt: the key template '" + options().key +
                              "' starts with {id}, so no prefix keeps the rebuilt keys apart from the live ones; "
                              "start the template with a literal such as '{type}:', or use `sluice rewind --sink " +
                              cfg_.name + " --to beginning`");
  }
  const std::string prefix = ShadowKeyPrefix(keys_.literal_prefix());
  config::SinkConfig shadow_cfg = cfg_;
  std::string& shadow_key = shadow_cfg.MutableOptions<RedisSinkOptions>().key;
  shadow_key = prefix + shadow_key;
  ASSIGN_OR_RETURN(KeyTemplate keys, KeyTemplate::Parse(shadow_key, cfg_.entity));
  auto shadow = std::make_unique<RedisSink>(shadow_cfg, endpoint_, std::move(keys), limits_);
  shadow->live_keys_ = keys_;
  shadow->shadow_prefix_ = prefix;
  shadow->where_ = where_ + " (rebuild, keys " + prefix + "...)";
  return std::unique_ptr<Sink>(std::move(shadow));
}

Status RedisSink::Connect() {
  ctx_.reset();
  ContextPtr c(redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port, ToTimeval(limits_.connect_timeout)));
  if (!c) return Unavailable(where_ + ": cannot allocate a connection");
  if (c->err) return Unavailable(where_ + ": cannot connect: " + c->errstr);
  if (redisSetTimeout(c.get(), ToTimeval(limits_.io_timeout)) != REDIS_OK) {
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

Status RedisSink::LoadScript() {
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
Status RedisSink::ServerError(std::string_view command, std::string_view err) {
  ctx_.reset();
  std::string what = where_ + ": " + std::string(command) + ": " + std::string(err);
  if (Classify(err) == ErrorClass::kUnavailable) return Unavailable(what);
  return FailedPrecondition(what + ": " + MisconfigurationAdvice(err));
}

// The connection failed (refused, reset, timed out): forget it.
Status RedisSink::ConnectionLost() {
  std::string why = ctx_ ? std::string(ctx_->errstr) : std::string("not connected");
  if (why == "Resource temporarily unavailable") {
    why = "no answer within the io timeout of " + std::to_string(limits_.io_timeout.count()) + " ms";
  }
  ctx_.reset();
  return Unavailable(where_ + ": connection lost: " + why);
}

Result<ReplyPtr> RedisSink::Command(int argc, const char** argv, const size_t* lens) {
  if (!ctx_) return ConnectionLost();
  void* raw = redisCommandArgv(ctx_.get(), argc, argv, lens);
  if (raw == nullptr) return ConnectionLost();
  return ReplyPtr(static_cast<redisReply*>(raw));
}

Result<ReplyPtr> RedisSink::Command(const std::vector<std::string_view>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (auto a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  return Command(static_cast<int>(args.size()), argv.data(), lens.data());
}

// Calls page(keys) for every page of SCAN MATCH pattern (a key may come
// twice, as SCAN promises only that a key present throughout comes once).
Status RedisSink::ScanKeys(const std::string& pattern, const std::function<Status(const std::vector<std::string>&)>& page) {
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
Result<std::vector<ReplyPtr>> RedisSink::PipelinePerKey(const char* command, const std::vector<std::string>& keys,
                                                        const std::function<std::string(const std::string&)>& to) {
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

Result<std::unique_ptr<Sink>> MakeRedisSink(const config::SinkConfig& sink, const config::Config& global) {
  return MakeRedisSink(sink, global, RedisConnectionLimits{});
}

Result<std::unique_ptr<Sink>> MakeRedisSink(const config::SinkConfig& sink, const config::Config&,
                                            const RedisConnectionLimits& limits) {
  const std::string where = "sink '" + sink.name + "'";
  const RedisSinkOptions& o = sink.Options<RedisSinkOptions>();
  Result<RedisEndpoint> endpoint = ParseRedisUrl(o.url);
  if (!endpoint.ok()) return endpoint.status().WithContext(where);
  Result<KeyTemplate> keys = KeyTemplate::Parse(o.key, sink.entity);
  if (!keys.ok()) return keys.status().WithContext(where);
  for (const auto& f : o.fields) {
    if (f.name == kVersionMember) return InvalidArgument(where + ": the hash field name _version is reserved");
  }
  // Redis refuses expiry times that overflow when added to now; far below that.
  constexpr int64_t kMaxTtlMs = int64_t{1} << 45;  // about 1100 years
  for (auto ttl : {o.ttl, o.tombstone_ttl}) {
    if (ttl.count() < 0 || ttl.count() > kMaxTtlMs) {
      return InvalidArgument(where + ": ttl and tombstone_ttl must be from 0 to " + std::to_string(kMaxTtlMs) + " ms");
    }
  }
  if (limits.connect_timeout.count() <= 0 || limits.io_timeout.count() <= 0) {
    return InvalidArgument(where + ": redis timeouts must be positive");
  }
  return std::unique_ptr<Sink>(
      std::make_unique<RedisSink>(sink, std::move(endpoint).value(), std::move(keys).value(), limits));
}

}  // namespace sluice::connectors::redis
