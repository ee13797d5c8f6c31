#include "tools/chorus-sim/scenario.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "algorithms/kernels/quantize.h"
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

// True when `b` is `a` with every peer p moved to p + shift mod n (kShift) or p XOR shift
// (kXor): same steps, kinds, sizes and dependencies. Offsets are not compared: they only
// matter through dependencies.
bool sameUpTo(Fold fold, const exec::Plan& a, const exec::Plan& b, int shift, int n) {
  auto moved = [&](int p) {
    return p < 0 ? p : fold == Fold::kXor ? p ^ shift : (p + shift) % n;
  };
  const auto& x = a.schedule.steps;
  const auto& y = b.schedule.steps;
  if (x.size() != y.size() || a.peers.size() != b.peers.size()) return false;
  for (size_t k = 0; k < a.peers.size(); ++k)
    if (moved(a.peers[k].rank) != b.peers[k].rank) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    const sched::Step& s = x[i];
    const sched::Step& t = y[i];
    if (s.kind != t.kind || moved(s.peer) != t.peer || s.a.bytes != t.a.bytes ||
        s.b.bytes != t.b.bytes || s.dst.bytes != t.dst.bytes || s.target != t.target ||
        s.quant.count != t.quant.count || s.quant.sources != t.quant.sources || s.deps != t.deps)
      return false;
  }
  return true;
}

bool usesWindowSync(const exec::Plan& p) {
  for (const sched::Step& s : p.schedule.steps)
    if (sched::isWindowSync(s.kind)) return true;
  return false;
}

