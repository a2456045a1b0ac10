// An example sink plugin: keeps a view of one entity type as a JSON-lines
// file. Written only against <sluice/plugin_sdk.h> (plus nlohmann/json for
// JSON), as a plugin outside this repository would be. See
// docs/connectors.md for the walk-through and README.md beside this file.
//
// The file is an append-only log of versions: one line per applied event,
//   {"id":"a1","version":3,"deleted":false,"event_id":17,"state":{...}}
// and the view is its fold: the last line of each id (the version check
// makes it the highest version). A delete appends a line with
// "deleted":true, which is the tombstone that keeps older versions out.
//
// The version index lives in memory and is rebuilt from the file on Open()
// and whenever the file was replaced or changed behind the sink's back.
// Each batch is one write() with O_APPEND, then fsync; with fsync: false the
// fsync waits for Flush(), which the engine calls before it saves offsets,
// so a saved offset never passes a line that is not on disk. A failed or
// short write is cut back off, so a batch is never half in the file. A
// missing directory (an unmounted volume) is SLUICE_UNAVAILABLE.
//
// Rebuild (plugin ABI 1.1): the shadow writes "<path>.rebuild" beside the
// live file, starting empty; promotion fsyncs it and rename()s it over the
// live file, which replaces the view in one atomic step. The live instance
// sees another inode on its next call and reloads.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sluice/plugin_sdk.h>
#include <string>

namespace {

using sluice::plugin_sdk::Event;
using sluice::plugin_sdk::EventResult;
using sluice::plugin_sdk::Outcome;
using sluice::plugin_sdk::Row;
using sluice::plugin_sdk::RowCallback;
using sluice::plugin_sdk::SinkContext;
using sluice::plugin_sdk::Status;

std::string ErrnoText(int err) { return std::strerror(err); }

// One entity in the file: its latest line.
struct Entry {
  uint64_t version = 0;
  bool deleted = false;
  std::string state;  // compact JSON; empty for a tombstone
};

class JsonlSink : public sluice::plugin_sdk::Sink {
 public:
  Status Configure(const SinkContext& context) override {
    nlohmann::json options;
    try {
      options = nlohmann::json::parse(context.options_json);
    } catch (const nlohmann::json::exception& e) {
      return Status::InvalidOptions(std::string("options are not JSON: ") + e.what());
    }
    if (!options.is_object()) return Status::InvalidOptions("options must be a mapping");
    for (const auto& [key, value] : options.items()) {
      if (key == "path") {
        if (!value.is_string() || value.get<std::string>().empty()) {
          return Status::InvalidOptions("path must be a file path, got " + value.dump());
        }
        std::filesystem::path p = value.get<std::string>();
        if (p.is_relative() && !context.config_dir.empty()) p = context.config_dir / p;
        path_ = p.lexically_normal().string();
      } else if (key == "fsync") {
        if (!value.is_boolean()) return Status::InvalidOptions("fsync must be true or false, got " + value.dump());
        fsync_ = value.get<bool>();
      } else {
        return Status::InvalidOptions("unknown option '" + key + "' (expected: path, fsync)");
      }
    }
    if (path_.empty()) return Status::InvalidOptions("the option 'path' is required (the JSON-lines file)");
    name_ = context.sink_name;
    return Status::Ok();
  }

  Status Open() override {
    if (!live_path_.empty() && !shadow_prepared_) {
      // What an abandoned rebuild left is not this rebuild's view.
      if (::unlink(path_.c_str()) != 0 && errno != ENOENT) return Unavailable("remove", errno);
      shadow_prepared_ = true;
    }
    return Reload();
  }

