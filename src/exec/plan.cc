#include "src/exec/plan.h"

#include <algorithm>

namespace chorus::exec {

using sched::StepKind;

namespace {

bool isMessage(StepKind k) {
  return k == StepKind::kSend || k == StepKind::kRecv || k == StepKind::kRecvReduce ||
         k == StepKind::kNotify || k == StepKind::kWait;
}
bool isSendLike(StepKind k) { return k == StepKind::kSend || k == StepKind::kNotify; }

size_t stepBytes(const sched::Step& s) { return sizeof(sched::Step) + s.deps.size() * 4; }

}  // namespace

StatusOr<std::shared_ptr<const Plan>> prepare(sched::Schedule schedule, std::string name,
                                              uint16_t algoId, bool exchangeHandles, int rank,
                                              int nranks) {
  auto plan = std::make_shared<Plan>();
  plan->name = std::move(name);
  plan->algoId = algoId;
  plan->exchangeHandles = exchangeHandles;
  const std::vector<sched::Step>& steps = schedule.steps;
  const size_t n = steps.size();
  auto where = [&](size_t i) {
    return plan->name + " step " + std::to_string(i) + " (" + sched::stepKindName(steps[i].kind) +
           ")";
  };

  plan->peers.resize(schedule.peers.size());
  for (size_t k = 0; k < schedule.peers.size(); ++k) {
    const int p = schedule.peers[k];
    if (p < 0 || p >= nranks || p == rank)
      return internalError(plan->name + ": peer " + std::to_string(p) + " out of range");
    plan->peers[k].rank = p;
  }
  auto slotOf = [&](int peer) -> int32_t {
    for (size_t k = 0; k < plan->peers.size(); ++k)
      if (plan->peers[k].rank == peer) return static_cast<int32_t>(k);
    return -1;
  };

  plan->peerSlot.assign(n, -1);
  plan->depCount.resize(n);
  plan->depStart.assign(n + 1, 0);
  bool messages = false, signalled = false;
  for (size_t i = 0; i < n; ++i) {
    const sched::Step& s = steps[i];
    plan->depCount[i] = static_cast<uint32_t>(s.deps.size());
    for (uint32_t d : s.deps) {
      if (d >= i) return internalError(where(i) + " depends on a later step");
      plan->depStart[d + 1]++;
    }
    const bool windowRange =
        s.a.buf == sched::kWindow || s.b.buf == sched::kWindow || s.dst.buf == sched::kWindow;
    if (sched::isWindowSync(s.kind) || windowRange) plan->window = true;
    if (s.kind == StepKind::kSignal) {
      ++plan->signals;
      signalled = true;
    } else if (s.kind == StepKind::kAwait) {
      if (!signalled)
        return internalError(where(i) + " awaits rank " + std::to_string(s.peer) +
                             " before this rank's first signal (which publishes its header)");
      if (s.peer < 0 || s.peer >= nranks || s.peer == rank || s.target == 0)
        return internalError(where(i) + " awaits an invalid peer or signal");
    }
    if (sched::isQuantStep(s.kind) && (s.quant.count == 0 || s.quant.sources == 0))
      return internalError(where(i) + " quantizes no elements or sums no blocks");
    const bool remoteUser = sched::isOneSided(s.kind) && s.a.buf != sched::kWindow;
    if (isMessage(s.kind) || remoteUser) {
      const int32_t slot = slotOf(s.peer);
      if (slot < 0)
        return internalError(where(i) + " names rank " + std::to_string(s.peer) +
                             ", missing from the schedule's peers");
      plan->peerSlot[i] = slot;
    }
    if (sched::isOneSided(s.kind) && s.a.buf == sched::kWindow &&
        (s.peer < 0 || s.peer >= nranks || s.peer == rank))
      return internalError(where(i) + " reads the window of an invalid peer");
    if (isMessage(s.kind)) {
      messages = true;
      Plan::Peer& p = plan->peers[static_cast<size_t>(plan->peerSlot[i])];
      if (isSendLike(s.kind)) {
        p.sends.push_back(static_cast<uint32_t>(i));
        ++p.msgsTo;
        if (s.kind == StepKind::kSend) p.bytesTo += s.a.bytes;
      } else {
        p.recvs.push_back(static_cast<uint32_t>(i));
        ++p.msgsFrom;
        if (s.kind != StepKind::kWait) p.bytesFrom += s.dst.bytes;
      }
      if (s.kind == StepKind::kRecvReduce)
        plan->maxRecvReduceBytes = std::max(plan->maxRecvReduceBytes, s.dst.bytes);
    }
  }
  for (size_t i = 0; i < n; ++i) plan->depStart[i + 1] += plan->depStart[i];
  plan->dependents.resize(plan->depStart[n]);
  {
    std::vector<uint32_t> fill(plan->depStart.begin(), plan->depStart.end() - 1);
    for (size_t i = 0; i < n; ++i)
      for (uint32_t d : steps[i].deps) plan->dependents[fill[d]++] = static_cast<uint32_t>(i);
  }
  for (size_t i = 0; i < n; ++i)
    if (plan->depCount[i] == 0 && !isMessage(steps[i].kind))
      plan->ready.push_back(static_cast<uint32_t>(i));
  plan->sequential = !messages && plan->peers.empty();
  plan->single = n == 1 && plan->peers.size() == 1 && !plan->window &&
                 (steps[0].kind == StepKind::kSend || steps[0].kind == StepKind::kRecv);
  if (plan->window && plan->signals == 0 && !steps.empty())
    return internalError(plan->name + " uses the host window but never signals (its first "
                         "signal publishes its header)");

  size_t bytes = sizeof(Plan) + plan->name.size();
  for (const sched::Step& s : steps) bytes += stepBytes(s);
  bytes += (plan->peerSlot.size() + plan->depCount.size() + plan->depStart.size() +
            plan->dependents.size() + plan->ready.size()) * 4;
  for (const Plan::Peer& p : plan->peers) bytes += (p.sends.size() + p.recvs.size()) * 4;
  plan->footprint = bytes;
  plan->schedule = std::move(schedule);
  return std::shared_ptr<const Plan>(std::move(plan));
}

StatusOr<std::shared_ptr<const Plan>> planAlgorithm(const algo::AlgoInfo& algo,
                                                    const sched::CollDesc& d, int rank,
                                                    int nranks, std::span<const int> ringOrder) {
  sched::Schedule s = algo::makeScheduleInOrder(algo, d, rank, nranks, ringOrder);
  const algo::AlgoInfo* ran = algo::findAlgorithm(d.coll, s.algo);
  if (!ran) ran = &algo;
  std::string name = std::string(sched::collName(d.coll)) + ":" + s.algo;
  return prepare(std::move(s), std::move(name), algo::algorithmIndex(ran),
                 ran->needs == algo::Needs::kOneSided, rank, nranks);
}

}  // namespace chorus::exec
