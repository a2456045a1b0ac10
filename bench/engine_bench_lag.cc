#include "bench/engine_bench_lag.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <unordered_map>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "bench/engine_bench_lag_kafka.h"
#include "bench/engine_bench_util.h"
#include "bench/mysql_bench.h"
#include "connectors/redis/redis_options.h"
#include "core/partitioner.h"
#include "sql/connection.h"
#include "sql/params.h"
#include "sql/routed_tables.h"
#include "sql/schema.h"
#include "writer/notice_sender.h"

namespace sluice::bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr auto kRetryDelay = std::chrono::milliseconds(20);
constexpr size_t kMaxProblems = 10;

uint64_t Nanos(Clock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

class LagConnection;

// Everything the event-loop thread owns while the load runs.
struct LoadState {
  const LagOptions& o;
  asio::io_context io{1};
  tcp::endpoint endpoint;
  std::string host_header;
  std::string note;
  Clock::time_point start;
  Clock::time_point end;  // commands not sent by then are dropped (counted in unsent)
  uint64_t warmup_commands = 0;
  uint64_t total_commands = 0;
  std::vector<std::unique_ptr<LagConnection>> connections;
  std::deque<LagConnection*> idle;
  std::deque<uint64_t> due;
  uint64_t next_index = 0;
  asio::steady_timer tick{io};

  // Results (event-loop thread only, read after the join).
  std::vector<uint64_t> latencies_ns;           // replies inside the measured window
  uint64_t window_replies = 0;                  // 200s that arrived inside the measured window
  std::vector<uint64_t> final_version;          // per sampled entity, from replies
  std::vector<std::string> problems;
  uint64_t max_backlog = 0;
  uint64_t unsent = 0;
  // Read by the progress thread.
  std::atomic<uint64_t> sent{0}, ok{0}, failures{0}, retries{0}, reconnects{0}, backlog{0};

  explicit LoadState(const LagOptions& options) : o(options) {}

  Clock::time_point DueAt(uint64_t index) const {
    return start + std::chrono::duration_cast<Clock::duration>(
                       std::chrono::duration<double>(static_cast<double>(index) / o.rate));
  }
  uint64_t EntityOfCommand(uint64_t index) const { return EntityOf(index, o.entities, 7); }
  void Problem(std::string what) {
    if (problems.size() < kMaxProblems) problems.push_back(std::move(what));
  }
  void Tick();
  void Dispatch();
  void Released(LagConnection* c) {
    idle.push_back(c);
    Dispatch();
  }
  void Finish(uint64_t index, unsigned status, const std::string& body);
  void Fail(uint64_t index, const std::string& why) {
    failures.fetch_add(1, std::memory_order_relaxed);
    Problem(o.run_id + "-lc" + std::to_string(index) + ": " + why);
  }
};

// One keep-alive connection with at most one command in flight; all its
// handlers run on the event-loop thread.
class LagConnection {
 public:
  explicit LagConnection(LoadState& st) : st_(st), socket_(st.io), timer_(st.io) {}

  void Send(uint64_t index) {
    index_ = index;
    attempts_ = 0;
    BuildRequest();
    if (open_) {
      Write();
    } else {
      Connect();
    }
  }

 private:
  void BuildRequest() {
    const uint64_t k = st_.EntityOfCommand(index_);
    std::string body = R"({"balance":)" + std::to_string(index_) + R"(,"note":")" + st_.note + R"(","owner":"o)" +
                       std::to_string(k % 1000) + "\"}";
    request_ = "POST /v1/entities/account/" + LagEntityId(st_.o.run_id, k) + "/commands/patch HTTP/1.1\r\nHost: " +
               st_.host_header + "\r\nContent-Type: application/json\r\nIdempotency-Key: " + st_.o.run_id + "-lc" +
               std::to_string(index_) + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  }

  void Connect() {
    ++attempts_;
    socket_.async_connect(st_.endpoint, [this](beast::error_code ec) {
      if (ec) return Broken(ec, "connect");
      socket_.set_option(tcp::no_delay(true), ec);
      open_ = true;
      WriteAgain();
    });
  }

  void Write() {
    ++attempts_;
    WriteAgain();
  }

  void WriteAgain() {
    asio::async_write(socket_, asio::buffer(request_), [this](beast::error_code ec, size_t) {
      if (ec) return Broken(ec, "write");
      Read();
    });
  }

  void Read() {
    parser_.emplace();
    parser_->body_limit(1 << 20);
    http::async_read(socket_, buffer_, *parser_, [this](beast::error_code ec, size_t) {
      if (ec) return Broken(ec, "read");
      const auto& res = parser_->get();
      if (!res.keep_alive()) Close();
      const unsigned status = res.result_int();
      if (status == 503 && attempts_ < st_.o.max_attempts) {
        st_.retries.fetch_add(1, std::memory_order_relaxed);
        timer_.expires_after(kRetryDelay);
        timer_.async_wait([this](beast::error_code) { open_ ? Write() : Connect(); });
        return;
      }
      st_.Finish(index_, status, res.body());
      st_.Released(this);
    });
  }

  void Broken(beast::error_code ec, const char* what) {
    Close();
    st_.reconnects.fetch_add(1, std::memory_order_relaxed);
    if (attempts_ >= st_.o.max_attempts) {
      st_.Fail(index_, std::string("gave up after ") + std::to_string(attempts_) + " attempts; last " + what +
                           ": " + ec.message());
      st_.Released(this);
      return;
    }
    timer_.expires_after(kRetryDelay);
    timer_.async_wait([this](beast::error_code) { Connect(); });
  }

  void Close() {
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    buffer_.consume(buffer_.size());
    open_ = false;
  }

  LoadState& st_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::string_body>> parser_;
  std::string request_;
  bool open_ = false;
  uint32_t attempts_ = 0;
  uint64_t index_ = 0;
};

