// The TLS contexts of one listener (ServerTls in server.h): built from the
// PEM files at start, and built again when one of the files changes, so
// that a renewed certificate is served without a restart. Private to http/.
//
// Threads: Current() from any thread (the event loops call it per accepted
// connection); a context handed out stays valid for as long as the
// connection holds it, also after a newer one replaced it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <boost/asio/ssl/context.hpp>

#include "core/status.h"
#include "http/server.h"

namespace sluice::http {

class TlsContexts {
 public:
  using Context = boost::asio::ssl::context;

  // FailedPrecondition naming the file and why when the files do not make a
  // context. `where` names the listener in messages ("127.0.0.1:8443").
  static Result<std::unique_ptr<TlsContexts>> Load(const ServerTls& files, std::string where);

  // The newest context that loaded. Looks at the files at most once per
  // `check_every`; when one changed, builds a new context from them (logging
  // the reload, or why it failed and that the previous one stays).
  std::shared_ptr<Context> Current();

  std::chrono::milliseconds check_every{1000};

 private:
  // What identifies a file's version: a renewal by rename or in place changes it.
  struct Stamp {
    ino_t inode = 0;
    int64_t mtime_ns = 0;
    int64_t size = -1;
    bool operator==(const Stamp& o) const { return inode == o.inode && mtime_ns == o.mtime_ns && size == o.size; }
  };
  TlsContexts(ServerTls files, std::string where) : files_(std::move(files)), where_(std::move(where)) {}
  std::vector<Stamp> Stamps() const;
  Result<std::shared_ptr<Context>> Build() const;

  const ServerTls files_;
  const std::string where_;
  std::mutex mu_;
  std::shared_ptr<Context> current_;
  std::vector<Stamp> stamps_;  // of the files current_ was built from, or of the last failed attempt
  std::chrono::steady_clock::time_point checked_{};
};

}  // namespace sluice::http
