#include "tools/chorus-perf/flags.h"

#include <CLI/CLI.hpp>

#include <sstream>
#include <string>

namespace chorus::perf {
namespace {

// CLI11 validator for byte sizes with K/M/G suffixes.
struct SizeValidator : CLI::Validator {
  SizeValidator() : CLI::Validator("SIZE") {
    func_ = [](std::string& s) -> std::string {
      return parseSize(s) ? std::string() : "not a size (e.g. 8, 64K, 1.5M, 2G): " + s;
    };
  }
};

FlagsResult usageError(std::string message) {
  FlagsResult r;
  r.status = 2;
  r.err = "chorus-perf: " + message + "\n";
  return r;
}

}  // namespace

FlagsResult parseFlags(int argc, const char* const* argv) {
  PerfOptions opts;
  std::string coll = "allreduce", minBytes = "32M", maxBytes = "32M", stepBytes = "1M";
  std::string op = "sum", dtype = "float";
  int check = 1, blocking = 0, registered = 0, nThreads = 1, nGpus = 1;

  std::vector<std::string> collNames;
  for (Coll c : kAllColls) collNames.emplace_back(collName(c));
  std::string collList;
  for (const std::string& n : collNames) collList += (collList.empty() ? "" : "|") + n;

  CLI::App app{"chorus-perf: benchmark chorus collectives (nccl-tests flags and output)."};
  app.set_version_flag("--version", "chorus-perf 0.1.0");
  app.add_option("--coll", coll,
                 collList + " (pingpong: ranks 0 and 1 bounce a message, one-way time; "
                            "stream: rank 0 sends rank 1 64 messages back to back, time per "
                            "message)")
      ->check(CLI::IsMember(collNames))
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
  app.add_option("-R,--register", registered,
                 "1: buffers from chorusMemAlloc, registered with chorusCommRegister")
      ->check(CLI::Range(0, 1))->capture_default_str();
  std::string quant;
  app.add_option("--quant", quant,
                 "quantized reducescatter/allgather/allreduce: int4|int8[:GROUP][:asym]"
                 "[:stochastic=SEED]; #wrong becomes the relative L2 error (%)");
  app.add_option("--csv", opts.csvPath, "write one CSV row per size and placement");
  app.add_option("--json", opts.jsonPath, "write the results as JSON");
  // Accepted so nccl-tests command lines run unchanged; chorus-perf is one rank per process.
  app.add_option("-t,--nthreads", nThreads, "threads per process (only 1)")->check(CLI::Range(1, 1));
  app.add_option("-g,--ngpus", nGpus, "devices per thread (only 1)")->check(CLI::Range(1, 1));
  app.footer("Run one process per rank, e.g. under chorus-run, mpirun, srun or torchrun.");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::ostringstream out, err;
    FlagsResult r;
    r.status = app.exit(e, out, err) == 0 ? 0 : 2;
    r.out = out.str();
    r.err = err.str();
    return r;
  }

  opts.coll = *parseColl(coll);
  opts.minBytes = *parseSize(minBytes);
  opts.maxBytes = *parseSize(maxBytes);
  opts.stepBytes = *parseSize(stepBytes);
  if (opts.minBytes > opts.maxBytes) {
    return usageError("invalid sizes: minbytes " + std::to_string(opts.minBytes) + " > maxbytes " +
                      std::to_string(opts.maxBytes));
  }
  if (opts.stepFactor < 2 && opts.stepBytes == 0 && opts.minBytes != opts.maxBytes) {
    return usageError("-i 0 needs -f 2 or more to make progress");
  }
  auto ops = parseOps(op);
  if (!ops) return usageError("unknown op '" + op + "' (sum prod max min avg premulsum all)");
  auto types = parseTypes(dtype);
  if (!types) {
    return usageError("unknown datatype '" + dtype +
                      "' (int8 uint8 int32 uint32 int64 uint64 half float double bfloat16 "
                      "f8e4m3 f8e5m2 all)");
  }
  opts.ops = *ops;
  opts.types = *types;
  if (!quant.empty()) {
    std::string why;
    opts.quant = parseQuant(quant, &why);
    if (!opts.quant) return usageError(why);
    opts.quantText = quant;
    if (!collQuantizes(opts.coll))
      return usageError("--quant applies to reducescatter, allgather and allreduce, not " + coll);
    for (chorusDataType_t t : opts.types)
      if (t != chorusFloat32 && t != chorusBfloat16 && t != chorusFloat16)
        return usageError("--quant takes float, bfloat16 or half, not " +
                          std::string(typeName(t)));
    for (Op o : opts.ops)
      if (o != Op::kSum && o != Op::kAvg)
        return usageError("--quant reduces with sum or avg, not " + std::string(opName(o)));
  }
  opts.check = check != 0;
  opts.blocking = blocking != 0;
  opts.registered = registered != 0;
  for (int i = 0; i < argc; ++i) opts.commandLine += (i ? " " : "") + std::string(argv[i]);

  FlagsResult r;
  r.options = std::move(opts);
  return r;
}

}  // namespace chorus::perf
