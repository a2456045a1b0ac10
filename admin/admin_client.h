// AdminClient: how the operator commands (`sluice pause|resume|rewind|
// rebuild`) reach a running process's admin endpoint (admin_service.h).
// Blocking, one request per connection, with a timeout. Not thread-safe.
#pragma once

#include <chrono>
#include <string>

#include "config/config.h"
#include "core/json.h"
#include "core/status.h"

namespace sluice::admin {

struct AdminReply {
  int status = 0;
  Json body;  // the parsed JSON body (null when empty or not JSON)
  // The error message of an {"error": {...}} body, else the raw body.
  std::string ErrorMessage() const;
};

class AdminClient {
 public:
  // Address and token from the config's admin section.
  explicit AdminClient(const config::AdminConfig& admin,
                       std::chrono::milliseconds timeout = std::chrono::seconds(90));

  // Unavailable when nothing listens (no process runs with this config) or
  // the connection fails; otherwise the reply, whatever its status.
  Result<AdminReply> Get(const std::string& target);
  Result<AdminReply> Post(const std::string& target, const Json& body);

 private:
  Result<AdminReply> Call(const std::string& method, const std::string& target, const std::string& body);

  config::AdminConfig admin_;
  std::chrono::milliseconds timeout_;
};

}  // namespace sluice::admin