void LoadState::Tick() {
  const auto now = Clock::now();
  while (next_index < total_commands && DueAt(next_index) <= now) due.push_back(next_index++);
  max_backlog = std::max<uint64_t>(max_backlog, due.size());
  Dispatch();
  if (next_index < total_commands && now < end) {
    tick.expires_at(DueAt(next_index));
    tick.async_wait([this](beast::error_code ec) {
      if (!ec) Tick();
    });
  }
}

void LoadState::Dispatch() {
  // The schedule is over: what the server could not take in time is not sent
  // (an open loop that ran on would only measure a queue).
  if (!due.empty() && Clock::now() >= end) {
    unsent += due.size() + (total_commands - next_index);
    due.clear();
    next_index = total_commands;
  }
  while (!due.empty() && !idle.empty()) {
    LagConnection* c = idle.front();
    idle.pop_front();
    const uint64_t index = due.front();
    due.pop_front();
    sent.fetch_add(1, std::memory_order_relaxed);
    c->Send(index);
  }
  backlog = due.size();
}

void LoadState::Finish(uint64_t index, unsigned status, const std::string& body) {
  const auto now = Clock::now();
  if (status != 200) return Fail(index, "HTTP " + std::to_string(status) + " " + body.substr(0, 200));
  const auto json = nlohmann::json::parse(body, nullptr, false);
  if (json.is_discarded() || !json.is_object()) return Fail(index, "the reply is not a JSON object");
  const uint64_t k = EntityOfCommand(index);
  const auto version = json.find("version");
  if (version == json.end() || !version->is_number_unsigned() || version->get<uint64_t>() == 0) {
    return Fail(index, "no version in the reply: " + body.substr(0, 200));
  }
  if (json.value("id", "") != LagEntityId(o.run_id, k)) return Fail(index, "the reply names another entity");
  ok.fetch_add(1, std::memory_order_relaxed);
  if (now >= DueAt(warmup_commands) && now < end) {
    ++window_replies;
    latencies_ns.push_back(Nanos(now - DueAt(index)));
  }
  if (k < final_version.size()) final_version[k] = std::max(final_version[k], version->get<uint64_t>());
}

