// chorus-train: trains a small character-level GPT on a Debian text corpus with libtorch doing
// the arithmetic and chorus doing every byte of communication. See README.md.
#include <torch/torch.h>

#include <malloc.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "comm.h"
#include "corpus.h"
#include "memory.h"
#include "model.h"
#include "trainer.h"

namespace {

struct Flags {
  std::string data = "/usr/share/games/fortunes";
  double holdout = 0.1;
  train::ModelConfig model;
  train::TrainConfig train;
  std::string mode = "dp";
  std::string dtype = "fp32";
  int64_t steps = 300;
  int64_t evalEvery = 50;
  int64_t saveEvery = 0;
  std::string saveDir = "chorus-train-ckpt";
  std::string resume;
  std::string dumpParams;
  std::string csv;
  int64_t sampleChars = 300;
  double temperature = 0.8;
  int threads = 1;
  double timeout = 60;
  bool quiet = false;
  bool memoryReport = false;
  bool noMallocCache = false;
};

std::string readStatus(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return line.substr(std::strlen(key));
  }
  return "?";
}

// The per-phase peaks of rank 0 (see memory.h), a table and one machine-readable line per phase.
void printMemoryReport(const train::Trainer& trainer, const std::string& mode,
                       const std::string& dtype, int W) {
  using train::memory::Phase;
  const train::memory::Peaks pk = train::memory::peaks();
  const auto fp = trainer.footprint();
  const double MiB = 1048576.0;
  std::printf("memory of rank 0, peak per phase (MiB): libtorch's CPU allocator by tag, and the "
              "process's resident set\n");
  std::printf("  flat buffers (at rest): params %.2f, grads %.2f, optimizer %.2f (Psi = %ld)\n",
              fp.params / MiB, fp.grads / MiB, fp.optimizer / MiB,
              long(trainer.layout().totalParams()));
  std::printf("  %-9s %9s %9s %9s %9s %9s %9s\n", "phase", "params", "grads", "optimizer",
              "other", "torch", "rss");
  for (int p = 0; p < train::memory::kPhases; ++p) {
    const auto& b = pk.bytes[p];
    std::printf("  %-9s %9.2f %9.2f %9.2f %9.2f %9.2f %9.1f\n",
                train::memory::phaseName(Phase(p)), b[0] / MiB, b[1] / MiB, b[2] / MiB,
                b[3] / MiB, b[4] / MiB, pk.rss[p] / MiB);
  }
  for (int p = 0; p < train::memory::kPhases; ++p) {
    const auto& b = pk.bytes[p];
    std::printf("memory-csv,%s,%s,%d,%ld,%s,%ld,%ld,%ld,%ld,%ld,%ld\n", mode.c_str(),
                dtype.c_str(), W, long(trainer.layout().totalParams()),
                train::memory::phaseName(Phase(p)), long(b[0]), long(b[1]), long(b[2]),
                long(b[3]), long(b[4]), long(pk.rss[p]));
  }
}

