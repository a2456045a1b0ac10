// The HTTP server's limits over loopback sockets: every timeout closes the
// connection it is about (and only that one), the connection limit evicts
// the connection idle the longest, and a listener whose every connection is
// busy refuses a newcomer with 503. Waits are bounded; nothing asserts a
// speed.
#include "http/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace sluice::http {
namespace {

using namespace std::chrono_literals;

// A blocking TCP client on 127.0.0.1 for one test.
class RawClient {
 public:
  explicit RawClient(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  bool Send(std::string_view bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  }
  // Reads until `until` appears in what was read, the peer closes, or the
  // timeout; returns what was read.
  std::string ReadUntil(std::string_view until, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (received_.find(until) == std::string::npos) {
      if (!ReadSome(deadline)) break;
    }
    return received_;
  }
  // True when the server closes the connection (EOF or reset) before the timeout.
  bool WaitClosed(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!closed_) {
      if (!ReadSome(deadline) && !closed_) return false;
    }
    return true;
  }
  // Shrinks the receive buffer so that a large reply fills it at once.
  void SmallReceiveBuffer() {
    int size = 4096;
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  }

 private:
  // One read; false on timeout or close.
  bool ReadSome(std::chrono::steady_clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char buf[65536];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      closed_ = true;
      return false;
    }
    received_.append(buf, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
  std::string received_;
};

constexpr std::string_view kGet = "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n";

// A server answering every request with "pong" (or what `answer` says),
// counting closes by reason.
struct TestServer {
  explicit TestServer(Limits limits, uint32_t threads = 1, Handler handler = nullptr) {
    ServerOptions o;
    o.io_threads = threads;
    o.limits = limits;
    o.max_body_bytes = 1024;
    o.on_accept = [this] { ++accepted; };
    o.on_close = [this](CloseReason r) {
      std::lock_guard lock(mu);
      ++closed[r];
    };
    if (!handler) {
      handler = [](Request&& req, Responder respond) {
        Response r;
        r.body = req.target == "/big" ? std::string(16 << 20, 'x') : "pong";
        r.content_type = "text/plain";
        respond(std::move(r));
      };
    }
    server = std::make_unique<Server>(o, std::move(handler));
    EXPECT_TRUE(server->Start().ok());
  }
  int Closed(CloseReason r) {
    std::lock_guard lock(mu);
    return closed[r];
  }
  // Waits until `count` connections were closed for `r`.
  bool WaitClosed(CloseReason r, int count, std::chrono::milliseconds timeout = 5s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (Closed(r) < count) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }
  bool Ping() {
    RawClient c(server->port());
    return c.Send(kGet) && c.ReadUntil("pong", 5s).find("200 OK") != std::string::npos;
  }

