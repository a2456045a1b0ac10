// The file store: the contract (object_store_test.h) on a fresh directory,
// then what only a directory can show (atomic rename, leftovers of a crash,
// a read-only or missing directory).
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "objectstore/object_store.h"
#include "objectstore/object_store_test.h"

namespace sluice::objectstore {
namespace {

// A new directory under TMPDIR, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "sluice-objectstore-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~ScratchDir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string url() const { return "file://" + path_; }

 private:
  std::string path_;
};

ObjectStoreOptions FileOptions(const std::string& url) {
  ObjectStoreOptions o;
  o.url = url;
  return o;
}

ContractStore MakeFileStore() {
  auto dir = std::make_shared<ScratchDir>();
  if (dir->path().empty()) {
    ADD_FAILURE() << "cannot make a scratch directory";
    return {};
  }
  auto store = OpenObjectStore(FileOptions(dir->url()));
  if (!store.ok()) {
    ADD_FAILURE() << store.status().ToString();
    return {};
  }
  return {std::move(store).value(), dir};
}

INSTANTIATE_TEST_SUITE_P(File, ObjectStoreContractTest, ::testing::Values(StoreKind{"FileStore", MakeFileStore}),
                         StoreKindName);

std::unique_ptr<ObjectStore> Open(const std::string& url) {
  auto store = OpenObjectStore(FileOptions(url));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

// Every name in a directory tree, temporary files included.
std::vector<std::string> RawNames(const std::string& root) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    names.push_back(std::filesystem::relative(e.path(), root).string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(FileStore, UrlsMustNameAnAbsoluteDirectoryPlainly) {
  for (const char* url : {"file://relative/dir", "file://host/dir", "file://", "file:///", "file:///a/../b",
                          "file:///a/./b", "file:///a//b", "file:/abs", "ftp:///x", "/just/a/path", ""}) {
    auto store = OpenObjectStore(FileOptions(url));
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument) << url;
  }
  auto store = OpenObjectStore(FileOptions("file:///var/lib/sluice/archive/"));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->Describe(), "file:///var/lib/sluice/archive");
}

TEST(FileStore, PutCreatesSubdirectoriesAndReplacesByRename) {
  ScratchDir dir;
  auto store = Open(dir.url());
  ASSERT_NE(store, nullptr);
  const std::string key = "segments/orders/p003/1-1000.seg";
  ASSERT_TRUE(store->Put(key, "first").ok());
  const std::string path = dir.path() + "/" + key;
  struct stat before {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  ASSERT_TRUE(store->Put(key, "second, longer").ok());
  struct stat after {};
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  // A new file renamed over the old one, not the old one rewritten in place:
  // a reader holding the old file still reads it whole.
  EXPECT_NE(before.st_ino, after.st_ino);
  std::ifstream in(path, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "second, longer");
  EXPECT_EQ((after.st_mode & 0777), 0644u);
  // No temporary file is left behind.
  EXPECT_EQ(RawNames(dir.path()), (std::vector<std::string>{"segments", "segments/orders", "segments/orders/p003",
                                                            "segments/orders/p003/1-1000.seg"}));
}

TEST(FileStore, LeftoverTemporaryFilesOfACrashAreNotListed) {
  ScratchDir dir;
  auto store = Open(dir.url());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Put("a/b.seg", "x").ok());
  std::ofstream(dir.path() + "/a/.sluice-tmp-Ab12Cd") << "half a segment";
  std::ofstream(dir.path() + "/.sluice-tmp-Zz99Yy") << "half";
  auto listed = store->List("");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].key, "a/b.seg");
}

TEST(FileStore, AnObjectInTheWayOfADirectoryIsAClearError) {
  ScratchDir dir;
  auto store = Open(dir.url());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Put("a", "x").ok());
  Status st = store->Put("a/b", "y");
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("is an object, not a directory"), std::string::npos) << st.message();
  EXPECT_EQ(store->Get("a/b").status().code(), StatusCode::kNotFound);
}

TEST(FileStore, AMissingDirectoryIsAFailedPreconditionNotAnEmptyStore) {
  ScratchDir dir;
  const std::string missing = dir.path() + "/not-mounted";
  auto store = Open("file://" + missing);
  ASSERT_NE(store, nullptr);
  Status check = CheckObjectStore(*store);
  EXPECT_EQ(check.code(), StatusCode::kFailedPrecondition) << check.ToString();
  EXPECT_NE(check.message().find("does not exist"), std::string::npos) << check.message();
  EXPECT_EQ(store->Put("a/b", "x").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->Get("a/b").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->List("").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->Delete("a/b").code(), StatusCode::kFailedPrecondition);
  // Put never creates the store's own directory.
  EXPECT_FALSE(std::filesystem::exists(missing));
}