// Polls the sampled entities' keys and records each new version's first sight.
// The Redis view's observer: MGETs of the sampled keys in a loop.
class Sampler : public LagObserver {
 public:
  Sampler(std::unique_ptr<RedisConn> conn, std::vector<std::string> keys, uint32_t pause_us)
      : conn_(std::move(conn)), keys_(std::move(keys)), pause_us_(pause_us), last_(keys_.size()) {
    for (auto& v : last_) v.store(0);
  }

  void Start() override {
    thread_ = std::thread([this] { Loop(); });
  }
  Status Stop() override {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return status_;
  }
  uint64_t last(size_t k) const override { return last_[k].load(); }
  uint64_t polls() const override { return polls_.load(); }
  uint64_t went_back() const override { return went_back_.load(); }
  size_t observations() const override { return observations_.load(); }
  double cycle_ms() const override {
    const uint64_t n = polls_.load();
    return n > 1 ? std::chrono::duration<double, std::milli>(last_poll_ - first_poll_).count() / double(n - 1) : 0;
  }
  const std::vector<Seen>& seen() const override { return seen_; }

 private:
  void Loop() {
    std::vector<const char*> argv = {"MGET"};
    std::vector<size_t> lens = {4};
    for (const auto& k : keys_) {
      argv.push_back(k.data());
      lens.push_back(k.size());
    }
    while (!stop_) {
      Status st = conn_->AppendArgv(static_cast<int>(argv.size()), argv.data(), lens.data());
      auto reply = st.ok() ? conn_->Read() : Result<RedisConn::ReplyPtr>(st);
      const int64_t now_us = RealtimeMicros();
      if (!reply.ok() || (*reply)->type != REDIS_REPLY_ARRAY || (*reply)->elements != keys_.size()) {
        status_ = reply.ok() ? Internal("redis: unexpected reply to MGET") : reply.status();
        return;
      }
      const auto now = Clock::now();
      if (polls_.load() == 0) first_poll_ = now;
      last_poll_ = now;
      const redisReply& r = **reply;
      for (size_t k = 0; k < r.elements; ++k) {
        const redisReply& e = *r.element[k];
        if (e.type != REDIS_REPLY_STRING) continue;
        const uint64_t v = VersionOfJsonValue({e.str, e.len});
        const uint64_t before = last_[k].load(std::memory_order_relaxed);
        if (v > before) {
          seen_.push_back(Seen{static_cast<uint32_t>(k), v, now_us});
          last_[k].store(v);
          observations_.fetch_add(1, std::memory_order_relaxed);
        } else if (v < before) {
          went_back_.fetch_add(1);
        }
      }
      polls_.fetch_add(1, std::memory_order_relaxed);
      if (pause_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(pause_us_));
    }
  }

  std::unique_ptr<RedisConn> conn_;
  std::vector<std::string> keys_;
  const uint32_t pause_us_;
  std::vector<std::atomic<uint64_t>> last_;
  std::vector<Seen> seen_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> polls_{0}, went_back_{0};
  std::atomic<size_t> observations_{0};
  Clock::time_point first_poll_{}, last_poll_{};
  Status status_ = Status::Ok();
  std::thread thread_;
};

