// ConfigReader: what a value points to outside the YAML: ${env:NAME} and
// ${file:PATH} secrets and JSON object files, and the file reading they and
// the loader share.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include <nlohmann/json.hpp>

#include "config/config_reader.h"
#include "config/config_text.h"
#include "core/json.h"

namespace sluice::config {

namespace {
constexpr size_t kMaxSecretFileBytes = 64u << 10;
}  // namespace

int ReadWholeFile(const std::string& path, size_t max_bytes, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return err;
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return EISDIR;
  }
  out->clear();
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return err;
    }
    if (n == 0) break;
    if (out->size() + static_cast<size_t>(n) > max_bytes) {
      ::close(fd);
      return EFBIG;
    }
    out->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return 0;
}

std::string ErrnoText(int err) { return std::system_category().message(err); }

std::filesystem::path ConfigReader::ResolvePath(std::string_view written) const {
  std::filesystem::path p{std::string(written)};
  if (p.is_relative() && !base_dir_.empty()) p = base_dir_ / p;
  return p;
}

// A secret field: a literal, or a whole-value "${env:NAME}" / "${file:PATH}".
// No message here may include the value.
bool ConfigReader::ReadSecret(const Field& f, std::string* out, bool* from_reference) {
  if (!f.value.IsScalar()) {
    // Describe() quotes only scalars, so this never shows a value.
    Problem(f.mark, f.path, "must be a string, got " + Describe(f.value));
    return false;
  }
  const std::string& text = f.value.Scalar();
  const bool reference = text.size() >= 3 && text.compare(0, 2, "${") == 0 && text.back() == '}';
  if (from_reference != nullptr) *from_reference = reference;
  if (!reference) {
    if (HasSecretReference(text)) {
      Problem(f.mark, f.path,
              "a secret reference must be the whole value, "
              "as in \"${env:NAME}\" or \"${file:PATH}\"");
      return false;
    }
    *out = text;
    return true;
  }
  const std::string_view inner = std::string_view(text).substr(2, text.size() - 3);
  if (inner.rfind("env:", 0) == 0) {
    const std::string name(inner.substr(4));
    const bool valid_name =
        !name.empty() && !(name[0] >= '0' && name[0] <= '9') && std::all_of(name.begin(), name.end(), IsWordChar);
    if (!valid_name) {
      Problem(f.mark, f.path, "invalid environment variable name " + QuoteValue(name) + " in ${env:NAME}");
      return false;
    }
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) {
      Problem(f.mark, f.path, "environment variable " + name + " is not set");
      return false;
    }
    *out = value;
    RememberReference(f, text);
    return true;
  }
  if (inner.rfind("file:", 0) == 0) {
    const std::string_view file = inner.substr(5);
    if (file.empty()) {
      Problem(f.mark, f.path, "${file:PATH} needs a path");
      return false;
    }
    const std::filesystem::path p = ResolvePath(file);
    std::string contents;
    if (const int err = ReadWholeFile(p.string(), kMaxSecretFileBytes, &contents); err != 0) {
      Problem(f.mark, f.path, "cannot read secret file " + p.string() + ": " + ErrnoText(err));
      return false;
    }
    if (!contents.empty() && contents.back() == '\n') {
      contents.pop_back();
      if (!contents.empty() && contents.back() == '\r') contents.pop_back();
    }
    *out = std::move(contents);
    RememberReference(f, text);
    return true;
  }
  Problem(f.mark, f.path, "a value of the form ${...} must be ${env:NAME} or ${file:PATH}");
  return false;
}

void ConfigReader::RememberReference(const Field& f, const std::string& reference) {
  if (secret_references_ != nullptr) (*secret_references_)[f.path] = reference;
}

std::optional<std::filesystem::path> ConfigReader::ReadNamedFile(const Field& f, std::string_view what,
                                                                 std::string* text) {
  std::string path;
  if (!ReadString(f, kNotEmpty, &path)) return std::nullopt;
  std::filesystem::path p = ResolvePath(path);
  if (const int err = ReadWholeFile(p.string(), kMaxConfigFileBytes, text); err != 0) {
    Problem(f.mark, f.path, "cannot read " + std::string(what) + QuoteValue(p.string()) + ": " + ErrnoText(err));
    return std::nullopt;
  }
  return p;
}

// A readable file, relative to the config file's folder, holding one JSON
// object: its path and its text.
void ConfigReader::ReadJsonObjectFile(const Field& f, std::string* path_out, std::string* json_out) {
  std::string text;
  const std::optional<std::filesystem::path> p = ReadNamedFile(f, "", &text);
  if (!p) return;
  const nlohmann::json parsed = ParseJsonOrDiscarded(text);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return Problem(f.mark, f.path, QuoteValue(p->string()) + " must hold one JSON object");
  }
  *path_out = p->lexically_normal().string();
  *json_out = std::move(text);
}

// A readable PEM file, relative to the config file's folder: its path.
void ConfigReader::ReadPemFile(const Field& f, std::string_view what, std::string* path_out) {
  std::string text;
  const std::optional<std::filesystem::path> p = ReadNamedFile(f, what, &text);
  if (!p) return;
  if (text.find("-----BEGIN ") == std::string::npos) {
    return Problem(f.mark, f.path, QuoteValue(p->string()) + " is not a PEM file (no -----BEGIN line)");
  }
  *path_out = p->lexically_normal().string();
}

}  // namespace sluice::config
