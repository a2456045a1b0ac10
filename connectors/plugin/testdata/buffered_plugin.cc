// A sink plugin that buffers, as a batching sink to a remote store does: the
// contract of flush() and shutdown() (plugin.h, "Durability" and "Shutdown")
// under test. Sink type "buffered_file":
//
//   apply()    checks versions against the file and its own buffer, and keeps
//              the lines of applied events in memory only
//   flush()    appends the buffer to the file in one write(); fails with
//              SLUICE_UNAVAILABLE while the file `fail_flush_while` exists
//   close()    drops the buffer (allowed: the host applies those events again)
//   open()     learns what the view holds from the file alone
//
// The view is the file's fold, one line per applied event:
//   <id> TAB <version> TAB <deleted 0|1> TAB <event_id> TAB <state JSON> LF
// and the highest version of each id wins. A missing directory is
// SLUICE_UNAVAILABLE (apply, flush, health), for the conformance kit.
//
// Options: path (required), calls (a file where every call is recorded as
// "<pid> <call> [<sink>]", init and shutdown included), fail_flush_while (a
// path), reject (events whose state contains this text are rejected, as are
// states that are not JSON).
//
// Its init() and shutdown() record themselves through the SDK's
// SLUICE_PLUGIN_WITH_HOOKS.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sluice/plugin_sdk.h>
#include <string>
#include <vector>

namespace {

using sluice::plugin_sdk::Event;
using sluice::plugin_sdk::EventResult;
using sluice::plugin_sdk::Outcome;
using sluice::plugin_sdk::Row;
using sluice::plugin_sdk::RowCallback;
using sluice::plugin_sdk::SinkContext;
using sluice::plugin_sdk::Status;

// The call log: lines wait in memory until a sink names the file.
struct CallLog {
  std::mutex mu;
  std::string path;
  std::vector<std::string> pending;
};

CallLog& Calls() {
  static CallLog* log = new CallLog();  // used from shutdown(), after main's statics may be gone
  return *log;
}

void AppendLine(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const std::string text = std::to_string(::getpid()) + " " + line + "\n";
  (void)!::write(fd, text.data(), text.size());
  ::close(fd);
}

void Record(const std::string& call) {
  CallLog& log = Calls();
  std::lock_guard lock(log.mu);
  if (log.path.empty()) {
    log.pending.push_back(call);
  } else {
    AppendLine(log.path, call);
  }
}

void SetCallLog(const std::string& path) {
  CallLog& log = Calls();
  std::lock_guard lock(log.mu);
  if (!log.path.empty()) return;
  log.path = path;
  for (const std::string& call : log.pending) AppendLine(path, call);
  log.pending.clear();
}

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

struct Entry {
  uint64_t version = 0;
  bool deleted = false;
  std::string state;
};

class BufferedFile : public sluice::plugin_sdk::Sink {
 public:
  ~BufferedFile() override {
    if (!name_.empty()) Record("destroy " + name_);
  }

  Status Configure(const SinkContext& context) override {
    nlohmann::json options;
    try {
      options = nlohmann::json::parse(context.options_json);
    } catch (const nlohmann::json::exception& e) {
      return Status::InvalidOptions(std::string("options are not JSON: ") + e.what());
    }
    std::string calls;
    for (const auto& [key, value] : options.items()) {
      if (!value.is_string()) return Status::InvalidOptions(key + " must be text");
      std::filesystem::path p = value.get<std::string>();
      if (key != "reject" && p.is_relative()) p = context.config_dir / p;
      if (key == "path") {
        path_ = p.string();
      } else if (key == "calls") {
        calls = p.string();
      } else if (key == "fail_flush_while") {
        fail_flush_while_ = p.string();
      } else if (key == "reject") {
        reject_ = value.get<std::string>();
      } else {
        return Status::InvalidOptions("unknown option '" + key + "' (expected: path, calls, fail_flush_while, reject)");
      }
    }
    if (path_.empty()) return Status::InvalidOptions("the option 'path' is required");
    if (!calls.empty()) SetCallLog(calls);
    name_ = context.sink_name;
    Record("create " + name_);
    return Status::Ok();
  }

  Status Open() override {
    Record("open " + name_);
    buffer_.clear();
    pending_.clear();
    return Load(durable_);
  }

