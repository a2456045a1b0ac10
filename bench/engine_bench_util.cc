#include "bench/engine_bench_util.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>

#include "connectors/elasticsearch/elasticsearch_options.h"
#include "connectors/redis/redis_options.h"

namespace sluice::bench {

int64_t RealtimeMicros() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

namespace {

int ExitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

}  // namespace

Result<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(const std::vector<std::string>& argv,
                                                          const std::string& log_path) {
  if (argv.empty()) return InvalidArgument("no program to start");
  const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return Internal("cannot open " + log_path + ": " + std::strerror(errno));
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    return Internal(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // The child: only async-signal-safe calls until exec.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  close(log_fd);
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid));
}

ChildProcess::~ChildProcess() {
  if (Running()) {
    kill(pid_, SIGKILL);
    Wait();
  }
}

bool ChildProcess::Running() {
  if (exit_code_) return false;
  int status = 0;
  const pid_t r = wait4(pid_, &status, WNOHANG, &usage_);
  if (r == pid_) {
    exit_code_ = ExitCodeOf(status);
    return false;
  }
  return r == 0;
}

int ChildProcess::Wait() {
  if (exit_code_) return *exit_code_;
  int status = 0;
  while (wait4(pid_, &status, 0, &usage_) < 0) {
    if (errno != EINTR) return 255;
  }
  exit_code_ = ExitCodeOf(status);
  return *exit_code_;
}

int ChildProcess::Terminate(std::chrono::milliseconds patience) {
  if (!Running()) return *exit_code_;
  kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (Running()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid_, SIGKILL);
      return Wait();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return *exit_code_;
}

Result<int> RunProgram(const std::vector<std::string>& argv, const std::string& log_path, rusage* usage) {
  ASSIGN_OR_RETURN(auto child, ChildProcess::Spawn(argv, log_path));
  const int code = child->Wait();
  if (usage) *usage = child->usage();
  return code;
}

std::optional<MemoryKib> ReadMemory(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  if (!in) return std::nullopt;
  MemoryKib m;
  bool seen = false;
  std::string line;
  while (std::getline(in, line)) {
    auto value = [&](std::string_view name) -> std::optional<uint64_t> {
      if (line.rfind(name, 0) != 0) return std::nullopt;
      return std::strtoull(line.c_str() + name.size(), nullptr, 10);
    };
    if (auto v = value("VmRSS:")) {
      m.rss = *v;
      seen = true;
    }
    if (auto v = value("VmHWM:")) m.hwm = *v;
  }
  if (!seen) return std::nullopt;
  return m;
}

MemorySampler::MemorySampler(std::vector<pid_t> pids, std::chrono::milliseconds interval) : pids_(std::move(pids)) {
  Sample(false);
  thread_ = std::thread([this, interval] {
    std::unique_lock lock(mu_);
    for (auto next = std::chrono::steady_clock::now() + interval;; next += interval) {
      if (cv_.wait_until(lock, next, [this] { return stop_; })) return;
      Sample(false);
    }
  });
}

MemorySampler::~MemorySampler() { Stop(); }

void MemorySampler::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  Sample(true);
}

void MemorySampler::Sample(bool hwm) {
  MemoryKib sum{};
  for (const pid_t pid : pids_) {
    const auto m = ReadMemory(pid);
    if (!m) return;
    sum.rss += m->rss;
    sum.hwm += m->hwm;
  }
  now_kib_ = sum.rss;
  peak_kib_ = std::max(peak_kib_.load(), sum.rss);
  ++samples_;
  if (hwm) hwm_kib_ = sum.hwm;
}

void RedisConn::ReplyFree::operator()(redisReply* r) const { freeReplyObject(r); }

Result<Endpoint> ParseHostPort(std::string_view text) {
  const size_t colon = text.rfind(':');
  Endpoint e;
  if (colon == std::string_view::npos || colon == 0) return InvalidArgument("want HOST:PORT, got " + std::string(text));
  e.host = std::string(text.substr(0, colon));
  const std::string port(text.substr(colon + 1));
  char* end = nullptr;
  const long n = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || n <= 0 || n > 65535) return InvalidArgument("want HOST:PORT, got " + std::string(text));
  e.port = static_cast<uint16_t>(n);
  return e;
}

Result<RedisKeys> BenchRedisKeys(const config::SinkConfig& sink) {
  const std::string& key = sink.Options<connectors::redis::RedisSinkOptions>().key;
  constexpr std::string_view kId = "{id}";
  if (key.size() <= kId.size() || !key.ends_with(kId) ||
      key.find_first_of("{}*?[]\\") != key.size() - kId.size()) {
    return InvalidArgument("sink " + sink.name + ": the benchmarks need a key of the form <prefix>{id}, got " + key);
  }
  return RedisKeys{key.substr(0, key.size() - kId.size())};
}

