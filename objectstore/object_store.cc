#include "objectstore/object_store.h"

#include <string>
#include <string_view>

#include "objectstore/file_store.h"
#include "objectstore/s3_store.h"

namespace sluice::objectstore {
namespace {

constexpr std::string_view kTempPrefix = ".sluice-tmp";

// The rule shared by keys and prefixes; `what` names the argument in messages.
Status CheckName(std::string_view name, std::string_view what) {
  auto bad = [&](std::string_view why) {
    std::string shown(name.substr(0, 200));
    for (char& c : shown) {
      if (c == '\0') c = '?';
    }
    return InvalidArgument(std::string(what) + " \"" + shown + "\" " + std::string(why));
  };
  if (name.front() == '/') return bad("is absolute (starts with '/')");
  if (name.find('\0') != std::string_view::npos) return bad("contains a NUL byte");
  if (name.find('\\') != std::string_view::npos) return bad("contains a backslash");
  if (name.find("..") != std::string_view::npos) return bad("contains \"..\"");
  if (name.find("//") != std::string_view::npos) return bad("contains \"//\"");
  size_t start = 0;
  while (start < name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string_view::npos) end = name.size();
    std::string_view segment = name.substr(start, end - start);
    if (segment == ".") return bad("has a segment \".\"");
    if (segment.substr(0, kTempPrefix.size()) == kTempPrefix) {
      return bad("has a segment starting with \".sluice-tmp\" (reserved for temporary files)");
    }
    start = end + 1;
  }
  return Status::Ok();
}

}  // namespace

Status CheckObjectKey(std::string_view key) {
  if (key.empty()) return InvalidArgument("object key is empty");
  RETURN_IF_ERROR(CheckName(key, "object key"));
  if (key.back() == '/') {
    return InvalidArgument("object key \"" + std::string(key.substr(0, 200)) + "\" ends with '/'");
  }
  return Status::Ok();
}

Status CheckObjectPrefix(std::string_view prefix) {
  if (prefix.empty()) return Status::Ok();
  return CheckName(prefix, "list prefix");
}

Result<std::unique_ptr<ObjectStore>> OpenObjectStore(const ObjectStoreOptions& options) {
  const std::string& url = options.url;
  if (url.empty()) {
    return InvalidArgument("object store url is empty (want file:///absolute/dir or s3://bucket[/prefix])");
  }
  if (url.rfind("file://", 0) == 0) return OpenFileStore(url);
  if (url.rfind("s3://", 0) == 0) return OpenS3Store(options);
  std::string shown = url.substr(0, url.find(':') == std::string::npos ? 40 : url.find(':'));
  return InvalidArgument("object store url must start with file:/// or s3://, not \"" + shown + "\"");
}

Status CheckObjectStore(ObjectStore& store) { return store.Check(); }

}  // namespace sluice::objectstore