// The "storage" source: the lag run's events inserted straight into the
// event tables on the same open-loop schedule as the HTTP source (event i
// due at start + i/rate, entity EntityOf(i), a patch-like state), by
// storage_writers threads. Each thread owns a set of partitions and so the
// event_ids and entity versions in them; per round it inserts every due
// event of its partitions in one transaction (one INSERT per partition),
// the way a partition worker batches what arrived while it committed.
// With --notices each commit is announced to the engines the way a writer
// announces it (writer/notice_sender.h), so that they read the partition at
// once rather than at their next look at the heads.
class StorageLoad {
 public:
  StorageLoad(const LagOptions& o, const config::Config& config, std::string type, uint32_t partitions)
      : o_(o), params_(sql::ParamsFrom(config.mysql)), type_(std::move(type)), partitions_(partitions),
        note_(MakeNote(o.run_id, 30)), version_(o.entities, 0), partition_of_(o.entities) {
    for (uint64_t k = 0; k < o.entities; ++k) partition_of_[k] = PartitionOf(LagEntityId(o.run_id, k), partitions);
    if (o.notices) {
      notices_ = std::make_unique<writer::NoticeSender>(writer::NoticeSender::Options{
          .storage = sql::OpenStorage(sql::LayoutFrom(config)), .member_ttl = config.engine.lease_ttl});
    }
  }

  // Runs the schedule to its end; the caller's thread waits for all writers.
  void Run(Clock::time_point start, uint64_t total, Clock::time_point window_begin, Clock::time_point end) {
    if (notices_) notices_->Start();
    std::vector<std::thread> threads;
    const uint32_t writers = std::max<uint32_t>(1, std::min(o_.storage_writers, partitions_));
    for (uint32_t t = 0; t < writers; ++t) {
      threads.emplace_back([=, this] { Writer(t, writers, start, total, window_begin, end); });
    }
    for (auto& th : threads) th.join();
    if (notices_) notices_->Stop();
  }

  std::atomic<uint64_t> inserted{0}, window_events{0}, unsent{0}, backlog{0};
  std::atomic<bool> failed{false};
  // Per entity, the last version inserted (read after Run()).
  uint64_t version(uint64_t k) const { return version_[k]; }
  std::vector<std::string> problems() const {
    std::lock_guard lock(mu_);
    return problems_;
  }

 private:
  void Problem(std::string what) {
    std::lock_guard lock(mu_);
    if (problems_.size() < kMaxProblems) problems_.push_back(std::move(what));
    failed = true;
  }

