#include "admin/admin_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "core/json.h"

namespace sluice::admin {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;

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

Result<AdminReply> AdminClient::Call(const std::string& method, const std::string& target, const std::string& body) {
  const std::string where = admin_.listen_host + ":" + std::to_string(admin_.listen_port);
  try {
    net::io_context io;
    net::ip::tcp::resolver resolver(io);
    beast::tcp_stream stream(io);
    stream.expires_after(timeout_);
    beast::error_code ec;
    const auto endpoints = resolver.resolve(admin_.listen_host, std::to_string(admin_.listen_port), ec);
    if (ec) return Unavailable("cannot resolve the admin endpoint " + where + ": " + ec.message());
    stream.connect(endpoints, ec);
    if (ec == net::error::connection_refused) {
      return Unavailable("nothing listens on the admin endpoint " + where +
                         ": is a `sluice serve` or `sluice sync` process running with this config?");
    }
    if (ec) return Unavailable("cannot reach the admin endpoint " + where + ": " + ec.message());
    http::request<http::string_body> req(method == "POST" ? http::verb::post : http::verb::get, target, 11);
    req.set(http::field::host, where);
    req.set(http::field::content_type, "application/json");
    if (!admin_.token.empty()) req.set(http::field::authorization, "Bearer " + admin_.token);
    req.body() = body;
    req.prepare_payload();
    http::write(stream, req, ec);
    if (ec) return Unavailable("sending to the admin endpoint " + where + ": " + ec.message());
    beast::flat_buffer buffer;
    http::response<http::string_body> res;
    http::read(stream, buffer, res, ec);
    if (ec) return Unavailable("reading the reply of the admin endpoint " + where + ": " + ec.message());
    stream.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
    AdminReply reply;
    reply.status = static_cast<int>(res.result_int());
    reply.body = ParseJsonOrDiscarded(res.body());
    if (reply.body.is_discarded()) reply.body = nullptr;
    return reply;
  } catch (const std::exception& e) {
    return Unavailable("talking to the admin endpoint " + where + ": " + e.what());
  }
}

}  // namespace sluice::admin
