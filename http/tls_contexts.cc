#include "http/tls_contexts.h"

#include <openssl/ssl.h>
#include <sys/stat.h>

#include <utility>

#include "core/log.h"

namespace sluice::http {
namespace ssl = boost::asio::ssl;

Result<std::unique_ptr<TlsContexts>> TlsContexts::Load(const ServerTls& files, std::string where) {
  std::unique_ptr<TlsContexts> t(new TlsContexts(files, std::move(where)));
  t->stamps_ = t->Stamps();
  ASSIGN_OR_RETURN(t->current_, t->Build());
  t->checked_ = std::chrono::steady_clock::now();
  return t;
}

std::vector<TlsContexts::Stamp> TlsContexts::Stamps() const {
  std::vector<Stamp> out;
  for (const std::string* path : {&files_.cert, &files_.key, &files_.client_ca}) {
    Stamp s;
    struct stat st {};
    if (!path->empty() && ::stat(path->c_str(), &st) == 0) {
      s.inode = st.st_ino;
      s.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
      s.size = st.st_size;
    }
    out.push_back(s);
  }
  return out;
}

Result<std::shared_ptr<TlsContexts::Context>> TlsContexts::Build() const {
  auto ctx = std::make_shared<Context>(Context::tls_server);
  boost::system::error_code ec;
  ctx->set_options(Context::default_workarounds | Context::no_sslv2 | Context::no_sslv3 | Context::no_tlsv1 |
                       Context::no_tlsv1_1 | Context::single_dh_use,
                   ec);
  const auto failed = [&](const std::string& what, const std::string& file) {
    return FailedPrecondition("TLS on " + where_ + ": cannot load the " + what + " " + file + ": " + ec.message());
  };
  if (ctx->use_certificate_chain_file(files_.cert, ec); ec) return failed("certificate", files_.cert);
  if (ctx->use_private_key_file(files_.key, Context::pem, ec); ec) {
    return FailedPrecondition("TLS on " + where_ + ": the private key " + files_.key +
                              " does not load or is not the key of " + files_.cert + ": " + ec.message());
  }
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    return FailedPrecondition("TLS on " + where_ + ": the private key " + files_.key + " is not the key of " +
                              files_.cert);
  }
  if (!files_.client_ca.empty()) {
    if (ctx->load_verify_file(files_.client_ca, ec); ec) return failed("client CA file", files_.client_ca);
    // Tell clients which CAs are accepted, so that one with several certificates picks the right one.
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(files_.client_ca.c_str());
    if (names != nullptr) SSL_CTX_set_client_CA_list(ctx->native_handle(), names);
    ctx->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert, ec);
  }
  return ctx;
}

std::shared_ptr<TlsContexts::Context> TlsContexts::Current() {
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now - checked_ < check_every) return current_;
  checked_ = now;
  std::vector<Stamp> stamps = Stamps();
  if (stamps == stamps_) return current_;
  stamps_ = std::move(stamps);
  Result<std::shared_ptr<Context>> built = Build();
  if (!built.ok()) {
    Log(LogLevel::kError, "http: " + built.status().message() + "; still serving the previous certificate");
    return current_;
  }
  current_ = std::move(built).value();
  Log(LogLevel::kInfo, "http: TLS on " + where_ + ": loaded the new certificate " + files_.cert);
  return current_;
}

}  // namespace sluice::http
