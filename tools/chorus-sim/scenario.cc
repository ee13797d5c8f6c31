#include "tools/chorus-sim/scenario.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "algorithms/registry.h"
#include "src/cost/cost_model.h"
#include "src/exec/plan.h"
#include "src/topology/layout.h"
#include "src/tuning/tuner.h"

namespace chorus::sim {

namespace {

using sched::Coll;

constexpr Coll kSimulated[] = {Coll::kAllReduce, Coll::kBroadcast,     Coll::kReduce,
                               Coll::kAllGather, Coll::kReduceScatter, Coll::kAllToAll,
                               Coll::kGather,    Coll::kScatter,       Coll::kBarrier};

std::string knownNames(Coll coll) {
  std::string names;
  for (const algo::AlgoInfo* a : algo::allAlgorithms())
    if (a->coll == coll && !a->quantized)
      names += (names.empty() ? "" : ", ") + std::string(a->name);
  return names;
}

}  // namespace

std::optional<sched::Coll> parseColl(std::string_view name) {
  for (Coll c : kSimulated)
    if (name == sched::collName(c)) return c;
  return std::nullopt;
}

StatusOr<Outcome> runCase(const Machine& machine, const Case& c, const EngineOptions& options) {
  const int n = machine.nranks();
  CHORUS_ASSIGN_OR_RETURN(topo::Layout layout, topo::Layout::uniform(n, machine.ranksPerHost()));
  constexpr size_t kElem = 4;  // float32, as nccl-tests and chorus-perf count sizes

  tune::Agreement agreed;
  agreed.oneSided = c.oneSided;
  agreed.intra = machine.intraClass();
  agreed.inter = machine.interClass();
  agreed.minNicMbps = static_cast<uint32_t>(machine.nicGbps() * 1000);
  agreed.chunkBytes = std::max<uint64_t>(kElem, c.chunkBytes / kElem * kElem);
  const algo::Platform platform = tune::platformFor(layout, agreed);

  sched::CollDesc d;
  d.coll = c.coll;
  d.elemSize = kElem;
  d.count = c.coll == Coll::kBarrier
                ? 0
                : std::max<uint64_t>(1, tune::descBytes(c.coll, c.sizeBytes, n) / kElem);
  d.chunkBytes = agreed.chunkBytes;
  d.root = c.root;
  if (c.root < 0 || c.root >= n)
    return invalidArgument("root " + std::to_string(c.root) + " is not a rank of " +
                           std::to_string(n));
  d.hostOf.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) d.hostOf[static_cast<size_t>(r)] = layout.hostOf(r);

  Outcome out;
  const algo::AlgoInfo* info = nullptr;
  if (c.algo == "tuner") {
    const tune::Choice choice = tune::choose(cost::defaultCostModel(), d, platform);
    if (!choice.algo)
      return invalidArgument(std::string(sched::collName(c.coll)) + ": the tuner found nothing "
                             "to run: " + choice.why);
    info = choice.algo;
    out.why = choice.why;
  } else {
    info = algo::findAlgorithm(c.coll, c.algo);
    if (!info)
      return invalidArgument("unknown algorithm '" + c.algo + "' for " +
                             sched::collName(c.coll) + " (known: " + knownNames(c.coll) +
                             ", or tuner)");
    const char* why = nullptr;
    if (!algo::needsMet(*info, platform, &why))
      return invalidArgument(std::string(sched::collName(c.coll)) + ":" + info->name +
                             " cannot run on this machine: " + (why ? why : "needs unmet") +
                             (info->needs == algo::Needs::kOneSided ? " (try --one-sided)" : ""));
  }
  if (info->quantized)
    return invalidArgument(std::string(sched::collName(c.coll)) + ":" + info->name +
                           ": quantized collectives are not simulated yet");

  std::vector<std::shared_ptr<const exec::Plan>> owned;
  std::vector<const exec::Plan*> plans;
  owned.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    CHORUS_ASSIGN_OR_RETURN(auto plan,
                            exec::planAlgorithm(*info, d, r, n, layout.ringOrder()));
    out.steps += plan->schedule.steps.size();
    plans.push_back(plan.get());
    owned.push_back(std::move(plan));
  }
  out.algo = plans.front()->name;
  CHORUS_ASSIGN_OR_RETURN(out.result, simulate(machine, plans, options));
  out.timeUs = out.result.timeUs;
  if (out.timeUs > 0 && c.coll != Coll::kBarrier) {
    out.algbwGBps = static_cast<double>(c.sizeBytes) / (out.timeUs * 1e3);
    out.busbwGBps = out.algbwGBps * tune::busFactor(c.coll, n);
  }
  return out;
}

}  // namespace chorus::sim
