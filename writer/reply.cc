#include "writer/reply.h"

#include "core/json.h"

namespace sluice::writer {

std::string ErrorBody(std::string_view code, std::string_view message, std::string_view extra_json) {
  std::string out = R"({"error":{"code":)";
  AppendJsonString(out, code);
  out += R"(,"message":)";
  AppendJsonString(out, message);
  // extra_json is "{...}": splice its members in.
  if (extra_json.size() > 2) {
    out += ',';
    out += extra_json.substr(1, extra_json.size() - 2);
  }
  out += "}}";
  return out;
}

Reply ErrorReply(int status, std::string_view code, std::string_view message, std::string_view extra_json) {
  Reply r;
  r.status = status;
  r.body = ErrorBody(code, message, extra_json);
  return r;
}

Reply UnavailableReply(std::string_view message) {
  Reply r = ErrorReply(503, "storage_unavailable", message);
  r.retry_after_seconds = 1;
  return r;
}

std::string CommandReplyBody(std::string_view type, std::string_view id, uint64_t version,
                             uint64_t event_id, uint32_t partition, std::string_view response_json) {
  std::string out = R"({"type":)";
  AppendJsonString(out, type);
  out += R"(,"id":)";
  AppendJsonString(out, id);
  out += R"(,"version":)" + std::to_string(version);
  out += R"(,"event_id":)" + std::to_string(event_id);
  out += R"(,"partition":)" + std::to_string(partition);
  out += R"(,"response":)";
  out += response_json;
  out += '}';
  return out;
}

}  // namespace sluice::writer
