// Replays a fuzz target's committed corpus through its entry function, built with the normal
// compiler and without libFuzzer: every input the fuzzer kept (and every regression input for a
// bug it found) runs in ctest on every build.
//
//   fuzz_replay TARGET CORPUS_DIR
//
// Exits 0 after running every file; a failed property aborts (the target's own checks), and an
// unknown target, a missing or empty folder, or an unreadable file exits 1, so a test pointed at
// the wrong place cannot pass by running nothing.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/fuzz_target.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fuzz_replay TARGET CORPUS_DIR\n");
    return 1;
  }
  const chorus::fuzz::Target* target = nullptr;
  for (const auto& t : chorus::fuzz::kTargets)
    if (std::strcmp(t.name, argv[1]) == 0) target = &t;
  if (!target) {
    std::fprintf(stderr, "fuzz_replay: no target named '%s'\n", argv[1]);
    return 1;
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(argv[2], ec))
    if (e.is_regular_file()) files.push_back(e.path());
  if (ec) {
    std::fprintf(stderr, "fuzz_replay: cannot list %s: %s\n", argv[2], ec.message().c_str());
    return 1;
  }
  if (files.empty()) {
    std::fprintf(stderr, "fuzz_replay: %s holds no inputs\n", argv[2]);
    return 1;
  }
  std::sort(files.begin(), files.end());
  size_t bytes = 0;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
    if (in.bad()) {
      std::fprintf(stderr, "fuzz_replay: cannot read %s\n", f.c_str());
      return 1;
    }
    // Named first, so the input that aborts is the last one printed.
    std::fprintf(stderr, "%s\n", f.filename().c_str());
    target->one(data.data(), data.size());
    bytes += data.size();
  }
  std::printf("fuzz_replay %s: %zu inputs (%zu bytes) passed\n", target->name, files.size(), bytes);
  return 0;
}
