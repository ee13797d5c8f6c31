// One simulated call: a collective of a given size, built for every rank of a Machine by the
// registered builders through the communicator's own path (exec::planAlgorithm: the builder in
// the layout's ring order, finalized, prepared), then replayed by the engine.
//
// The algorithm is a registered name ("ring", "allreduce:ring") or "tuner": tune::choose() over
// the registry with the default cost model, on the Platform a job of this shape would agree on
// (tune::platformFor with the machine's link classes and NIC speed; no host window, one-sided
// reads only when asked for). Sizes are nccl-tests sizes (the larger buffer of one rank, float32
// elements), and algbw / busbw follow nccl-tests: algbw = size / time, busbw = algbw x
// tune::busFactor().
//
// Folding by host (the symmetry that makes thousands of ranks affordable). With more than one
// host, when every rank's plan is host 0's plan of the same local rank with its peers moved by
// whole hosts — shifted (rings, pairwise) or, with powers of two, XORed (recursive doubling and
// halving) — the engine simulates host 0's ranks only (EngineOptions::fold, engine.h). Whether
// the plans are so is checked, not assumed, but on a sample: host 0's plans are compared, step
// by step (kind, peer mapped, byte counts, dependencies, peers), with those of hosts 1, H/3,
// H/2 and H-1 (the distinct ones of those); the shift is tried first, then the XOR. The
// simulation falls back to every rank when:
//   - folding is off (Case::fold) or there is one host, or the network tells hosts apart
//     (Machine::notFoldable: several leaf groups, or shared oversubscribed rail uplinks);
//   - a sampled plan differs: rooted collectives (broadcast, reduce, gather, scatter: the root's
//     host is special), trees over hosts (tree, double binary tree, binomial), uneven slices
//     (a count that does not divide evenly gives ranks different byte counts), and anything
//     else a builder does differently on some host;
//   - a plan synchronizes through the host window (one host only anyway).
// A builder that treats an unsampled host differently from the sampled ones would be folded
// wrongly; the registered builders' schedules are functions of (rank - root) mod n and hostOf,
// which the sample exercises, but that is an argument, not a proof.
//
// Shared plans (every rank simulated, Case::share). The same sample, per local rank: where local
// rank l's plans on every sampled host were host 0's moved by whole hosts — the chains below the
// tree's host leaders, the middle ranks of a chain broadcast, every rank of a ring whose hosts
// share a pool of cores — hosts 1..H-1's rank l are not built: each runs host 0's plan with its
// peers moved (RankPlan, engine.h), simulated on its own resources like any other rank. The
// results are those of every plan built (the plans are the same); the cost is each step's state
// (40 bytes) instead of a plan built, read and kept per rank. Same argument as the fold.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "algorithms/common/schedule.h"
#include "algorithms/kernels/quantize_ops.h"
#include "src/base/status.h"
#include "tools/chorus-sim/engine.h"
#include "tools/chorus-sim/machine.h"

namespace chorus::sim {

struct Case {
  sched::Coll coll = sched::Coll::kAllReduce;
  uint64_t sizeBytes = 0;      ///< nccl-tests size
  std::string algo = "tuner";  ///< registered name, or "tuner"
  uint64_t chunkBytes = 256 << 10;  ///< pipelining chunk (CHORUS_CHUNK_SIZE's default)
  int root = 0;
  bool oneSided = false;  ///< every pair may read the other's memory (CUDA IPC, CMA, RDMA)
  bool fold = true;       ///< fold by host where the plans allow it (see above)
  /// Not folded: ranks whose plans are host 0's of the same local rank moved by whole hosts,
  /// on the sampled hosts, run host 0's plan (RankPlan::like: not built, steps shared).
  bool share = true;
  /// Refuse an every-rank simulation estimated (rank 0's steps x ranks, those running a shared
  /// plan counted half) above this many steps rather than run out of memory (peak RSS of
  /// every-rank trees at 16,384 ranks with no plan shared: 113-120 bytes per step before the
  /// steps' state was split from their plans, so 64M is at most about 7.7 GB).
  uint64_t maxSteps = 64'000'000;
  int dumpRank = -1;  ///< >= 0: Outcome::plan lists this rank's plan, step by step
  /// Quantized collectives (quant_*: qgZ, qwZ): the config of the call. A quantized algorithm
  /// named without one gets QuantConfig{} (int8, groups of 256); with one, the tuner may also
  /// choose a quantized algorithm, as the communicator's does for a quantized call.
  std::optional<kernels::QuantConfig> quant;
};

struct Outcome {
  std::string algo;  ///< what was built, "allreduce:ring" (a fallback names itself)
  std::string why;   ///< the tuner's reasoning, when it chose
  double timeUs = 0;
  /// The cost model's prediction for the same algorithm, call and platform (what the tuner
  /// compares, tune::choose's input), for the cross-check against the simulation.
  double modelUs = 0;
  double algbwGBps = 0;
  double busbwGBps = 0;
  uint64_t steps = 0;  ///< steps simulated (over host 0's ranks when folded)
  int simulatedRanks = 0;
  bool folded = false;
  Fold fold = Fold::kNone;
  int sharedRanks = 0;   ///< not folded: ranks running host 0's plan of their local rank
  std::string foldNote;  ///< why it folded or did not
  std::string plan;      ///< Case::dumpRank's plan: "step kind peer bytes <- deps" lines
  Result result;
};

/// The collective named `name` ("allreduce", ...; sendrecv and alltoallv are not simulated).
std::optional<sched::Coll> parseColl(std::string_view name);

StatusOr<Outcome> runCase(const Machine& machine, const Case& c,
                          const EngineOptions& options = {});

}  // namespace chorus::sim
