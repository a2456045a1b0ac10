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
      where_("sink '" + cfg.name + "' (redis " + endpoint_.Describe() + ")") {
  if (!endpoint_.cluster_nodes.empty()) {
    cluster_ = std::make_unique<RedisCluster>(endpoint_.cluster_nodes, [this](const std::string& host, uint16_t port) {
      return OpenServer(Transport(host, port), "node " + host + ":" + std::to_string(port) + ": ");
    });
  }
}

// The options that the write and check paths read.
const RedisSinkOptions& RedisSink::options() const { return cfg_.Options<RedisSinkOptions>(); }
const std::vector<config::FieldMapping>& RedisSink::hash_fields() const { return options().fields; }
bool RedisSink::values_expire() const { return options().ttl.count() > 0; }

Capabilities RedisSink::capabilities() const {
  Capabilities c;
  c.can_push = true;
  c.entity_checks = true;
  c.scan_repeats = true;
  c.overwrite = true;
  c.stays_open_at_takeover = true;  // every write is version-checked: nothing to learn at a takeover
  return c;
}

Status RedisSink::Open() {
  SigpipeGuard guard;
  try {
    RETURN_IF_ERROR(Connect());
    return PrepareShadowKeys();
  } catch (const std::exception& e) {
    DropConnections();
    return Internal(where_ + ": " + e.what());
  }
}

Status RedisSink::Health() {
  SigpipeGuard guard;
  try {
    if (!connected()) return Connect();
    ASSIGN_OR_RETURN(std::vector<RedisConnection*> servers, Servers());
    for (RedisConnection* server : servers) {
      Result<ReplyPtr> reply = RunOn(*server, {"PING"});
      if (!reply.ok()) return ConnectionLost(reply.status());
      if ((*reply)->type == REDIS_REPLY_ERROR) return ServerError("PING", ReplyText(**reply));
    }
    return Status::Ok();
  } catch (const std::exception& e) {
    DropConnections();
    return Internal(where_ + ": " + e.what());
  }
}