int run(const Flags& f, train::Comm& comm) {
  const int rank = comm.rank(), W = comm.size();
  if (f.memoryReport) train::memory::install();
  torch::set_num_threads(f.threads);
  train::Corpus corpus = train::Corpus::load(f.data, f.holdout);
  train::ModelConfig model = f.model;
  model.vocab = corpus.vocab();
  train::TrainConfig tc = f.train;
  static const std::map<std::string, train::Mode> kModes = {{"dp", train::Mode::kDp},
                                                           {"zero1", train::Mode::kZero1},
                                                           {"zero2", train::Mode::kZero2},
                                                           {"zero3", train::Mode::kZero3},
                                                           {"zeropp", train::Mode::kZeroPP}};
  tc.mode = kModes.at(f.mode);
  tc.bf16 = f.dtype == "bf16";
  if (tc.errorFeedback && tc.mode != train::Mode::kZeroPP) {
    throw std::invalid_argument("--error-feedback needs --mode zeropp (not " + f.mode + ")");
  }
  train::Trainer trainer(model, tc, corpus, comm);

  int64_t start = 0;
  if (!f.resume.empty()) {
    start = trainer.loadCheckpoint(f.resume);
  } else {
    trainer.initFromSeed();
  }
  if (rank == 0) {
    auto fp = trainer.footprint();
    std::printf("chorus-train: mode %s, %s, %d rank%s, %ld parameters in %d units "
                "(layers %ld, width %ld, heads %ld, context %ld, vocab %ld)\n",
                f.mode.c_str(), f.dtype.c_str(), W, W == 1 ? "" : "s",
                long(trainer.layout().totalParams()),
                trainer.layout().numUnits(), long(model.layers), long(model.width),
                long(model.heads), long(model.context), long(model.vocab));
    std::printf("corpus: %s, %zu files, %zu bytes (%zu train, %zu held out)\n", f.data.c_str(),
                corpus.files(), corpus.totalBytes(), corpus.train().size(),
                corpus.heldOut().size());
    std::printf("batch %ld sequences x %ld tokens per step, %ld per rank in %ld micro-batch%s; "
                "flat buffers per rank: params %.2f MiB, grads %.2f MiB, optimizer %.2f MiB\n",
                long(tc.batch), long(model.context), long(tc.batch / W), long(tc.accum),
                tc.accum == 1 ? "" : "es", fp.params / 1048576.0, fp.grads / 1048576.0,
                fp.optimizer / 1048576.0);
    if (start > 0) std::printf("resumed from %s at step %ld\n", f.resume.c_str(), long(start));
    std::fflush(stdout);
  }
  std::unique_ptr<std::ofstream> csv;
  if (rank == 0 && !f.csv.empty()) {
    csv = std::make_unique<std::ofstream>(f.csv, std::ios::trunc);
    if (!*csv) throw std::runtime_error("--csv: cannot create " + f.csv);
    *csv << "step,loss,heldout_loss,grad_norm,tokens_per_s,step_ms,compute_ms,comm_ms\n";
  }
  const double tokensPerStep = double(tc.batch) * double(model.context);
  uint64_t stepIntra = 0, stepInter = 0;  // bytes sent by the steps (not evaluations, saves)
  for (int64_t s = start + 1; s <= f.steps; ++s) {
    comm.takeWaitSeconds();
    uint64_t intra0 = 0, inter0 = 0, intra1 = 0, inter1 = 0;
    trainer.bytesSent(intra0, inter0);
    auto t0 = std::chrono::steady_clock::now();
    train::StepResult r = trainer.step(s);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double commSec = comm.takeWaitSeconds();
    trainer.bytesSent(intra1, inter1);
    stepIntra += intra1 - intra0;
    stepInter += inter1 - inter0;
    double heldOut = -1;
    if (f.evalEvery > 0 && (s % f.evalEvery == 0 || s == f.steps)) heldOut = trainer.heldOutLoss();
    if (rank == 0) {
      if (!f.quiet) {
        std::printf("step %5ld | loss %.6f | %8.0f tok/s | %7.1f ms (compute %.1f, comm %.1f)\n",
                    long(s), r.loss, tokensPerStep / sec, sec * 1e3, (sec - commSec) * 1e3,
                    commSec * 1e3);
      }
      if (heldOut >= 0) std::printf("step %5ld | held-out loss %.4f\n", long(s), heldOut);
      std::fflush(stdout);
      if (csv) {
        char line[256];
        std::snprintf(line, sizeof line, "%ld,%.9g,%s,%.6g,%.1f,%.3f,%.3f,%.3f\n", long(s), r.loss,
                      heldOut >= 0 ? std::to_string(heldOut).c_str() : "", r.gradNorm,
                      tokensPerStep / sec, sec * 1e3, (sec - commSec) * 1e3, commSec * 1e3);
        *csv << line;
        csv->flush();
      }
    }
    if (f.saveEvery > 0 && s % f.saveEvery == 0) {
      const std::string dir = f.saveDir + "/step-" + std::to_string(s);
      trainer.saveCheckpoint(dir, s);
      if (rank == 0) std::printf("checkpoint: %s\n", dir.c_str());
    }
  }
  if (!f.dumpParams.empty()) trainer.dumpParameters(f.dumpParams);
  if (f.sampleChars > 0) {
    std::string text = trainer.sample(f.sampleChars, f.temperature);
    if (rank == 0) std::printf("sample:\n%s\n", text.c_str());
  }
  if (rank == 0) {
    const int64_t steps = std::max<int64_t>(1, f.steps - start);
    std::printf("traffic of rank 0 per step: sent %.1f KiB within the host, %.1f KiB to other "
                "hosts (model: %.1f KiB of fp32 parameters)\n",
                stepIntra / 1024.0 / steps, stepInter / 1024.0 / steps,
                trainer.layout().totalParams() * 4 / 1024.0);
    std::printf("algorithms run: %s\n", comm.algorithms().c_str());
    if (!trainer.hostAlgorithms().empty()) {
      std::printf("algorithms run (host communicator): %s\n", trainer.hostAlgorithms().c_str());
    }
    if (f.memoryReport) {
      printMemoryReport(trainer, f.mode, f.dtype, W);
    } else {
      std::printf("peak resident memory of rank 0: %s\n", readStatus("VmHWM:").c_str());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"chorus-train: a character-level GPT trained with chorus collectives "
               "(dp, ZeRO-1/2/3) over libtorch"};
  app.add_option("--data", f.data, "text file, or directory of text files (sorted, *.dat skipped)");
  app.add_option("--holdout", f.holdout, "fraction of the text held out (its tail)");
  app.add_option("--mode", f.mode, "dp | zero1 | zero2 | zero3 | zeropp")
      ->check(CLI::IsMember({"dp", "zero1", "zero2", "zero3", "zeropp"}));
  app.add_flag("--error-feedback", f.train.errorFeedback,
               "zeropp: add each rank's int4 gradient quantization residual to the next step");
  app.add_option("--dtype", f.dtype,
                 "fp32, or bf16: bf16 parameters and gradients (compute and communication), "
                 "fp32 master weights and AdamW states")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--layers", f.model.layers, "transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--width", f.model.width, "model width")->check(CLI::PositiveNumber);
  app.add_option("--heads", f.model.heads, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--context", f.model.context, "tokens per sequence")->check(CLI::Range(2, 4096));
  app.add_option("--dropout", f.model.dropout, "dropout probability")->check(CLI::Range(0.0, 0.9));
  app.add_option("--batch", f.train.batch, "global sequences per step")->check(CLI::PositiveNumber);
  app.add_option("--accum", f.train.accum, "micro-batches per rank per step")
      ->check(CLI::PositiveNumber);
  app.add_option("--steps", f.steps, "last step to run")->check(CLI::NonNegativeNumber);
  app.add_option("--lr", f.train.lr, "AdamW learning rate (fixed)");
  app.add_option("--beta1", f.train.beta1, "AdamW beta1");
  app.add_option("--beta2", f.train.beta2, "AdamW beta2");
  app.add_option("--eps", f.train.eps, "AdamW epsilon");
  app.add_option("--weight-decay", f.train.weightDecay, "AdamW decoupled weight decay");
  app.add_option("--clip", f.train.clip, "clip the global gradient norm to this (<= 0: off)");
  app.add_option("--seed", f.train.seed, "seed of the initialization, data order and dropout");
  app.add_option("--eval-every", f.evalEvery, "held-out loss every N steps (0: never)");
  app.add_option("--eval-samples", f.train.evalSamples, "held-out windows per evaluation")
      ->check(CLI::PositiveNumber);
  app.add_option("--save-every", f.saveEvery, "sharded checkpoint every N steps (0: never)");
  app.add_option("--save-dir", f.saveDir, "checkpoints go to DIR/step-N/");
  app.add_option("--resume", f.resume, "checkpoint directory (DIR/step-N) to continue from");
  app.add_option("--dump-params", f.dumpParams, "write the final parameters here (rank 0)");
  app.add_option("--csv", f.csv, "per-step CSV log (rank 0)");
  app.add_option("--sample-chars", f.sampleChars, "characters of text generated at the end");
  app.add_option("--temperature", f.temperature, "sampling temperature")
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", f.threads, "libtorch intra-op threads per rank")
      ->check(CLI::PositiveNumber);
  app.add_option("--timeout", f.timeout, "seconds any wait on a peer may take")
      ->check(CLI::PositiveNumber);
  app.add_flag("--memory-report", f.memoryReport,
               "count libtorch's CPU allocations by tag (params, grads, optimizer, other) and "
               "the resident set, and print rank 0's peaks per phase at the end");
  app.add_flag("--quiet", f.quiet, "no per-step lines (held-out lines and the summary remain)");
  app.add_flag("--no-malloc-cache", f.noMallocCache,
               "leave glibc's defaults: large freed blocks go back to the kernel at once");
  CLI11_PARSE(app, argc, argv);
  if (!f.noMallocCache) {
    // Every step allocates and frees the same large buffers (gathered units, send and receive
    // buffers, autograd's gradients: MBs each). With glibc's defaults they are mmap'ed and
    // unmapped each time, and every step page-faults them in again — on the netns runs of
    // README.md that was 40% of zero3's step. Serving them from the heap and not trimming it
    // keeps the pages (as a caching allocator would), at the price of a resident set that no
    // longer shrinks after a peak. 32 MiB is the largest threshold glibc accepts.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }

  train::Comm comm;
  try {
    comm.initFromEnv(f.timeout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chorus-train: error: %s\n(launch with chorus-run -n N, mpirun, or "
                 "torchrun-style MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE)\n", e.what());
    return 1;
  }
  try {
    return run(f, comm);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (what.rfind("rank ", 0) == 0) {  // already names the rank
      std::fprintf(stderr, "chorus-train: error: %s\n", what.c_str());
    } else {
      std::fprintf(stderr, "chorus-train rank %d: error: %s\n", comm.rank(), what.c_str());
    }
    std::fflush(stderr);
    comm.abort();
    return 1;
  }
}
