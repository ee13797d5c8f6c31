// chorus-perf's benchmark harness: one place for initialization, buffers, timing, checking and
// reporting; the collectives themselves are in coll_*.cc.
//
// For each size the harness times `iters` back-to-back calls (after a barrier), then, with
// checking on, runs the collective once more on fresh inputs and poisoned outputs and counts the
// output elements that differ from the locally computed expectation. Times are each rank's mean
// per call, averaged over ranks; wrong elements are summed over ranks.
#pragma once

#include <cstdint>
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
  std::vector<Op> ops = {Op::kSum};
  std::vector<chorusDataType_t> types = {chorusFloat32};
  int root = 0;
  std::string csvPath;
  std::string jsonPath;
  std::string commandLine;  // echoed in the header
};

// Joins the job described by the environment, runs the benchmark and returns the process exit
// status (0, or 1 when a check failed). Failures of chorus calls end the process with a message.
int runBenchmark(const PerfOptions& opts);

}  // namespace chorus::perf
