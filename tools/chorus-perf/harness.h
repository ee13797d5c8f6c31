// chorus-perf's benchmark harness: one place for initialization, buffers, timing, checking and
// reporting; the collectives themselves are in coll_*.cc.
//
// For each size the harness times `iters` back-to-back calls (after a barrier), then, with
// checking on, runs the collective once more on fresh inputs and poisoned outputs and counts the
// output elements that differ from the locally computed expectation. Times are each rank's mean
// per call, averaged over ranks (and divided by legsPerCall: pingpong reports one way); wrong
// elements are summed over ranks.
#pragma once

#include "tools/chorus-perf/flags.h"

namespace chorus::perf {

// Joins the job described by the environment, runs the benchmark and returns the process exit
// status (0, or 1 when a check failed; 2 when the job cannot run the collective, e.g. pingpong
// on other than 2 ranks). Failures of chorus calls end the process with a message.
int runBenchmark(const PerfOptions& opts);

}  // namespace chorus::perf
