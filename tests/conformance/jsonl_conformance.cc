// The example JSON-lines plugin (connectors/examples/jsonl_sink) in the
// conformance kit. Its "server" is the directory of the file: renaming the
// directory away is the outage (an unmounted volume).
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "tests/conformance/conformance.h"

namespace sluice::conformance {
namespace {

namespace fs = std::filesystem;

class JsonlUnderTest : public ConnectorUnderTest {
 public:
  ~JsonlUnderTest() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  Status SetUp() override {
    dir_ = fs::temp_directory_path() / UniqueName("sluice_jsonl");
    std::error_code ec;
    fs::create_directories(dir_ / "view", ec);
    if (ec) return Internal("cannot create " + dir_.string() + ": " + ec.message());
    return Status::Ok();
  }

  std::string SinkYaml() override {
    return "type: jsonl, path: " + nlohmann::json((dir_ / "view" / "accounts.jsonl").string()).dump();
  }

  std::string ExtraYaml() override { return "plugins: [" + nlohmann::json(JSONL_PLUGIN).dump() + "]\n"; }

  // Folds the file: the highest version of each id wins.
  Result<std::optional<ViewRow>> ReadBack(const std::string& entity_id) override {
    std::ifstream in(dir_ / "view" / "accounts.jsonl");
    std::optional<ViewRow> found;
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded()) return Internal("a line of the file is not JSON: " + line);
      if (j.at("id") != entity_id) continue;
      ViewRow row{j.at("version").get<uint64_t>(), j.at("deleted").get<bool>(), std::nullopt};
      if (!row.deleted && j.at("state").contains("n")) row.n = j.at("state").at("n").get<int64_t>();
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

SLUICE_CONFORMANCE_CONNECTOR(JsonlPlugin, JsonlUnderTest);

}  // namespace sluice::conformance
