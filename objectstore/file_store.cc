#include "objectstore/file_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace sluice::objectstore {
namespace {

constexpr std::string_view kTempName = ".sluice-tmp-";

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

// A file descriptor closed when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  // Closes now; the close's errno (0 when it succeeded).
  int Reset() {
    int err = 0;
    if (fd_ >= 0 && ::close(fd_) != 0) err = errno;
    fd_ = -1;
    return err;
  }

 private:
  int fd_;
};

class FileObjectStore final : public ObjectStore {
 public:
  explicit FileObjectStore(std::string root) : root_(std::move(root)) {}

  Status Put(const std::string& key, std::string_view bytes) override {
    RETURN_IF_ERROR(CheckObjectKey(key));
    const std::string path = root_ + "/" + key;
    const std::string dir = path.substr(0, path.rfind('/'));
    std::string tmp = dir + "/" + std::string(kTempName) + "XXXXXX";
    int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
    if (fd < 0 && (errno == ENOENT || errno == ENOTDIR)) {
      RETURN_IF_ERROR(MakeParents(key));
      tmp = dir + "/" + std::string(kTempName) + "XXXXXX";
      fd = ::mkostemp(tmp.data(), O_CLOEXEC);
    }
    if (fd < 0) return ErrnoStatus(errno, "cannot create a temporary file for", key);
    Fd file(fd);
    Status written = WriteSynced(file, bytes, key);
    if (written.ok()) {
      if (int err = file.Reset(); err != 0) written = ErrnoStatus(err, "cannot close", key);
    }
    if (written.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
      written = ErrnoStatus(errno, "cannot rename the temporary file over", key);
    }
    if (!written.ok()) {
      ::unlink(tmp.c_str());
      return written;
    }
    return SyncDir(dir, key);
  }

