// kafka_bench: draining a backlog into Kafka with the kafka sink, and its
// same-run baseline, a plain librdkafka producer of the same records
// (DESIGN 9, docs/BENCHMARKS.md). bench/scenarios/kafka.bench strings the modes
// together.
//
//   load   the backlog of engine_bench (bench/engine_bench_backlog.h) straight
//          into the event tables of a fresh, `sluice init`ed database
//   drain  creates the sink's topic (empty, as the baseline's), starts
//          `sluice sync --config FILE` (FILE holds ONE kafka sink, no offsets
//          yet) and times it from the process start until the sum of the
//          topic's high watermarks reaches the backlog's event count (also
//          reported: when the first record was in the topic);
//          samples VmRSS (peak) and the CPU split; stops it (SIGTERM, exit 0
//          expected); then reads the whole topic back and checks one record
//          per event: per key the versions 1..V in order, none repeated
//   raw    baseline: the same records (same key, value bytes and headers,
//          same partitions) from one plain librdkafka producer with the same
//          durability (acks=all, idempotent), all queued at once and
//          flushed: what librdkafka and the broker do without the engine
//   verify `sluice verify` of the drained topic: its time, peak RSS and CPU
//   takeover, release  partitions changing hands: bench/kafka_bench_ownership.h
//
// Exit codes: 0 done and verified, 1 failed or not verified, 2 bad usage.
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/program_options.hpp>

#include "bench/bench_common.h"
#include "connectors/builtin_sink_types.h"
#include "bench/engine_bench_backlog.h"
#include "bench/engine_bench_util.h"
#include "bench/kafka_bench_ownership.h"
#include "config/config.h"
#include "connectors/kafka/kafka_client.h"
#include "connectors/kafka/kafka_options.h"
#include "connectors/kafka/kafka_sink.h"
#include "connectors/kafka/record_codec.h"
#include "sql/params.h"

namespace po = boost::program_options;

