#include "tests/support/config_support.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <unistd.h>

#include "connectors/builtin_sink_types.h"

namespace sluice::testing {

Result<config::Config> LoadConfigFromString(const std::string& text, const std::string& path) {
  return config::LoadConfigFromString(text, path, connectors::BuiltinSinkTypes());
}

Result<config::Config> LoadConfig(const std::string& path) {
  return config::LoadConfig(path, connectors::BuiltinSinkTypes());
}

std::string Errors(const std::string& yaml) {
  Result<config::Config> r = LoadConfigFromString(yaml, kFile);
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  return r.status().message();
}

std::string WithSinks(const std::string& items) { return std::string(kValid) + "sinks:\n" + items; }

std::string ValidWith(const std::string& from, const std::string& to) {
  std::string s = kValid;
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  s.replace(at, from.size(), to);
  return s;
}

std::string SinksWith(const std::string& from, const std::string& to) {
  std::string s = std::string(kValid) + kSinks;
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  s.replace(at, from.size(), to);
  return s;
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  if (const char* old = std::getenv(name)) old_ = old, had_ = true;
  if (value != nullptr) {
    setenv(name, value, 1);
  } else {
    unsetenv(name);
  }
}

ScopedEnv::~ScopedEnv() {
  if (had_) {
    setenv(name_.c_str(), old_.c_str(), 1);
  } else {
    unsetenv(name_.c_str());
  }
}

ScratchDir::ScratchDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "sluice_config_XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed for " << pattern;
  path_ = pattern;
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::filesystem::path ScratchDir::Write(const std::string& name, const std::string& contents) const {
  const auto p = path_ / name;
  std::ofstream(p) << contents;
  return p;
}

}  // namespace sluice::testing
