// What an error reply from Redis means for the redis sink: which error code it
// carries and what the caller should do about it. Pure functions, safe from
// any thread.
#pragma once

#include <string>
#include <string_view>

namespace sluice::connectors::redis {

enum class ReplyErrorClass {
  kEvent,          // about one command or event (WRONGTYPE, a script error): reject that event
  kNoScript,       // the script cache lost the sink's script: load it again
  kUnavailable,    // the server cannot serve now (LOADING, BUSY, OOM, READONLY, ...): retry later
  kMisconfigured,  // auth, ACL or cluster: the operator must change the config
};

// The error code of a reply text ("WRONGTYPE", "NOSCRIPT"). Redis before 7
// wraps errors raised inside a script as
// "ERR Error running script ... @user_script:N: CODE ..."; the inner code is returned.
std::string_view ReplyErrorCode(std::string_view error);

ReplyErrorClass ClassifyReplyError(std::string_view error);

// For a kMisconfigured (or unexpected) error: what the operator should change.
std::string MisconfigurationAdvice(std::string_view error);

}  // namespace sluice::connectors::redis
