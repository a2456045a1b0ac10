#include "connectors/redis/redis_connection.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <string>
#include <utility>

#include "http/tls_peer.h"

namespace sluice::connectors::redis {
namespace {

constexpr size_t kReadChunk = 64 * 1024;

std::string Errno(int e) { return std::strerror(e); }

// The oldest error OpenSSL queued on this thread, or `fallback`.
std::string SslError(const std::string& fallback) {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return fallback;
  char text[256];
  ERR_error_string_n(e, text, sizeof text);
  return text;
}

void SetTimeouts(int fd, std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

// A connected blocking TCP socket, or -1 with *why set.
int ConnectTcp(const RedisTransport& t, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(t.port);
  if (const int rc = getaddrinfo(t.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    *why = std::string("cannot resolve the host: ") + gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      *why = Errno(errno);
      continue;
    }
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = poll(&p, 1, static_cast<int>(t.connect_timeout.count()));
      if (rc == 0) {
        *why = "no connection within the connect timeout of " + std::to_string(t.connect_timeout.count()) + " ms";
        rc = -1;
      } else if (rc > 0) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        if (err != 0) *why = Errno(err);
      } else {
        *why = Errno(errno);
      }
    } else if (rc != 0) {
      *why = Errno(errno);
    }
    if (rc == 0) break;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(found);
  if (fd < 0) return -1;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);  // a dead peer is still caught by the io timeout
  return fd;
}

void AppendDecimal(std::string& out, size_t n) {
  char digits[24];
  const auto r = std::to_chars(digits, digits + sizeof digits, n);
  out.append(digits, r.ptr);
}

}  // namespace

struct RedisConnection::Tls {
  SSL_CTX* ctx = nullptr;
  SSL* ssl = nullptr;
  ~Tls() {
    if (ssl != nullptr) SSL_free(ssl);
    if (ctx != nullptr) SSL_CTX_free(ctx);
  }
};

Result<std::unique_ptr<RedisConnection>> RedisConnection::Open(const RedisTransport& t) {
  std::unique_ptr<RedisConnection> c(new RedisConnection());
  c->io_timeout_ = t.io_timeout;
  std::string why;
  c->fd_ = ConnectTcp(t, &why);
  if (c->fd_ < 0) return Unavailable("cannot connect: " + why);
  c->reader_ = redisReaderCreate();
  if (c->reader_ == nullptr) return Unavailable("cannot allocate a reply reader");
  if (t.tls) {
    ERR_clear_error();
    auto tls = std::make_unique<Tls>();
    tls->ctx = SSL_CTX_new(TLS_client_method());
    if (tls->ctx == nullptr) return Unavailable("TLS: " + SslError("cannot make a TLS context"));
    SSL_CTX_set_min_proto_version(tls->ctx, TLS1_2_VERSION);
    const config::TlsClientOptions& o = t.tls_options;
    const int trusted = o.ca.empty() ? SSL_CTX_set_default_verify_paths(tls->ctx)
                                     : SSL_CTX_load_verify_locations(tls->ctx, o.ca.c_str(), nullptr);
    if (trusted != 1) {
      return Unavailable("TLS: cannot load the CA certificates " + (o.ca.empty() ? std::string("of this machine") : o.ca) +
                         ": " + SslError("unreadable"));
    }
    if (!o.cert.empty()) {
      if (SSL_CTX_use_certificate_chain_file(tls->ctx, o.cert.c_str()) != 1) {
        return Unavailable("TLS: cannot load the client certificate " + o.cert + ": " + SslError("unreadable"));
      }
      if (SSL_CTX_use_PrivateKey_file(tls->ctx, o.key.c_str(), SSL_FILETYPE_PEM) != 1 ||
          SSL_CTX_check_private_key(tls->ctx) != 1) {
        return Unavailable("TLS: cannot load the client key " + o.key + " (or it is not the certificate's): " +
                           SslError("unreadable"));
      }
    }
    SSL_CTX_set_verify(tls->ctx, SSL_VERIFY_PEER, nullptr);
    tls->ssl = SSL_new(tls->ctx);
    if (tls->ssl == nullptr) return Unavailable("TLS: " + SslError("cannot make a TLS session"));
    if (!http::ExpectPeer(tls->ssl, t.host, o.verify == config::TlsClientOptions::Verify::kIdentity)) {
      return Unavailable("TLS: cannot check the host name " + t.host);
    }
    SSL_set_fd(tls->ssl, c->fd_);
    SetTimeouts(c->fd_, t.connect_timeout);
    if (SSL_connect(tls->ssl) != 1) {
      if (const std::string refused = http::PeerRefusal(tls->ssl); !refused.empty()) {
        ERR_clear_error();
        return Unavailable("TLS: the server's certificate is refused: " + refused);
      }
      const int saved = errno;
      return Unavailable("TLS handshake failed: " +
                         SslError(saved == EAGAIN ? "no answer within the connect timeout of " +
                                                        std::to_string(t.connect_timeout.count()) + " ms"
                                                  : "the server closed the connection"));
    }
    c->tls_ = std::move(tls);
  }
  SetTimeouts(c->fd_, t.io_timeout);
  return c;
}

