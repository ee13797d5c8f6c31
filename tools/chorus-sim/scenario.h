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
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "algorithms/common/schedule.h"
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
};

struct Outcome {
  std::string algo;  ///< what was built, "allreduce:ring" (a fallback names itself)
  std::string why;   ///< the tuner's reasoning, when it chose
  double timeUs = 0;
  double algbwGBps = 0;
  double busbwGBps = 0;
  uint64_t steps = 0;  ///< steps over all ranks
  Result result;
};

/// The collective named `name` ("allreduce", ...; sendrecv and alltoallv are not simulated).
std::optional<sched::Coll> parseColl(std::string_view name);

StatusOr<Outcome> runCase(const Machine& machine, const Case& c,
                          const EngineOptions& options = {});

}  // namespace chorus::sim
