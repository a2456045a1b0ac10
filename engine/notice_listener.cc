#include "engine/notice_listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/log.h"
#include "core/names.h"
#include "core/thread_name.h"

namespace sluice::engine {

NoticeListener::NoticeListener(std::string host, uint16_t port, OnNotice on_notice)
    : host_(std::move(host)), port_(port), on_notice_(std::move(on_notice)) {}

NoticeListener::~NoticeListener() { Stop(); }

Status NoticeListener::Start() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port_);
  if (const int rc = getaddrinfo(host_.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return InvalidArgument("engine.notices.listen: cannot resolve " + host_ + ": " + gai_strerror(rc));
  }
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && fd_ < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0) {
      why = std::strerror(errno);
      close(fd);
      continue;
    }
    fd_ = fd;
  }
  freeaddrinfo(found);
  if (fd_ < 0) return Unavailable("engine.notices.listen: cannot bind udp " + host_ + ":" + service + ": " + why);
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (pipe2(stop_pipe_, O_CLOEXEC) != 0) {
    close(fd_);
    fd_ = -1;
    return Internal(std::string("engine notices: pipe: ") + std::strerror(errno));
  }
  thread_ = StartNamedThread("sluice-notices", [this] { Run(); });
  return Status::Ok();
}

void NoticeListener::Stop() {
  if (thread_.joinable()) {
    const char stop = 1;
    (void)!write(stop_pipe_[1], &stop, 1);
    thread_.join();
  }
  for (int* fd : {&fd_, &stop_pipe_[0], &stop_pipe_[1]}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

std::string NoticeListener::address() const {
  const std::string host = IsIpv6Literal(host_) ? "[" + host_ + "]" : host_;
  return "udp:" + host + ":" + std::to_string(port_);
}

void NoticeListener::Run() {
  char buf[kCommitNoticeDatagramMax + 1];
  for (;;) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      Log(LogLevel::kError, std::string("engine: commit notices stop: poll: ") + std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    // Everything queued, without blocking.
    for (;;) {
      const ssize_t n = recv(fd_, buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC);
      if (n < 0) break;
      auto notices = static_cast<size_t>(n) <= kCommitNoticeDatagramMax
                         ? DecodeCommitNotices(std::string_view(buf, static_cast<size_t>(n)))
                         : Result<std::vector<CommitNotice>>(InvalidArgument("a commit notice datagram is too long"));
      if (!notices.ok()) {
        LogRateLimited(LogLevel::kWarn, "engine.notices",
                       "engine: dropped a datagram on the commit notice port: " + notices.status().message());
        continue;
      }
      for (const CommitNotice& notice : *notices) on_notice_(notice);
    }
  }
}

}  // namespace sluice::engine
