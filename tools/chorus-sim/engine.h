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
// to back; EngineOptions::buckets). When a draining bucket runs dry the rates are shared out
// again, like at a flow's end.
// Fair sharing. Flows in their bandwidth phase share every resource they cross max-min fairly
// (progressive filling: all rates grow together; a resource that fills freezes its flows; a
// flow also stops at its route's ceiling). Rates are recomputed whenever a flow starts or ends,
// and between two such events every rate is constant, so the simulated time is exact for the
// model (no time step). A recomputation starts from the flows on the resources where flows
// started or ended, keeps every other flow's rate, checks that the result is max-min fair
// (every flow at its cap or on a full resource where no flow is faster) where the two sets
// meet, and grows the set where it is not; no rate outside the flows connected to the change
// through shared resources can change, and after a few growths it takes all of those
// (EngineOptions::wholeComponents: always, at once). A flow that starts alone on every resource
// it crosses (no token bucket there) gets its rate at once, by the same arithmetic, and one that
// ends leaves alone the resources it had to itself: no recomputation for either.
//
// The CPU (EngineOptions::msgUs, msgBytesPerUs, callUs; a machine with CPUs, Machine::cpus).
// A rank's software costs are work on its CPU resources, counted in CPU microseconds: its own
// CPU (capacity 1: a rank is one thread, so its pieces share it and add up) and, when the host
// has a pool of cores, that pool (capacity: the cores), which its ranks then share. A rank's
// pieces below run one after another (a rank is one thread; FIFO, like a connection's flows);
// those of different ranks run at once, sharing the pool.
//   a call            a piece of callUs before the rank's first step
//   send / notify     a piece of msgUs before its flow starts
//   recv / recvReduce a piece of msgUs once the message has arrived (before the reduction)
//   / wait
//   a message's bytes its flow also crosses the sender's and the receiver's CPU resources, each
//                     byte costing 1 / msgBytesPerUs CPU microseconds there (a weighted share:
//                     the copy through the socket stack runs while the bytes flow, and a rank
//                     copying two messages at once copies each at half the rate)
//   between ranks of  the same with shmMsgUs and shmMsgBytesPerUs (when set)
//   one host
// Weights make the fair share weighted (a flow at rate x loads a resource by x times its
// weight); every other resource has weight 1, so without CPU costs nothing changes. The CPU
// pieces of a host's ranks are the same on every host up to the fold's mapping, so folding by
// host stays exact. Gets (one-sided reads) cost no CPU here.
// Not modelled: the consistency header exchange, flow control (a
// sender never waits for buffer space at the receiver: sends are eager), protocol choice by size
// (NCCL's LL/LL128/Simple), the CPU of copies and reductions (they occupy the rank's memory
// only), softirq work of the network stack outside the rank's own time.
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

/// How full the token buckets are when the call starts, for calls run back to back:
///   kEmpty   each call left them dry (calls that saturate their links)
///   kFull    calls that load no bucketed link above its rate, on average over the call,
///            leave it full for the next (it refills while idle faster than they drain it)
///   kSteady  whichever of the two holds: simulated full, and if any bucketed resource carried
///            more than its capacity x the call's time, simulated again empty. Steady state
///            only: a benchmark's first calls of a size on a full bucket are not averaged in.
enum class BucketStart : uint8_t { kEmpty, kFull, kSteady };

struct EngineOptions {
  double reduceTraffic = 3;  ///< memory bytes per byte reduced
  double copyTraffic = 2;    ///< memory bytes per byte copied
  /// Memory bytes per byte a quantization step touches (reads plus writes: a.bytes +
  /// dst.bytes); the machine's ranks decide the rate (Constants::cpuQuantTraffic / gpu...).
  double quantTraffic = 2;
  /// The CPU (see above; all 0: none, and the machine needs no CPUs): CPU microseconds per
  /// message a rank sends or receives, the rate a message's bytes are copied through the
  /// socket stack at each end (bytes per CPU microsecond, 1 GB/s = 1000; 0: free), and CPU
  /// microseconds per call per rank.
  double msgUs = 0;
  double msgBytesPerUs = 0;
  double callUs = 0;
  /// The two message costs for a message between ranks of one host (chorus's shared memory: a
  /// copy into and out of a slot and a flag, no system call); negative: msgUs and
  /// msgBytesPerUs, as for a message between hosts.
  double shmMsgUs = -1;
  double shmMsgBytesPerUs = -1;
  BucketStart buckets = BucketStart::kEmpty;
  /// Folded: `plans` are those of host 0's ranks only, and every other host's ranks run the
  /// same plans mapped as `fold` says. Each simulated flow then stands for one flow per host,
  /// each on its own host's copies of the resources, so a resource's load is counted on host
  /// 0's copy with its multiplicity. The caller must know the plans are so (scenario.h
  /// checks); the engine cannot tell.
  Fold fold = Fold::kNone;
  /// Every rate computation over all the flows connected to the change (the check of the
  /// default, which starts from the flows next to it and grows only where fairness fails).
  bool wholeComponents = false;
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
  uint64_t sharedFlows = 0;  ///< flows whose rate was computed, summed over the recomputations
  uint64_t growths = 0;      ///< times a recomputation's set of flows had to grow
};

/// Runs `plans` (one per rank of `machine`, in rank order; folded: one per rank of host 0) to
/// completion; folded, rankDoneUs and the resources of every host are filled from host 0's.
/// Fails when the plans do not fit together (a send without its receive, mismatched sizes) or
/// deadlock, naming the ranks and steps involved.
StatusOr<Result> simulate(const Machine& machine, std::span<const exec::Plan* const> plans,
                          const EngineOptions& options = {});

/// What the engine reads for one rank: its plan, or (`like` >= 0, an earlier rank; not folded)
/// that rank's plan again with every peer p moved to p + (rank - like) mod n. Ranks whose plans
/// are the same up to such a shift (the chains below a tree's host leaders, on every host) then
/// share one copy of the steps, and only each step's state is per rank (40 bytes). The caller
/// must know the plans are so (scenario.h checks, on a sample); the engine cannot tell.
struct RankPlan {
  std::shared_ptr<const exec::Plan> plan;
  int like = -1;
};

/// The same with the plans asked for one at a time, rank 0 first: the engine keeps what it
/// replays of each (about 50 bytes per step of its own and 40 of state, against about 250 for a
/// plan) and drops the plan before asking for the next, so an every-rank run never holds them
/// all.
using PlanSource = std::function<StatusOr<RankPlan>(int rank)>;
StatusOr<Result> simulate(const Machine& machine, int count, const PlanSource& source,
                          const EngineOptions& options = {});

}  // namespace chorus::sim
