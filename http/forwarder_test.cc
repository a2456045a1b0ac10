// The forwarder against a real http::Server on loopback: what it sends
// arrives as sent, every answer comes back with its status, body and
// headers, many transfers run at once on its one thread, and a peer that
// is gone, stalls or is stopped gives kUnavailable instead of an answer.
#include "http/forwarder.h"

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace sluice::http {
namespace {

using namespace std::chrono_literals;

Result<Response> Wait(Forwarder& f, const std::string& url, const std::string& method,
                      std::vector<std::pair<std::string, std::string>> headers, const std::string& body) {
  std::promise<Result<Response>> answer;
  auto got = answer.get_future();
  f.Send(url, method, std::move(headers), body, [&](Result<Response> r) { answer.set_value(std::move(r)); });
  return got.get();
}

TEST(Forwarder, SendsTheRequestAsGivenAndReturnsTheWholeAnswer) {
  Server server({}, [](Request&& req, Responder respond) {
    Response r;
    r.status = req.target == "/missing" ? 404 : 201;
    r.body = req.method + " " + req.target + " " + std::string(req.Header("Idempotency-Key").value_or("-")) + " " +
             req.body;
    r.content_type = "text/plain";
    r.headers.emplace_back("ETag", "\"7\"");
    respond(std::move(r));
  });
  ASSERT_TRUE(server.Start().ok());
  Forwarder f({});
  ASSERT_TRUE(f.Start().ok());
  const std::string base = "http://127.0.0.1:" + std::to_string(server.port());
  auto r = Wait(f, base + "/v1/account/a1/patch?x=1", "POST", {{"Idempotency-Key", "k1"}}, R"({"n":1})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->status, 201);
  EXPECT_EQ(r->body, R"(POST /v1/account/a1/patch?x=1 k1 {"n":1})");
  EXPECT_EQ(r->content_type, "text/plain");
  bool etag = false;
  for (const auto& [name, value] : r->headers) {
    EXPECT_NE(name, "Content-Length");  // hop-by-hop headers are the relay's own
    if (name == "ETag") etag = value == "\"7\"";
  }
  EXPECT_TRUE(etag);
  auto missing = Wait(f, base + "/missing", "GET", {}, "");
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->status, 404);  // an answer, not a failure
}

TEST(Forwarder, ManyTransfersAtOnceOnOneThread) {
  std::atomic<int> in_handler{0};
  std::atomic<int> most{0};
  // Each answer waits a little on its own thread, so transfers overlap.
  ServerOptions two_loops;
  two_loops.io_threads = 2;
  two_loops.limits.max_connections = 1000;  // every transfer may have its own connection
  Server server(two_loops, [&](Request&& req, Responder respond) {
    const int now = ++in_handler;
    int m = most.load();
    while (now > m && !most.compare_exchange_weak(m, now)) {
    }
    std::thread([&in_handler, respond = std::move(respond), body = std::move(req.body)]() mutable {
      std::this_thread::sleep_for(20ms);
      --in_handler;
      Response r;
      r.body = body;
      respond(std::move(r));
    }).detach();
  });
  ASSERT_TRUE(server.Start().ok());
  Forwarder f({});
  ASSERT_TRUE(f.Start().ok());
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port()) + "/echo";
  constexpr int kTransfers = 200;
  std::vector<std::promise<Result<Response>>> answers(kTransfers);
  for (int i = 0; i < kTransfers; ++i) {
    f.Send(url, "POST", {}, std::to_string(i), [&answers, i](Result<Response> r) { answers[i].set_value(std::move(r)); });
  }
  for (int i = 0; i < kTransfers; ++i) {
    auto r = answers[i].get_future().get();
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->body, std::to_string(i));
  }
  EXPECT_GT(most.load(), 8) << "transfers did not overlap";
  std::this_thread::sleep_for(50ms);  // the detached answers are written
}

TEST(Forwarder, APeerThatIsGoneOrStallsOrAStoppedForwarderIsUnavailable) {
  ForwarderOptions o;
  o.request_timeout = 300ms;
  Forwarder f(o);
  ASSERT_TRUE(f.Start().ok());
  // Nothing listens: bound and released.
  uint16_t gone = 0;
  {
    Server s({}, [](Request&&, Responder respond) { respond({}); });
    ASSERT_TRUE(s.Start().ok());
    gone = s.port();
  }
  auto r = Wait(f, "http://127.0.0.1:" + std::to_string(gone) + "/x", "GET", {}, "");
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("127.0.0.1:" + std::to_string(gone)), std::string::npos)
      << r.status().message();

  // A peer that never answers: the request timeout ends the transfer.
  std::vector<Responder> never;
  std::mutex mu;
  Server stall({}, [&](Request&&, Responder respond) {
    std::lock_guard lock(mu);
    never.push_back(std::move(respond));
  });
  ASSERT_TRUE(stall.Start().ok());
  const auto start = std::chrono::steady_clock::now();
  r = Wait(f, "http://127.0.0.1:" + std::to_string(stall.port()) + "/x", "POST", {}, "{}");
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);

  // Stopped with a transfer in flight, and sent to after it stopped.
  std::promise<Result<Response>> pending;
  f.Send("http://127.0.0.1:" + std::to_string(stall.port()) + "/y", "GET", {}, "",
         [&](Result<Response> x) { pending.set_value(std::move(x)); });
  std::this_thread::sleep_for(50ms);
  f.Stop();
  EXPECT_EQ(pending.get_future().get().status().code(), StatusCode::kUnavailable);
  r = Wait(f, "http://127.0.0.1:" + std::to_string(stall.port()) + "/z", "GET", {}, "");
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  {
    std::lock_guard lock(mu);
    for (auto& respond : never) respond({});
    never.clear();  // before the server goes (they hold its connections)
  }
}

}  // namespace
}  // namespace sluice::http
