// A plan: one rank's schedule prepared once for the executor, cached, and re-run for every call
// with the same signature.
//
// prepare() takes a finalized schedule — in real ranks, exactly what the symbolic checker reads
// (tests/support/checker.h checks Plan::schedule) — and derives everything the executor would
// otherwise rebuild per call: the dependency graph as counts and a flat list of dependents, the
// steps ready at the start, per message peer its queues of sends and receives in program order
// and what the consistency header announces (bytes and messages each way), and how the plan
// runs:
//   - window plans (kSignal / kAwait / kWindow ranges) synchronize through the host window and
//     publish their header with their first signal;
//   - plans without messages run their steps in program order (program order is the meaning;
//     it respects every dependency), which is all the host-window algorithms need and costs a
//     loop over a few steps;
//   - the rest run as a dataflow over the dependencies (src/exec/executor.h).
// Nothing in a plan depends on the call's buffers, type or operator: those are bound per run.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <span>

#include "algorithms/common/schedule.h"
#include "algorithms/registry.h"
#include "src/base/status.h"

namespace chorus::exec {

struct Plan {
  /// What runs, "allreduce:ring" (statistics, logs); schedule.algo is its short name.
  std::string name;
  /// The algorithm's registry index, carried by the host window's header (any value equal on
  /// every rank for the same algorithm).
  uint16_t algoId = 0xffff;
  /// Finalized, in real ranks.
  sched::Schedule schedule;

  struct Peer {
    int rank = -1;
    std::vector<uint32_t> sends;  // send / notify steps to it, in program order
    std::vector<uint32_t> recvs;  // recv / recvReduce / wait steps from it
    uint64_t bytesTo = 0, bytesFrom = 0;
    uint32_t msgsTo = 0, msgsFrom = 0;
  };
  /// The message peers (schedule.peers), each with its queues.
  std::vector<Peer> peers;
  /// Per step: the index into `peers` of its peer (messages, one-sided reads of user buffers),
  /// -1 for local steps and window steps.
  std::vector<int32_t> peerSlot;
  /// Dependencies: per step the number it waits for, and the steps waiting for it
  /// (dependents[depStart[i] .. depStart[i+1])).
  std::vector<uint32_t> depCount;
  std::vector<uint32_t> depStart;
  std::vector<uint32_t> dependents;
  /// Local, one-sided and window steps with no dependencies.
  std::vector<uint32_t> ready;

  uint32_t signals = 0;          ///< kSignal steps (window plans)
  bool window = false;           ///< touches the host window
  bool sequential = false;       ///< no message steps and no message peers: program order
  /// One send or one receive and nothing else (chorusSend / chorusRecv outside a group): a
  /// point-to-point run (sequence 0) posts it and waits for it, without the dataflow's
  /// bookkeeping, and starts its deadline only when it first has to wait. A collective with
  /// such a plan still runs as a dataflow (its header goes first).
  bool single = false;
  /// Peers exchange memory handles after their headers (the algorithm reads user buffers of
  /// its peers; every rank of it exchanges, readers or not, so both sides agree).
  bool exchangeHandles = false;
  uint64_t maxRecvReduceBytes = 0;  ///< largest recvReduce, for the staging buffers
  size_t footprint = 0;             ///< bytes this plan holds (the plan cache's bound)
};

/// Prepares `schedule` (finalized) of rank `rank` of `nranks`. Fails on what would otherwise
/// fail mid-run: a peer out of range or missing from schedule.peers, a window step in a plan
/// that may not use the window, an await before the plan's first signal.
StatusOr<std::shared_ptr<const Plan>> prepare(sched::Schedule schedule, std::string name,
                                              uint16_t algoId, bool exchangeHandles, int rank,
                                              int nranks);

/// The plan of registered algorithm `algo` for `rank`: its schedule built in the layout's ring
/// order (algo::makeScheduleInOrder; ringOrder empty keeps rank order), finalized and prepared.
/// The plan is named after what was built ("allreduce:ring"; a builder that does not apply
/// builds its fallback, and the plan carries the fallback's name and registry index). This is
/// the one way a collective's plan is made: the communicator runs it, and the symbolic checker's
/// tests check its `schedule`.
StatusOr<std::shared_ptr<const Plan>> planAlgorithm(const algo::AlgoInfo& algo,
                                                    const sched::CollDesc& d, int rank,
                                                    int nranks, std::span<const int> ringOrder);

}  // namespace chorus::exec