// The codes and messages of Put and CheckObjectStore on a read-only
// directory. Root may write anywhere, so as root the calls run in a child
// process that has become nobody (65534) first.
struct ReadOnlyOutcome {
  StatusCode put = StatusCode::kOk;
  StatusCode check = StatusCode::kOk;
  StatusCode get = StatusCode::kOk;
  std::string put_message;
};

ReadOnlyOutcome RunReadOnly(const std::string& url) {
  auto run = [&]() {
    ReadOnlyOutcome out;
    auto opened = OpenObjectStore(FileOptions(url));
    if (!opened.ok()) return out;
    ObjectStore& store = **opened;
    Status put = store.Put("segments/new.seg", "x");
    out.put = put.code();
    out.put_message = put.message();
    out.check = CheckObjectStore(store).code();
    out.get = store.Get("existing.seg").status().code();
    return out;
  };
  if (::geteuid() != 0) return run();
  int fds[2];
  if (::pipe(fds) != 0) return {};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    int code = 2;
    if (::setgid(65534) == 0 && ::setuid(65534) == 0) {
      ReadOnlyOutcome out = run();
      std::string msg = std::to_string(static_cast<int>(out.put)) + " " + std::to_string(static_cast<int>(out.check)) +
                        " " + std::to_string(static_cast<int>(out.get)) + " " + out.put_message;
      code = ::write(fds[1], msg.data(), msg.size()) == static_cast<ssize_t>(msg.size()) ? 0 : 3;
    }
    ::_exit(code);
  }
  ::close(fds[1]);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "the child that dropped root failed";
  ReadOnlyOutcome out;
  int put = 0, check = 0, get = 0, used = 0;
  if (std::sscanf(text.c_str(), "%d %d %d %n", &put, &check, &get, &used) >= 3) {
    out.put = static_cast<StatusCode>(put);
    out.check = static_cast<StatusCode>(check);
    out.get = static_cast<StatusCode>(get);
    out.put_message = text.substr(static_cast<size_t>(used));
  }
  return out;
}

TEST(FileStore, AReadOnlyDirectoryIsAClearPermissionError) {
  ScratchDir dir;
  auto store = Open(dir.url());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Put("existing.seg", "old").ok());
  ASSERT_EQ(::chmod(dir.path().c_str(), 0555), 0);
  ReadOnlyOutcome out = RunReadOnly(dir.url());
  ::chmod(dir.path().c_str(), 0755);
  EXPECT_EQ(out.put, StatusCode::kPermissionDenied) << out.put_message;
  EXPECT_NE(out.put_message.find(dir.url()), std::string::npos) << out.put_message;
  EXPECT_NE(out.put_message.find("must be writable"), std::string::npos) << out.put_message;
  EXPECT_EQ(out.check, StatusCode::kPermissionDenied);
  // Reading still works.
  EXPECT_EQ(out.get, StatusCode::kOk);
  auto got = store->Get("existing.seg");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "old");
}

TEST(FileStore, CheckWritesNothingThatStays) {
  ScratchDir dir;
  auto store = Open(dir.url());
  ASSERT_NE(store, nullptr);
  Status st = CheckObjectStore(*store);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(RawNames(dir.path()).empty());
}

TEST(ObjectKeys, TheRuleBothStoresApply) {
  for (const char* ok : {"a", "a/b", "segments/orders/p003/1-2.seg", "with space", "é/€", ".hidden", "a.b/c"}) {
    EXPECT_TRUE(CheckObjectKey(ok).ok()) << ok;
  }
  // Any "..", even inside a name.
  EXPECT_FALSE(CheckObjectKey("a/c..d").ok());
  EXPECT_TRUE(CheckObjectPrefix("").ok());
  EXPECT_TRUE(CheckObjectPrefix("segments/").ok());
  EXPECT_TRUE(CheckObjectPrefix("segments/ord").ok());
  EXPECT_FALSE(CheckObjectPrefix("/segments").ok());
  Status st = CheckObjectKey(std::string("a\0b", 3));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message().find('\0'), std::string::npos);
  EXPECT_NE(CheckObjectKey("a//b").message().find("\"//\""), std::string::npos);
}

}  // namespace
}  // namespace sluice::objectstore