  void Writer(uint32_t t, uint32_t writers, Clock::time_point start, uint64_t total, Clock::time_point window_begin,
              Clock::time_point end) {
    auto opened = sql::Connection::Open(params_);
    if (!opened.ok()) return Problem("storage writer: " + opened.status().message());
    sql::Connection& c = **opened;
    auto due_at = [&](uint64_t i) {
      return start + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(static_cast<double>(i) / o_.rate));
    };
    auto own = [&](uint64_t i) { return partition_of_[EntityOf(i, o_.entities, 7)] % writers == t; };
    // Each partition carries on after whatever an earlier run left in it.
    std::vector<uint64_t> next_event_id(partitions_, 1);
    for (uint32_t p = t; p < partitions_; p += writers) {
      auto head = c.Query("SELECT COALESCE(MAX(event_id), 0) FROM " + sql::QuoteIdent(sql::EventTableName(type_, p)));
      if (!head.ok()) return Problem("storage writer: " + head.status().message());
      next_event_id[p] = 1 + std::stoull(head->at(0).at(0).value_or("0"));
    }
    std::vector<std::string> statements(partitions_);
    std::vector<uint64_t> rows(partitions_, 0);
    uint64_t i = 0;
    while (i < total && !failed) {
      const auto now = Clock::now();
      if (now >= end) {  // what could not be inserted in time is not (as with HTTP)
        uint64_t left = 0;
        for (; i < total; ++i) left += own(i) ? 1 : 0;
        unsent += left;
        break;
      }
      uint64_t n = 0;
      for (; i < total && due_at(i) <= now; ++i) {
        if (!own(i)) continue;
        const uint64_t k = EntityOf(i, o_.entities, 7);
        const uint32_t p = partition_of_[k];
        std::string& q = statements[p];
        if (rows[p] == 0) {
          q = "INSERT INTO " + sql::QuoteIdent(sql::EventTableName(type_, p)) + " " + sql::kEventInsertColumns +
              " VALUES ";
        } else {
          q += ',';
        }
        const uint64_t v = ++version_[k];
        const std::string state = R"({"balance":)" + std::to_string(i) + R"(,"note":")" + note_ +
                                  R"(","owner":"o)" + std::to_string(k % 1000) + "\"}";
        q += '(' + std::to_string(next_event_id[p]++) + ',';
        c.AppendQuoted(q, LagEntityId(o_.run_id, k));
        q += ',' + std::to_string(v) + ',';
        c.AppendQuoted(q, o_.run_id + "-lc" + std::to_string(i));
        q += ",'patch',NULL,";
        c.AppendQuoted(q, state);
        q += R"(,'{"version":)" + std::to_string(v) + "}',";
        c.AppendQuoted(q, state);
        q += ",NULL,0)";
        ++rows[p];
        ++n;
      }
      backlog = n;
      if (n == 0) {  // sleep until this writer's next event is due
        uint64_t j = i;
        while (j < total && !own(j)) ++j;
        if (j >= total) break;
        std::this_thread::sleep_until(std::min(due_at(j), end));
        continue;
      }
      Status st = c.Execute("BEGIN").status();
      std::vector<uint32_t> written;
      for (uint32_t p = 0; p < partitions_ && st.ok(); ++p) {
        if (rows[p] == 0) continue;
        st = c.Execute(statements[p]).status();
        rows[p] = 0;
        written.push_back(p);
      }
      if (st.ok()) st = c.Execute("COMMIT").status();
      if (!st.ok()) return Problem("storage writer: " + st.message());
      const auto committed = Clock::now();
      if (notices_) {
        for (uint32_t p : written) notices_->Announce(type_, p, next_event_id[p] - 1);
      }
      inserted += n;
      if (committed >= window_begin && committed < end) window_events += n;
    }
  }

  const LagOptions& o_;
  const sql::ConnectParams params_;
  const std::string type_;
  const uint32_t partitions_;
  const std::string note_;
  std::vector<uint64_t> version_;         // per entity; only its partition's writer touches it
  std::vector<uint32_t> partition_of_;    // per entity
  std::unique_ptr<writer::NoticeSender> notices_;  // --notices
  mutable std::mutex mu_;
  std::vector<std::string> problems_;
};

}  // namespace

