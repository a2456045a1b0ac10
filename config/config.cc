// The loader: LoadConfig / LoadConfigFromString, the first-document logic,
// and the small functions config.h and sink_type.h declare. The reading
// itself is ConfigReader's (config_reader.h); printing is config_print.cc's.
#include "config/config.h"

#include "core/names.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config_reader.h"
#include "config/sink_type.h"

namespace sluice::config {

uint32_t BatchThreadsFor(uint32_t configured, unsigned cores) {
  if (configured != 0) return configured;
  return std::clamp<uint32_t>(2 * std::max(cores, 1u), 4, 32);
}

std::string_view DurabilityBarrierName(DurabilityBarrier b) {
  switch (b) {
    case DurabilityBarrier::kAuto: return "auto";
    case DurabilityBarrier::kLsn: return "lsn";
    case DurabilityBarrier::kCommit: return "commit";
    case DurabilityBarrier::kOff: return "off";
  }
  return "auto";
}

std::string_view MysqlSslModeName(MysqlSslMode mode) {
  switch (mode) {
    case MysqlSslMode::kDisabled: return "disabled";
    case MysqlSslMode::kRequired: return "required";
    case MysqlSslMode::kVerifyCa: return "verify_ca";
    case MysqlSslMode::kVerifyIdentity: return "verify_identity";
  }
  return "disabled";
}

std::pair<std::string, uint16_t> MetricsConfig::ListenOf(Process process) const {
  switch (process) {
    case Process::kWriter: return {writer_listen_host, writer_listen_port};
    case Process::kSync: return {sync_listen_host, sync_listen_port};
    case Process::kServe: break;
  }
  return {listen_host, listen_port};
}

const MysqlConfig* Config::FindServer(std::string_view name) const {
  if (name == kMainServer) return &mysql;
  for (const StorageServerConfig& s : servers) {
    if (s.name == name) return &s.mysql;
  }
  return nullptr;
}

const std::string& Config::ServerOf(const std::string& type, uint32_t partition) const {
  static const std::string kMain(kMainServer);
  const auto entity = entities.find(type);
  if (entity == entities.end()) return kMain;
  const std::vector<PartitionRange>& placement = entity->second.placement;
  // The last range starting at or before `partition`.
  auto it = std::upper_bound(placement.begin(), placement.end(), partition,
                             [](uint32_t p, const PartitionRange& r) { return p < r.first; });
  if (it == placement.begin()) return kMain;
  --it;
  return partition <= it->last ? it->server : kMain;
}

const SinkType* SinkTypes::Find(std::string_view name) const {
  for (const SinkType& t : types_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

namespace {

// Where the documents of a YAML text start, read with a Parser because
// yaml-cpp 0.7 never reads past a stray ',' (", a: 1"): it keeps handing out
// empty documents at the same place, and YAML::LoadAll collected them until
// memory ran out.
class DocumentStarts : public YAML::EventHandler {
 public:
  // The first node's mark of each document handled so far.
  const std::vector<YAML::Mark>& roots() const { return roots_; }

  void OnDocumentStart(const YAML::Mark&) override { in_root_ = true; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& m, YAML::anchor_t) override { Node(m); }
  void OnAlias(const YAML::Mark& m, YAML::anchor_t) override { Node(m); }
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t, const std::string&) override { Node(m); }
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    Node(m);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    Node(m);
  }
  void OnMapEnd() override {}

 private:
  void Node(const YAML::Mark& m) {
    if (in_root_) roots_.push_back(m);
    in_root_ = false;
  }
  bool in_root_ = false;
  std::vector<YAML::Mark> roots_;
};

// The first document of `text`, and the root mark of every document up to
// the second (enough to refuse a second one). Throws what YAML::Load throws,
// and a ParserException where yaml-cpp stops making progress.
YAML::Node LoadFirstDocument(const std::string& text, std::vector<YAML::Mark>* roots) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts starts;
  while (starts.roots().size() < 2 && parser.HandleNextDocument(starts)) {
  }
  *roots = starts.roots();
  if (roots->size() == 2 && (*roots)[0].pos == (*roots)[1].pos) {
    const YAML::Mark& at = (*roots)[0];
    const std::string_view rest = std::string_view(text).substr(std::min(text.size(), static_cast<size_t>(at.pos)));
    throw YAML::ParserException(at, "unexpected " + QuoteValue(rest.substr(0, 1)));
  }
  return roots->empty() ? YAML::Node() : YAML::Load(text);
}

Result<Config> Load(const std::string& text, const std::string& path, const SinkTypes& types) {
  Problems problems(path);
  std::vector<YAML::Node> docs;
  std::vector<YAML::Mark> roots;
  try {
    docs.push_back(LoadFirstDocument(text, &roots));
  } catch (const YAML::DeepRecursion& e) {
    problems.Add(e.mark, "", "invalid YAML: nested more than " + std::to_string(e.depth()) +
                                 " levels deep");
    return InvalidArgument(problems.Join());
  } catch (const YAML::Exception& e) {
    problems.Add(e.mark, "", "invalid YAML: " + e.msg);
    return InvalidArgument(problems.Join());
  }
  if (roots.size() < 2 && docs[0].IsNull()) {
    YAML::Mark start;  // 1:1
    problems.Add(start, "",
                 "the configuration is empty; it needs at least the storage and entities sections");
    return InvalidArgument(problems.Join());
  }
  if (roots.size() > 1) {
    problems.Add(roots[1], "", "only one YAML document is allowed per file");
  }

  Config config;
  config.path = path;
  config.sink_types = std::make_shared<const SinkTypes>(types);
  ConfigReader reader(&problems, path, std::filesystem::path(path).parent_path(), config.sink_types.get());
  reader.ReadRoot(docs[0], &config);
  if (!problems.empty()) return InvalidArgument(problems.Join());
  return config;
}

}  // namespace

Result<Config> LoadConfigFromString(const std::string& text, const std::string& path, const SinkTypes& types) {
  // yaml-cpp reports through exceptions; none may leave this module.
  try {
    return Load(text, path, types);
  } catch (const std::exception& e) {
    return Internal(path + ": unexpected error while reading the configuration: " + e.what());
  } catch (...) {
    return Internal(path + ": unexpected error while reading the configuration");
  }
}

Result<Config> LoadConfig(const std::string& path, const SinkTypes& types) {
  try {
    std::string text;
    if (const int err = ReadWholeFile(path, kMaxConfigFileBytes, &text); err != 0) {
      return InvalidArgument(path + ": cannot read: " + ErrnoText(err));
    }
    return LoadConfigFromString(text, path, types);
  } catch (...) {
    return Internal(path + ": unexpected error while reading the configuration");
  }
}

bool IsValidMemberName(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == ':' || c == '-';
  });
}

bool IsValidAdvertiseUrl(std::string_view url) {
  const size_t scheme = url.substr(0, 5) == "https" ? 8 : 7;
  if (url.size() > 255 || (url.substr(0, 7) != "http://" && url.substr(0, 8) != "https://")) return false;
  const std::string_view hostport = url.substr(scheme);
  const size_t colon = hostport.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == hostport.size() || hostport.size() - colon > 6) return false;
  uint32_t port = 0;
  for (const char c : hostport.substr(colon + 1)) {
    if (c < '0' || c > '9') return false;
    port = port * 10 + static_cast<uint32_t>(c - '0');
  }
  return port >= 1 && port <= 65535 && IsValidHostName(hostport.substr(0, colon));
}

}  // namespace sluice::config