namespace sluice::bench {
namespace {

using connectors::ChangeEvent;
namespace kafka = connectors::kafka;

constexpr int kExitOk = 0, kExitFailure = 1, kExitUsage = 2;
constexpr std::chrono::milliseconds kTimeout{10000};

struct Args {
  std::string mode, config_path, sink, run_id, sluice, log_path;
  uint64_t entities = 100000;
  uint32_t versions = 10;
  uint32_t load_threads = 2, rows_per_insert = 1000;
  uint32_t rounds = 3;  // takeover, release: rounds each way
  double timeout_s = 600;
  bool kv = false;
  std::vector<std::pair<std::string, pid_t>> watch;  // --watch NAME=PID: their CPU too
};


double Elapsed(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }


Result<kafka::KafkaHandle> Client(const config::SinkConfig& sink, rd_kafka_type_t type,
                                  void (*dr)(rd_kafka_t*, const rd_kafka_message_t*, void*) = nullptr,
                                  void* opaque = nullptr) {
  kafka::ClientOptions o;
  o.type = type;
  o.client_id = "kafka_bench";
  o.delivery_report = dr;
  o.opaque = opaque;
  return kafka::NewClient(sink.Options<kafka::KafkaSinkOptions>(), o);
}

Result<uint64_t> SumHighWatermarks(rd_kafka_t* rk, const std::string& topic, int32_t partitions) {
  uint64_t sum = 0;
  for (int32_t t = 0; t < partitions; ++t) {
    ASSIGN_OR_RETURN(kafka::Watermarks w, kafka::QueryWatermarks(rk, topic, t, kTimeout));
    sum += static_cast<uint64_t>(w.high);
  }
  return sum;
}

// Creates `topic` with the sink's partition count (or the backlog's) and
// waits until the broker knows it: done before either timed run starts, so
// that neither measures the broker creating a topic. Empty string if done.
std::string CreateEmptyTopic(rd_kafka_t* rk, const config::SinkConfig& sink, const std::string& topic,
                             const Backlog& b, int32_t* partitions_out) {
  if (kafka::TopicPartitionCount(rk, topic, kTimeout).ok()) {
    return "topic " + topic + " already exists: each run starts from a new, empty topic";
  }
  const uint32_t wanted = sink.Options<kafka::KafkaSinkOptions>().partitions;
  const int32_t partitions = static_cast<int32_t>(wanted != 0 ? wanted : b.spec().partitions);
  if (Status st = kafka::CreateTopic(rk, topic, partitions, 1, kTimeout); !st.ok()) return st.message();
  for (int i = 0; i < 200; ++i) {
    auto n = kafka::TopicPartitionCount(rk, topic, kTimeout);
    if (n.ok() && *n == partitions) {
      bool answer = true;
      for (int32_t t = 0; t < partitions && answer; ++t) answer = kafka::QueryWatermarks(rk, topic, t, kTimeout).ok();
      if (answer) {
        *partitions_out = partitions;
        return "";
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return "topic " + topic + " was created but its partitions do not answer";
}

// Reads the whole topic: one record per backlog event, per key versions
// 1..V in topic order. Appends problems.
void CheckTopic(const config::SinkConfig& sink, const std::string& topic, const Backlog& b,
                std::vector<std::string>& problems, uint64_t& records) {
  auto rk = Client(sink, RD_KAFKA_CONSUMER);
  if (!rk.ok()) return problems.push_back(rk.status().message());
  auto n = kafka::TopicPartitionCount(rk->get(), topic, kTimeout);
  if (!n.ok()) return problems.push_back(n.status().message());
  std::unordered_map<std::string, uint32_t> last;
  last.reserve(b.spec().entities * 2);
  records = 0;
  for (int32_t t = 0; t < *n; ++t) {
    auto w = kafka::QueryWatermarks(rk->get(), topic, t, kTimeout);
    if (!w.ok()) return problems.push_back(w.status().message());
    Status st = kafka::ReadPartition(rk->get(), topic, t, w->low, w->high, [&](const rd_kafka_message_t& m) {
      ++records;
      const std::string key(static_cast<const char*>(m.key), m.key_len);
      const std::string v(kafka::HeaderValue(m, kafka::kHeaderVersion).value_or(""));
      const uint64_t parsed = kafka::ParseDecimalHeader(v).value_or(0);  // versions start at 1
      uint32_t& prev = last[key];
      if (parsed != uint64_t{prev} + 1 && problems.size() < 10) {
        problems.push_back("key " + key + ": version '" + v + "' after " + std::to_string(prev));
      }
      if (parsed != 0) prev = static_cast<uint32_t>(parsed);
    }, kTimeout);
    if (!st.ok()) return problems.push_back(st.message());
  }
  if (records != b.total_events()) {
    problems.push_back(std::to_string(records) + " records for " + std::to_string(b.total_events()) + " events");
  }
  if (last.size() != b.spec().entities) {
    problems.push_back(std::to_string(last.size()) + " keys for " + std::to_string(b.spec().entities) + " entities");
  }
  for (const auto& [key, v] : last) {
    if (v != b.spec().versions && problems.size() < 20) {
      problems.push_back("key " + key + " ends at version " + std::to_string(v));
    }
  }
}

// Prints the run's report (common keys, then `extra`'s) and its problems;
// the exit code.
int Finish(const Args& a, const Backlog& b, double seconds, uint64_t records,
           const std::vector<std::pair<std::string, std::string>>& cpu, const std::vector<std::string>& problems,
           const std::function<void(Report&)>& extra) {
  Report r;
  r.Add("label", a.mode);
  r.Add("events", b.total_events());
  r.Add("seconds", seconds, 2);
  r.Add("rate", static_cast<uint64_t>(static_cast<double>(b.total_events()) / seconds));
  r.Add("records", records);
  for (const auto& [k, v] : cpu) r.Add(k, v);
  if (extra) extra(r);
  r.Add("verified", problems.empty() ? "yes" : "no");
  r.Print(a.kv);
  for (const auto& p : problems) std::cerr << "problem: " << p << "\n";
  return problems.empty() ? kExitOk : kExitFailure;
}

int Drain(const Args& a, const config::SinkConfig& sink, const Backlog& b) {
  const std::string topic = kafka::TopicName(sink.Options<kafka::KafkaSinkOptions>().topic, sink.entity);
  auto rk = Client(sink, RD_KAFKA_PRODUCER);
  if (!rk.ok()) {
    std::cerr << rk.status().message() << "\n";
    return kExitFailure;
  }
  int32_t partitions = 0;
  if (const std::string problem = CreateEmptyTopic(rk->get(), sink, topic, b, &partitions); !problem.empty()) {
    std::cerr << problem << "\n";
    return kExitFailure;
  }
  CpuWatch cpu;
  const auto start = Clock::now();
  auto child = ChildProcess::Spawn({a.sluice, "sync", "--config", a.config_path}, a.log_path);
  if (!child.ok()) {
    std::cerr << child.status().message() << "\n";
    return kExitFailure;
  }
  const pid_t pid = (*child)->pid();
  cpu.Watch("sluice", pid);
  for (const auto& [name, watched] : a.watch) cpu.Watch(name, watched);
  const auto before = cpu.Take();
  uint64_t delivered = 0, rss_peak = 0;
  double first_record_s = -1;
  bool exited = false;
  std::vector<std::string> problems;
  {
    ProgressLine progress("drain into " + topic, [&](double t) {
      return std::to_string(delivered) + "/" + std::to_string(b.total_events()) + " records after " +
             std::to_string(static_cast<int>(t)) + " s";
    });
    auto last_rss = Clock::now() - std::chrono::seconds(1);
    while (delivered < b.total_events()) {
      if (Elapsed(start) > a.timeout_s) {
        problems.push_back("not drained within the timeout");
        break;
      }
      if (!(*child)->Running()) {
        exited = true;
        problems.push_back("sluice sync exited during the drain (see " + a.log_path + ")");
        break;
      }
      if (Clock::now() - last_rss >= std::chrono::milliseconds(100)) {
        if (const auto m = ReadMemory(pid)) rss_peak = std::max(rss_peak, m->rss);
        last_rss = Clock::now();
      }
      if (auto sum = SumHighWatermarks(rk->get(), topic, partitions); sum.ok()) delivered = *sum;
      if (delivered > 0 && first_record_s < 0) first_record_s = Elapsed(start);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  const double seconds = Elapsed(start);
  const auto after = cpu.Take();
  const auto memory = exited ? std::nullopt : ReadMemory(pid);
  const uint64_t hwm = memory ? memory->hwm : 0;
  int exit_code = -1;
  if (!exited) {
    exit_code = (*child)->Terminate();
    if (exit_code != 0) problems.push_back("sluice sync exited with " + std::to_string(exit_code));
  }
  uint64_t records = 0;
  if (problems.empty()) CheckTopic(sink, topic, b, problems, records);

  return Finish(a, b, seconds, records, cpu.Compare(before, after, b.total_events()), problems, [&](Report& r) {
    if (first_record_s >= 0) {
      r.Add("first_record_s", first_record_s, 2);
    } else {
      r.Add("first_record_s", "-");  // no record ever arrived
    }
    r.Add("rss_peak_mib", static_cast<double>(rss_peak) / 1024.0, 1);
    r.Add("hwm_mib", static_cast<double>(hwm) / 1024.0, 1);
    r.Add("exit", static_cast<uint64_t>(exit_code < 0 ? 255 : exit_code));
  });
}

struct RawState {
  std::atomic<uint64_t> delivered{0}, failed{0};
};

void OnRawDelivery(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
  auto* s = static_cast<RawState*>(opaque);
  if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    ++s->delivered;
  } else {
    ++s->failed;
  }
}

int Raw(const Args& a, const config::SinkConfig& sink, const Backlog& b) {
  const std::string topic = kafka::TopicName(sink.Options<kafka::KafkaSinkOptions>().topic, sink.entity);
  // A plain producer: the sink's brokers, acks=all and idempotence as the
  // sink has them, every other setting librdkafka's default.
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char errstr[512];
  RawState state;
  for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
           {"bootstrap.servers", sink.Options<kafka::KafkaSinkOptions>().brokers},
           {"acks", "all"},
           {"enable.idempotence", "true"}}) {
    rd_kafka_conf_set(conf, k.c_str(), v.c_str(), errstr, sizeof(errstr));
  }
  rd_kafka_conf_set_dr_msg_cb(conf, OnRawDelivery);
  rd_kafka_conf_set_opaque(conf, &state);
  kafka::KafkaHandle rk(rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr)));
  if (!rk) {
    std::cerr << errstr << "\n";
    return kExitFailure;
  }
  int32_t partitions = 0;
  if (const std::string problem = CreateEmptyTopic(rk.get(), sink, topic, b, &partitions); !problem.empty()) {
    std::cerr << problem << "\n";
    return kExitFailure;
  }
  // Values are built inside the timed loop, as the sink builds them: the
  // baseline differs from the sink only by the engine (MySQL reads, offsets)
  // and by not waiting for each batch's delivery reports.
  std::vector<std::string> problems;
  CpuWatch cpu;
  cpu.Watch("kafka_bench", getpid());
  for (const auto& [name, watched] : a.watch) cpu.Watch(name, watched);
  const auto before = cpu.Take();
  const auto start = Clock::now();
  uint64_t queued = 0;
  {
    ProgressLine progress("raw producer into " + topic, [&](double t) {
      return std::to_string(state.delivered.load()) + "/" + std::to_string(b.total_events()) + " delivered after " +
             std::to_string(static_cast<int>(t)) + " s";
    });
    const int64_t now_us = RealtimeMicros();
    std::string value;
    for (uint32_t p = 0; p < b.spec().partitions; ++p) {
      for (uint64_t id = 1; id <= b.PartitionEvents(p); ++id) {
        const ChangeEvent e = b.ChangeEventAt(p, id, now_us);
        value.clear();  // one buffer for every record, as the sink has
        kafka::AppendValue(value, e, sink.Options<kafka::KafkaSinkOptions>().format);
        const std::string version = std::to_string(e.version), event_id = std::to_string(e.event_id),
                          partition = std::to_string(p);
        for (;;) {
          rd_kafka_headers_t* h = rd_kafka_headers_new(4);
          rd_kafka_header_add(h, "sluice-entity-type", -1, e.entity_type.data(), static_cast<ssize_t>(e.entity_type.size()));
          rd_kafka_header_add(h, "sluice-version", -1, version.data(), static_cast<ssize_t>(version.size()));
          rd_kafka_header_add(h, "sluice-event-id", -1, event_id.data(), static_cast<ssize_t>(event_id.size()));
          rd_kafka_header_add(h, "sluice-partition", -1, partition.data(), static_cast<ssize_t>(partition.size()));
          const auto err = rd_kafka_producev(
              rk.get(), RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(static_cast<int32_t>(p) % partitions),
              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(e.entity_id.data(), e.entity_id.size()),
              RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()), RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_END);
          if (err == RD_KAFKA_RESP_ERR_NO_ERROR) break;
          rd_kafka_headers_destroy(h);
          if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            problems.push_back(std::string("produce: ") + rd_kafka_err2str(err));
            break;
          }
          rd_kafka_poll(rk.get(), 10);
        }
        ++queued;
        rd_kafka_poll(rk.get(), 0);
      }
    }
    while (state.delivered + state.failed < queued && Elapsed(start) < a.timeout_s) rd_kafka_flush(rk.get(), 500);
  }
  const double seconds = Elapsed(start);
  const auto after = cpu.Take();
  if (state.failed > 0) problems.push_back(std::to_string(state.failed.load()) + " records failed");
  uint64_t records = 0;
  if (problems.empty()) CheckTopic(sink, topic, b, problems, records);
  return Finish(a, b, seconds, records, cpu.Compare(before, after, b.total_events()), problems, nullptr);
}

