// Selection and plans: the one path from a call's signature to the plan that runs it.
//
//   select   tune::choose() over the registered algorithms (CHORUS_ALGO masks them);
//   build    the algorithm's builder, in the layout's ring order where the algorithm says so
//            (algo::makeScheduleInOrder), finalized;
//   prepare  exec::prepare(): the executor's view of the schedule, once;
//   cache    PlanCache, by signature (plan_cache.h), bounded.
// Nothing here knows an algorithm by name: what differs between them is in their registry
// entries.
#include <algorithm>

#include "src/base/logging.h"
#include "src/core/communicator.h"

namespace chorus {

sched::CollDesc Communicator::describe(const CollArgs& a, bool inPlace, bool segments) const {
  const size_t elem = dataTypeSize(a.dtype);
  sched::CollDesc d;
  d.coll = a.coll;
  d.count = a.count;
  d.elemSize = elem;
  d.root = a.root;
  d.inPlace = inPlace;
  d.chunkBytes = std::max<uint64_t>(elem, chunkBytes_ / elem * elem);
  d.hostOf = hostOf_;
  if (a.v) {
    d.sendCounts = a.v->sendCounts;
    d.sendDispls = a.v->sendDispls;
    d.recvCounts = a.v->recvCounts;
    d.recvDispls = a.v->recvDispls;
  }
  d.window = agreed_.window;
  if (a.quant) d.quant = *a.quant;
  d.segments = segments;
  return d;
}

StatusOr<std::shared_ptr<const exec::Plan>> Communicator::planFor(const sched::CollDesc& d) {
  const tune::Choice c = tune::choose(model_, d, platform_, mask_);
  if (!c.algo)
    return invalidUsage(std::string(sched::collName(d.coll)) + " on rank " +
                        std::to_string(rank_) + ": " + c.why);
  CHORUS_ASSIGN_OR_RETURN(
      auto plan, exec::planAlgorithm(*c.algo, d, rank_, nranks_, layout_->ringOrder()));
  CHORUS_LOG(INFO, TUNE) << plan->name << " for " << sched::collName(d.coll) << " count " << d.count
                         << " x " << d.elemSize << " B on " << nranks_ << " ranks: " << c.why
                         << "; " << plan->schedule.steps.size() << " steps";
  return plan;
}

// One plan for a whole group of point-to-point operations: each op's buffer is a user buffer
// of its own; FIFO order per peer and direction is the order of the calls, as in NCCL.
StatusOr<std::shared_ptr<const exec::Plan>> Communicator::p2pPlan(std::span<const P2POp> ops) {
  // The same ops as one of the last few groups (a ping-pong alternates a send and a receive; a
  // halo exchange repeats one group): no key to build or look up.
  auto word = [](const P2POp& op) {
    return (static_cast<uint64_t>(op.peer) << 1) | (op.isSend ? 1 : 0);
  };
  for (const RecentP2P& r : recentP2P_) {
    if (!r.plan || r.ops.size() != 2 * ops.size()) continue;
    bool same = true;
    for (size_t i = 0; i < ops.size() && same; ++i)
      same = r.ops[2 * i] == word(ops[i]) &&
             r.ops[2 * i + 1] == ops[i].count * dataTypeSize(ops[i].dtype);
    if (same) return r.plan;
  }
  CHORUS_ASSIGN_OR_RETURN(auto plan, p2pPlanFor(ops));
  RecentP2P& slot = recentP2P_[nextRecentP2P_++ % recentP2P_.size()];
  slot.ops.clear();
  for (const P2POp& op : ops) {
    slot.ops.push_back(word(op));
    slot.ops.push_back(op.count * dataTypeSize(op.dtype));
  }
  slot.plan = plan;
  return plan;
}

StatusOr<std::shared_ptr<const exec::Plan>> Communicator::p2pPlanFor(
    std::span<const P2POp> ops) {
  PlanKey key;
  key.coll = sched::Coll::kSendRecv;
  for (const P2POp& op : ops) {
    key.extra.push_back((static_cast<uint64_t>(op.peer) << 1) | (op.isSend ? 1 : 0));
    key.extra.push_back(op.count * dataTypeSize(op.dtype));
  }
  if (auto plan = plans_.find(key)) return plan;
  sched::Schedule s;
  s.algo = "p2p";
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    const sched::Range r{static_cast<sched::BufId>(sched::kFirstUserBuf + i), 0,
                         op.count * dataTypeSize(op.dtype)};
    if (op.peer == rank_) continue;  // self-pairs are copied below
    if (op.isSend)
      s.send(op.peer, r);
    else
      s.recv(op.peer, r);
  }
  // Self send/recv pairs (allowed in NCCL within a group): match in order, copy locally.
  std::vector<size_t> selfSends, selfRecvs;
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].peer == rank_) (ops[i].isSend ? selfSends : selfRecvs).push_back(i);
  if (selfSends.size() != selfRecvs.size())
    return invalidUsage("rank " + std::to_string(rank_) + " posted " +
                        std::to_string(selfSends.size()) + " sends to itself but " +
                        std::to_string(selfRecvs.size()) + " receives from itself");
  for (size_t k = 0; k < selfSends.size(); ++k) {
    const P2POp& snd = ops[selfSends[k]];
    const P2POp& rcv = ops[selfRecvs[k]];
    const uint64_t sb = snd.count * dataTypeSize(snd.dtype);
    const uint64_t rb = rcv.count * dataTypeSize(rcv.dtype);
    if (sb != rb)
      return invalidUsage("rank " + std::to_string(rank_) + " sends " + std::to_string(sb) +
                          " bytes to itself but receives " + std::to_string(rb));
    s.copy({static_cast<sched::BufId>(sched::kFirstUserBuf + selfSends[k]), 0, sb},
           {static_cast<sched::BufId>(sched::kFirstUserBuf + selfRecvs[k]), 0, rb});
  }
  s.finalize();
  CHORUS_ASSIGN_OR_RETURN(auto plan, exec::prepare(std::move(s), "sendrecv:p2p",
                                                   algo::kNoAlgorithm, false, rank_, nranks_));
  plans_.insert(key, plan);
  return plan;
}

}  // namespace chorus
