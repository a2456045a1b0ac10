// kafka_bench --mode takeover|release (kafka_bench_ownership.h).
#include "bench/kafka_bench_ownership.h"

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <vector>

#include "bench/bench_common.h"
#include "bench/engine_bench_util.h"
#include "connectors/kafka/kafka_client.h"
#include "connectors/kafka/kafka_options.h"
#include "connectors/kafka/kafka_sink.h"
#include "connectors/kafka/record_codec.h"

namespace sluice::bench {
namespace {

using connectors::ChangeEvent;
namespace kafka = connectors::kafka;
using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kTimeout{10000};

uint64_t NanosSince(Clock::time_point t0) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

// This process's threads, from /proc/self/status.
uint64_t OwnThreads() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Threads:", 0) == 0) return std::stoull(line.substr(8));
  }
  return 0;
}

double OwnRssMib() {
  const auto m = ReadMemory(getpid());
  return m ? static_cast<double>(m->rss) / 1024.0 : 0;
}

uint64_t Median(std::vector<uint64_t> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The sink under test and what it was given: the partitions [from, to) get
// one event each (the next version of entity "t<p>") or are taken over
// under a new token.
class OwnedSink {
 public:
  OwnedSink(const config::Config& cfg, const config::SinkConfig& sink)
      : sink_(sink), partitions_(cfg.entities.at(sink.entity).partitions), version_(partitions_, 0) {
    auto made = kafka::MakeKafkaSink(sink, cfg);
    if (made.ok()) {
      s_ = std::move(made).value();
    } else {
      made_ = made.status();
    }
  }
  ~OwnedSink() {
    if (s_) s_->Close();
  }

  uint32_t partitions() const { return partitions_; }
  connectors::Sink& sink() { return *s_; }

  Status Open() {
    if (!made_.ok()) return made_;
    return s_->Open();
  }

  Status Apply(uint32_t from, uint32_t to) {
    std::vector<ChangeEvent> events;
    for (uint32_t p = from; p < to; ++p) {
      ChangeEvent& e = events.emplace_back();
      const uint64_t v = ++version_[p];
      e.entity_type = sink_.entity;
      e.partition = p;
      e.event_id = v;
      e.entity_id = "t" + std::to_string(p);
      e.version = v;
      e.state = R"({"n":)" + std::to_string(v) + "}";
      e.command_name = "patch";
      e.command_id = e.entity_id + "-" + std::to_string(v);
    }
    const connectors::ApplyResult r = s_->Apply(events);
    if (!r.status.ok()) return r.status;
    for (const auto& x : r.results) {
      if (x.outcome != connectors::Outcome::kApplied) return Internal("an event was not applied: " + x.reason);
    }
    return Status::Ok();
  }

  Status Take(uint32_t from, uint32_t to) {
    connectors::TakenOver t{"sink/" + sink_.name, "kafka_bench", {}};
    for (uint32_t p = from; p < to; ++p) t.tokens[p] = token_;
    ++token_;
    return s_->TakeOver(t);
  }

  // Closes the sink and reads the topic back: per key the versions 1..N in
  // order, one record per event applied. Returns the records read.
  Result<uint64_t> Check(std::vector<std::string>& problems) {
    s_->Close();
    const std::string topic = kafka::TopicName(sink_.Options<kafka::KafkaSinkOptions>().topic, sink_.entity);
    kafka::ClientOptions o;
    o.type = RD_KAFKA_CONSUMER;
    o.client_id = "kafka_bench";
    ASSIGN_OR_RETURN(kafka::KafkaHandle rk, kafka::NewClient(sink_.Options<kafka::KafkaSinkOptions>(), o));
    ASSIGN_OR_RETURN(const int32_t n, kafka::TopicPartitionCount(rk.get(), topic, kTimeout));
    std::map<std::string, uint64_t> last;
    uint64_t records = 0;
    for (int32_t t = 0; t < n; ++t) {
      ASSIGN_OR_RETURN(kafka::Watermarks w, kafka::QueryWatermarks(rk.get(), topic, t, kTimeout));
      RETURN_IF_ERROR(kafka::ReadPartition(rk.get(), topic, t, w.low, w.high, [&](const rd_kafka_message_t& m) {
        ++records;
        const std::string key(static_cast<const char*>(m.key), m.key_len);
        const uint64_t v =
            kafka::ParseDecimalHeader(kafka::HeaderValue(m, kafka::kHeaderVersion).value_or("")).value_or(0);
        if (v != last[key] + 1 && problems.size() < 10) {
          problems.push_back("key " + key + ": version " + std::to_string(v) + " after " + std::to_string(last[key]));
        }
        last[key] = v;
      }, kTimeout));
    }
    uint64_t events = 0;
    for (const uint64_t v : version_) events += v;
    if (records != events) {
      problems.push_back(std::to_string(records) + " records for " + std::to_string(events) + " events");
    }
    return records;
  }

 private:
  const config::SinkConfig& sink_;
  const uint32_t partitions_;
  std::vector<uint64_t> version_;  // per partition: events applied
  std::unique_ptr<connectors::Sink> s_;
  Status made_;
  uint64_t token_ = 1;
};

int Fail(const Status& st) {
  std::cerr << "kafka_bench: " << st.message() << "\n";
  return 1;
}

int Takeover(const OwnershipArgs& a, OwnedSink& s) {
  const uint32_t n = s.partitions(), half = n / 2;
  std::vector<uint64_t> stay, reopen;  // ns
  {
    std::atomic<uint32_t> done{0};
    ProgressLine progress("takeover", [&](double) {
      return std::to_string(done.load()) + "/" + std::to_string(2 * a.rounds) + " rounds";
    });
    for (uint32_t round = 0; round < 2 * a.rounds; ++round) {
      const bool stays_open = round % 2 == 0;
      const auto t0 = Clock::now();
      if (!stays_open) {
        s.sink().Close();
        if (Status st = s.Open(); !st.ok()) return Fail(st);
      }
      if (Status st = s.Take(half, n); !st.ok()) return Fail(st);
      if (Status st = s.Apply(0, n); !st.ok()) return Fail(st);
      (stays_open ? stay : reopen).push_back(NanosSince(t0));
      ++done;
    }
  }
  std::vector<std::string> problems;
  auto records = s.Check(problems);
  if (!records.ok()) return Fail(records.status());
  const double stay_ms = Summarize(stay).p50_ms, reopen_ms = Summarize(reopen).p50_ms;
  Report r;
  r.Add("label", a.mode);
  r.Add("partitions", uint64_t{n});
  r.Add("taken", uint64_t{n - half});
  r.Add("rounds", uint64_t{a.rounds});
  r.Add("stay_open_ms", stay_ms, 1);
  r.Add("reopen_ms", reopen_ms, 1);
  r.Add("stay_per_reopen", reopen_ms > 0 ? stay_ms / reopen_ms : 0, 3);
  r.Add("records", *records);
  r.Add("verified", problems.empty() ? "yes" : "no");
  r.Print(a.kv);
  for (const auto& p : problems) std::cerr << "problem: " << p << "\n";
  return problems.empty() ? 0 : 1;
}

int Release(const OwnershipArgs& a, OwnedSink& s) {
  const uint32_t n = s.partitions(), half = n / 2;
  std::vector<uint32_t> lost;
  for (uint32_t p = half; p < n; ++p) lost.push_back(p);
  std::vector<uint64_t> release_ns, kept_ns, kept_before_ns;  // the engine now; before: not told
  std::vector<uint64_t> threads_open, threads_released, threads_not_told;
  std::vector<uint64_t> rss_open_kib, rss_released_kib;
  {
    std::atomic<uint32_t> done{0};
    ProgressLine progress("release", [&](double) {
      return std::to_string(done.load()) + "/" + std::to_string(2 * a.rounds) + " rounds";
    });
    for (uint32_t round = 0; round < 2 * a.rounds; ++round) {
      const bool told = round % 2 == 0;
      threads_open.push_back(OwnThreads());
      if (told) rss_open_kib.push_back(static_cast<uint64_t>(OwnRssMib() * 1024));
      const auto t0 = Clock::now();
      if (told) {
        s.sink().Released(lost);
        release_ns.push_back(NanosSince(t0));
        threads_released.push_back(OwnThreads());
        rss_released_kib.push_back(static_cast<uint64_t>(OwnRssMib() * 1024));
      } else {
        threads_not_told.push_back(OwnThreads());
      }
      const auto t1 = Clock::now();
      if (Status st = s.Apply(0, half); !st.ok()) return Fail(st);
      (told ? kept_ns : kept_before_ns).push_back(NanosSince(t1));
      // The lost half comes back (the other engine stopped).
      if (Status st = s.Take(half, n); !st.ok()) return Fail(st);
      if (Status st = s.Apply(half, n); !st.ok()) return Fail(st);
      ++done;
    }
  }
  std::vector<std::string> problems;
  auto records = s.Check(problems);
  if (!records.ok()) return Fail(records.status());
  const double kept_ms = Summarize(kept_ns).p50_ms, kept_before_ms = Summarize(kept_before_ns).p50_ms;
  const uint64_t open = Median(threads_open), released = Median(threads_released);
  Report r;
  r.Add("label", a.mode);
  r.Add("partitions", uint64_t{n});
  r.Add("released", uint64_t{n - half});
  r.Add("rounds", uint64_t{a.rounds});
  r.Add("release_ms", Summarize(release_ns).p50_ms, 1);
  r.Add("kept_ms", kept_ms, 1);
  r.Add("kept_not_told_ms", kept_before_ms, 1);
  r.Add("kept_per_not_told", kept_before_ms > 0 ? kept_ms / kept_before_ms : 0, 3);
  r.Add("threads_open", open);
  r.Add("threads_released", released);
  r.Add("threads_not_told", Median(threads_not_told));
  r.Add("threads_freed_per_partition", open > released ? static_cast<double>(open - released) / (n - half) : 0, 2);
  r.Add("rss_open_mib", static_cast<double>(Median(rss_open_kib)) / 1024.0, 1);
  r.Add("rss_released_mib", static_cast<double>(Median(rss_released_kib)) / 1024.0, 1);
  r.Add("records", *records);
  r.Add("verified", problems.empty() ? "yes" : "no");
  r.Print(a.kv);
  for (const auto& p : problems) std::cerr << "problem: " << p << "\n";
  return problems.empty() ? 0 : 1;
}

}  // namespace

int RunOwnership(const OwnershipArgs& a, const config::Config& cfg, const config::SinkConfig& sink) {
  OwnedSink s(cfg, sink);
  if (Status st = s.Open(); !st.ok()) return Fail(st);
  if (Status st = s.Take(0, s.partitions()); !st.ok()) return Fail(st);
  if (Status st = s.Apply(0, s.partitions()); !st.ok()) return Fail(st);
  return a.mode == "release" ? Release(a, s) : Takeover(a, s);
}

}  // namespace sluice::bench
