// chorus-perf: nccl-tests-compatible benchmark of chorus collectives.
//
//   chorus-run -n 4 chorus-perf --coll allreduce -b 8 -e 128M -f 2 -d float -o sum
//
// Flags and output follow nccl-tests (all_reduce_perf and friends), so existing scripts and
// habits carry over; --coll picks the collective instead of a binary per collective.
#include <cstdio>

#include "tools/chorus-perf/flags.h"
#include "tools/chorus-perf/harness.h"

int main(int argc, char** argv) {
  chorus::perf::FlagsResult flags = chorus::perf::parseFlags(argc, argv);
  if (!flags.options) {
    std::fputs(flags.out.c_str(), stdout);
    std::fputs(flags.err.c_str(), stderr);
    return flags.status;
  }
  return chorus::perf::runBenchmark(*flags.options);
}