  std::atomic<int> accepted{0};
  std::mutex mu;
  std::map<CloseReason, int> closed;
  std::unique_ptr<Server> server;
};

Limits Short() {
  Limits l;
  l.max_connections = 16;
  l.header_timeout = 400ms;
  l.body_timeout = 400ms;
  l.idle_timeout = 400ms;
  l.write_timeout = 400ms;
  return l;
}

TEST(HttpServer, ServesKeepAliveRequestsHeadersAndHead) {
  TestServer s(Limits{}, 2, [&](Request&& req, Responder respond) {
    Response r;
    r.body = req.method + " " + req.target + " " + std::string(req.Header("x-KEY").value_or("none"));
    respond(std::move(r));
  });
  RawClient c(s.server->port());
  ASSERT_TRUE(c.Send("GET /a HTTP/1.1\r\nHost: x\r\nX-Key: k1\r\n\r\nHEAD /b HTTP/1.1\r\nHost: x\r\n\r\n"));
  c.ReadUntil("Content-Length: 12", 5s);
  const std::string got = c.ReadUntil("anything more", 300ms);
  // Both pipelined requests on one connection; the HEAD reply has a length but no body.
  EXPECT_NE(got.find("GET /a k1"), std::string::npos) << got;
  EXPECT_NE(got.find("Content-Length: 12"), std::string::npos) << got;
  EXPECT_EQ(got.find("HEAD /b none"), std::string::npos) << got;
  EXPECT_EQ(s.server->open_connections(), 1u);
}

TEST(HttpServer, SlowHeaderIsClosedAtItsTimeoutWhileOthersAreServed) {
  TestServer s(Short());
  RawClient slow(s.server->port());
  ASSERT_TRUE(slow.connected());
  // One byte every 50 ms: the whole header would take seconds.
  std::atomic<bool> stop{false};
  std::thread drip([&] {
    const std::string header = "GET /ping HTTP/1.1\r\nHost: x\r\nX-Padding: " + std::string(100, 'p') + "\r\n\r\n";
    for (char ch : header) {
      if (stop || !slow.Send(std::string(1, ch))) return;
      std::this_thread::sleep_for(50ms);
    }
  });
  EXPECT_TRUE(s.Ping());
  EXPECT_TRUE(slow.WaitClosed(5s));
  stop = true;
  drip.join();
  EXPECT_EQ(s.Closed(CloseReason::kHeaderTimeout), 1);
  EXPECT_TRUE(s.Ping());
}

TEST(HttpServer, SilentNewConnectionIsClosedAtTheHeaderTimeout) {
  TestServer s(Short());
  RawClient silent(s.server->port());
  EXPECT_TRUE(silent.WaitClosed(5s));
  EXPECT_TRUE(s.WaitClosed(CloseReason::kHeaderTimeout, 1));
}

TEST(HttpServer, IdleKeptAliveConnectionIsClosedAtTheIdleTimeout) {
  Limits l = Short();
  l.header_timeout = 10s;  // only the idle timeout may close it
  TestServer s(l);
  RawClient c(s.server->port());
  ASSERT_TRUE(c.Send(kGet));
  ASSERT_NE(c.ReadUntil("pong", 5s).find("pong"), std::string::npos);
  EXPECT_TRUE(c.WaitClosed(5s));
  EXPECT_EQ(s.Closed(CloseReason::kIdleTimeout), 1);
  EXPECT_EQ(s.Closed(CloseReason::kHeaderTimeout), 0);
}

TEST(HttpServer, SlowBodyIsClosedAtTheBodyTimeout) {
  Limits l = Short();
  l.header_timeout = 10s;
  TestServer s(l);
  RawClient c(s.server->port());
  ASSERT_TRUE(c.Send("POST /ping HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789"));
  EXPECT_TRUE(c.WaitClosed(5s));
  EXPECT_EQ(s.Closed(CloseReason::kBodyTimeout), 1);
}

TEST(HttpServer, ClientThatNeverReadsItsReplyIsClosedAtTheWriteTimeout) {
  TestServer s(Short());
  RawClient c(s.server->port());
  c.SmallReceiveBuffer();
  ASSERT_TRUE(c.Send("GET /big HTTP/1.1\r\nHost: x\r\n\r\n"));
  // 16 MiB cannot fit in the socket buffers while nobody reads.
  EXPECT_TRUE(s.WaitClosed(CloseReason::kWriteTimeout, 1));
  EXPECT_TRUE(s.Ping());
}

TEST(HttpServer, ConnectionLimitEvictsTheConnectionIdleTheLongest) {
  Limits l;
  l.max_connections = 3;
  TestServer s(l);
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 3; ++i) {
    idle.push_back(std::make_unique<RawClient>(s.server->port()));
    ASSERT_TRUE(idle.back()->Send(kGet));
    ASSERT_NE(idle.back()->ReadUntil("pong", 5s).find("pong"), std::string::npos);
  }
  ASSERT_EQ(s.server->open_connections(), 3u);
  // A fourth client is served; the first (idle the longest) made room.
  EXPECT_TRUE(s.Ping());
  EXPECT_TRUE(idle[0]->WaitClosed(5s));
  EXPECT_EQ(s.Closed(CloseReason::kEvicted), 1);
  for (size_t i = 1; i < idle.size(); ++i) {
    EXPECT_TRUE(idle[i]->Send(kGet));
    EXPECT_NE(idle[i]->ReadUntil("pong", 5s).find("pong"), std::string::npos) << i;
  }
}

TEST(HttpServer, SilentConnectionsMakeRoomBeforeOnesReadingABody) {
  Limits l;
  l.max_connections = 2;
  TestServer s(l);
  RawClient body(s.server->port());
  ASSERT_TRUE(body.Send("POST /ping HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n01234"));
  std::this_thread::sleep_for(100ms);
  RawClient silent(s.server->port());
  std::this_thread::sleep_for(100ms);
  // The silent one is newer but still waits for its header: it goes first.
  EXPECT_TRUE(s.Ping());
  EXPECT_TRUE(silent.WaitClosed(5s));
  EXPECT_TRUE(body.Send(std::string(95, 'b')));
  EXPECT_NE(body.ReadUntil("pong", 5s).find("pong"), std::string::npos);
}

TEST(HttpServer, NewcomerGets503WhenEveryConnectionIsWithTheHandler) {
  Limits l;
  l.max_connections = 2;
  std::mutex mu;
  std::vector<Responder> held;
  TestServer s(l, 1, [&](Request&& req, Responder respond) {
    if (req.target == "/hold") {
      std::lock_guard lock(mu);
      held.push_back(std::move(respond));
      return;
    }
    Response r;
    r.body = "pong";
    respond(std::move(r));
  });
  RawClient a(s.server->port());
  RawClient b(s.server->port());
  ASSERT_TRUE(a.Send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(b.Send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n"));
  for (int i = 0; i < 500; ++i) {
    {
      std::lock_guard lock(mu);
      if (held.size() == 2) break;
    }
    std::this_thread::sleep_for(10ms);
  }
  RawClient c(s.server->port());
  EXPECT_NE(c.ReadUntil("\r\n\r\n", 5s).find("503 Service Unavailable"), std::string::npos);
  EXPECT_TRUE(c.WaitClosed(5s));
  EXPECT_EQ(s.Closed(CloseReason::kRefused), 1);
  {
    std::lock_guard lock(mu);
    for (auto& r : held) r(Response{200, "done", "text/plain", {}});
    held.clear();  // responders must not outlive the server
  }
  EXPECT_NE(a.ReadUntil("done", 5s).find("done"), std::string::npos);
  EXPECT_TRUE(s.Ping());
}

TEST(HttpServer, OversizedAndMalformedRequestsAreAnsweredAndClosed) {
  TestServer s(Limits{});
  {
    RawClient c(s.server->port());
    ASSERT_TRUE(c.Send("POST /ping HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n"));
    EXPECT_NE(c.ReadUntil("}}", 5s).find("413"), std::string::npos);
    EXPECT_TRUE(c.WaitClosed(5s));
  }
  {
    RawClient c(s.server->port());
    ASSERT_TRUE(c.Send("NOT HTTP\r\n\r\n"));
    EXPECT_NE(c.ReadUntil("}}", 5s).find("400"), std::string::npos);
    EXPECT_TRUE(c.WaitClosed(5s));
  }
  EXPECT_TRUE(s.WaitClosed(CloseReason::kServer, 2));
}

TEST(HttpServer, EveryAcceptedConnectionIsClosedOnceWithAReason) {
  Limits l = Short();
  l.max_connections = 4;
  TestServer s(l, 2);
  {
    std::vector<std::unique_ptr<RawClient>> clients;
    for (int i = 0; i < 10; ++i) {
      clients.push_back(std::make_unique<RawClient>(s.server->port()));
      if (i % 2 == 0) clients.back()->Send(kGet);
    }
    std::this_thread::sleep_for(50ms);
  }
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  int closed = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    closed = 0;
    {
      std::lock_guard lock(s.mu);
      for (const auto& [r, n] : s.closed) closed += n;
    }
    if (closed == s.accepted && s.server->open_connections() == 0) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(closed, s.accepted.load());
  EXPECT_EQ(s.server->open_connections(), 0u);
}

}  // namespace
}  // namespace sluice::http
