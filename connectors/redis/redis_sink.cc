#include "connectors/redis/redis_sink.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <cstdlib>
#include <tuple>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "connectors/redis/key_template.h"
#include "connectors/redis/redis_connection.h"
#include "connectors/redis/redis_options.h"
#include "connectors/redis/redis_sink_impl.h"
#include "connectors/redis/redis_url.h"
#include "connectors/redis/reply_error.h"
#include "connectors/redis/view_value.h"

namespace sluice::connectors::redis {

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
    conn_.reset();
    return Internal(where_ + ": " + e.what());
  }
}

Status RedisSink::Health() {
  SigpipeGuard guard;
  try {
    if (!conn_) return Connect();
    const char* argv[] = {"PING"};
    size_t lens[] = {4};
    Result<ReplyPtr> reply = Command(1, argv, lens);
    if (!reply.ok()) return reply.status();
    if ((*reply)->type == REDIS_REPLY_ERROR) return ServerError("PING", ReplyText(**reply));
    return Status::Ok();
  } catch (const std::exception& e) {
    conn_.reset();
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
  conn_.reset();
  RedisTransport t;
  t.host = endpoint_.host;
  t.port = endpoint_.port;
  t.tls = endpoint_.tls;
  t.tls_options = options().tls;
  t.connect_timeout = limits_.connect_timeout;
  t.io_timeout = limits_.io_timeout;
  if (!endpoint_.sentinels.empty()) {
    ASSIGN_OR_RETURN(std::tie(t.host, t.port), AskSentinels(t));
  }
  Result<std::unique_ptr<RedisConnection>> c = RedisConnection::Open(t);
  if (!c.ok()) {
    return Unavailable(where_ + ": " + (endpoint_.sentinels.empty() ? "" : "master " + t.host + ":" +
                                                                            std::to_string(t.port) + ": ") +
                       c.status().message());
  }
  conn_ = std::move(c).value();

  if (!endpoint_.password.empty()) {
    std::vector<std::string_view> args = {"AUTH"};
    if (!endpoint_.username.empty()) args.push_back(endpoint_.username);
    args.push_back(endpoint_.password);
    Result<ReplyPtr> reply = Command(args);
    if (!reply.ok()) return reply.status();
    if ((*reply)->type == REDIS_REPLY_ERROR) {
      std::string err(ReplyText(**reply));
      conn_.reset();
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
      conn_.reset();
      if (Classify(err) != ErrorClass::kEvent) return ServerError("SELECT", err);
      return FailedPrecondition(where_ + ": redis refused SELECT " + db + " (" + err +
                                "): fix the database number in the sink url");
    }
  }
  // What the sentinels named may have been demoted since (a failover they
  // have not told of yet): write to a master only.
  if (!endpoint_.sentinels.empty()) {
    Result<ReplyPtr> role = Command({"ROLE"});
    if (!role.ok()) return role.status();
    const redisReply& r = **role;
    if (r.type == REDIS_REPLY_ERROR) return ServerError("ROLE", ReplyText(r));
    const bool master = r.type == REDIS_REPLY_ARRAY && r.elements > 0 && r.element[0]->type == REDIS_REPLY_STRING &&
                        ReplyText(*r.element[0]) == "master";
    if (!master) {
      conn_.reset();
      return Unavailable(where_ + ": the sentinels named " + t.host + ":" + std::to_string(t.port) +
                         " as master '" + endpoint_.master + "', but it is not a master (yet): a failover is under way");
    }
  }
  // The name shows the sink in CLIENT LIST; a refusal (ACL) is harmless and ignored.
  Result<ReplyPtr> named = Command({"CLIENT", "SETNAME", "sluice:" + cfg_.name});
  if (!named.ok()) return named.status();
  return LoadScript();
}

// Asks each sentinel in turn for the master's address; the first that
// knows it answers.
Result<std::pair<std::string, uint16_t>> RedisSink::AskSentinels(const RedisTransport& base) {
  std::string tried;
  for (const auto& [host, port] : endpoint_.sentinels) {
    RedisTransport s = base;
    s.host = host;
    s.port = port;
    const std::string who = "sentinel " + host + ":" + std::to_string(port);
    Result<std::unique_ptr<RedisConnection>> c = RedisConnection::Open(s);
    if (!c.ok()) {
      tried += "; " + who + ": " + c.status().message();
      continue;
    }
    const auto ask = [&](std::vector<std::string_view> args) -> Result<ReplyPtr> {
      std::vector<const char*> argv;
      std::vector<size_t> lens;
      for (auto a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
      }
      return (*c)->Command(static_cast<int>(args.size()), argv.data(), lens.data());
    };
    if (!options().sentinel_password.empty()) {
      Result<ReplyPtr> auth = ask({"AUTH", options().sentinel_password});
      if (!auth.ok() || (*auth)->type == REDIS_REPLY_ERROR) {
        tried += "; " + who + ": AUTH: " + (auth.ok() ? std::string(ReplyText(**auth)) : auth.status().message());
        continue;
      }
    }
    Result<ReplyPtr> addr = ask({"SENTINEL", "get-master-addr-by-name", endpoint_.master});
    if (!addr.ok()) {
      tried += "; " + who + ": " + addr.status().message();
      continue;
    }
    const redisReply& r = **addr;
    if (r.type == REDIS_REPLY_ARRAY && r.elements == 2 && r.element[0]->type == REDIS_REPLY_STRING &&
        r.element[1]->type == REDIS_REPLY_STRING) {
      const std::string port_text(ReplyText(*r.element[1]));
      const int master_port = std::atoi(port_text.c_str());
      if (master_port > 0 && master_port <= 65535) {
        return std::make_pair(std::string(ReplyText(*r.element[0])), static_cast<uint16_t>(master_port));
      }
    }
    tried += "; " + who + ": " +
             (r.type == REDIS_REPLY_ERROR ? std::string(ReplyText(r)) : "does not know master '" + endpoint_.master + "'");
  }
  return Unavailable(where_ + ": no sentinel gave the address of master '" + endpoint_.master + "'" + tried);
}

Status RedisSink::LoadScript() {
  Result<ReplyPtr> reply = Command({"SCRIPT", "LOAD", kVersionCheckScript});
  if (!reply.ok()) return reply.status();
  const redisReply& r = **reply;
  if (r.type == REDIS_REPLY_ERROR) return ServerError("SCRIPT LOAD", ReplyText(r));
  if (r.type != REDIS_REPLY_STRING) {
    conn_.reset();
    return Internal(where_ + ": SCRIPT LOAD gave no sha");
  }
  sha_.assign(r.str, r.len);
  return Status::Ok();
}

// A status for an error reply to a connection-level command; drops the
// connection, since the caller gives up on it.
Status RedisSink::ServerError(std::string_view command, std::string_view err) {
  conn_.reset();
  std::string what = where_ + ": " + std::string(command) + ": " + std::string(err);
  if (Classify(err) == ErrorClass::kUnavailable) return Unavailable(what);
  return FailedPrecondition(what + ": " + MisconfigurationAdvice(err));
}

// The connection failed (refused, reset, timed out; `why` says which): forget it.
Status RedisSink::ConnectionLost(const Status& why) {
  conn_.reset();
  return Unavailable(where_ + ": connection lost: " + why.message());
}

Result<ReplyPtr> RedisSink::Command(int argc, const char** argv, const size_t* lens) {
  if (!conn_) return ConnectionLost(Unavailable("not connected"));
  Result<ReplyPtr> reply = conn_->Command(argc, argv, lens);
  if (!reply.ok()) return ConnectionLost(reply.status());
  return reply;
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
      conn_.reset();
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
    conn_->Append(to ? 3 : 2, argv, lens);
  }
  std::vector<ReplyPtr> replies;
  for (size_t i = 0; i < keys.size(); ++i) {
    Result<ReplyPtr> read = conn_->Read();
    if (!read.ok()) return ConnectionLost(read.status());
    replies.push_back(std::move(read).value());
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