RedisConnection::~RedisConnection() {
  if (tls_ && !broken_) SSL_shutdown(tls_->ssl);  // best effort close_notify; never waits for the answer
  tls_.reset();
  if (fd_ >= 0) close(fd_);
  if (reader_ != nullptr) redisReaderFree(reader_);
}

Status RedisConnection::Fail(std::string why) {
  broken_ = true;
  return Unavailable(std::move(why));
}

void RedisConnection::Append(int argc, const char* const* argv, const size_t* lens) {
  out_ += '*';
  AppendDecimal(out_, static_cast<size_t>(argc));
  out_ += "\r\n";
  for (int i = 0; i < argc; ++i) {
    out_ += '$';
    AppendDecimal(out_, lens[i]);
    out_ += "\r\n";
    out_.append(argv[i], lens[i]);
    out_ += "\r\n";
  }
}

Status RedisConnection::WriteSome(const char* data, size_t size, size_t* written) {
  if (tls_) {
    ERR_clear_error();
    const int n = SSL_write(tls_->ssl, data, static_cast<int>(std::min<size_t>(size, 1 << 30)));
    if (n > 0) {
      *written = static_cast<size_t>(n);
      return Status::Ok();
    }
    const int saved = errno;
    if (SSL_get_error(tls_->ssl, n) == SSL_ERROR_SYSCALL && saved != EAGAIN) return Fail(saved ? Errno(saved) : "the server closed the connection");
    if (saved == EAGAIN) return Fail("cannot write within the io timeout of " + std::to_string(io_timeout_.count()) + " ms");
    return Fail("TLS: " + SslError("write failed"));
  }
  const ssize_t n = send(fd_, data, size, MSG_NOSIGNAL);
  if (n > 0) {
    *written = static_cast<size_t>(n);
    return Status::Ok();
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    return Fail("cannot write within the io timeout of " + std::to_string(io_timeout_.count()) + " ms");
  }
  return Fail(n < 0 ? Errno(errno) : "the server closed the connection");
}

Status RedisConnection::ReadSome(char* data, size_t size, size_t* got) {
  const auto timed_out = [this] {
    return "no answer within the io timeout of " + std::to_string(io_timeout_.count()) + " ms";
  };
  if (tls_) {
    ERR_clear_error();
    const int n = SSL_read(tls_->ssl, data, static_cast<int>(size));
    if (n > 0) {
      *got = static_cast<size_t>(n);
      return Status::Ok();
    }
    const int saved = errno;
    const int err = SSL_get_error(tls_->ssl, n);
    if (err == SSL_ERROR_ZERO_RETURN) return Fail("the server closed the connection");
    if (saved == EAGAIN || saved == EWOULDBLOCK) return Fail(timed_out());
    if (err == SSL_ERROR_SYSCALL) return Fail(saved ? Errno(saved) : "the server closed the connection");
    return Fail("TLS: " + SslError("read failed"));
  }
  const ssize_t n = recv(fd_, data, size, 0);
  if (n > 0) {
    *got = static_cast<size_t>(n);
    return Status::Ok();
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Fail(timed_out());
  return Fail(n < 0 ? Errno(errno) : "the server closed the connection");
}

Status RedisConnection::Flush() {
  if (broken_) return Unavailable("the connection failed before");
  size_t done = 0;
  while (done < out_.size()) {
    size_t n = 0;
    RETURN_IF_ERROR(WriteSome(out_.data() + done, out_.size() - done, &n));
    done += n;
  }
  out_.clear();
  return Status::Ok();
}

Result<ReplyPtr> RedisConnection::Read() {
  if (!out_.empty()) RETURN_IF_ERROR(Flush());
  if (broken_) return Unavailable("the connection failed before");
  char buffer[kReadChunk];
  for (;;) {
    void* reply = nullptr;
    if (redisReaderGetReply(reader_, &reply) != REDIS_OK) {
      return Fail(std::string("the server's reply is not RESP: ") + reader_->errstr);
    }
    if (reply != nullptr) return ReplyPtr(static_cast<redisReply*>(reply));
    size_t got = 0;
    RETURN_IF_ERROR(ReadSome(buffer, sizeof buffer, &got));
    if (redisReaderFeed(reader_, buffer, got) != REDIS_OK) {
      return Fail(std::string("the server's reply is not RESP: ") + reader_->errstr);
    }
  }
}

Result<ReplyPtr> RedisConnection::Command(int argc, const char* const* argv, const size_t* lens) {
  Append(argc, argv, lens);
  return Read();
}

}  // namespace sluice::connectors::redis