  Status Apply(std::span<const Event> events, std::span<EventResult> results) override {
    if (Status s = RefreshIfChanged(); !s.ok()) return s;
    std::map<std::string, Entry, std::less<>> pending;  // this batch's winners
    std::string lines;
    uint64_t line_count = 0;
    for (size_t i = 0; i < events.size(); ++i) {
      const Event& e = events[i];
      std::string state;
      if (!e.deleted) {
        try {
          state = nlohmann::json::parse(e.state).dump();  // compact: one line
        } catch (const nlohmann::json::exception& ex) {
          results[i] = {Outcome::kRejected, std::string("the state is not valid JSON: ") + ex.what()};
          continue;
        }
      }
      const std::string id(e.entity_id);
      auto p = pending.find(id);
      const Entry* held = p != pending.end() ? &p->second : Find(id);
      if (held != nullptr && held->version >= e.version) {
        results[i].outcome = Outcome::kStale;
        continue;
      }
      nlohmann::json line = {{"id", id}, {"version", e.version}, {"deleted", e.deleted},
                             {"event_id", e.event_id}};
      lines += line.dump();
      lines.pop_back();  // drop the closing brace to splice the state in as raw JSON
      lines += ",\"state\":";
      lines += e.deleted ? "null" : state;
      lines += "}\n";
      ++line_count;
      pending[id] = Entry{e.version, e.deleted, std::move(state)};
    }
    if (!lines.empty()) {
      if (Status s = AppendAll(lines); !s.ok()) return s;
    }
    for (auto& [id, entry] : pending) index_[id] = std::move(entry);
    sluice::plugin_sdk::Host::CounterAdd("jsonl_lines_written_total", name_, line_count);
    sluice::plugin_sdk::Host::CounterAdd("jsonl_bytes_written_total", name_, lines.size());
    return Status::Ok();
  }

  Status Health() override {
    struct stat st {};
    const std::string dir = std::filesystem::path(path_).parent_path().string();
    if (::stat(dir.empty() ? "." : dir.c_str(), &st) != 0) {
      return Status::Unavailable("jsonl: directory " + dir + ": " + ErrnoText(errno));
    }
    return Status::Ok();
  }

  Status Scan(const RowCallback& each) override {
    if (Status s = RefreshIfChanged(); !s.ok()) return s;
    for (const auto& [id, entry] : index_) {
      if (!each(Row{id, entry.version, entry.deleted, entry.state})) break;
    }
    return Status::Ok();
  }

  // With fsync: false, what the batches since the last flush wrote.
  Status Flush() override {
    if (!unsynced_) return Status::Ok();
    if (Status s = SyncPath(path_, O_RDONLY); !s.ok()) return s;
    unsynced_ = false;
    return Status::Ok();
  }

  void Close() override { index_.clear(); }

  // The shadow writes "<path>.rebuild" in the same directory, so that
  // rename() can replace the live file atomically.
  Status MakeRebuildShadow(JsonlSink& shadow) const {
    shadow.name_ = name_;
    shadow.fsync_ = fsync_;
    shadow.path_ = path_ + ".rebuild";
    shadow.live_path_ = path_;
    return Status::Ok();
  }

  Status PromoteRebuildShadow() {
    if (live_path_.empty()) return Status::Misconfigured("jsonl: " + path_ + " is not a rebuild shadow");
    if (Status s = RefreshIfChanged(); !s.ok()) return s;  // makes sure the file exists
    if (fsync_) {
      if (Status s = SyncPath(path_, O_RDONLY); !s.ok()) return s;
    }
    if (::rename(path_.c_str(), live_path_.c_str()) != 0) return Unavailable("rename the rebuilt file onto", errno);
    if (fsync_) {
      const std::string dir = std::filesystem::path(live_path_).parent_path().string();
      return SyncPath(dir.empty() ? "." : dir, O_RDONLY | O_DIRECTORY);
    }
    return Status::Ok();
  }

 private:
  // fsync of a file or, with O_DIRECTORY, of the directory entry a rename changed.
  static Status SyncPath(const std::string& path, int flags) {
    const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
    int err = fd < 0 ? errno : 0;
    if (fd >= 0) {
      if (::fsync(fd) != 0) err = errno;
      ::close(fd);
    }
    if (err == 0) return Status::Ok();
    return Status::Unavailable("jsonl: cannot fsync " + path + ": " + ErrnoText(err));
  }

  const Entry* Find(const std::string& id) const {
    auto it = index_.find(id);
    return it == index_.end() ? nullptr : &it->second;
  }

  // Re-reads the file when it is not the one (or not the size) last seen.
  Status RefreshIfChanged() {
    struct stat st {};
    if (::stat(path_.c_str(), &st) != 0) {
      if (errno == ENOENT && known_ && known_size_ == 0) {
        // Never written: fine as long as the directory is there.
        return Health();
      }
      return Reload();
    }
    if (known_ && st.st_ino == known_inode_ && st.st_dev == known_device_ &&
        static_cast<uint64_t>(st.st_size) == known_size_) {
      return Status::Ok();
    }
    return Reload();
  }

