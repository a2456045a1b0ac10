#include "writer/notice_sender.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/commit_notice.h"
#include "core/log.h"
#include "core/thread_name.h"

namespace sluice::writer {

struct NoticeSender::Engine {
  std::string address;
  sockaddr_storage to{};
  socklen_t len = 0;
};

namespace {

// "udp:HOST:PORT" or "udp:[V6]:PORT" -> the socket address, or nothing.
bool Resolve(const std::string& address, sockaddr_storage* to, socklen_t* len) {
  if (!address.starts_with("udp:")) return false;
  std::string rest = address.substr(4);
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  std::string host = rest.substr(0, colon);
  const std::string port = rest.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) return false;
  std::memcpy(to, found->ai_addr, found->ai_addrlen);
  *len = found->ai_addrlen;
  freeaddrinfo(found);
  return true;
}

}  // namespace

NoticeSender::NoticeSender(Options options) : options_(std::move(options)) {}

NoticeSender::~NoticeSender() { Stop(); }

void NoticeSender::Start() {
  fd4_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  fd6_ = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  thread_ = StartNamedThread("sluice-announce", [this] { Run(); });
}

void NoticeSender::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (int* fd : {&fd4_, &fd6_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

void NoticeSender::Announce(const std::string& type, uint32_t partition, uint64_t head) {
  bool first = false;
  {
    std::lock_guard lock(mu_);
    first = pending_.empty();
    uint64_t& h = pending_[{type, partition}];
    h = std::max(h, head);
  }
  if (first) cv_.notify_one();
}

void NoticeSender::Skip(std::string address) {
  std::lock_guard lock(mu_);
  skip_ = std::move(address);
}

void NoticeSender::Refresh(sql::LeaseTable& members) {
  auto rows = members.Members(sql::kEngineMembers, options_.member_ttl);
  if (!rows.ok()) {
    LogRateLimited(LogLevel::kWarn, "writer.announce",
                   "writer: cannot read the engines' addresses (commits are found by their looks meanwhile): " +
                       rows.status().message());
    return;  // keep the last list
  }
  std::string skip;
  {
    std::lock_guard lock(mu_);
    skip = skip_;
  }
  std::vector<Engine> engines;
  for (const sql::MemberRow& m : *rows) {
    if (!skip.empty() && m.address == skip) continue;
    const auto known = std::find_if(engines_.begin(), engines_.end(), [&](const Engine& e) { return e.address == m.address; });
    if (known != engines_.end()) {
      engines.push_back(*known);  // resolved already
      continue;
    }
    Engine e;
    e.address = m.address;
    if (Resolve(m.address, &e.to, &e.len)) engines.push_back(e);
  }
  engines_ = std::move(engines);
}

void NoticeSender::Send(const std::vector<std::string>& datagrams) {
  for (const Engine& e : engines_) {
    const int fd = e.to.ss_family == AF_INET6 ? fd6_ : fd4_;
    if (fd < 0) continue;
    for (const std::string& d : datagrams) {
      // Non-blocking: a full socket buffer drops the notice, as a network would.
      (void)sendto(fd, d.data(), d.size(), MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&e.to), e.len);
    }
  }
}

void NoticeSender::Run() {
  std::unique_ptr<sql::LeaseTable> members = options_.storage->OpenLeases();
  auto next_refresh = std::chrono::steady_clock::now();
  for (;;) {
    if (std::chrono::steady_clock::now() >= next_refresh) {
      Refresh(*members);
      next_refresh = std::chrono::steady_clock::now() + options_.refresh;
    }
    std::map<std::pair<std::string, uint32_t>, uint64_t> pending;
    {
      std::unique_lock lock(mu_);
      cv_.wait_until(lock, next_refresh, [this] { return stopping_ || !pending_.empty(); });
      if (stopping_) return;
      pending.swap(pending_);
    }
    if (pending.empty() || engines_.empty()) continue;
    std::vector<CommitNotice> notices;
    notices.reserve(pending.size());
    for (const auto& [key, head] : pending) notices.push_back({key.first, key.second, head});
    Send(EncodeCommitNotices(notices));
  }
}

}  // namespace sluice::writer