Result<LagResult> RunLag(const config::Config& config, const config::SinkConfig& sink, const LagOptions& o) {
  using connectors::redis::RedisSinkOptions;
  const bool kafka = sink.type == "kafka";
  if (!kafka && (sink.type != "redis" || sink.Options<RedisSinkOptions>().format != RedisSinkOptions::Format::kJson)) {
    return InvalidArgument("the lag benchmark needs a redis sink with format json, or a kafka sink");
  }
  if (o.rate <= 0 || o.seconds <= 0 || o.connections == 0 || o.entities == 0) {
    return InvalidArgument("rate, seconds, connections and entities must be positive");
  }
  if (o.notices && !config.engine.notices.enabled) {
    return InvalidArgument("--notices: the config turns commit notices off (engine.notices.enabled: false)");
  }
  const uint32_t partitions = config.entities.at(sink.entity).partitions;
  const uint32_t sample = static_cast<uint32_t>(std::min<uint64_t>(o.sample, o.entities));
  const bool raw = o.source == "kafka_raw";
  if (raw && !kafka) return InvalidArgument("the kafka_raw source needs a kafka sink");
  KafkaRawLoad raw_load(o, sink, partitions);
  if (raw) RETURN_IF_ERROR(raw_load.Open());  // the topic, before its consumer
  std::unique_ptr<LagObserver> observer;
  if (kafka) {
    std::vector<std::string> ids;
    for (uint32_t k = 0; k < sample; ++k) ids.push_back(LagEntityId(o.run_id, k));
    ASSIGN_OR_RETURN(observer, KafkaLagObserver(sink, std::move(ids)));
  } else {
    ASSIGN_OR_RETURN(auto keys, BenchRedisKeys(sink));
    std::vector<std::string> sample_keys;
    for (uint32_t k = 0; k < sample; ++k) sample_keys.push_back(keys.Key(LagEntityId(o.run_id, k)));
    ASSIGN_OR_RETURN(auto redis, RedisConn::Open(o.redis));
    observer = std::make_unique<Sampler>(std::move(redis), sample_keys, o.poll_interval_us);
  }
  LagObserver& sampler = *observer;

  const bool storage = o.source == "storage" || raw;
  if (!storage && o.source != "http") return InvalidArgument("the source must be http, storage or kafka_raw");
  LoadState st(o);
  StorageLoad storage_load(o, config, sink.entity, partitions);
  if (!storage) {
    tcp::resolver resolver(st.io);
    beast::error_code ec;
    auto results = resolver.resolve(o.host, std::to_string(o.port), ec);
    if (ec || results.empty()) return Unavailable("cannot resolve " + o.host + ": " + ec.message());
    st.endpoint = results.begin()->endpoint();
  }
  st.host_header = o.host + ":" + std::to_string(o.port);
  st.note = MakeNote(o.run_id, 30);
  st.warmup_commands = static_cast<uint64_t>(o.warmup_seconds * o.rate);
  st.total_commands = st.warmup_commands + static_cast<uint64_t>(o.seconds * o.rate);
  st.final_version.assign(sample, 0);
  st.latencies_ns.reserve(st.total_commands);
  for (uint32_t c = 0; c < o.connections; ++c) {
    st.connections.push_back(std::make_unique<LagConnection>(st));
    st.idle.push_back(st.connections.back().get());
  }

  CpuWatch cpu;
  for (const auto& [name, pid] : o.watch) cpu.Watch(name, pid);
  ASSIGN_OR_RETURN(auto counters_conn, sql::Connection::Open(sql::ParamsFrom(config.mysql)));

  LagResult r;
  r.commands = st.total_commands - st.warmup_commands;
  sampler.Start();
  const int64_t start_us = RealtimeMicros();
  st.start = Clock::now();
  st.end = st.DueAt(st.total_commands);
  const int64_t window_begin_us = start_us + static_cast<int64_t>(o.warmup_seconds * 1e6);
  const int64_t window_end_us = window_begin_us + static_cast<int64_t>(o.seconds * 1e6);
  Clock::time_point load_end;
  {
    uint64_t last_done = 0;
    double last_t = 0;
    ProgressLine progress("lag", [&](double t) {
      if (storage) {
        const uint64_t done = raw ? raw_load.produced_count.load() : storage_load.inserted.load();
        const double rate = t > last_t ? static_cast<double>(done - last_done) / (t - last_t) : 0;
        last_done = done;
        last_t = t;
        return std::string(t < o.warmup_seconds ? "warm-up, " : "") + WithCommas(done) + "/" +
               WithCommas(st.total_commands) + (raw ? " records produced, " : " events inserted, ") +
               WithCommas(static_cast<uint64_t>(rate)) + "/s now, due in the last round " +
               std::to_string(raw ? raw_load.backlog.load() : storage_load.backlog.load()) +
               ", versions seen by the sampler " + WithCommas(sampler.observations());
      }
      const uint64_t done = st.ok.load() + st.failures.load();
      const double rate = t > last_t ? static_cast<double>(done - last_done) / (t - last_t) : 0;
      last_done = done;
      last_t = t;
      return std::string(t < o.warmup_seconds ? "warm-up, " : "") + WithCommas(done) + "/" +
             WithCommas(st.total_commands) + " replies, " + WithCommas(static_cast<uint64_t>(rate)) +
             "/s now, waiting for a connection " + std::to_string(st.backlog.load()) + ", failures " +
             std::to_string(st.failures.load()) + ", 503 retries " + std::to_string(st.retries.load()) +
             ", versions seen by the sampler " + WithCommas(sampler.observations());
    });
    std::thread loop([&] {
      if (raw) {
        raw_load.Run(st.start, st.total_commands, st.DueAt(st.warmup_commands), st.end);
        return;
      }
      if (storage) {
        storage_load.Run(st.start, st.total_commands, st.DueAt(st.warmup_commands), st.end);
        return;
      }
      st.Tick();
      st.io.run();
    });
    // The CPU split covers the measured window only.
    std::this_thread::sleep_until(st.start + std::chrono::duration_cast<Clock::duration>(
                                                 std::chrono::duration<double>(o.warmup_seconds)));
    const CpuWatch::Sample a = cpu.Take();
    auto counters_a = ReadServerCounters(*counters_conn);
    std::this_thread::sleep_until(st.start + std::chrono::duration_cast<Clock::duration>(
                                                 std::chrono::duration<double>(o.warmup_seconds + o.seconds)));
    const CpuWatch::Sample b = cpu.Take();
    auto counters_b = ReadServerCounters(*counters_conn);
    if (counters_a.ok() && counters_b.ok()) {
      r.mysql_selects_per_s = static_cast<double>(counters_b->selects - counters_a->selects) / o.seconds;
      r.mysql_inserts_per_s = static_cast<double>(counters_b->inserts - counters_a->inserts) / o.seconds;
      r.mysql_fsyncs_per_s = static_cast<double>(counters_b->fsyncs - counters_a->fsyncs) / o.seconds;
    }
    loop.join();
    load_end = Clock::now();
    if (raw) {
      st.window_replies = raw_load.window_events.load();
      st.ok = raw_load.produced_count.load();
      st.unsent = raw_load.unsent.load();
      for (uint32_t k = 0; k < sample; ++k) st.final_version[k] = raw_load.version(k);
      for (auto& p : raw_load.problems()) st.Problem(std::move(p));
    } else if (storage) {
      st.window_replies = storage_load.window_events.load();
      st.ok = storage_load.inserted.load();
      st.unsent = storage_load.unsent.load();
      for (uint32_t k = 0; k < sample; ++k) st.final_version[k] = storage_load.version(k);
      for (auto& p : storage_load.problems()) st.Problem(std::move(p));
    }
    // Per command answered inside the window (the loop's counter, read after the join).
    r.cpu = cpu.Compare(a, b, st.window_replies);

    // Every sampled entity must reach the last version a reply reported.
    for (;;) {
      bool all = true;
      for (uint32_t k = 0; k < sample && all; ++k) all = sampler.last(k) >= st.final_version[k];
      if (all) break;
      if (std::chrono::duration<double>(Clock::now() - load_end).count() > o.catchup_timeout_seconds) {
        st.Problem("the view did not catch up within " + std::to_string(o.catchup_timeout_seconds) + " s");
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    r.catchup_seconds = std::chrono::duration<double>(Clock::now() - load_end).count();
  }
  RETURN_IF_ERROR(sampler.Stop());

  r.ok = st.ok.load();
  r.failures = st.failures.load();
  r.retries = st.retries.load();
  r.reconnects = st.reconnects.load();
  r.max_backlog = st.max_backlog;
  r.unsent = st.unsent;
  r.http = Summarize(st.latencies_ns);
  r.achieved_rate = static_cast<double>(st.window_replies) / o.seconds;
  r.polls = sampler.polls();
  r.poll_cycle_ms = sampler.cycle_ms();
  r.problems = st.problems;
  if (r.failures > 0) r.problems.push_back(std::to_string(r.failures) + " commands failed");
  if (sampler.went_back() > 0) {
    r.problems.push_back("a sampled key's version went backwards " + std::to_string(sampler.went_back()) + " times");
  }
  if (sampler.gaps() > 0) {
    r.problems.push_back("the topic skipped a version of an entity " + std::to_string(sampler.gaps()) + " times");
  }

  // committed_at of every version of the sampled entities (for kafka_raw:
  // when the producer was handed it).
  std::vector<std::vector<uint32_t>> by_partition(partitions);
  if (!raw) {
    for (uint32_t k = 0; k < sample; ++k) by_partition[PartitionOf(LagEntityId(o.run_id, k), partitions)].push_back(k);
  }
  std::unordered_map<std::string, uint32_t> number_of;
  for (uint32_t k = 0; k < sample; ++k) number_of[LagEntityId(o.run_id, k)] = k;
  std::map<std::pair<uint32_t, uint64_t>, int64_t> committed;
  if (raw) {
    for (const auto& [key, at] : raw_load.produced()) {
      if (key.first >= sample) continue;
      committed[key] = at;
      if (at >= window_begin_us && at < window_end_us) ++r.versions_committed;
    }
  }
  ASSIGN_OR_RETURN(auto conn, sql::Connection::Open(sql::ParamsFrom(config.mysql)));
  for (uint32_t p = 0; p < partitions; ++p) {
    if (by_partition[p].empty()) continue;
    std::string q = "SELECT entity_id, version, CAST(UNIX_TIMESTAMP(committed_at) * 1000000 AS UNSIGNED) FROM " +
                    sql::QuoteIdent(sql::EventTableName(sink.entity, p)) + " WHERE entity_id IN (";
    for (size_t i = 0; i < by_partition[p].size(); ++i) {
      if (i > 0) q += ',';
      conn->AppendQuoted(q, LagEntityId(o.run_id, by_partition[p][i]));
    }
    q += ')';
    ASSIGN_OR_RETURN(auto rows, conn->Query(q));
    for (const auto& row : rows) {
      const uint32_t k = number_of.at(row.at(0).value_or(""));
      const int64_t at = static_cast<int64_t>(std::stoull(row.at(2).value_or("0")));
      committed[{k, std::stoull(row.at(1).value_or("0"))}] = at;
      if (at >= window_begin_us && at < window_end_us) ++r.versions_committed;
    }
  }
  std::vector<uint64_t> lags_ns;
  int64_t min_lag_us = INT64_MAX;
  std::ofstream dump;
  if (!o.dump_path.empty()) dump.open(o.dump_path);
  uint64_t unknown = 0;
  for (const auto& s : sampler.seen()) {
    auto it = committed.find({s.entity, s.version});
    if (it == committed.end()) {
      ++unknown;
      continue;
    }
    if (it->second < window_begin_us || it->second >= window_end_us) continue;
    const int64_t lag_us = s.at_us - it->second;
    min_lag_us = std::min(min_lag_us, lag_us);
    if (dump.is_open()) dump << it->second << ' ' << lag_us << ' ' << s.entity << ' ' << s.version << '\n';
    lags_ns.push_back(static_cast<uint64_t>(std::max<int64_t>(0, lag_us)) * 1000);
  }
  if (unknown > 0) {
    r.problems.push_back(std::to_string(unknown) + " versions seen in the view are not in storage");
  }
  r.lag_samples = lags_ns.size();
  r.lag = Summarize(std::move(lags_ns));
  r.lag_min_ms = r.lag_samples > 0 ? static_cast<double>(min_lag_us) / 1000.0 : 0;
  if (r.lag_samples == 0) r.problems.push_back("no lag was measured");
  // A topic shows every version: each one committed in the window is read.
  if (kafka && r.lag_samples != r.versions_committed) {
    r.problems.push_back(std::to_string(r.versions_committed) + " versions committed in the window, " +
                         std::to_string(r.lag_samples) + " read from the topic");
  }
  return r;
}

}  // namespace sluice::bench
