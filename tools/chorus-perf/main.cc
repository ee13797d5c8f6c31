// chorus-perf: nccl-tests-compatible benchmark of chorus collectives.
//
//   chorus-run -n 4 chorus-perf --coll allreduce -b 8 -e 128M -f 2 -d float -o sum
//
// Flags and output follow nccl-tests (all_reduce_perf and friends), so existing scripts and
// habits carry over; --coll picks the collective instead of a binary per collective.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "tools/chorus-perf/harness.h"
#include "tools/chorus-perf/perf_params.h"

namespace {

using chorus::perf::PerfOptions;

// CLI11 validator for byte sizes with K/M/G suffixes.
struct SizeValidator : CLI::Validator {
  SizeValidator() : CLI::Validator("SIZE") {
    func_ = [](std::string& s) -> std::string {
      return chorus::perf::parseSize(s) ? std::string() : "not a size (e.g. 8, 64K, 1.5M, 2G): " + s;
    };
  }
};

}  // namespace

int main(int argc, char** argv) {
  PerfOptions opts;
  std::string coll = "allreduce", minBytes = "32M", maxBytes = "32M", stepBytes = "1M";
  std::string op = "sum", dtype = "float";
  int check = 1, blocking = 0, nThreads = 1, nGpus = 1;

  CLI::App app{"chorus-perf: benchmark chorus collectives (nccl-tests flags and output)."};
  app.set_version_flag("--version", "chorus-perf 0.1.0");
  app.add_option("--coll", coll, "allreduce|allgather|reducescatter|broadcast|reduce|alltoall|sendrecv")
      ->check(CLI::IsMember({"allreduce", "allgather", "reducescatter", "broadcast", "reduce",
                             "alltoall", "sendrecv"}))
      ->capture_default_str();
  app.add_option("-b,--minbytes", minBytes, "smallest size (K/M/G suffixes)")
      ->check(SizeValidator())->capture_default_str();
  app.add_option("-e,--maxbytes", maxBytes, "largest size (K/M/G suffixes)")
      ->check(SizeValidator())->capture_default_str();
  auto* stepBytesOpt = app.add_option("-i,--stepbytes", stepBytes, "add this many bytes per step")
                           ->check(SizeValidator())->capture_default_str();
  auto* stepFactorOpt = app.add_option("-f,--stepfactor", opts.stepFactor, "multiply the size by this per step")
                            ->check(CLI::Range(1, 1 << 20));
  stepFactorOpt->excludes(stepBytesOpt);
  app.add_option("-n,--iters", opts.iters, "timed iterations per size")
      ->check(CLI::Range(1, 1 << 30))->capture_default_str();
  app.add_option("-w,--warmup_iters", opts.warmupIters, "warm-up iterations per size")
      ->check(CLI::Range(0, 1 << 30))->capture_default_str();
  app.add_option("-c,--check", check, "check results (0/1)")->check(CLI::Range(0, 1))->capture_default_str();
  app.add_option("-o,--op", op, "sum|prod|max|min|avg|premulsum|all")->capture_default_str();
  app.add_option("-d,--datatype", dtype,
                 "int8|uint8|int32|uint32|int64|uint64|half|float|double|bfloat16|f8e4m3|f8e5m2|all")
      ->capture_default_str();
  app.add_option("-r,--root", opts.root, "root of broadcast/reduce")->capture_default_str();
  app.add_option("-z,--blocking", blocking, "1: blocking calls; 0: nonblocking calls + chorusWait")
      ->check(CLI::Range(0, 1))->capture_default_str();
  app.add_option("--csv", opts.csvPath, "write one CSV row per size and placement");
  app.add_option("--json", opts.jsonPath, "write the results as JSON");
  // Accepted so nccl-tests command lines run unchanged; chorus-perf is one rank per process.
  app.add_option("-t,--nthreads", nThreads, "threads per process (only 1)")->check(CLI::Range(1, 1));
  app.add_option("-g,--ngpus", nGpus, "devices per thread (only 1)")->check(CLI::Range(1, 1));
  app.footer("Run one process per rank, e.g. under chorus-run, mpirun, srun or torchrun.");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; usage errors exit 2, as is customary for command-line tools.
    return app.exit(e) == 0 ? 0 : 2;
  }

  opts.coll = *chorus::perf::parseColl(coll);
  opts.minBytes = *chorus::perf::parseSize(minBytes);
  opts.maxBytes = *chorus::perf::parseSize(maxBytes);
  opts.stepBytes = *chorus::perf::parseSize(stepBytes);
  if (opts.minBytes > opts.maxBytes) {
    std::fprintf(stderr, "chorus-perf: invalid sizes: minbytes %llu > maxbytes %llu\n",
                 static_cast<unsigned long long>(opts.minBytes),
                 static_cast<unsigned long long>(opts.maxBytes));
    return 2;
  }
  if (opts.stepFactor < 2 && opts.stepBytes == 0 && opts.minBytes != opts.maxBytes) {
    std::fprintf(stderr, "chorus-perf: -i 0 needs -f 2 or more to make progress\n");
    return 2;
  }
  auto ops = chorus::perf::parseOps(op);
  if (!ops) {
    std::fprintf(stderr, "chorus-perf: unknown op '%s' (sum prod max min avg premulsum all)\n", op.c_str());
    return 2;
  }
  auto types = chorus::perf::parseTypes(dtype);
  if (!types) {
    std::fprintf(stderr,
                 "chorus-perf: unknown datatype '%s' (int8 uint8 int32 uint32 int64 uint64 half "
                 "float double bfloat16 f8e4m3 f8e5m2 all)\n",
                 dtype.c_str());
    return 2;
  }
  opts.ops = *ops;
  opts.types = *types;
  opts.check = check != 0;
  opts.blocking = blocking != 0;
  for (int i = 0; i < argc; ++i) opts.commandLine += (i ? " " : "") + std::string(argv[i]);

  return chorus::perf::runBenchmark(opts);
}
