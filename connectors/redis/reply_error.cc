#include "connectors/redis/reply_error.h"

namespace sluice::connectors::redis {

std::string_view ReplyErrorCode(std::string_view error) {
  constexpr std::string_view kUserScript = "@user_script:";
  if (error.substr(0, 4) == "ERR " && error.find("Error running script") != std::string_view::npos) {
    if (size_t p = error.find(kUserScript); p != std::string_view::npos) {
      std::string_view inner = error.substr(p + kUserScript.size());
      if (size_t colon = inner.find(": "); colon != std::string_view::npos) error = inner.substr(colon + 2);
    }
  }
  return error.substr(0, error.find(' '));
}

ReplyErrorClass ClassifyReplyError(std::string_view error) {
  std::string_view code = ReplyErrorCode(error);
  if (code == "NOSCRIPT") return ReplyErrorClass::kNoScript;
  if (code == "NOAUTH" || code == "WRONGPASS" || code == "NOPERM" || code == "MOVED" || code == "ASK" ||
      code == "CROSSSLOT") {
    return ReplyErrorClass::kMisconfigured;
  }
  if (code == "LOADING" || code == "BUSY" || code == "OOM" || code == "READONLY" || code == "MASTERDOWN" ||
      code == "MISCONF" || code == "TRYAGAIN" || code == "CLUSTERDOWN" || code == "NOREPLICAS") {
    return ReplyErrorClass::kUnavailable;
  }
  return ReplyErrorClass::kEvent;
}

std::string MisconfigurationAdvice(std::string_view error) {
  std::string_view code = ReplyErrorCode(error);
  if (code == "NOAUTH") return "redis requires a password: put it in the sink url as redis://:PASSWORD@host:port/db";
  if (code == "WRONGPASS") return "redis rejected the user or password: fix them in the sink url";
  if (code == "NOPERM") {
    return "the redis user lacks a permission: allow it EVALSHA, SCRIPT, CLIENT, PING, GET, EXISTS, HGETALL and "
           "SCAN on the sink's keys, or use another user";
  }
  if (code == "MOVED" || code == "ASK" || code == "CROSSSLOT") {
    return "the url points at a node of a Redis Cluster: write it as redis-cluster://host:port[,host:port...] "
           "(rediss-cluster:// over TLS)";
  }
  return "check the redis server and the sink url";
}

}  // namespace sluice::connectors::redis