Result<std::string> BenchIndexName(const config::SinkConfig& sink) {
  const std::string& index = sink.Options<connectors::elasticsearch::ElasticsearchSinkOptions>().index;
  if (index.empty() || index.find_first_of("{}") != std::string::npos) {
    return InvalidArgument("sink " + sink.name + ": the benchmarks need a literal index name, got " + index);
  }
  return index;
}

Result<std::unique_ptr<RedisConn>> RedisConn::Open(const Endpoint& server) {
  timeval tv{5, 0};
  redisContext* ctx = redisConnectWithTimeout(server.host.c_str(), server.port, tv);
  if (ctx == nullptr) return Unavailable("redis: cannot allocate a connection");
  if (ctx->err) {
    std::string why = ctx->errstr;
    redisFree(ctx);
    return Unavailable("redis " + server.Describe() + ": " + why);
  }
  redisSetTimeout(ctx, timeval{30, 0});
  return std::unique_ptr<RedisConn>(new RedisConn(ctx));
}

RedisConn::~RedisConn() { redisFree(ctx_); }

Status RedisConn::AppendArgv(int argc, const char** argv, const size_t* lens) {
  if (redisAppendCommandArgv(ctx_, argc, argv, lens) != REDIS_OK) {
    return Unavailable(std::string("redis: ") + ctx_->errstr);
  }
  return Status::Ok();
}

Status RedisConn::Append(const std::vector<std::string_view>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (auto a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  return AppendArgv(static_cast<int>(argv.size()), argv.data(), lens.data());
}

Result<RedisConn::ReplyPtr> RedisConn::Read() {
  void* raw = nullptr;
  if (redisGetReply(ctx_, &raw) != REDIS_OK || raw == nullptr) {
    return Unavailable(std::string("redis: ") + ctx_->errstr);
  }
  return ReplyPtr(static_cast<redisReply*>(raw));
}

Result<RedisConn::ReplyPtr> RedisConn::Run(const std::vector<std::string_view>& args) {
  RETURN_IF_ERROR(Append(args));
  ASSIGN_OR_RETURN(auto reply, Read());
  if (reply->type == REDIS_REPLY_ERROR) {
    return Internal("redis " + std::string(args.empty() ? "" : args[0]) + ": " + std::string(reply->str, reply->len));
  }
  return reply;
}

Result<uint64_t> RedisConn::DeleteMatching(const std::string& pattern) {
  uint64_t deleted = 0;
  std::string cursor = "0";
  do {
    ASSIGN_OR_RETURN(auto page, Run({"SCAN", cursor, "MATCH", pattern, "COUNT", "2000"}));
    if (page->type != REDIS_REPLY_ARRAY || page->elements != 2) return Internal("redis: unexpected reply to SCAN");
    cursor.assign(page->element[0]->str, page->element[0]->len);
    const redisReply& keys = *page->element[1];
    if (keys.elements == 0) continue;
    std::vector<const char*> argv = {"UNLINK"};
    std::vector<size_t> lens = {6};
    for (size_t k = 0; k < keys.elements; ++k) {
      argv.push_back(keys.element[k]->str);
      lens.push_back(keys.element[k]->len);
    }
    RETURN_IF_ERROR(AppendArgv(static_cast<int>(argv.size()), argv.data(), lens.data()));
    ASSIGN_OR_RETURN(auto done, Read());
    if (done->type == REDIS_REPLY_INTEGER) deleted += static_cast<uint64_t>(done->integer);
  } while (cursor != "0");
  return deleted;
}

Result<double> RedisConn::WriteCommandMicros() {
  ASSIGN_OR_RETURN(auto info, Run({"INFO", "commandstats"}));
  if (info->type != REDIS_REPLY_STRING) {
    return Internal("redis: unexpected reply to INFO");
  }
  const std::string_view text(info->str, info->len);
  double total = 0;
  for (std::string_view name : {"cmdstat_evalsha:", "cmdstat_set:"}) {
    const size_t at = text.find(name);
    if (at == std::string_view::npos) continue;
    const size_t usec = text.find("usec=", at);
    if (usec == std::string_view::npos) continue;
    total += std::strtod(std::string(text.substr(usec + 5, 32)).c_str(), nullptr);
  }
  return total;
}

uint64_t VersionOfJsonValue(std::string_view value) {
  constexpr std::string_view kPrefix = R"({"_version":)";
  if (value.substr(0, kPrefix.size()) != kPrefix) return 0;
  uint64_t v = 0;
  for (size_t i = kPrefix.size(); i < value.size() && value[i] >= '0' && value[i] <= '9'; ++i) {
    v = v * 10 + static_cast<uint64_t>(value[i] - '0');
  }
  return v;
}

}  // namespace sluice::bench