// `sluice verify --config FILE --sink NAME` of a drained topic, once: its
// time, its own peak RSS and CPU (the child's rusage), per backlog event.
int Verify(const Args& a, const config::SinkConfig& sink, const Backlog& b) {
  rusage usage{};
  const auto start = Clock::now();
  Result<int> code = 0;
  {
    ProgressLine progress("sluice verify " + sink.name, [](double) { return std::string("running"); });
    code = RunProgram({a.sluice, "verify", "--config", a.config_path, "--sink", sink.name}, a.log_path, &usage);
  }
  const double seconds = Elapsed(start);
  std::vector<std::string> problems;
  if (!code.ok()) {
    problems.push_back("cannot run sluice verify: " + code.status().message());
  } else if (*code != 0) {
    problems.push_back("sluice verify found differences or failed (exit " + std::to_string(*code) + ", " +
                       a.log_path + ")");
  }
  const double cpu_s = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                       static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  Report r;
  r.Add("label", a.mode);
  r.Add("events", b.total_events());
  r.Add("seconds", seconds, 2);
  r.Add("rate", static_cast<uint64_t>(static_cast<double>(b.total_events()) / seconds));
  r.Add("verify_rss_mib", static_cast<double>(usage.ru_maxrss) / 1024.0, 1);
  r.Add("sluice_us_per_op", cpu_s * 1e6 / static_cast<double>(b.total_events()), 2);
  r.Add("verified", problems.empty() ? "yes" : "no");
  r.Print(a.kv);
  for (const auto& p : problems) std::cerr << "problem: " << p << "\n";
  return problems.empty() ? kExitOk : kExitFailure;
}

