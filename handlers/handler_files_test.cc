#include "handlers/handler_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "config/config.h"
#include "connectors/builtin_sink_types.h"

namespace sluice::handlers {
namespace {

class HandlerFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("sluice_handlers_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_ / "handlers");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& rel, const std::string& text) { std::ofstream(dir_ / rel) << text; }
  Result<config::Config> Load(const std::string& entities, const std::string& writer = "") {
    Write("sluice.yaml", "storage: {mysql: {}}\nentities:\n" + entities + writer);
    return config::LoadConfig((dir_ / "sluice.yaml").string(), connectors::BuiltinSinkTypes());
  }
  std::filesystem::path dir_;
};

TEST_F(HandlerFilesTest, ResolvesRelativeToTheConfigAndCompiles) {
  Write("handlers/account.js", "function deposit(s, r) { s.b = (s.b || 0) + r.amount; }\nfunction close() {}\n");
  auto cfg = Load("  account: {partitions: 2, handlers: handlers/account.js}\n  plain: {partitions: 1}\n",
                  "writer: {handler_timeout: 20ms, handler_memory: 8MiB}\n");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->entities.at("account").handlers, (dir_ / "handlers/account.js").string());
  EXPECT_EQ(cfg->writer.handler_timeout, std::chrono::milliseconds(20));
  EXPECT_EQ(cfg->writer.handler_memory, uint64_t{8} << 20);
  auto scripts = LoadHandlerScripts(*cfg);
  ASSERT_TRUE(scripts.ok()) << scripts.status().message();
  ASSERT_EQ(scripts->size(), 1u);
  const HandlerScript& s = *scripts->at("account");
  EXPECT_EQ(s.commands, (std::vector<std::string>{"close", "deposit"}));
  EXPECT_EQ(s.limits.timeout, std::chrono::milliseconds(20));
}

TEST_F(HandlerFilesTest, MissingFileIsAConfigErrorAtTheKey) {
  auto cfg = Load("  account: {partitions: 2, handlers: handlers/nope.js}\n");
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find("sluice.yaml:3:38: "), std::string::npos) << cfg.status().message();
  EXPECT_NE(cfg.status().message().find("cannot read handler file"), std::string::npos);
}

TEST_F(HandlerFilesTest, LimitsAreValidated) {
  Write("handlers/a.js", "function a() {}");
  auto cfg = Load("  a: {partitions: 1, handlers: handlers/a.js}\n", "writer: {handler_timeout: 0ms, handler_memory: 1KiB}\n");
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find("writer.handler_timeout"), std::string::npos) << cfg.status().message();
  EXPECT_NE(cfg.status().message().find("writer.handler_memory"), std::string::npos) << cfg.status().message();
}

TEST_F(HandlerFilesTest, SyntaxErrorsOfEveryFileAreReportedWithFileAndLine) {
  Write("handlers/a.js", "function a() {\n  return 1 +;\n}\n");
  Write("handlers/b.js", "function b() {}\n\n\nvar x = ;\n");
  auto cfg = Load("  a: {partitions: 1, handlers: handlers/a.js}\n  b: {partitions: 1, handlers: handlers/b.js}\n");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  auto scripts = LoadHandlerScripts(*cfg);
  ASSERT_FALSE(scripts.ok());
  const std::string m = scripts.status().message();
  EXPECT_NE(m.find((dir_ / "handlers/a.js").string() + ":2: SyntaxError"), std::string::npos) << m;
  EXPECT_NE(m.find((dir_ / "handlers/b.js").string() + ":4: SyntaxError"), std::string::npos) << m;
  EXPECT_NE(m.find("entities.a.handlers at "), std::string::npos) << m;
}

}  // namespace
}  // namespace sluice::handlers
