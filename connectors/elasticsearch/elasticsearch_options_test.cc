// The elasticsearch sink's section of the YAML config (parsed by config/):
// accepted forms, defaults, secrets, and one message per problem.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "config/config.h"
#include "connectors/elasticsearch/elasticsearch_options.h"
#include "connectors/elasticsearch/elasticsearch_sink.h"
#include "tests/support/config_support.h"

namespace sluice::config {
namespace {

using connectors::elasticsearch::ElasticsearchSinkOptions;
using testing::LoadConfigFromString;

constexpr char kHead[] = R"(storage:
  mysql: {host: 127.0.0.1, port: 13306, user: sluice, password: pw, database: d}
entities:
  account: {partitions: 4}
sinks:
  - name: search
    type: elasticsearch
    entity: account
)";

Result<Config> Load(const std::string& sink_lines, const std::string& path = "t.yaml") {
  return LoadConfigFromString(std::string(kHead) + sink_lines, path);
}

std::string Errors(const std::string& sink_lines) {
  Result<Config> r = Load(sink_lines);
  return r.ok() ? "" : r.status().message();
}

TEST(ElasticsearchConfig, DefaultsAndIndexTemplate) {
  Result<Config> r = Load("    url: http://127.0.0.1:19200/\n    index: \"{type}_view\"\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const SinkConfig& s = r->sinks.at(0);
  const ElasticsearchSinkOptions& es = s.Options<ElasticsearchSinkOptions>();
  EXPECT_EQ(es.url, "http://127.0.0.1:19200") << "the trailing slash is dropped";
  EXPECT_EQ(connectors::elasticsearch::IndexName(s), "account_view");
  EXPECT_TRUE(es.auto_create);
  EXPECT_EQ(es.connect_timeout, std::chrono::milliseconds(2000));
  EXPECT_EQ(es.request_timeout, std::chrono::milliseconds(30000));
  EXPECT_EQ(es.connections, 1u);
  EXPECT_TRUE(es.mapping_json.empty());
  EXPECT_TRUE(es.username.empty() && es.password.empty() && es.api_key.empty());
  const Result<Config> three = Load("    url: http://127.0.0.1:19200\n    connections: 3\n");
  ASSERT_TRUE(three.ok()) << three.status().ToString();
  EXPECT_EQ(three->sinks.at(0).Options<ElasticsearchSinkOptions>().connections, 3u);
}

TEST(ElasticsearchConfig, SecretsComeFromTheEnvironmentAndAreRedacted) {
  setenv("SLUICE_TEST_ES_PASSWORD", "s3cret-pw", 1);
  setenv("SLUICE_TEST_ES_URL", "https://search.internal:9200", 1);
  Result<Config> r = Load(
      "    url: ${env:SLUICE_TEST_ES_URL}\n    username: sluice\n    password: ${env:SLUICE_TEST_ES_PASSWORD}\n"
      "    request_timeout: 5s\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ElasticsearchSinkOptions& es = r->sinks.at(0).Options<ElasticsearchSinkOptions>();
  EXPECT_EQ(es.url, "https://search.internal:9200");
  EXPECT_EQ(es.password, "s3cret-pw");
  EXPECT_EQ(es.request_timeout, std::chrono::milliseconds(5000));
  const std::string shown = r->Redacted();
  EXPECT_EQ(shown.find("s3cret-pw"), std::string::npos) << shown;
  EXPECT_EQ(shown.find("search.internal"), std::string::npos) << shown;
  EXPECT_NE(shown.find("username: sluice"), std::string::npos) << shown;

  setenv("SLUICE_TEST_ES_KEY", "a2V5OnNlY3JldA==", 1);
  r = Load("    url: http://127.0.0.1:19200\n    api_key: ${env:SLUICE_TEST_ES_KEY}\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->sinks.at(0).Options<ElasticsearchSinkOptions>().api_key, "a2V5OnNlY3JldA==");
  EXPECT_EQ(r->Redacted().find("a2V5OnNlY3JldA=="), std::string::npos);
  unsetenv("SLUICE_TEST_ES_PASSWORD");
  unsetenv("SLUICE_TEST_ES_URL");
  unsetenv("SLUICE_TEST_ES_KEY");
}

TEST(ElasticsearchConfig, MappingFileIsReadRelativeToTheConfigFile) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("sluice_es_config_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "mapping.json") << R"({"mappings":{"properties":{"owner":{"type":"keyword"}}}})";
  std::ofstream(dir / "list.json") << "[1, 2]";
  Result<Config> r = Load("    url: http://h:1\n    mapping: mapping.json\n", (dir / "sluice.yaml").string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->sinks.at(0).Options<ElasticsearchSinkOptions>().mapping_path, (dir / "mapping.json").string());
  EXPECT_NE(r->sinks.at(0).Options<ElasticsearchSinkOptions>().mapping_json.find("keyword"), std::string::npos);

  r = Load("    url: http://h:1\n    mapping: list.json\n    template: missing.json\n", (dir / "sluice.yaml").string());
  ASSERT_FALSE(r.ok());
  const std::string file = (dir / "sluice.yaml").string();
  EXPECT_EQ(r.status().message(),
            file + ":10:14: sinks[0].mapping: \"" + (dir / "list.json").string() + "\" must hold one JSON object\n" +
                file + ":11:15: sinks[0].template: cannot read \"" + (dir / "missing.json").string() +
                "\": No such file or directory");
  std::filesystem::remove_all(dir);
}

TEST(ElasticsearchConfigErrors, OneLinePerProblem) {
  EXPECT_EQ(Errors("    index: x\n"), "t.yaml:6:5: sinks[0].url: required key is missing");
  EXPECT_EQ(Errors("    url: ftp://h\n"),
            "t.yaml:9:10: sinks[0].url: must be a URL of the form http(s)://host[:port][/path]: the scheme "
            "must be http or https, got \"ftp://h\"");
  // The URL is quoted without its credentials (config/redact.h).
  EXPECT_EQ(Errors("    url: http://u:p@h:9200\n"),
            "t.yaml:9:10: sinks[0].url: must be a URL of the form http(s)://host[:port][/path]: put "
            "credentials in username/password or api_key, not in the URL, got \"http://***:***@h:9200\"");
  EXPECT_EQ(Errors("    url: http://h:9200/?token=t0k\n"),
            "t.yaml:9:10: sinks[0].url: must be a URL of the form http(s)://host[:port][/path]: no spaces, "
            "query or fragment, got \"http://h:9200/?token=***\"");
  EXPECT_EQ(Errors("    url: http://h\n    index: Accounts\n"),
            "t.yaml:10:12: sinks[0].index: must be an index name template such as \"{type}_view\" (lowercase; "
            "{type} is replaced), got \"Accounts\"");
  EXPECT_EQ(Errors("    url: http://h\n    index: \"{id}\"\n").substr(0, 31), "t.yaml:10:12: sinks[0].index: m");
  EXPECT_EQ(Errors("    url: http://h\n    username: u\n"),
            "t.yaml:6:5: sinks[0]: username and password go together (basic auth)");
  EXPECT_EQ(Errors("    url: http://h\n    username: u\n    password: p\n    api_key: k\n"),
            "t.yaml:6:5: sinks[0]: give either api_key or username/password, not both");
  EXPECT_EQ(Errors("    url: http://h\n    request_timeout: soon\n"),
            "t.yaml:10:22: sinks[0].request_timeout: must be a duration such as 500ms, 2s, 1m or 24h, got "
            "\"soon\"");
  for (const char* bad : {"0", "17", "two"}) {
    const std::string e = Errors(std::string("    url: http://h\n    connections: ") + bad + "\n");
    EXPECT_EQ(e.rfind("t.yaml:10:18: sinks[0].connections: ", 0), 0u) << e;
  }
  // Another type's keys are misplaced here, and ours there.
  EXPECT_EQ(Errors("    url: http://h\n    table: t\n"),
            "t.yaml:10:5: sinks[0].table: only for mysql sinks (this sink is type elasticsearch)");
}

// TLS keys: only with https://, a certificate with its key, PEM files that
// can be read, tls_verify identity or ca; printed back, handed to the REST
// client, and tls_verify: ca warned of.
TEST(ElasticsearchConfig, TlsKeys) {
  const std::string dir = ::testing::TempDir();  // ends with /
  const std::string ca = dir + "es_tls_ca.pem", cert = dir + "es_tls_cert.pem", key = dir + "es_tls.key";
  for (const std::string& f : {ca, cert, key}) {
    std::ofstream(f) << "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  }
  const std::string https = "    url: https://search.example.com:9200\n";
  EXPECT_EQ(Errors(https + "    tls_ca: " + ca + "\n    tls_cert: " + cert + "\n    tls_key: " + key +
                   "\n    tls_verify: identity\n"),
            "");
  EXPECT_EQ(Errors("    url: http://search.example.com:9200\n    tls_ca: " + ca + "\n    tls_verify: ca\n"),
            "t.yaml:10:5: sinks[0].tls_ca: only with an https:// url\n"
            "t.yaml:11:5: sinks[0].tls_verify: only with an https:// url");
  EXPECT_EQ(Errors(https + "    tls_cert: " + cert + "\n"),
            "t.yaml:10:5: sinks[0].tls_cert: needs tls_key, the certificate's private key");
  EXPECT_EQ(Errors(https + "    tls_key: " + key + "\n"),
            "t.yaml:10:5: sinks[0].tls_key: needs tls_cert, the certificate of this key");
  EXPECT_EQ(Errors(https + "    tls_verify: none\n"),
            "t.yaml:10:17: sinks[0].tls_verify: must be identity or ca, got \"none\"");
  EXPECT_EQ(Errors(https + "    tls_ca: " + dir + "no-such.pem\n").find("t.yaml:10:13: sinks[0].tls_ca: cannot read CA file "),
            0u);
  const std::string unreadable = Errors(https + "    tls_key: " + dir + "no-such.key\n    tls_cert: " + cert + "\n");
  EXPECT_EQ(unreadable.find("t.yaml:10:14: sinks[0].tls_key: cannot read private key file "), 0u) << unreadable;
  std::ofstream(dir + "es-not-pem.txt") << "hello";
  EXPECT_NE(Errors(https + "    tls_ca: " + dir + "es-not-pem.txt\n").find("is not a PEM file"), std::string::npos);

  Result<Config> r = Load(https + "    tls_ca: " + ca + "\n    tls_cert: " + cert + "\n    tls_key: " + key +
                          "\n    tls_verify: ca\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const SinkConfig& sink = r->sinks.at(0);
  const TlsClientOptions& tls = sink.Options<ElasticsearchSinkOptions>().tls;
  EXPECT_EQ(tls.ca, ca);
  EXPECT_EQ(tls.cert, cert);
  EXPECT_EQ(tls.key, key);
  EXPECT_EQ(tls.verify, TlsClientOptions::Verify::kCa);
  EXPECT_NE(r->Redacted().find("    tls_ca: " + ca + "\n    tls_cert: " + cert + "\n    tls_key: " + key +
                               "\n    tls_verify: ca\n"),
            std::string::npos)
      << r->Redacted();
  const connectors::elasticsearch::RestClientOptions client = connectors::elasticsearch::ClientOptions(sink);
  EXPECT_EQ(client.tls_ca, ca);
  EXPECT_EQ(client.tls_cert, cert);
  EXPECT_EQ(client.tls_key, key);
  EXPECT_FALSE(client.verify_host);
  const SinkType& type = connectors::elasticsearch::ElasticsearchSinkType().config;
  ASSERT_TRUE(type.warnings);
  const auto warnings = type.warnings(sink);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "WARNING: sink 'search' has tls_verify: ca: any server with a certificate from " + ca +
                             " is accepted, whatever host it was issued to; remove tls_verify to check the host name too");

  // Defaults: the machine's CAs, the host name checked, nothing printed, no warning.
  r = Load(https);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(connectors::elasticsearch::ClientOptions(r->sinks.at(0)).verify_host);
  EXPECT_EQ(r->Redacted().find("tls_"), std::string::npos) << r->Redacted();
  EXPECT_TRUE(type.warnings(r->sinks.at(0)).empty());
}

}  // namespace
}  // namespace sluice::config