// Deletes every topic of the run (named "<run id>-..."): each of the
// scenarios' topics holds a copy of the backlog.
int Cleanup(const Args& a, const config::SinkConfig& sink) {
  auto rk = Client(sink, RD_KAFKA_PRODUCER);
  if (!rk.ok()) {
    std::cerr << "kafka_bench: " << rk.status().message() << "\n";
    return kExitFailure;
  }
  auto topics = kafka::TopicsStartingWith(rk->get(), a.run_id + "-", kTimeout);
  Status st = topics.ok() ? kafka::DeleteTopics(rk->get(), *topics, kTimeout) : topics.status();
  if (!st.ok()) {
    std::cerr << "kafka_bench: " << st.message() << "\n";
    return kExitFailure;
  }
  std::cout << "kafka_bench: deleted " << topics->size() << " topics of run " << a.run_id << "\n";
  return kExitOk;
}

int Main(int argc, char** argv) {
  Args a;
  std::string format = "text";
  std::vector<std::string> watch;
  po::options_description opts(
      "kafka_bench: drain a backlog into Kafka with the kafka sink, and the plain-producer baseline\n\n"
      "usage: kafka_bench --mode load|drain|raw|takeover|release|cleanup --config FILE [options]\n\n"
      "  load   the engine_bench backlog into the event tables of FILE's (sluice init'ed) database\n"
      "  drain  time `sluice sync --config FILE` (one kafka sink) until the topic holds every event;\n"
      "         RSS, CPU; then read the topic back: one record per event, versions 1..V per key\n"
      "  raw    baseline: the same records from one plain librdkafka producer (acks=all, idempotent),\n"
      "         into the topic of --sink (created with the same partitions), then read back the same way\n"
      "  takeover  the sink alone, holding every partition, takes half of them over again and applies\n"
      "         an event to each, staying open against closing and opening again (--rounds each way)\n"
      "  release  the sink alone, holding every partition, loses half of them, told (Sink::Released)\n"
      "         against not told; then an event to each partition kept (--rounds each way)\n"
      "  verify  `sluice verify --sink` of the drained topic (--sluice): seconds, rate, its peak RSS\n"
      "         (verify_rss_mib) and CPU per event (sluice_us_per_op)\n"
      "  cleanup  delete every topic of the run (\"<run id>-...\") from the brokers of FILE's kafka sink\n\n"
      "options");
  opts.add_options()("help,h", "this help")("mode", po::value(&a.mode), "load, drain, raw, verify, takeover, release or cleanup")(
      "config", po::value(&a.config_path), "sluice config file")(
      "sink", po::value(&a.sink), "the kafka sink of FILE (default: its first sink)")(
      "run-id", po::value(&a.run_id), "backlog id (the same for load, drain and raw)")(
      "entities", po::value(&a.entities)->default_value(a.entities), "entities of the backlog")(
      "versions", po::value(&a.versions)->default_value(a.versions), "versions per entity")(
      "load-threads", po::value(&a.load_threads)->default_value(a.load_threads), "load: connections")(
      "sluice", po::value(&a.sluice), "drain, verify: the sluice binary")(
      "log", po::value(&a.log_path)->default_value("/tmp/kafka_bench_sync.log"), "drain: sluice sync's log; verify: its output")(
      "rounds", po::value(&a.rounds)->default_value(a.rounds), "takeover, release: rounds each way")(
      "timeout", po::value(&a.timeout_s)->default_value(a.timeout_s), "seconds before giving up")(
      "format", po::value(&format)->default_value(format), "text or kv (one key=value line)")(
      "watch", po::value(&watch)->composing(), "NAME=PID: also report this process's CPU (repeatable)");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::cerr << "kafka_bench: " << e.what() << "\n";
    return kExitUsage;
  }
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return kExitOk;
  }
  a.kv = format == "kv";
  if (std::string error; !ParseWatch(watch, &a.watch, &error)) {
    std::cerr << "kafka_bench: " << error << "\n";
    return kExitUsage;
  }
  if ((a.mode != "load" && a.mode != "drain" && a.mode != "raw" && a.mode != "cleanup" && a.mode != "takeover" &&
       a.mode != "release" && a.mode != "verify") ||
      a.config_path.empty() ||
      a.run_id.empty() ||
      ((a.mode == "drain" || a.mode == "verify") && a.sluice.empty()) || (format != "kv" && format != "text")) {
    std::cerr << "kafka_bench: need --mode load|drain|raw|verify|takeover|release|cleanup, --config, --run-id (and --sluice for drain and verify); see --help\n";
    return kExitUsage;
  }
  auto cfg = config::LoadConfig(a.config_path, connectors::BuiltinSinkTypes());
  if (!cfg.ok()) {
    std::cerr << cfg.status().message() << "\n";
    return kExitUsage;
  }
  BacklogSpec spec;
  spec.run_id = a.run_id;
  spec.entities = a.entities;
  spec.versions = a.versions;
  spec.partitions = cfg->entities.count(spec.type) ? cfg->entities.at(spec.type).partitions : 0;
  if (spec.partitions == 0) {
    std::cerr << "kafka_bench: the config has no entity type " << spec.type << "\n";
    return kExitUsage;
  }
  const Backlog backlog(spec);
  if (a.mode == "load") {
    auto r = LoadBacklog(sql::ParamsFrom(cfg->mysql), backlog, a.load_threads, a.rows_per_insert);
    if (!r.ok()) {
      std::cerr << r.status().message() << "\n";
      return kExitFailure;
    }
    Report rep;
    rep.Add("label", "load");
    rep.Add("rows", r->rows);
    rep.Add("seconds", r->seconds, 2);
    rep.Add("rate", static_cast<uint64_t>(static_cast<double>(r->rows) / r->seconds));
    rep.Add("verified", r->problems.empty() ? "yes" : "no");
    rep.Print(a.kv);
    for (const auto& p : r->problems) std::cerr << "problem: " << p << "\n";
    return r->problems.empty() ? kExitOk : kExitFailure;
  }
  const config::SinkConfig* sink = nullptr;
  for (const auto& s : cfg->sinks) {
    if (s.type == "kafka" && (a.sink.empty() || s.name == a.sink)) {
      sink = &s;
      break;
    }
  }
  if (sink == nullptr) {
    std::cerr << "kafka_bench: no kafka sink " << a.sink << " in " << a.config_path << "\n";
    return kExitUsage;
  }
  if (a.mode == "cleanup") return Cleanup(a, *sink);
  if (a.mode == "takeover" || a.mode == "release") return RunOwnership({a.mode, a.rounds, a.kv}, *cfg, *sink);
  if (a.mode == "verify") return Verify(a, *sink, backlog);
  return a.mode == "drain" ? Drain(a, *sink, backlog) : Raw(a, *sink, backlog);
}

}  // namespace
}  // namespace sluice::bench

int main(int argc, char** argv) { return sluice::bench::Main(argc, argv); }