  Status Apply(std::span<const Event> events, std::span<EventResult> results) override {
    if (Status s = Health(); !s.ok()) return s;
    for (size_t i = 0; i < events.size(); ++i) {
      const Event& e = events[i];
      if (!e.deleted && !nlohmann::json::accept(e.state)) {
        results[i] = {Outcome::kRejected, "the state is not JSON"};
        continue;
      }
      if (!reject_.empty() && e.state.find(reject_) != std::string_view::npos) {
        results[i] = {Outcome::kRejected, "the state contains '" + reject_ + "'"};
        continue;
      }
      const std::string id(e.entity_id);
      // Stale only against what is durable or in this instance's buffer.
      const Entry* held = Find(pending_, id);
      if (held == nullptr) held = Find(durable_, id);
      if (held != nullptr && held->version >= e.version) {
        results[i].outcome = Outcome::kStale;
        continue;
      }
      buffer_ += id + "\t" + std::to_string(e.version) + "\t" + (e.deleted ? "1" : "0") + "\t" +
                 std::to_string(e.event_id) + "\t" + std::string(e.deleted ? "null" : e.state) + "\n";
      pending_[id] = Entry{e.version, e.deleted, std::string(e.state)};
    }
    return Status::Ok();
  }

  Status Flush() override {
    Record("flush " + name_);
    if (!fail_flush_while_.empty() && Exists(fail_flush_while_)) {
      return Status::Unavailable("buffered_file: flushes fail while " + fail_flush_while_ + " exists");
    }
    if (Status s = Health(); !s.ok()) return s;
    if (buffer_.empty()) return Status::Ok();
    const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return Status::Unavailable("buffered_file: cannot open " + path_ + ": " + std::strerror(errno));
    const ssize_t n = ::write(fd, buffer_.data(), buffer_.size());
    ::close(fd);
    if (n != static_cast<ssize_t>(buffer_.size())) {
      return Status::Unavailable("buffered_file: cannot write " + path_);
    }
    for (auto& [id, entry] : pending_) durable_[id] = std::move(entry);
    buffer_.clear();
    pending_.clear();
    return Status::Ok();
  }

  Status Health() override { return DirectoryThere(); }

  // The file's fold: what is durable, not the buffer.
  Status Scan(const RowCallback& each) override {
    std::map<std::string, Entry> view;
    if (Status s = Load(view); !s.ok()) return s;
    for (const auto& [id, entry] : view) {
      if (!each(Row{id, entry.version, entry.deleted, entry.deleted ? "" : entry.state})) break;
    }
    return Status::Ok();
  }

  void Close() override {
    Record("close " + name_);
    buffer_.clear();
    pending_.clear();
  }

 private:
  Status DirectoryThere() const {
    const std::string dir = std::filesystem::path(path_).parent_path().string();
    if (!Exists(dir.empty() ? "." : dir)) return Status::Unavailable("buffered_file: directory " + dir + " is gone");
    return Status::Ok();
  }

  static const Entry* Find(const std::map<std::string, Entry>& m, const std::string& id) {
    auto it = m.find(id);
    return it == m.end() ? nullptr : &it->second;
  }

  Status Load(std::map<std::string, Entry>& into) const {
    into.clear();
    if (Status s = DirectoryThere(); !s.ok()) return s;
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return Status::Ok();
      return Status::Unavailable("buffered_file: cannot open " + path_ + ": " + std::strerror(errno));
    }
    std::string text;
    char buf[1 << 16];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
    ::close(fd);
    for (size_t start = 0, end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
      const std::string line = text.substr(start, end - start);
      std::vector<std::string> f;  // id, version, deleted, event_id; the state is the rest
      size_t from = 0;
      for (int k = 0; k < 4; ++k) {
        const size_t tab = line.find('\t', from);
        if (tab == std::string::npos) return Status::Misconfigured("buffered_file: a line it did not write in " + path_);
        f.push_back(line.substr(from, tab - from));
        from = tab + 1;
      }
      Entry e{std::stoull(f[1]), f[2] == "1", line.substr(from)};
      Entry& slot = into[f[0]];
      if (e.version > slot.version) slot = std::move(e);
    }
    return Status::Ok();
  }

  std::string name_;
  std::string path_;
  std::string fail_flush_while_;
  std::string reject_;
  std::map<std::string, Entry> durable_;  // the file's fold as of open() and the last flush
  std::map<std::string, Entry> pending_;  // what the buffer adds to it
  std::string buffer_;                    // its lines
};

}  // namespace

SLUICE_PLUGIN_WITH_HOOKS(
    "buffered", "1.0.0",
    [] {
      Record("init");
      return Status::Ok();
    },
    [] { Record("shutdown"); }, sluice::plugin_sdk::SinkType<BufferedFile>("buffered_file", SLUICE_CAP_POINT_VIEW))
