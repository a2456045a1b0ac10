// json_parse_bench: what sluice's bounded JSON parser (core/json.h ParseJson:
// a SAX pass that counts nesting depth and refuses numbers outside a double's
// range, then builds the value) costs next to the plain
// nlohmann::json::parse that it replaced, on the same texts in one thread.
//
//   json_parse_bench [--parses N]
//
// Texts: a ~900-byte command body (objects, strings, numbers, an array), a
// 64 KiB body of many small objects, and a body nested 90 deep (under the
// default writer.max_json_depth of 100). Each is parsed N times by each
// parser, alternating, twice. Prints one line per run: the text, the parser,
// the CPU microseconds of this thread per parse. Exit status 0, 1 when a
// parse fails, 2 on a bad command line.
#include <time.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "core/json.h"

namespace {

double ThreadCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

std::string CommandBody() {
  std::string s = R"({"customer":{"id":"c-0012345","name":"Ada Lovelace","email":"ada@example.com",)"
                  R"("address":{"street":"12 Analytical Engine Row","city":"London","zip":"NW1 6XE"}},)"
                  R"("items":[)";
  for (int i = 0; i < 8; ++i) {
    if (i > 0) s += ',';
    s += R"({"sku":"SKU-)" + std::to_string(10000 + i) + R"(","qty":)" + std::to_string(i + 1) +
         R"(,"price":)" + std::to_string(19.99 + i) + R"(,"gift":false})";
  }
  s += R"(],"note":"leave at the door, ring twice","total":1234.56,"paid":true,"tags":["a","b","c"]})";
  return s;
}

std::string LargeBody() {
  std::string s = R"({"rows":[)";
  for (int i = 0; s.size() < 64 * 1024; ++i) {
    if (i > 0) s += ',';
    s += R"({"i":)" + std::to_string(i) + R"(,"v":)" + std::to_string(i * 0.5) + R"(,"s":"row )" +
         std::to_string(i) + R"("})";
  }
  return s + "]}";
}

std::string DeepBody(int depth) {
  std::string s;
  for (int i = 0; i < depth - 1; ++i) s += R"({"k":)";
  s += "[1,2,3]";
  for (int i = 0; i < depth - 1; ++i) s += '}';
  return s;
}

bool Run(const std::string& name, const std::string& text, bool bounded, uint64_t parses) {
  size_t sink = 0;
  const double t0 = ThreadCpuSeconds();
  for (uint64_t i = 0; i < parses; ++i) {
    if (bounded) {
      auto parsed = sluice::ParseJson(text, sluice::kDefaultMaxJsonDepth);
      if (!parsed.ok()) {
        std::cerr << "json_parse_bench: " << name << ": " << parsed.status().message() << "\n";
        return false;
      }
      sink += parsed->size();
    } else {
      sink += sluice::Json::parse(text).size();
    }
  }
  const double cpu = ThreadCpuSeconds() - t0;
  std::cout << "text=" << name << " bytes=" << text.size() << " parser=" << (bounded ? "ParseJson" : "nlohmann")
            << " parses=" << parses << " us_per_parse=" << cpu * 1e6 / static_cast<double>(parses)
            << " check=" << sink % 7 << "\n";
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t parses = 100000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::cout << "usage: json_parse_bench [--parses N]\n"
                   "  --parses  parses of the command body per run (default 100000; the 64 KiB body\n"
                   "            gets N/64, the deep one N)\n";
      return 0;
    }
    if (a == "--parses" && i + 1 < argc) {
      parses = std::strtoull(argv[++i], nullptr, 10);
      if (parses == 0) {
        std::cerr << "json_parse_bench: --parses must be a positive number\n";
        return 2;
      }
    } else {
      std::cerr << "json_parse_bench: unknown option " << a << " (see --help)\n";
      return 2;
    }
  }
  const std::vector<std::pair<std::string, std::string>> texts = {
      {"command", CommandBody()}, {"large", LargeBody()}, {"deep90", DeepBody(90)}};
  for (int round = 0; round < 2; ++round) {
    for (const auto& [name, text] : texts) {
      const uint64_t n = name == "large" ? std::max<uint64_t>(1, parses / 64) : parses;
      if (!Run(name, text, false, n) || !Run(name, text, true, n)) return 1;
    }
  }
  return 0;
}