  // Rebuilds the index from the file, cutting off a torn last line.
  Status Reload() {
    index_.clear();
    known_ = false;
    if (Status s = Health(); !s.ok()) return s;
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return Unavailable("open", errno);
    std::string text;
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int err = errno;
        ::close(fd);
        return Unavailable("read", err);
      }
      if (n == 0) break;
      text.append(buf, static_cast<size_t>(n));
    }
    size_t complete = text.rfind('\n');
    complete = complete == std::string::npos ? 0 : complete + 1;
    if (complete != text.size() && ::ftruncate(fd, static_cast<off_t>(complete)) != 0) {
      const int err = errno;
      ::close(fd);
      return Unavailable("truncate a torn last line of", err);
    }
    struct stat st {};
    const int stat_rc = ::fstat(fd, &st);
    ::close(fd);
    if (stat_rc != 0) return Unavailable("stat", errno);
    size_t start = 0;
    size_t line_no = 0;
    while (start < complete) {
      const size_t end = text.find('\n', start);
      ++line_no;
      try {
        const auto line = nlohmann::json::parse(text.begin() + static_cast<std::ptrdiff_t>(start),
                                                text.begin() + static_cast<std::ptrdiff_t>(end));
        Entry entry{line.at("version").get<uint64_t>(), line.at("deleted").get<bool>(), ""};
        if (!entry.deleted) entry.state = line.at("state").dump();
        Entry& slot = index_[line.at("id").get<std::string>()];
        if (entry.version > slot.version) slot = std::move(entry);
      } catch (const nlohmann::json::exception& e) {
        return Status::Misconfigured("jsonl: " + path_ + ":" + std::to_string(line_no) +
                                     ": not a line this sink wrote: " + e.what());
      }
      start = end + 1;
    }
    Remember(st);
    return Status::Ok();
  }

  // Appends `lines` in one write, or nothing at all.
  Status AppendAll(const std::string& lines) {
    const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return Unavailable("open", errno);
    struct stat before {};
    if (::fstat(fd, &before) != 0) {
      const int err = errno;
      ::close(fd);
      return Unavailable("stat", err);
    }
    const ssize_t n = ::write(fd, lines.data(), lines.size());
    int err = n < 0 ? errno : (static_cast<size_t>(n) != lines.size() ? ENOSPC : 0);
    if (err == 0 && fsync_ && ::fsync(fd) != 0) err = errno;
    if (err == 0 && !fsync_) unsynced_ = true;
    if (err != 0) {
      // Best effort: take a partial batch back off so the file holds whole batches.
      if (::ftruncate(fd, before.st_size) != 0) known_ = false;
      ::close(fd);
      known_ = false;
      return Unavailable("write", err);
    }
    struct stat after {};
    const int stat_rc = ::fstat(fd, &after);
    ::close(fd);
    if (stat_rc != 0) {
      known_ = false;
      return Status::Ok();
    }
    // Someone else appended meanwhile: re-read before the next batch.
    if (static_cast<uint64_t>(before.st_size) != known_size_ || before.st_ino != known_inode_) {
      known_ = false;
    } else {
      Remember(after);
    }
    return Status::Ok();
  }

  void Remember(const struct stat& st) {
    known_ = true;
    known_inode_ = st.st_ino;
    known_device_ = st.st_dev;
    known_size_ = static_cast<uint64_t>(st.st_size);
  }

  Status Unavailable(const char* what, int err) const {
    return Status::Unavailable(std::string("jsonl: cannot ") + what + " " + path_ + ": " + ErrnoText(err));
  }

  std::string name_;
  std::string path_;
  bool fsync_ = true;
  bool unsynced_ = false;  // fsync: false: written since the last Flush()
  // Set on a rebuild shadow: the live file it replaces, and whether its first
  // Open() has removed what an abandoned rebuild left.
  std::string live_path_;
  bool shadow_prepared_ = false;
  std::map<std::string, Entry, std::less<>> index_;
  bool known_ = false;  // the index matches the file identified below
  ino_t known_inode_ = 0;
  dev_t known_device_ = 0;
  uint64_t known_size_ = 0;
};

}  // namespace

SLUICE_PLUGIN("jsonl_sink", "1.0.0",
              sluice::plugin_sdk::SinkType<JsonlSink>("jsonl", SLUICE_CAP_POINT_VIEW | SLUICE_CAP_CAN_PUSH))
