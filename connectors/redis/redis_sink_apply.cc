// Apply and Repair: a batch through the version check script
// (version_check.lua), pipelined a call at a time.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "connectors/redis/redis_sink_impl.h"
#include "connectors/redis/view_value.h"
#include "core/json.h"

namespace sluice::connectors::redis {

ApplyResult RedisSink::Apply(std::span<const ChangeEvent> events) {
  SigpipeGuard guard;
  try {
    guard_ = kGuardNewer;
    return ApplyBatch(events);
  } catch (const std::exception& e) {
    DropConnections();
    return ApplyResult{Internal(where_ + ": " + e.what()), {}};
  }
}

// The same script as Apply, with the guard relaxed (see version_check.lua).
ApplyResult RedisSink::Repair(std::span<const ChangeEvent> events, RepairGuard repair_guard) {
  SigpipeGuard guard;
  try {
    guard_ = repair_guard == RepairGuard::kAny ? kGuardAny : kGuardNotOlder;
    return ApplyBatch(events);
  } catch (const std::exception& e) {
    DropConnections();
    return ApplyResult{Internal(where_ + ": " + e.what()), {}};
  }
}

// Appends the script arguments of one event to args_/arena_ in the
// layout of its format (see version_check.lua): the key(s) first, then
// the rest. False with `reason` when the event cannot be written (nothing
// appended).
bool RedisSink::BuildEvent(const ChangeEvent& e, std::string& reason) {
  if (!e.entity_type.empty() && e.entity_type != cfg_.entity) {
    reason = "event of entity type '" + e.entity_type + "' given to a sink of type '" + cfg_.entity + "'";
    return false;
  }
  const size_t args_mark = args_.size();
  const size_t arena_mark = arena_.size();
  size_t off = arena_.size();
  keys_.AppendKey(arena_, e.entity_id);
  AddArena(off);
  if (cluster_) {
    // The tombstone key is passed too: it is not the value key + suffix.
    const std::string tomb = TombstoneKey(std::string_view(arena_).substr(off));
    off = arena_.size();
    arena_ += tomb;
    AddArena(off);
  } else if (hash_) {
    off = arena_.size();
    keys_.AppendKey(arena_, e.entity_id);
    arena_ += kTombstoneSuffix;
    AddArena(off);
  }
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
void RedisSink::AppendDigits(uint64_t n) {
  char digits[24];
  auto [end, ec] = std::to_chars(digits, digits + sizeof digits, n);
  (void)ec;  // 24 chars always hold a uint64_t
  arena_.append(digits, end);
}

// Appends n in decimal to the arena as one argument.
void RedisSink::AppendNumber(uint64_t n) {
  const size_t off = arena_.size();
  AppendDigits(n);
  AddArena(off);
}

bool RedisSink::AddJsonValue(const ChangeEvent& e, std::string& reason) {
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

bool RedisSink::AddHashFields(const ChangeEvent& e, std::string& reason) {
  Result<Json> state = ParseJson(e.state);
  if (!state.ok()) {
    reason = "the state is not valid JSON: " + state.status().message();
    return false;
  }
  if (!HashFieldsOf(*state, hash_fields(), fields_, reason)) return false;
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

ApplyResult RedisSink::ApplyBatch(std::span<const ChangeEvent> events) {
  ApplyResult out;
  if (events.empty()) return out;
  if (!connected()) {
    Status s = Connect();
    if (!s.ok()) return ApplyResult{s, {}};
  }
  out.results.assign(events.size(), EventResult{});

  // The first round sends each call as soon as its events are built, so
  // that Redis runs one call while the next is being built. In a cluster
  // the events are first grouped by hash slot (a call's keys must share
  // one), so the calls go once every event is built.
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
    if (!cluster_ && sendable_.size() > call_begin && (sendable_.size() - call_begin == kEventsPerCall || last)) {
      calls_.push_back(Call{call_begin, sendable_.size()});
      call_begin = sendable_.size();
      if (Status s = SendCall(calls_.back()); !s.ok()) return ApplyResult{s, {}};
    }
  }
  if (cluster_) {
    GroupBySlot();
    for (Call& call : calls_) {
      if (Status s = SendCall(call); !s.ok()) return ApplyResult{s, {}};
    }
  }

  // Later rounds redo calls that met NOSCRIPT (a server's script cache was
  // flushed: load it again, once per batch), a cluster's redirections (MOVED:
  // learn the slots again; ASK; TRYAGAIN: a slot half moved; the engine
  // retries the batch later if it is still moving) and, one event per
  // call, the events of a call that failed as a whole, to find the one to
  // reject. A redone event that had been applied before comes back stale.
  bool reloaded = false;
  for (int round = 0; !calls_.empty(); ++round) {
    if (round == kMaxRounds) {
      DropConnections();
      return ApplyResult{Unavailable(where_ + ": the batch did not settle after " + std::to_string(kMaxRounds) +
                                     " rounds" + (cluster_ ? " (the cluster's slots keep moving)" : "")),
                         {}};
    }
    Status s;
    for (size_t c = 0; round > 0 && c < calls_.size() && s.ok(); ++c) s = SendCall(calls_[c]);
    Redo redo;
    if (s.ok()) s = ReadReplies(out.results, redo);
    if (!s.ok()) return ApplyResult{s, {}};
    if (!redo.reload.empty()) {
      if (reloaded) {
        DropConnections();
        return ApplyResult{Unavailable(where_ + ": the script vanished from redis twice in one batch"), {}};
      }
      for (RedisConnection* server : redo.reload) {
        if (s = LoadScript(*server); !s.ok()) return ApplyResult{s, {}};
      }
      reloaded = true;
    }
    if (redo.moved) {
      if (s = cluster_->Refresh(); !s.ok()) return ApplyResult{ConnectionLost(s), {}};
    }
    calls_.swap(redo_);
  }
  if (Status replicated = WaitForReplicas(); !replicated.ok()) return ApplyResult{replicated, {}};
  return out;
}

// Orders sendable_ by hash slot (keeping the batch's order within a slot,
// so one key's events stay in order) and makes calls_ of one slot each.
void RedisSink::GroupBySlot() {
  slots_.clear();
  for (const Sendable& ev : sendable_) {
    const Arg& key = args_[ev.first_arg];
    slots_.push_back(KeySlot(std::string_view(arena_.data() + key.offset, key.size)));
  }
  std::vector<size_t> order(sendable_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return slots_[a] < slots_[b]; });
  std::vector<Sendable> sorted;
  std::vector<uint16_t> sorted_slots;
  sorted.reserve(order.size());
  for (size_t i : order) {
    sorted.push_back(sendable_[i]);
    sorted_slots.push_back(slots_[i]);
  }
  sendable_.swap(sorted);
  slots_.swap(sorted_slots);
  for (size_t begin = 0; begin < sendable_.size();) {
    size_t end = begin + 1;
    while (end < sendable_.size() && end - begin < kEventsPerCall && slots_[end] == slots_[begin]) ++end;
    calls_.push_back(Call{begin, end, slots_[begin]});
    begin = end;
  }
}

// A batch counts as written once wait_replicas replicas have it (of every
// master, in a cluster), so that a failover to one of them loses none of
// it; otherwise it is retried (the version check makes that harmless).
Status RedisSink::WaitForReplicas() {
  if (options().wait_replicas == 0) return Status::Ok();
  const std::string want = std::to_string(options().wait_replicas);
  const std::string timeout = std::to_string(std::max<int64_t>(1, limits_.io_timeout.count() / 2));
  ASSIGN_OR_RETURN(std::vector<RedisConnection*> servers, Servers());
  for (RedisConnection* server : servers) {
    Result<ReplyPtr> reply = RunOn(*server, {"WAIT", want, timeout});
    if (!reply.ok()) return ConnectionLost(reply.status());
    const redisReply& r = **reply;
    if (r.type == REDIS_REPLY_ERROR) return ServerError("WAIT", ReplyText(r));
    if (r.type != REDIS_REPLY_INTEGER || r.integer < static_cast<long long>(options().wait_replicas)) {
      return Unavailable(where_ + ": " +
                         (r.type == REDIS_REPLY_INTEGER ? std::to_string(r.integer) : std::string("no")) + " of the " +
                         want + " replicas (wait_replicas) acknowledged the batch within " + timeout + " ms" +
                         (cluster_ ? " on " + cluster_->NameOf(server) : ""));
    }
  }
  return Status::Ok();
}

// Queues one EVALSHA for the events of `call` on its server (ASKING first
// after an ASK) and writes it at once (without waiting for any reply).
Status RedisSink::SendCall(Call& call) {
  if (!cluster_) {
    call.server = conn_.get();
  } else {
    Result<RedisConnection*> server =
        call.ask ? cluster_->At(call.ask->host, call.ask->port) : cluster_->ForSlot(call.slot);
    if (!server.ok()) return ConnectionLost(server.status());
    call.server = *server;
  }
  if (call.ask) {
    const char* argv[] = {"ASKING"};
    const size_t lens[] = {6};
    call.server->Append(1, argv, lens);
  }
  AssembleCall(call);
  call.server->Append(static_cast<int>(argv_.size()), argv_.data(), lens_.data());
  if (Status written = call.server->Flush(); !written.ok()) return ConnectionLost(written);
  return Status::Ok();
}

// Reads one reply per call of calls_ (each from its server) into results;
// calls to make again go to redo_, and `redo` says what to do first.
Status RedisSink::ReadReplies(std::vector<EventResult>& results, Redo& redo) {
  redo_.clear();
  for (const Call& call : calls_) {
    if (call.ask) {
      Result<ReplyPtr> asking = call.server->Read();
      if (!asking.ok()) return ConnectionLost(asking.status());
      if ((*asking)->type == REDIS_REPLY_ERROR) return ServerError("ASKING", ReplyText(**asking));
    }
    Result<ReplyPtr> read = call.server->Read();
    if (!read.ok()) return ConnectionLost(read.status());
    ReplyPtr reply = std::move(read).value();
    const size_t count = call.end - call.begin;
    if (reply->type == REDIS_REPLY_INTEGER && reply->integer == static_cast<long long>(count)) {
      for (size_t k = call.begin; k < call.end; ++k) results[sendable_[k].event] = EventResult{Outcome::kApplied, {}};
      continue;
    }
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
    if (cluster_ && reply->type == REDIS_REPLY_ERROR) {
      // The slot is elsewhere (MOVED, or a script that found a key gone),
      // moving (ASK), or its keys are half moved (TRYAGAIN).
      Call again{call.begin, call.end, call.slot};
      if (std::optional<Redirect> to = ParseRedirect(err)) {
        if (to->ask) again.ask = std::move(to);
        redo.moved = redo.moved || !again.ask;
        redo_.push_back(std::move(again));
        continue;
      }
      if (IsNonLocalKeyError(err) || ReplyErrorCode(err) == "TRYAGAIN") {
        redo.moved = redo.moved || IsNonLocalKeyError(err);
        redo_.push_back(std::move(again));
        continue;
      }
    }
    switch (reply->type == REDIS_REPLY_ERROR ? Classify(err) : ErrorClass::kEvent) {
      case ErrorClass::kNoScript: {
        bool listed = false;
        for (RedisConnection* server : redo.reload) listed = listed || server == call.server;
        if (!listed) redo.reload.push_back(call.server);
        redo_.push_back(Call{call.begin, call.end, call.slot});
        break;
      }
      case ErrorClass::kEvent:
        if (count == 1) {
          results[sendable_[call.begin].event] = EventResult{Outcome::kRejected, "redis: " + err};
        } else {
          for (size_t k = call.begin; k < call.end; ++k) redo_.push_back(Call{k, k + 1, call.slot});
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
void RedisSink::AssembleCall(const Call& call) {
  argv_.clear();
  lens_.clear();
  auto push = [this](const Arg& a) {
    argv_.push_back(a.fixed ? a.fixed : arena_.data() + a.offset);
    lens_.push_back(a.size);
  };
  const size_t keys_per_event = hash_ || cluster_ ? 2 : 1;
  auto [end, ec] = std::to_chars(numkeys_, numkeys_ + sizeof numkeys_, keys_per_event * (call.end - call.begin));
  (void)ec;  // 24 chars always hold a size_t
  push(Arg{"EVALSHA", 0, 7});
  push(Arg{sha_.data(), 0, sha_.size()});
  push(Arg{numkeys_, 0, static_cast<size_t>(end - numkeys_)});
  for (size_t k = call.begin; k < call.end; ++k) {
    for (size_t i = 0; i < keys_per_event; ++i) push(args_[sendable_[k].first_arg + i]);
  }
  push(Arg{hash_ ? "h" : cluster_ ? "J" : "j", 0, 1});
  push(Arg{ttl_ms_.data(), 0, ttl_ms_.size()});
  push(Arg{tombstone_ttl_ms_.data(), 0, tombstone_ttl_ms_.size()});
  push(Arg{kTombstoneSuffix.data(), 0, kTombstoneSuffix.size()});
  push(Arg{guard_, 0, 1});
  push(Arg{KeysRepeat(call) ? "1" : "0", 0, 1});
  for (size_t k = call.begin; k < call.end; ++k) {
    const Sendable& ev = sendable_[k];
    for (size_t i = ev.first_arg + keys_per_event; i < ev.first_arg + ev.arg_count; ++i) push(args_[i]);
  }
}

// The script keeps a key's state by event when no key repeats (cheaper for
// Redis, whose time every sink shares); finding that out here costs a sort
// of at most kEventsPerCall keys.
bool RedisSink::KeysRepeat(const Call& call) {
  call_keys_.clear();
  for (size_t k = call.begin; k < call.end; ++k) {
    const Arg& key = args_[sendable_[k].first_arg];
    call_keys_.emplace_back(arena_.data() + key.offset, key.size);
  }
  std::sort(call_keys_.begin(), call_keys_.end());
  return std::adjacent_find(call_keys_.begin(), call_keys_.end()) != call_keys_.end();
}

}  // namespace sluice::connectors::redis