  Result<std::string> Get(const std::string& key) override {
    RETURN_IF_ERROR(CheckObjectKey(key));
    const std::string path = root_ + "/" + key;
    Fd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (file.get() < 0) {
      int err = errno;
      if (err != ENOENT && err != ENOTDIR) return ErrnoStatus(err, "cannot open", key);
      // An unmounted volume is not a missing object.
      RETURN_IF_ERROR(RootExists());
      return Missing(key);
    }
    struct stat st {};
    if (::fstat(file.get(), &st) != 0) return ErrnoStatus(errno, "cannot stat", key);
    if (!S_ISREG(st.st_mode)) return Missing(key);
    std::string out;
    out.resize(static_cast<size_t>(st.st_size));
    size_t have = 0;
    while (true) {
      if (have == out.size()) out.resize(out.size() + 65536);
      ssize_t n = ::read(file.get(), out.data() + have, out.size() - have);
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "cannot read", key);
      }
      if (n == 0) break;
      have += static_cast<size_t>(n);
    }
    out.resize(have);
    return out;
  }

  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override {
    RETURN_IF_ERROR(CheckObjectPrefix(prefix));
    // Walk from the deepest directory the prefix names whole.
    size_t slash = prefix.rfind('/');
    std::string start = slash == std::string::npos ? std::string() : prefix.substr(0, slash);
    std::vector<ObjectInfo> out;
    Fd dir(::open((start.empty() ? root_ : root_ + "/" + start).c_str(),
                  O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dir.get() < 0) {
      int err = errno;
      if (err != ENOENT && err != ENOTDIR) return ErrnoStatus(err, "cannot list", start.empty() ? "the directory" : start);
      RETURN_IF_ERROR(RootExists());
      return out;
    }
    RETURN_IF_ERROR(Walk(dir.get(), start, prefix, &out));
    std::sort(out.begin(), out.end(), [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
    return out;
  }

  Status Delete(const std::string& key) override {
    RETURN_IF_ERROR(CheckObjectKey(key));
    const std::string path = root_ + "/" + key;
    if (::unlink(path.c_str()) != 0) {
      int err = errno;
      if (err != ENOENT && err != ENOTDIR && err != EISDIR) return ErrnoStatus(err, "cannot delete", key);
      // A directory, or nothing there: no object either way, as long as the
      // store's directory itself is there.
      return RootExists();
    }
    return SyncDir(path.substr(0, path.rfind('/')), key);
  }

  std::string Describe() const override { return "file://" + root_; }

  Status Check() override {
    RETURN_IF_ERROR(RootExists());
    std::string probe = root_ + "/" + std::string(kTempName) + "XXXXXX";
    Fd file(::mkostemp(probe.data(), O_CLOEXEC));
    if (file.get() < 0) return ErrnoStatus(errno, "cannot create a file in", "the directory");
    Status st = WriteSynced(file, "probe", "a probe file");
    ::unlink(probe.c_str());
    return st;
  }

 private:
  // Maps an errno to the code that tells the caller what to do.
  Status ErrnoStatus(int err, std::string_view what, std::string_view key) const {
    std::string m = Describe() + ": " + std::string(what) + " " + std::string(key) + ": " + ErrnoText(err);
    switch (err) {
      case EACCES:
      case EPERM:
      case EROFS:
        return PermissionDenied(m + " (the directory must be writable by this process)");
      case ENOSPC:
      case EDQUOT:
        return ResourceExhausted(m);
      case ENAMETOOLONG:
        return InvalidArgument(m);
      case EISDIR:
      case ENOTDIR:
      case ENOENT:
        return FailedPrecondition(m);
      case EIO:
      case EINTR:
      case EAGAIN:
      case ETIMEDOUT:
      case ESTALE:
        return Unavailable(m);
      default:
        return Internal(m);
    }
  }

  Status Missing(std::string_view key) const { return NotFound(Describe() + ": no object " + std::string(key)); }

  Status RootExists() const {
    struct stat st {};
    if (::stat(root_.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) {
        return FailedPrecondition(Describe() + ": the directory does not exist (create it, or mount its volume)");
      }
      return ErrnoStatus(errno, "cannot reach", "the directory");
    }
    if (!S_ISDIR(st.st_mode)) return FailedPrecondition(Describe() + ": not a directory");
    return Status::Ok();
  }

  // Creates the directories between the root and key's file, fsyncing the
  // parent of each one it creates so that a crash cannot lose the path.
  Status MakeParents(std::string_view key) const {
    RETURN_IF_ERROR(RootExists());
    size_t pos = 0;
    while ((pos = key.find('/', pos)) != std::string_view::npos) {
      std::string sub(key.substr(0, pos));
      std::string dir = root_ + "/" + sub;
      if (::mkdir(dir.c_str(), 0755) == 0) {
        RETURN_IF_ERROR(SyncDir(dir.substr(0, dir.rfind('/')), sub));
      } else if (errno != EEXIST) {
        if (errno == ENOTDIR) {
          return FailedPrecondition(Describe() + ": cannot store " + std::string(key) + ": a parent of " + sub +
                                    " is an object, not a directory");
        }
        return ErrnoStatus(errno, "cannot create the directory", sub);
      } else {
        struct stat st {};
        if (::stat(dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
          return FailedPrecondition(Describe() + ": cannot store " + std::string(key) + ": " + sub +
                                    " is an object, not a directory");
        }
      }
      ++pos;
    }
    return Status::Ok();
  }

  Status WriteSynced(Fd& file, std::string_view bytes, std::string_view key) const {
    if (::fchmod(file.get(), 0644) != 0) return ErrnoStatus(errno, "cannot chmod the temporary file of", key);
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(file.get(), bytes.data() + done, bytes.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "cannot write", key);
      }
      done += static_cast<size_t>(n);
    }
    if (::fsync(file.get()) != 0) return ErrnoStatus(errno, "cannot fsync", key);
    return Status::Ok();
  }

  Status SyncDir(const std::string& dir, std::string_view key) const {
    Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (d.get() < 0) return ErrnoStatus(errno, "cannot open the directory of", key);
    // Some filesystems cannot fsync a directory (EINVAL); they order
    // metadata themselves.
    if (::fsync(d.get()) != 0 && errno != EINVAL) return ErrnoStatus(errno, "cannot fsync the directory of", key);
    return Status::Ok();
  }

  // Adds the files under the open directory `fd` (whose key is `base`, ""
  // for the root) whose keys start with `prefix`.
  Status Walk(int fd, const std::string& base, const std::string& prefix, std::vector<ObjectInfo>* out) const {
    int own = ::dup(fd);
    if (own < 0) return ErrnoStatus(errno, "cannot list", base.empty() ? "the directory" : base);
    DIR* d = ::fdopendir(own);
    if (d == nullptr) {
      int err = errno;
      ::close(own);
      return ErrnoStatus(err, "cannot list", base.empty() ? "the directory" : base);
    }
    std::vector<std::string> subdirs;
    Status st;
    while (true) {
      errno = 0;
      struct dirent* e = ::readdir(d);
      if (e == nullptr) {
        if (errno != 0) st = ErrnoStatus(errno, "cannot list", base.empty() ? "the directory" : base);
        break;
      }
      std::string_view name(e->d_name);
      if (name == "." || name == ".." || name.substr(0, kTempName.size()) == kTempName) continue;
      std::string key = base.empty() ? std::string(name) : base + "/" + std::string(name);
      struct stat s {};
      if (::fstatat(fd, e->d_name, &s, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;  // deleted while we list
        st = ErrnoStatus(errno, "cannot stat", key);
        break;
      }
      if (S_ISDIR(s.st_mode)) {
        // Only directories that can hold a matching key.
        std::string as_dir = key + "/";
        if (as_dir.compare(0, std::min(as_dir.size(), prefix.size()), prefix, 0,
                           std::min(as_dir.size(), prefix.size())) == 0) {
          subdirs.push_back(std::string(name));
        }
      } else if (S_ISREG(s.st_mode) && key.compare(0, prefix.size(), prefix) == 0) {
        out->push_back(ObjectInfo{key, static_cast<uint64_t>(s.st_size)});
      }
    }
    ::closedir(d);
    RETURN_IF_ERROR(st);
    for (const std::string& name : subdirs) {
      std::string key = base.empty() ? name : base + "/" + name;
      Fd sub(::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
      if (sub.get() < 0) {
        if (errno == ENOENT) continue;
        return ErrnoStatus(errno, "cannot list", key);
      }
      RETURN_IF_ERROR(Walk(sub.get(), key, prefix, out));
    }
    return Status::Ok();
  }

  std::string root_;  // absolute, no trailing '/'
};

}  // namespace

Result<std::unique_ptr<ObjectStore>> OpenFileStore(const std::string& url) {
  constexpr std::string_view kScheme = "file://";
  std::string path = url.substr(kScheme.size());
  if (path.empty() || path.front() != '/') {
    return InvalidArgument("file store url \"" + url + "\" must be file:///absolute/dir (three slashes, no host)");
  }
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (path == "/") return InvalidArgument("file store url \"" + url + "\" names the root directory");
  if (path.find('\0') != std::string::npos || path.find("//") != std::string::npos ||
      (path + "/").find("/./") != std::string::npos || (path + "/").find("/../") != std::string::npos) {
    return InvalidArgument("file store url \"" + url + "\" must name a directory plainly (no \"//\", \".\" or \"..\")");
  }
  return std::unique_ptr<ObjectStore>(std::make_unique<FileObjectStore>(std::move(path)));
}

}  // namespace sluice::objectstore
