#include "admin/admin_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <openssl/ssl.h>

#include "core/json.h"
#include "http/tls_peer.h"

namespace sluice::admin {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;

std::string AdminReply::ErrorMessage() const {
  if (body.is_object() && body.contains("error") && body["error"].is_object() && body["error"].contains("message") &&
      body["error"]["message"].is_string()) {
    return body["error"]["message"].get<std::string>();
  }
  return body.is_null() ? "HTTP " + std::to_string(status) : body.dump();
}

AdminClient::AdminClient(const config::AdminConfig& admin, std::chrono::milliseconds timeout)
    : admin_(admin), timeout_(timeout) {}

Result<AdminReply> AdminClient::Get(const std::string& target) { return Call("GET", target, ""); }

Result<AdminReply> AdminClient::Post(const std::string& target, const Json& body) {
  return Call("POST", target, body.dump());
}

namespace {

// One request and its reply over a connected stream (plain or TLS).
template <typename Stream>
Result<AdminReply> Exchange(Stream& stream, const std::string& where, const std::string& token,
                            const std::string& method, const std::string& target, const std::string& body) {
  beast::error_code ec;
  http::request<http::string_body> req(method == "POST" ? http::verb::post : http::verb::get, target, 11);
  req.set(http::field::host, where);
  req.set(http::field::content_type, "application/json");
  if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
  req.body() = body;
  req.prepare_payload();
  http::write(stream, req, ec);
  if (ec) return Unavailable("sending to the admin endpoint " + where + ": " + ec.message());
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(stream, buffer, res, ec);
  if (ec) return Unavailable("reading the reply of the admin endpoint " + where + ": " + ec.message());
  AdminReply reply;
  reply.status = static_cast<int>(res.result_int());
  reply.body = ParseJsonOrDiscarded(res.body());
  if (reply.body.is_discarded()) reply.body = nullptr;
  return reply;
}

}  // namespace

Result<AdminReply> AdminClient::Call(const std::string& method, const std::string& target, const std::string& body) {
  // A listener on every address is reached on this machine's loopback.
  std::string host = admin_.listen_host;
  if (host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  const std::string where = (host.find(':') == std::string::npos ? host : "[" + host + "]") + ":" +
                            std::to_string(admin_.listen_port);
  try {
    net::io_context io;
    net::ip::tcp::resolver resolver(io);
    beast::tcp_stream stream(io);
    stream.expires_after(timeout_);
    beast::error_code ec;
    const auto endpoints = resolver.resolve(host, std::to_string(admin_.listen_port), ec);
    if (ec) return Unavailable("cannot resolve the admin endpoint " + where + ": " + ec.message());
    stream.connect(endpoints, ec);
    if (ec == net::error::connection_refused) {
      return Unavailable("nothing listens on the admin endpoint " + where +
                         ": is a `sluice serve` or `sluice sync` process running with this config?");
    }
    if (ec) return Unavailable("cannot reach the admin endpoint " + where + ": " + ec.message());
    if (!admin_.tls.enabled()) {
      Result<AdminReply> reply = Exchange(stream, where, admin_.token, method, target, body);
      stream.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
      return reply;
    }
    // TLS: the listener's certificate must chain to admin.tls.ca (else to a
    // CA this machine trusts) and name the host connected to.
    ssl::context ctx(ssl::context::tls_client);
    const config::ListenerTls& t = admin_.tls;
    if (t.ca.empty()) {
      ctx.set_default_verify_paths(ec);
    } else {
      ctx.load_verify_file(t.ca, ec);
    }
    if (ec) return FailedPrecondition("cannot load the CA file " + t.ca + " (admin.tls.ca): " + ec.message());
    if (!t.client_ca.empty()) {  // the endpoint wants a client certificate: the listener's own
      ctx.use_certificate_chain_file(t.cert, ec);
      if (!ec) ctx.use_private_key_file(t.key, ssl::context::pem, ec);
      if (ec) return FailedPrecondition("cannot load admin.tls.cert and key: " + ec.message());
    }
    ctx.set_verify_mode(ssl::verify_peer);
    beast::ssl_stream<beast::tcp_stream> tls(std::move(stream), ctx);
    sluice::http::ExpectPeer(tls.native_handle(), host, true);
    tls.handshake(ssl::stream_base::client, ec);
    if (ec) {
      const std::string refused = sluice::http::PeerRefusal(tls.native_handle());
      const std::string why = refused.empty() ? ec.message() : "its certificate is refused: " + refused;
      return Unavailable("TLS with the admin endpoint " + where + " failed: " + why +
                         (t.ca.empty() ? " (admin.tls.ca names the CA that signed its certificate)" : ""));
    }
    Result<AdminReply> reply = Exchange(tls, where, admin_.token, method, target, body);
    beast::get_lowest_layer(tls).socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
    return reply;
  } catch (const std::exception& e) {
    return Unavailable("talking to the admin endpoint " + where + ": " + e.what());
  }
}

}  // namespace sluice::admin