// The shadow writes the same keys under a prefix (ShadowKeyPrefix), so it
// never touches a live key and the two SCAN patterns never meet.
Result<std::unique_ptr<Sink>> RedisSink::MakeRebuildShadow() const {
  if (cluster_) {
    return FailedPrecondition(where_ + ": a view in a Redis Cluster cannot be rebuilt beside the live keys (RENAME "
                              "cannot move a key to another hash slot); use `sluice rewind --sink " + cfg_.name +
                              " --to beginning`, which rewrites the keys in place");
  }
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

RedisTransport RedisSink::Transport(const std::string& host, uint16_t port) const {
  RedisTransport t;
  t.host = host;
  t.port = port;
  t.tls = endpoint_.tls;
  t.tls_options = options().tls;
  t.connect_timeout = limits_.connect_timeout;
  t.io_timeout = limits_.io_timeout;
  return t;
}

// Connects to the server (standalone), to the master the sentinels name, or
// learns a cluster's slots (its masters are connected when first used).
Status RedisSink::Connect() {
  conn_.reset();
  if (cluster_) {
    cluster_->DropConnections();
    Status learnt = cluster_->Refresh();
    return learnt.ok() ? learnt : Status(learnt.code(), where_ + ": " + learnt.message());
  }
  RedisTransport t = Transport(endpoint_.host, endpoint_.port);
  std::string label;
  if (!endpoint_.sentinels.empty()) {
    ASSIGN_OR_RETURN(std::tie(t.host, t.port), AskSentinels(t));
    label = "master " + t.host + ":" + std::to_string(t.port) + ": ";
  }
  Result<std::unique_ptr<RedisConnection>> c = OpenServer(t, label);
  if (!c.ok()) return Status(c.status().code(), where_ + ": " + c.status().message());
  conn_ = std::move(c).value();
  return Status::Ok();
}

// One server made ready for the sink: connected (over TLS, its certificate
// checked), AUTH, SELECT, for a sentinel's master a check that it still is
// one, CLIENT SETNAME and the script loaded. Messages start with `label`
// (which server, when there are several) and never name a secret.
Result<std::unique_ptr<RedisConnection>> RedisSink::OpenServer(const RedisTransport& t, const std::string& label) {
  Result<std::unique_ptr<RedisConnection>> opened = RedisConnection::Open(t);
  if (!opened.ok()) return Unavailable(label + opened.status().message());
  std::unique_ptr<RedisConnection> c = std::move(opened).value();
  const auto run = [&](std::vector<std::string_view> args) -> Result<ReplyPtr> {
    Result<ReplyPtr> reply = RunOn(*c, args);
    if (!reply.ok()) return Unavailable(label + "connection lost: " + reply.status().message());
    return reply;
  };
  const auto refused = [&](std::string_view command, std::string_view err) {
    Status s = ReplyStatus(command, err);
    return Status(s.code(), label + s.message());
  };
  if (!endpoint_.password.empty()) {
    std::vector<std::string_view> args = {"AUTH"};
    if (!endpoint_.username.empty()) args.push_back(endpoint_.username);
    args.push_back(endpoint_.password);
    ASSIGN_OR_RETURN(ReplyPtr reply, run(args));
    if (reply->type == REDIS_REPLY_ERROR) {
      const std::string err(ReplyText(*reply));
      if (Classify(err) == ErrorClass::kUnavailable) return Unavailable(label + "AUTH: " + err);
      return FailedPrecondition(label + "redis refused AUTH (" + err +
                                "): fix the user and password in the sink url, as "
                                "redis://[user]:PASSWORD@host:port/db");
    }
  }
  if (endpoint_.db != 0) {
    const std::string db = std::to_string(endpoint_.db);
    ASSIGN_OR_RETURN(ReplyPtr reply, run({"SELECT", db}));
    if (reply->type == REDIS_REPLY_ERROR) {
      const std::string err(ReplyText(*reply));
      if (Classify(err) != ErrorClass::kEvent) return refused("SELECT", err);
      return FailedPrecondition(label + "redis refused SELECT " + db + " (" + err +
                                "): fix the database number in the sink url");
    }
  }
  // What the sentinels named may have been demoted since (a failover they
  // have not told of yet): write to a master only.
  if (!endpoint_.sentinels.empty()) {
    ASSIGN_OR_RETURN(ReplyPtr role, run({"ROLE"}));
    const redisReply& r = *role;
    if (r.type == REDIS_REPLY_ERROR) return refused("ROLE", ReplyText(r));
    const bool master = r.type == REDIS_REPLY_ARRAY && r.elements > 0 && r.element[0]->type == REDIS_REPLY_STRING &&
                        ReplyText(*r.element[0]) == "master";
    if (!master) {
      return Unavailable(label + "the sentinels named it as master '" + endpoint_.master +
                         "', but it is not a master (yet): a failover is under way");
    }
  }
  // The name shows the sink in CLIENT LIST; a refusal (ACL) is harmless and ignored.
  ASSIGN_OR_RETURN(ReplyPtr named, run({"CLIENT", "SETNAME", "sluice:" + cfg_.name}));
  ASSIGN_OR_RETURN(ReplyPtr loaded, run({"SCRIPT", "LOAD", kVersionCheckScript}));
  const redisReply& r = *loaded;
  if (r.type == REDIS_REPLY_ERROR) return refused("SCRIPT LOAD", ReplyText(r));
  if (r.type != REDIS_REPLY_STRING) return Internal(label + "SCRIPT LOAD gave no sha");
  sha_.assign(r.str, r.len);
  return c;
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
    const auto ask = [&](std::vector<std::string_view> args) { return RunOn(**c, args); };
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

// SCRIPT LOAD again on `c` (a server's script cache was flushed).
Status RedisSink::LoadScript(RedisConnection& c) {
  Result<ReplyPtr> reply = RunOn(c, {"SCRIPT", "LOAD", kVersionCheckScript});
  if (!reply.ok()) return ConnectionLost(reply.status());
  const redisReply& r = **reply;
  if (r.type == REDIS_REPLY_ERROR) return ServerError("SCRIPT LOAD", ReplyText(r));
  if (r.type != REDIS_REPLY_STRING) {
    DropConnections();
    return Internal(where_ + ": SCRIPT LOAD gave no sha");
  }
  sha_.assign(r.str, r.len);
  return Status::Ok();
}

// A status for an error reply to a connection-level command; drops the
// connection, since the caller gives up on it.
Status RedisSink::ServerError(std::string_view command, std::string_view err) {
  DropConnections();
  Status s = ReplyStatus(command, err);
  return Status(s.code(), where_ + ": " + s.message());
}

// The status of an error reply `err` to `command`, without the sink's name.
Status RedisSink::ReplyStatus(std::string_view command, std::string_view err) const {
  std::string what = std::string(command) + ": " + std::string(err);
  if (Classify(err) == ErrorClass::kUnavailable) return Unavailable(what);
  if (cluster_ && (ParseRedirect(err) || IsNonLocalKeyError(err))) {
    return Unavailable(what + ": the cluster's slots moved while the sink worked; it learns them again");
  }
  return FailedPrecondition(what + ": " + MisconfigurationAdvice(err));
}

// The connection failed (refused, reset, timed out; `why` says which): forget it.
Status RedisSink::ConnectionLost(const Status& why) {
  DropConnections();
  return Unavailable(where_ + ": connection lost: " + why.message());
}

void RedisSink::DropConnections() {
  conn_.reset();
  if (cluster_) cluster_->DropConnections();
}

Result<ReplyPtr> RedisSink::RunOn(RedisConnection& c, const std::vector<std::string_view>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (auto a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  return c.Command(static_cast<int>(args.size()), argv.data(), lens.data());
}

Result<ReplyPtr> RedisSink::Command(const std::vector<std::string_view>& args) {
  if (!conn_) return ConnectionLost(Unavailable("not connected"));
  Result<ReplyPtr> reply = RunOn(*conn_, args);
  if (!reply.ok()) return ConnectionLost(reply.status());
  return reply;
}

// The servers the view's keys are on: the one server, or every master of
// the cluster. Connects when not connected.
Result<std::vector<RedisConnection*>> RedisSink::Servers() {
  if (!connected()) RETURN_IF_ERROR(Connect());
  if (!cluster_) return std::vector<RedisConnection*>{conn_.get()};
  Result<std::vector<RedisConnection*>> masters = cluster_->Masters();
  if (!masters.ok()) return ConnectionLost(masters.status());
  return masters;
}

// The server that holds `key`, connected.
Result<RedisConnection*> RedisSink::ServerFor(std::string_view key) {
  if (!connected()) RETURN_IF_ERROR(Connect());
  if (!cluster_) return conn_.get();
  Result<RedisConnection*> c = cluster_->ForSlot(KeySlot(key));
  if (!c.ok()) return ConnectionLost(c.status());
  return c;
}

// Calls page(keys) for every page of SCAN MATCH pattern, on every server (a key may come
// twice, as SCAN promises only that a key present throughout comes once).
Status RedisSink::ScanKeys(const std::string& pattern, const std::function<Status(const std::vector<std::string>&)>& page) {
  if (!connected()) RETURN_IF_ERROR(Connect());
  std::vector<std::pair<std::string, uint16_t>> servers = {{"", 0}};  // a single server: conn_
  if (cluster_) {
    Result<std::vector<std::pair<std::string, uint16_t>>> masters = cluster_->MasterAddresses();
    if (!masters.ok()) return ConnectionLost(masters.status());
    servers = std::move(*masters);
  }
  std::vector<std::string> keys;
  for (const auto& [host, port] : servers) {
    std::string cursor = "0";
    do {
      if (!connected()) RETURN_IF_ERROR(Connect());
      RedisConnection* server = conn_.get();
      if (cluster_) {
        Result<RedisConnection*> at = cluster_->At(host, port);
        if (!at.ok()) return ConnectionLost(at.status());
        server = *at;
      }
      Result<ReplyPtr> reply = RunOn(*server, {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
      if (!reply.ok()) return ConnectionLost(reply.status());
      const redisReply& r = **reply;
      if (r.type == REDIS_REPLY_ERROR) return ServerError("SCAN", ReplyText(r));
      if (r.type != REDIS_REPLY_ARRAY || r.elements != 2 || r.element[0]->type != REDIS_REPLY_STRING ||
          r.element[1]->type != REDIS_REPLY_ARRAY) {
        DropConnections();
        return Internal(where_ + ": unexpected reply to SCAN");
      }
      cursor.assign(r.element[0]->str, r.element[0]->len);
      keys.clear();
      const redisReply& found = *r.element[1];
      for (size_t k = 0; k < found.elements; ++k) keys.emplace_back(ReplyText(*found.element[k]));
      if (!keys.empty()) RETURN_IF_ERROR(page(keys));
    } while (cursor != "0");
  }
  return Status::Ok();
}

// Sends one `command key [to]` per key in one pipeline (`to` maps a key to
// the second argument, for RENAME) and returns the replies in order.
Result<std::vector<ReplyPtr>> RedisSink::PipelinePerKey(const char* command, const std::vector<std::string>& keys,
                                                        const std::function<std::string(const std::string&)>& to) {
  routed_.clear();
  for (const std::string& key : keys) {
    const std::string second = to ? to(key) : std::string();
    const char* argv[] = {command, key.data(), second.data()};
    size_t lens[] = {std::char_traits<char>::length(command), key.size(), second.size()};
    RETURN_IF_ERROR(Route(key, to ? 3 : 2, argv, lens));
  }
  std::vector<ReplyPtr> replies;
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSIGN_OR_RETURN(ReplyPtr reply, NextRouted());
    replies.push_back(std::move(reply));
  }
  return replies;
}

// Queues a command on the server of `key`; NextRouted reads the replies in
// the order the commands were queued, each from its own server.
Status RedisSink::Route(std::string_view key, int argc, const char* const* argv, const size_t* lens) {
  if (routed_.empty()) routed_next_ = 0;
  ASSIGN_OR_RETURN(RedisConnection * server, ServerFor(key));
  server->Append(argc, argv, lens);
  routed_.push_back(server);
  return Status::Ok();
}

Result<ReplyPtr> RedisSink::NextRouted() {
  if (routed_next_ >= routed_.size()) return Internal(where_ + ": more replies read than commands sent");
  RedisConnection* server = routed_[routed_next_++];
  if (routed_next_ == routed_.size()) routed_.clear();
  Result<ReplyPtr> reply = server->Read();
  if (!reply.ok()) return ConnectionLost(reply.status());
  return reply;
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
