// The replay driver: a main() for a fuzz target in builds without libFuzzer
// (the normal gcc build, and its ASan and TSan builds). It feeds every file
// of the directories (or files) it is given to LLVMFuzzerTestOneInput, the
// same entry point libFuzzer calls, so every seed and every input that once
// crashed is run by every build as a unit test (fuzz/CMakeLists.txt).
//
//   fuzz_json_replay fuzz/corpus/fuzz_json fuzz/regressions/fuzz_json
//
// The first argument is the seed corpus and must hold at least one input;
// the others (the regressions) may be empty or missing. A crash or a failed
// check aborts with the input's path already printed; exit status 1 when an
// input cannot be read or the corpus is empty. Files ending in .md are not
// inputs.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool ReadFile(const std::filesystem::path& p, std::string* out) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR_OR_FILE...\n", argv[0]);
    return 1;
  }
  size_t total = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    std::vector<std::filesystem::path> files;
    std::error_code ec;
    if (std::filesystem::is_directory(arg, ec)) {
      for (const auto& entry : std::filesystem::directory_iterator(arg, ec)) {
        if (entry.is_regular_file() && entry.path().extension() != ".md") files.push_back(entry.path());
      }
    } else if (std::filesystem::is_regular_file(arg, ec)) {
      files.push_back(arg);
    }
    if (i == 1 && files.empty()) {
      std::fprintf(stderr, "%s: no inputs in %s\n", argv[0], argv[i]);
      return 1;
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::string data;
      if (!ReadFile(f, &data)) {
        std::fprintf(stderr, "%s: cannot read %s\n", argv[0], f.c_str());
        return 1;
      }
      // Printed before the run so that a crash names its input.
      std::fprintf(stderr, "replay %s (%zu bytes)\n", f.c_str(), data.size());
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(data.data()), data.size());
      ++total;
    }
  }
  std::fprintf(stderr, "%s: %zu inputs replayed, no crash\n", argv[0], total);
  return 0;
}
