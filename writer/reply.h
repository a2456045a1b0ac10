// Replies of the writer's HTTP API and the JSON bodies they carry.
// Pure functions and plain values, safe from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace sluice::writer {

struct Reply {
  int status = 200;
  std::string body;           // JSON text
  bool replayed = false;      // an idempotent replay: sent as "Idempotent-Replayed: true"
  int retry_after_seconds = 0;  // > 0: sent as "Retry-After"
  // Sync push sinks: what each view did, as "name=updated, other=timeout";
  // sent as "Sluice-Push" (a header, so the body stays replayable byte for byte).
  std::string push_report;
};

// Called exactly once per command or read, from whichever thread finished it.
using ReplyFn = std::function<void(Reply)>;

// {"error":{"code":"...","message":"..."}}; `extra_json`, when given, is a
// JSON object text whose members are added to the error object.
std::string ErrorBody(std::string_view code, std::string_view message, std::string_view extra_json = "");
Reply ErrorReply(int status, std::string_view code, std::string_view message, std::string_view extra_json = "");
// 503 with Retry-After: the same request (same Idempotency-Key) is safe to retry.
Reply UnavailableReply(std::string_view message);

// The body of an applied command. It is a function of stored fields only, so
// a replay rebuilt from the event row is byte-identical to the first reply:
// {"type":T,"id":I,"version":V,"event_id":E,"partition":P,"response":R}
std::string CommandReplyBody(std::string_view type, std::string_view id, uint64_t version,
                             uint64_t event_id, uint32_t partition, std::string_view response_json);

}  // namespace sluice::writer
