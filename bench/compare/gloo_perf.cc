// Reference numbers from Gloo (Debian's libgloo-dev) on the same machine: gloo::allreduce on
// float sum with the ring algorithm over Gloo's TCP transport on 127.0.0.1, with chorus-perf's
// flags, sizes, timing, check and table (harness.h). Ranks are started by chorus-run:
//
//   chorus-run -n 4 --no-prefix -- gloo_perf -b 8 -e 64M -f 4 -n 20 -w 3 [-a ring|bcube]
//
// Rank and size come from CHORUS_RANK / CHORUS_NRANKS. Rendezvous goes through Gloo's FileStore
// in a directory named after CHORUS_JOB_SECRET (new for every chorus-run job, so concurrent or
// leftover jobs never see each other's keys) under $TMPDIR, or in $GLOO_PERF_STORE if set. Rank 0
// removes the directory at the end. GLOO_PERF_TIMEOUT (seconds, default 300) bounds every Gloo
// operation.
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include "bench/compare/harness.h"

namespace {

namespace fs = std::filesystem;
using chorus::compare::Coll;
using ReduceFn = void (*)(void*, const void*, const void*, size_t);

int envInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// One allreduce call's options, built once per buffer layout and reused: the timed loop then
// measures gloo::allreduce itself, not the creation of its unbound buffers.
class Allreduce {
 public:
  Allreduce(std::shared_ptr<gloo::Context> ctx, gloo::AllreduceOptions::Algorithm algo)
      : ctx_(std::move(ctx)), algo_(algo) {}

  template <typename T>
  void run(const T* in, T* out, size_t count) {
    if (count == 0) return;
    if (!opts_ || in != in_ || out != out_ || count != count_) {
      opts_ = std::make_unique<gloo::AllreduceOptions>(ctx_);
      opts_->setAlgorithm(algo_);
      // Gloo takes a non-const input pointer but does not write through it.
      opts_->setInput(const_cast<T*>(in), count);
      opts_->setOutput(out, count);
      // gloo::sum is a header template, so this is compiled (and vectorized) here, not in the
      // Debian library, which is built without GLOO_USE_AVX.
      opts_->setReduceFunction(static_cast<ReduceFn>(&gloo::sum<T>));
      in_ = in;
      out_ = out;
      count_ = count;
    }
    gloo::allreduce(*opts_);
  }

 private:
  std::shared_ptr<gloo::Context> ctx_;
  gloo::AllreduceOptions::Algorithm algo_;
  std::unique_ptr<gloo::AllreduceOptions> opts_;
  const void* in_ = nullptr;
  void* out_ = nullptr;
  size_t count_ = 0;
};

int runRank(const chorus::compare::Options& opts, int rank, int nranks) {
  gloo::AllreduceOptions::Algorithm algo = gloo::AllreduceOptions::Algorithm::RING;
  if (opts.algo == "bcube") {
    algo = gloo::AllreduceOptions::Algorithm::BCUBE;
  } else if (!opts.algo.empty() && opts.algo != "ring") {
    if (rank == 0) std::fprintf(stderr, "gloo_perf: -a %s: ring or bcube\n", opts.algo.c_str());
    return 2;
  }
  if (opts.coll != Coll::kAllReduce) {
    if (rank == 0) std::fprintf(stderr, "gloo_perf: only allreduce is compared\n");
    return 2;
  }

  fs::path storeDir;
  if (const char* dir = std::getenv("GLOO_PERF_STORE"); dir && *dir) {
    storeDir = dir;
  } else {
    const char* secret = std::getenv("CHORUS_JOB_SECRET");
    const char* tmp = std::getenv("TMPDIR");
    if (!secret || !*secret) {
      std::fprintf(stderr, "gloo_perf: CHORUS_JOB_SECRET unset: start under chorus-run or set "
                           "GLOO_PERF_STORE to a directory private to this job\n");
      return 2;
    }
    storeDir = fs::path(tmp && *tmp ? tmp : "/tmp") / (std::string("gloo_perf-") + secret);
  }
  fs::create_directories(storeDir);  // every rank: whichever comes first creates it
  gloo::rendezvous::FileStore store(storeDir.string());

  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  attr.ai_family = AF_INET;
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, nranks);
  ctx->setTimeout(std::chrono::seconds(envInt("GLOO_PERF_TIMEOUT", 300)));
  ctx->connectFullMesh(store, device);

  Allreduce data(ctx, algo);
  Allreduce timeSum(ctx, gloo::AllreduceOptions::Algorithm::RING);
  Allreduce wrongSum(ctx, gloo::AllreduceOptions::Algorithm::RING);
  chorus::compare::Backend b;
  b.rank = rank;
  b.nranks = nranks;
  b.description = "Gloo " + std::to_string(GLOO_VERSION_MAJOR) + "." +
                  std::to_string(GLOO_VERSION_MINOR) + "." + std::to_string(GLOO_VERSION_PATCH) +
                  " gloo::allreduce " + (opts.algo.empty() ? "ring" : opts.algo) +
                  ", tcp transport on 127.0.0.1";
  b.barrier = [&] {
    gloo::BarrierOptions o(ctx);
    gloo::barrier(o);
  };
  b.run = [&](const float* in, float* out, size_t count) { data.run(in, out, count); };
  b.sumDouble = [&](double v) {
    double out = 0;
    timeSum.run(&v, &out, 1);
    return out;
  };
  b.sumInt64 = [&](int64_t v) {
    int64_t out = 0;
    wrongSum.run(&v, &out, 1);
    return out;
  };
  int status = chorus::compare::runBenchmark(opts, b);
  // runBenchmark ends with a barrier: every rank is past rendezvous, the store is unused.
  if (rank == 0 && !std::getenv("GLOO_PERF_STORE")) fs::remove_all(storeDir);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  std::string error;
  auto opts = chorus::compare::parseOptions(argc, argv, "gloo_perf", &error);
  if (!opts) {
    if (!error.empty()) std::fprintf(stderr, "gloo_perf: %s\n", error.c_str());
    return error.empty() ? 0 : 2;
  }
  int rank = envInt("CHORUS_RANK", -1);
  int nranks = envInt("CHORUS_NRANKS", -1);
  if (rank < 0 || nranks < 1 || rank >= nranks) {
    std::fprintf(stderr, "gloo_perf: CHORUS_RANK / CHORUS_NRANKS unset or invalid: start the "
                         "ranks with chorus-run\n");
    return 2;
  }
  try {
    return runRank(*opts, rank, nranks);
  } catch (const std::exception& e) {
    // Gloo reports every failure (timeout, peer gone, bad address) by throwing.
    std::fprintf(stderr, "gloo_perf: rank %d: %s\n", rank, e.what());
    return 1;
  }
}
