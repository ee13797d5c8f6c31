// chorus-perf's command line: the options the harness runs with, and the parser that fills them
// from nccl-tests-style flags. Parsing needs no communicator, so tests/unit/tools checks every
// flag and every refusal without starting a job.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "tools/chorus-perf/perf_params.h"

namespace chorus::perf {

struct PerfOptions {
  Coll coll = Coll::kAllReduce;
  // nccl-tests' defaults.
  uint64_t minBytes = 32ull << 20;
  uint64_t maxBytes = 32ull << 20;
  uint64_t stepBytes = 1ull << 20;
  uint64_t stepFactor = 1;
  int iters = 20;
  int warmupIters = 5;
  bool check = true;
  bool blocking = false;  // false: nonblocking I-forms completed with chorusWait
  /// -R 1: the send and receive buffers come from chorusMemAlloc and are registered with
  /// chorusCommRegister (nccl-tests' -R), so the host's peers can read them without a copy.
  bool registered = false;
  std::vector<Op> ops = {Op::kSum};
  std::vector<chorusDataType_t> types = {chorusFloat32};
  int root = 0;
  /// --quant: the quantized form of the collective with this config (flags.cc checks it
  /// applies); the #wrong column then holds the relative L2 error against the exact sum.
  std::optional<chorusQuantConfig_t> quant;
  std::string quantText;
  std::string csvPath;
  std::string jsonPath;
  std::string commandLine;  // echoed in the header
};

// What parsing decided. With `options` set the benchmark runs; otherwise the process prints
// `out` (help, version) to stdout and `err` (a usage error) to stderr and exits with `status`:
// 0 after --help or --version, 2 on a usage error, as is customary for command-line tools.
struct FlagsResult {
  std::optional<PerfOptions> options;
  int status = 0;
  std::string out;
  std::string err;
};

FlagsResult parseFlags(int argc, const char* const* argv);

}  // namespace chorus::perf
