// The discrete-event simulation of one collective: every rank's prepared plan (src/exec/plan.h)
// replayed on a Machine.
//
// What runs. Each rank starts every step whose dependencies (Plan::depCount / dependents, the
// ones finalize() derived from program order) are done, at the time the last of them finished.
//   send / notify     a flow from the rank to its peer over Machine::route(); the step is done
//                     when the flow's last byte has left (its buffer may be reused); the bytes
//                     arrive route.latencyUs later. The k-th send or notify to a peer matches
//                     the peer's k-th recv, recvReduce or wait from the rank (FIFO per ordered
//                     pair, as Plan::Peer queues them). Flows of one ordered pair go one after
//                     another (one connection); flows of different pairs run at once.
//   recv / wait       done when it has started and its message has arrived
//   recvReduce        then reduces: a flow of reduceTraffic x bytes on the rank's memory
//   get / getReduce   a flow from the peer to the rank (its bytes arrive route latency after
//                     the last one left), then, for getReduce, the reduction
//   copy, reduce      a flow on the rank's memory of copyTraffic / reduceTraffic x bytes
//   quantize,         a flow on the rank's memory of quantTraffic x the bytes the kernel
//   (de/re)quantize   touches: its source range (elements, or the packed blocks it decodes)
//                     plus its destination (packed blocks, or elements)
//   signal / await    a signal is done at once; an await is done once the peer's signal
//                     number `target` is done plus the route latency between them
// Token buckets. A resource with Resource::burstBytes (an emulated link's tc tbf) is no
// bottleneck while its bucket holds tokens; the bucket fills at the resource's capacity less
// what passes and drains at what passes less the capacity; it starts empty (timed calls run back
// to back). When a draining bucket runs dry the rates are shared out again, like at a flow's end.
// Fair sharing. Flows in their bandwidth phase share every resource they cross max-min fairly
// (progressive filling: all rates grow together; a resource that fills freezes its flows; a
// flow also stops at its route's ceiling). Rates are recomputed whenever a flow starts or ends,
// over the flows connected to it through shared resources (no other rate can change), and
// between two such events every rate is constant, so the simulated time is exact for the model
// (no time step).
//
// Not modelled: the consistency header exchange and the per-call overhead, flow control (a
// sender never waits for buffer space at the receiver: sends are eager), protocol choice by size
// (NCCL's LL/LL128/Simple), CPU time-sharing when ranks outnumber cores.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/exec/plan.h"
#include "tools/chorus-sim/machine.h"

namespace chorus::sim {

/// How host h's ranks relate to host 0's when a simulation is folded by host: rank r + h K
/// (r < K, the ranks per host) runs rank r's plan with every peer p replaced by g_h(p), where
///   kShift  g_h(p) = p + h K mod n           (rings, pairwise exchanges)
///   kXor    g_h(p) = p XOR h K, K and the host count powers of two   (recursive doubling and
///                                              halving, whose partners differ in one bit)
/// Both move whole hosts onto whole hosts, which the machine (identical hosts, one non-blocking
/// switch) does not tell apart.
enum class Fold : uint8_t { kNone, kShift, kXor };
const char* foldName(Fold f);  // "none", "shift", "xor"

struct EngineOptions {
  double reduceTraffic = 3;  ///< memory bytes per byte reduced
  double copyTraffic = 2;    ///< memory bytes per byte copied
  /// Memory bytes per byte a quantization step touches (reads plus writes: a.bytes +
  /// dst.bytes); the machine's ranks decide the rate (Constants::cpuQuantTraffic / gpu...).
  double quantTraffic = 2;
  /// Folded: `plans` are those of host 0's ranks only, and every other host's ranks run the
  /// same plans mapped as `fold` says. Each simulated flow then stands for one flow per host,
  /// each on its own host's copies of the resources, so a resource's load is counted on host
  /// 0's copy with its multiplicity. The caller must know the plans are so (scenario.h
  /// checks); the engine cannot tell.
  Fold fold = Fold::kNone;
};

/// One step of the critical path.
struct PathStep {
  int rank = 0;
  uint32_t step = 0;
  sched::StepKind kind = sched::StepKind::kCopy;
  int peer = -1;
  uint64_t bytes = 0;
  double startUs = 0;  ///< when its dependencies (and message) let it start
  double endUs = 0;
};

struct Result {
  double timeUs = 0;                   ///< when the last rank finished
  std::vector<double> rankDoneUs;      ///< per rank
  std::vector<double> resourceBytes;   ///< per resource of the machine: bytes carried
  std::vector<double> resourceBusyUs;  ///< per resource: time with at least one flow on it
  /// The chain of steps that ends last, first to last: each step's start was set by the one
  /// before it (its last dependency to finish, or for a receive its matching send's flow).
  std::vector<PathStep> criticalPath;
  uint64_t flows = 0;   ///< flows simulated (messages, reads, memory operations)
  uint64_t events = 0;  ///< rate recomputations
};

/// Runs `plans` (one per rank of `machine`, in rank order; folded: one per rank of host 0) to
/// completion; folded, rankDoneUs and the resources of every host are filled from host 0's.
/// Fails when the plans do not fit together (a send without its receive, mismatched sizes) or
/// deadlock, naming the ranks and steps involved.
StatusOr<Result> simulate(const Machine& machine, std::span<const exec::Plan* const> plans,
                          const EngineOptions& options = {});

/// The same with the plans asked for one at a time, rank 0 first: the engine keeps what it
/// replays of each (about 100 bytes per step with its own state, against about 250 for a plan)
/// and drops the plan before asking for the next, so an every-rank run never holds them all.
using PlanSource = std::function<StatusOr<std::shared_ptr<const exec::Plan>>(int rank)>;
StatusOr<Result> simulate(const Machine& machine, int count, const PlanSource& source,
                          const EngineOptions& options = {});

}  // namespace chorus::sim
