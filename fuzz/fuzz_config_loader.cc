// Fuzz target: bytes as a configuration file through
// config::LoadConfigFromString, and Config::Redacted() on success.
//
// The file is loaded as if it were fuzz/config_files/fuzz.yaml, so relative
// paths (handler files, mappings, ${file:...} secrets) resolve among the
// small files checked in there. Environment references that the seeds use
// are set here; any other name resolves to whatever the environment holds
// or is reported unset. Inputs are skipped (return -1: libFuzzer keeps them
// out of its corpus) when a scalar, key or value, after YAML's escapes,
// names /dev, /proc, /sys or /run or contains "..", so that no path the
// loader reads (${file:...}, handler and mapping files) can block on a
// terminal, a pipe or the kernel log; or contains "plugin.library", the
// librdkafka property that makes rd_kafka_conf_set (which checks a Kafka
// sink's properties) dlopen a library.
//
// Properties checked on every input:
//   - nothing crashes, leaks or trips a sanitizer, and no exception reaches
//     LoadConfigFromString's last-resort catch (Internal: a validation that
//     threw instead of reporting a problem);
//   - a failure is InvalidArgument with one "FILE:LINE:COL: ..." line per
//     problem;
//   - the secrets resolved from the environment or a file (the markers
//     below) never appear in an error message or in Redacted();
//   - Redacted() loads again, and redacts to the same text.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "config/config.h"
#include "connectors/builtin_sink_types.h"
#include "fuzz/check.h"

namespace sluice::fuzz {
namespace {

constexpr std::string_view kConfigPath = SLUICE_SOURCE_DIR "/fuzz/config_files/fuzz.yaml";
// The secret parts of the values behind the references the seeds use; the
// files fuzz/config_files/secret and secret_url hold the file ones.
constexpr std::string_view kMarkers[] = {"FuzzEnvSecret5e1", "FuzzEnvUrlSecret3c9", "FuzzFileSecret7a3",
                                         "FuzzFileUrlSecret9d4"};

// What no scalar may contain (see the top of the file).
constexpr std::string_view kUnsafe[] = {"/dev", "/proc", "/sys", "/run", "..", "plugin.library"};

void SetEnvironment() {
  static const bool done = [] {
    setenv("SLUICE_FUZZ_SECRET", "FuzzEnvSecret5e1", 1);
    setenv("SLUICE_FUZZ_SECRET_URL", "redis://:FuzzEnvUrlSecret3c9@127.0.0.1:16379/0", 1);
    setenv("SLUICE_MYSQL_PASSWORD", "FuzzEnvSecret5e1", 1);
    return true;
  }();
  (void)done;
}

// True when no scalar of the YAML (after escapes) could
// name a file outside fuzz/config_files/ that might block a read. Text that
// yaml-cpp cannot load is harmless: the loader reads nothing for it.
bool ReadsOnlyHarmlessFiles(const std::string& text) {
  // Only an escape (a backslash in a double-quoted scalar) makes a scalar
  // hold what the bytes do not: folding lines only ever adds a space. So
  // without a backslash the bytes tell, and the YAML need not be parsed.
  if (text.find('\\') == std::string::npos) {
    return std::none_of(std::begin(kUnsafe), std::end(kUnsafe),
                        [&](std::string_view bad) { return text.find(bad) != std::string::npos; });
  }
  // The loader reads the first document only (YAML::LoadAll can run away).
  std::vector<YAML::Node> stack;
  try {
    stack.push_back(YAML::Load(text));
  } catch (...) {
    return true;
  }
  // Aliases share nodes and may form cycles (`a: &x [*x]`): each mapping and
  // sequence is walked once. Node::is() tells nodes apart; their marks only
  // narrow the search (a flow mapping that is the first key of a block
  // mapping starts where that mapping does).
  std::map<std::pair<size_t, int>, std::vector<YAML::Node>> walked;
  while (!stack.empty()) {
    YAML::Node n = stack.back();
    stack.pop_back();
    if (n.IsScalar()) {
      const std::string& s = n.Scalar();
      for (std::string_view bad : kUnsafe) {
        if (s.find(bad) != std::string::npos) return false;
      }
      continue;
    }
    if (!n.IsSequence() && !n.IsMap()) continue;
    auto& same_mark = walked[{n.Mark().pos, static_cast<int>(n.Type())}];
    if (std::any_of(same_mark.begin(), same_mark.end(), [&](const YAML::Node& w) { return w.is(n); })) continue;
    same_mark.push_back(n);
    if (n.IsSequence()) {
      for (const auto& child : n) stack.push_back(child);
    } else {
      for (const auto& kv : n) {
        stack.push_back(kv.first);
        stack.push_back(kv.second);
      }
    }
  }
  return true;
}

void CheckNoSecret(std::string_view out, std::string_view input, const char* where) {
  for (std::string_view m : kMarkers) {
    if (input.find(m) != std::string_view::npos) continue;  // written inline by the input itself
    SLUICE_FUZZ_CHECK(out.find(m) == std::string_view::npos,
                      std::string("a resolved secret appears in ") + where + ":\n" + std::string(out));
  }
}

}  // namespace
}  // namespace sluice::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  fuzz::SetEnvironment();
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (!fuzz::ReadsOnlyHarmlessFiles(text)) return -1;
  const std::string path(fuzz::kConfigPath);
  auto config = config::LoadConfigFromString(text, path, connectors::BuiltinSinkTypes());
  if (!config.ok()) {
    const std::string message = config.status().message();
    SLUICE_FUZZ_CHECK(config.status().code() == StatusCode::kInvalidArgument, message);
    SLUICE_FUZZ_CHECK(message.rfind(path + ":", 0) == 0, message);
    fuzz::CheckNoSecret(message, text, "an error message");
    return 0;
  }
  const std::string redacted = config->Redacted();
  fuzz::CheckNoSecret(redacted, text, "Redacted()");
  auto again = config::LoadConfigFromString(redacted, path, connectors::BuiltinSinkTypes());
  SLUICE_FUZZ_CHECK(again.ok(), "Redacted() does not load:\n" + again.status().message() + "\n" + redacted);
  SLUICE_FUZZ_CHECK(again->Redacted() == redacted,
                    "Redacted() of Redacted() differs:\n" + redacted + "\n---\n" + again->Redacted());
  return 0;
}
