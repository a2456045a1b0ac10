// The built-in elasticsearch sink in the conformance kit, against the test
// OpenSearch (SLUICE_TEST_OPENSEARCH_URL), through a TcpProxy that the kit
// can cut. Each test gets its own index, deleted afterwards.
#include <chrono>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>

#include "tests/conformance/conformance.h"
#include "tests/support/test_support.h"

namespace sluice::conformance {
namespace {

uint16_t OpenSearchPort() {
  const char* url = std::getenv("SLUICE_TEST_OPENSEARCH_URL");
  const std::string s = url != nullptr && *url != '\0' ? url : "http://127.0.0.1:19200";
  return static_cast<uint16_t>(std::stoi(s.substr(s.rfind(':') + 1)));
}

class ElasticsearchUnderTest : public ProxiedConnector {
 public:
  ~ElasticsearchUnderTest() override {
    if (!index_.empty()) {
      testing::HttpClient(OpenSearchPort(), std::chrono::seconds(10))
          .Send("DELETE /" + index_ + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    }
  }

  Status SetUp() override {
    testing::HttpClient probe(OpenSearchPort(), std::chrono::seconds(5));
    if (probe.Get("/").status != 200) {
      return Unavailable("OpenSearch is not reachable on port " + std::to_string(OpenSearchPort()));
    }
    StartProxy("127.0.0.1", OpenSearchPort());
    index_ = UniqueName("conf");
    for (char& c : index_) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return Status::Ok();
  }

  std::string SinkYaml() override {
    return "type: elasticsearch, url: \"http://127.0.0.1:" + std::to_string(proxy_port()) + "\", index: \"" +
           index_ + "\"";
  }

  // The document's _version is the entity version (version_type=external);
  // a delete is the tombstone document {"_sluice_deleted": true}. GET by id
  // is real-time: no refresh needed.
  Result<std::optional<ViewRow>> ReadBack(const std::string& entity_id) override {
    testing::HttpClient http(OpenSearchPort(), std::chrono::seconds(10));
    const testing::HttpReply r = http.Get("/" + index_ + "/_doc/" + entity_id);
    if (r.status == 404) return std::optional<ViewRow>();
    if (r.status != 200) return Internal("GET " + index_ + "/_doc/" + entity_id + ": " + std::to_string(r.status) + " " + r.body);
    const auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (j.is_discarded() || !j.contains("_version") || !j.contains("_source")) {
      return Internal("unexpected document: " + r.body);
    }
    const auto& source = j.at("_source");
    ViewRow row{j.at("_version").get<uint64_t>(), source.value("_sluice_deleted", false), std::nullopt};
    if (!row.deleted && source.contains("n")) row.n = source.at("n").get<int64_t>();
    return std::optional<ViewRow>(row);
  }

 private:
  std::string index_;
};

}  // namespace

SLUICE_CONFORMANCE_CONNECTOR(Elasticsearch, ElasticsearchUnderTest);

}  // namespace sluice::conformance