std::string knownNames(Coll coll) {
  std::string names;
  for (const algo::AlgoInfo* a : algo::allAlgorithms())
    if (a->coll == coll)
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
  if (c.quant) {
    CHORUS_RETURN_IF_ERROR(kernels::validateQuantConfig(*c.quant, "quantization: "));
    d.quant = *c.quant;
  }
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
  {  // As tune::choose prices a candidate (tuner.cc inputFor / bytesOf).
    cost::CostInput in = platform.cost;
    in.nranks = platform.nranks;
    in.roundBytes = platform.window.roundBytes;
    in.chunkBytes = std::max<uint64_t>(1, d.chunkBytes);
    in.packedRatio = sched::packedRatio(d);
    out.modelUs = tune::predictUs(cost::defaultCostModel(), *info, d.count * d.elemSize,
                                  cost::normalized(in));
  }
  // The call's config matters to quantized algorithms only (an unquantized one, named or the
  // tuner's choice, moves the call's type as it is).
  if (!info->quantized) d.quant.reset();
  else if (!d.quant) d.quant = kernels::QuantConfig{};

  std::vector<std::shared_ptr<const exec::Plan>> owned;
  auto build = [&](int r) { return exec::planAlgorithm(*info, d, r, n, layout.ringOrder()); };
  if (c.dumpRank >= 0) {
    if (c.dumpRank >= n)
      return invalidArgument("rank " + std::to_string(c.dumpRank) + " to list is not a rank of " +
                             std::to_string(n));
    CHORUS_ASSIGN_OR_RETURN(auto plan, build(c.dumpRank));
    const auto& steps = plan->schedule.steps;
    for (size_t i = 0; i < steps.size(); ++i) {
      const sched::Step& s = steps[i];
      std::string line = std::to_string(i) + " " + sched::stepKindName(s.kind);
      if (s.peer >= 0) line += " peer " + std::to_string(s.peer);
      const uint64_t bytes = s.kind == sched::StepKind::kSend ? s.a.bytes : s.dst.bytes;
      if (bytes) line += " " + std::to_string(bytes) + " B";
      if (!s.deps.empty()) {
        line += " <-";
        for (uint32_t dep : s.deps) line += " " + std::to_string(dep);
      }
      out.plan += line + "\n";
    }
  }
  const int K = machine.ranksPerHost(), H = machine.hosts();
  for (int r = 0; r < K; ++r) {
    CHORUS_ASSIGN_OR_RETURN(auto plan, build(r));
    owned.push_back(std::move(plan));
  }
  out.algo = owned.front()->name;

  // Fold by host when the sampled hosts' plans are host 0's shifted (see scenario.h).
  std::string note;
  if (!c.fold) note = "folding off";
  else if (H == 1) note = "one host";
  else if (!machine.notFoldable().empty()) note = machine.notFoldable();
  for (int r = 0; r < K && note.empty(); ++r)
    if (usesWindowSync(*owned[static_cast<size_t>(r)])) note = "the plans use the host window";
  std::vector<int> sample;
  for (int h : {1, H / 3, H / 2, H - 1})
    if (h >= 1 && h < H && std::find(sample.begin(), sample.end(), h) == sample.end())
      sample.push_back(h);
  // Each sampled plan is compared with host 0's as soon as it is built and then dropped (at
  // 16,384 ranks a plan can hold a million steps: all 32 at once were most of a run's memory),
  // and the sampling stops once neither mapping can hold for the whole host nor, with
  // Case::share, for any local rank on its own.
  auto pow2 = [](int v) { return (v & (v - 1)) == 0; };
  // Per local rank: its plan was host 0's moved by whole hosts on every sampled host.
  std::vector<char> shifts(static_cast<size_t>(K), H > 1 && c.share);
  const bool sampleFold = note.empty();
  if (sampleFold || c.share) {
    bool shiftHolds = sampleFold, xorHolds = sampleFold && pow2(H) && pow2(K);
    std::string shifted;  // the first rank whose plan is not host 0's shifted
    auto anyShares = [&] { return std::find(shifts.begin(), shifts.end(), 1) != shifts.end(); };
    for (size_t i = 0;
         i < sample.size() * static_cast<size_t>(K) && (shiftHolds || xorHolds || anyShares());
         ++i) {
      const int h = sample[i / static_cast<size_t>(K)], l = static_cast<int>(i) % K;
      if (!shiftHolds && !xorHolds && !shifts[static_cast<size_t>(l)]) continue;
      CHORUS_ASSIGN_OR_RETURN(auto plan, build(h * K + l));
      const exec::Plan& host0 = *owned[static_cast<size_t>(l)];
      if (!sameUpTo(Fold::kShift, host0, *plan, h * K, n)) {
        if (shiftHolds)
          shifted = "rank " + std::to_string(h * K + l) + "'s plan is not rank " +
                    std::to_string(l) + "'s moved by " + std::to_string(h) + " host(s)";
        shiftHolds = false;
        shifts[static_cast<size_t>(l)] = 0;
      }
      if (xorHolds && !sameUpTo(Fold::kXor, host0, *plan, h * K, n)) xorHolds = false;
    }
    if (shiftHolds) out.fold = Fold::kShift;
    else if (xorHolds) out.fold = Fold::kXor;
    else if (sampleFold) note = shifted + (pow2(H) && pow2(K) ? ", shifted or XORed" : "");
  }
  out.folded = out.fold != Fold::kNone;
  if (!out.folded)
    for (int l = 0; l < K; ++l)
      if (shifts[static_cast<size_t>(l)]) out.sharedRanks += H - 1;
  std::string hosts;  // the sampled ones
  for (int h : sample) hosts += (hosts.empty() ? "" : ", ") + std::to_string(h);
  if (out.folded) {
    out.foldNote = std::string("folded by host (") + foldName(out.fold) + "): " +
                   std::to_string(K) + " of " + std::to_string(n) +
                   " ranks simulated (plans checked on hosts " + hosts + ")";
  } else {
    out.foldNote = "every rank simulated: " + note;
    if (out.sharedRanks > 0)
      out.foldNote += " (" + std::to_string(out.sharedRanks) + " of them run host 0's plan of "
                      "their local rank moved by whole hosts, checked on hosts " + hosts + ")";
    // A rank running a shared plan holds its steps' state only: it counts half.
    const uint64_t perRank = owned.front()->schedule.steps.size();
    const uint64_t estimate = perRank * static_cast<uint64_t>(n - out.sharedRanks) +
                              perRank * static_cast<uint64_t>(out.sharedRanks) / 2;
    if (estimate > c.maxSteps)
      return invalidArgument(out.algo + " on " + std::to_string(n) +
                             " ranks needs every rank simulated (" + note + "), about " +
                             std::to_string(estimate) + " steps, over the limit of " +
                             std::to_string(c.maxSteps));
  }
  // Host 0's plans are held; every other host's (every-rank runs) are built when the engine
  // asks for them and dropped once it has read them. The engine may ask for them all again
  // (BucketStart::kSteady runs a call twice), always rank 0 first.
  // A rank whose local rank's plans were host 0's moved by whole hosts on every sampled host
  // runs host 0's (RankPlan::like, engine.h): its plan is not built.
  const PlanSource source = [&](int r) -> StatusOr<RankPlan> {
    RankPlan rp;
    const size_t l = static_cast<size_t>(r % K);
    if (r < K) {
      rp.plan = owned[l];
    } else if (!out.folded && shifts[l]) {
      rp.like = static_cast<int>(l);
    } else {
      CHORUS_ASSIGN_OR_RETURN(rp.plan, build(r));
    }
    if (r == 0) out.steps = 0;
    out.steps += (rp.plan ? rp.plan : owned[l])->schedule.steps.size();
    return rp;
  };
  out.simulatedRanks = out.folded ? K : n;
  EngineOptions eo = options;
  eo.fold = out.fold;
  CHORUS_ASSIGN_OR_RETURN(out.result, simulate(machine, out.simulatedRanks, source, eo));
  out.timeUs = out.result.timeUs;
  if (out.timeUs > 0 && c.coll != Coll::kBarrier) {
    out.algbwGBps = static_cast<double>(c.sizeBytes) / (out.timeUs * 1e3);
    out.busbwGBps = out.algbwGBps * tune::busFactor(c.coll, n);
  }
  return out;
}

}  // namespace chorus::sim
