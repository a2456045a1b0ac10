// A plugin that buffers until flush() (connectors/plugin/testdata/
// buffered_plugin.cc) in the conformance kit: the kit reads the view only
// after a flush, and a reopened sink must apply again what a close dropped.
// Its "server" is the directory of its file, renamed away for the outage.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/conformance/conformance.h"

namespace sluice::conformance {
namespace {

namespace fs = std::filesystem;

class BufferedUnderTest : public ConnectorUnderTest {
 public:
  ~BufferedUnderTest() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  Status SetUp() override {
    dir_ = fs::temp_directory_path() / UniqueName("sluice_buffered");
    std::error_code ec;
    fs::create_directories(dir_ / "view", ec);
    if (ec) return Internal("cannot create " + dir_.string() + ": " + ec.message());
    return Status::Ok();
  }

  std::string SinkYaml() override {
    return "type: buffered_file, path: " + nlohmann::json((dir_ / "view" / "accounts.tsv").string()).dump();
  }

  std::string ExtraYaml() override { return "plugins: [" + nlohmann::json(BUFFERED_PLUGIN).dump() + "]\n"; }

  // The file's fold; lines are id, version, deleted, event_id, state (tabs).
  Result<std::optional<ViewRow>> ReadBack(const std::string& entity_id) override {
    std::ifstream in(dir_ / "view" / "accounts.tsv");
    std::optional<ViewRow> found;
    for (std::string line; std::getline(in, line);) {
      std::vector<std::string> f;
      size_t from = 0;
      for (int k = 0; k < 4; ++k) {
        const size_t tab = line.find('\t', from);
        if (tab == std::string::npos) return Internal("a torn line: " + line);
        f.push_back(line.substr(from, tab - from));
        from = tab + 1;
      }
      if (f[0] != entity_id) continue;
      ViewRow row{std::stoull(f[1]), f[2] == "1", std::nullopt};
      const auto state = nlohmann::json::parse(line.substr(from), nullptr, false);
      if (!row.deleted && state.is_object() && state.contains("n")) row.n = state.at("n").get<int64_t>();
      if (!found || row.version > found->version) found = row;
    }
    return found;
  }

  bool CanGoDown() const override { return true; }

  void SetServerDown(bool down) override {
    std::error_code ec;
    if (down) {
      fs::rename(dir_ / "view", dir_ / "view.away", ec);
    } else if (fs::exists(dir_ / "view.away")) {
      fs::rename(dir_ / "view.away", dir_ / "view", ec);
    }
  }

 private:
  fs::path dir_;
};

}  // namespace

SLUICE_CONFORMANCE_CONNECTOR(BufferedPlugin, BufferedUnderTest);

}  // namespace sluice::conformance
