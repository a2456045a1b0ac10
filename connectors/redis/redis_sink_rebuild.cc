// The rebuild shadow (built by MakeRebuildShadow in redis_sink.cc): its
// leftovers cleared on first Open, its keys switched onto the live ones.
#include <hiredis/hiredis.h>

#include <exception>
#include <string>
#include <vector>

#include "connectors/redis/redis_sink_impl.h"

namespace sluice::connectors::redis {

// Runs while the live sink is paused. First drops the live keys with no
// rebuilt counterpart (the entity is gone, or the key is damage), then
// RENAMEs every shadow key onto its live key: atomic per key, TTLs carried
// over, but not for the view as a whole (see README.md).
Status RedisSink::PromoteRebuildShadow() {
  if (!live_keys_) return Sink::PromoteRebuildShadow();
  SigpipeGuard guard;
  try {
    if (!connected()) RETURN_IF_ERROR(Connect());
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
    DropConnections();
    return Internal(where_ + ": switching the rebuilt keys in: " + e.what());
  }
}

// A shadow's first Open(): deletes the keys an abandoned rebuild left.
Status RedisSink::PrepareShadowKeys() {
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
Status RedisSink::DropLiveKeysNotRebuilt() {
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

Status RedisSink::RenameShadowKeysOntoLive() {
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

}  // namespace sluice::connectors::redis
