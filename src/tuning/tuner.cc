#include "src/tuning/tuner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "src/base/strings.h"
#include "src/topology/layout.h"

namespace chorus::tune {

using algo::AlgoInfo;
using sched::Coll;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string qualified(const AlgoInfo& a) { return std::string(sched::collName(a.coll)) + ":" + a.name; }

// The bytes a CollDesc stands for: count x element size; all-to-allv, the mean per peer.
uint64_t bytesOf(const sched::CollDesc& d) {
  if (d.coll == Coll::kAllToAllv && !d.sendCounts.empty()) {
    uint64_t total = 0;
    for (uint64_t c : d.sendCounts) total += c;
    return total / d.sendCounts.size() * d.elemSize;
  }
  return d.count * d.elemSize;
}

// The CostInput of one call on `p`.
cost::CostInput inputFor(const sched::CollDesc& d, const algo::Platform& p) {
  cost::CostInput in = p.cost;
  in.nranks = p.nranks;
  in.roundBytes = p.window.roundBytes;
  in.chunkBytes = std::max<uint64_t>(1, d.chunkBytes);
  in.packedRatio = sched::packedRatio(d);
  in.segments = in.segments || d.segments;  // the platform's: chorus-topo --tune --segments
  return cost::normalized(in);
}

}  // namespace

// ---- CHORUS_ALGO --------------------------------------------------------------------------

StatusOr<AlgoMask> AlgoMask::parse(std::string_view spec) {
  AlgoMask m;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string_view::npos) end = spec.size();
    const std::string_view item = spec.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) continue;
    const size_t colon = item.find(':');
    bool matched = false;
    for (const AlgoInfo* a : algo::allAlgorithms()) {
      const bool hit = colon == std::string_view::npos
                           ? item == a->name
                           : item.substr(0, colon) == sched::collName(a->coll) &&
                                 item.substr(colon + 1) == a->name;
      if (!hit) continue;
      auto& list = m.allowed_[{a->coll, a->quantized}];
      if (std::find(list.begin(), list.end(), a) == list.end()) list.push_back(a);
      matched = true;
    }
    if (!matched) {
      std::string known;
      for (const AlgoInfo* a : algo::allAlgorithms())
        appendItem(known, qualified(*a));
      return invalidArgument("CHORUS_ALGO='" + std::string(spec) + "': no algorithm matches '" +
                             std::string(item) + "' (known: " + known + ")");
    }
  }
  return m;
}

bool AlgoMask::allows(const AlgoInfo& a) const {
  auto it = allowed_.find({a.coll, a.quantized});
  if (it == allowed_.end()) return true;
  return std::find(it->second.begin(), it->second.end(), &a) != it->second.end();
}

std::string AlgoMask::describe(Coll coll, bool quantized) const {
  std::string s;
  auto it = allowed_.find({coll, quantized});
  if (it == allowed_.end()) return s;
  for (const AlgoInfo* a : it->second) appendItem(s, qualified(*a), ",");
  return s;
}

// ---- Platform ----------------------------------------------------------------------------

cost::CostInput costInputFor(const topo::Layout& layout, cost::LinkClass intra,
                             cost::LinkClass inter, int coresPerHost) {
  cost::CostInput in;
  in.nranks = layout.nranks();
  in.hosts = layout.numHosts();
  in.ranksPerHost = layout.maxLocalSize();
  in.equalHosts = layout.uniformHosts();
  in.intra = intra;
  in.inter = inter;
  in.coresPerHost = coresPerHost;
  return in;
}

algo::Platform platformFor(const topo::Layout& layout, const Agreement& agreed) {
  algo::Platform p;
  p.nranks = layout.nranks();
  p.oneSided = agreed.oneSided;
  p.window = agreed.window;
  p.cost = costInputFor(layout, agreed.intra, agreed.inter, static_cast<int>(agreed.minCores));
  p.cost.chunkBytes = agreed.chunkBytes;
  p.cost.interSpeedGbps = agreed.minNicMbps / 1000.0;
  p.cost.roundBytes = agreed.window.roundBytes;
  return p;
}

// ---- Prediction --------------------------------------------------------------------------

cost::Traffic trafficOf(const AlgoInfo& a, uint64_t bytes, const cost::CostInput& raw) {
  const cost::CostInput in = cost::normalized(raw);
  const double N = static_cast<double>(bytes);
  cost::Traffic t;
  if (in.nranks == 1) {
    // Every algorithm degenerates to a local copy (or nothing, in place).
    if (a.coll != Coll::kBarrier) t.copyBytes = N;
    t.workingSet = 2 * N;
    return t;
  }
  t = a.traffic(a.coll, N, in);
  t.waits += t.headerPeers;
  return t;
}

cost::Breakdown explain(const cost::CostModel& model, const AlgoInfo& a, uint64_t bytes,
                        const cost::CostInput& in) {
  return model.explain(trafficOf(a, bytes, in), in);
}

double predictUs(const cost::CostModel& model, const AlgoInfo& a, uint64_t bytes,
                 const cost::CostInput& in) {
  return explain(model, a, bytes, in).totalUs();
}

double predictUs(Coll coll, std::string_view algo, uint64_t bytes, const cost::CostInput& in) {
  const AlgoInfo* a = algo::findAlgorithm(coll, algo);
  return a ? predictUs(cost::defaultCostModel(), *a, bytes, in) : kInf;
}

// ---- Choice ------------------------------------------------------------------------------

Choice choose(const cost::CostModel& model, const sched::CollDesc& d, const algo::Platform& p,
              const AlgoMask& mask) {
  Choice out;
  const cost::CostInput in = inputFor(d, p);
  const uint64_t bytes = bytesOf(d);
  struct Candidate {
    const AlgoInfo* algo;
    double us;
  };
  std::vector<Candidate> eligible;
  std::string skipped, refusedByNeeds;
  const bool quantized = d.quant.has_value();
  const bool masked = mask.masks(d.coll, quantized);
  const std::string maskText = mask.describe(d.coll, quantized);
  for (const AlgoInfo* a : algo::allAlgorithms()) {
    if (a->coll != d.coll || a->quantized != quantized) continue;
    const char* why = nullptr;
    if (!algo::needsMet(*a, p, &why)) {
      appendItem(skipped, std::string(a->name) + ": " + why, "; ");
      if (masked && mask.allows(*a))
        appendItem(refusedByNeeds, qualified(*a) + " " + why, "; ");
      continue;
    }
    if (!mask.allows(*a)) continue;
    if (a->applies && p.nranks > 1 && !masked) {
      if (const char* reason = a->applies(d, p)) {
        appendItem(skipped, std::string(a->name) + ": " + reason, "; ");
        continue;
      }
    }
    eligible.push_back({a, predictUs(model, *a, bytes, in)});
  }
  if (eligible.empty()) {
    const std::string what = std::string(quantized ? "quantized " : "") + sched::collName(d.coll);
    out.why = masked ? "CHORUS_ALGO allows " + maskText + " for " + what +
                           ", which cannot run here: " + refusedByNeeds
                     : "no algorithm for " + what;
    return out;
  }
  // Stable: on equal predictions the registry's order decides.
  std::stable_sort(eligible.begin(), eligible.end(),
                   [](const Candidate& a, const Candidate& b) { return a.us < b.us; });
  out.algo = eligible.front().algo;
  out.predictedUs = eligible.front().us;
  std::ostringstream why;
  why << (masked ? "CHORUS_ALGO " + maskText + ", " : std::string())
      << "cost model, " << cost::sizeText(bytes) << " on " << in.nranks << " ranks / "
      << in.hosts << (in.hosts == 1 ? " host" : " hosts") << ": ";
  for (size_t i = 0; i < eligible.size(); ++i)
    why << (i ? " < " : "") << eligible[i].algo->name << " " << cost::usText(eligible[i].us);
  if (!skipped.empty()) why << "; not eligible: " << skipped;
  out.why = why.str();
  return out;
}

double busFactor(Coll coll, int nranks) {
  const double n = nranks;
  switch (coll) {
    case Coll::kAllReduce: return 2 * (n - 1) / n;
    case Coll::kAllGather:
    case Coll::kReduceScatter:
    case Coll::kAllToAll:
    case Coll::kAllToAllv:
    case Coll::kGather:
    case Coll::kScatter: return (n - 1) / n;
    default: return 1;
  }
}

uint64_t descBytes(Coll coll, uint64_t size, int nranks) {
  switch (coll) {
    case Coll::kAllGather:
    case Coll::kReduceScatter:
    case Coll::kAllToAll:
    case Coll::kAllToAllv:
    case Coll::kGather:
    case Coll::kScatter: return size / static_cast<uint64_t>(nranks);
    default: return size;
  }
}

std::string decisionTable(const cost::CostModel& model, const algo::Platform& p,
                          uint64_t minBytes, uint64_t maxBytes, uint64_t factor,
                          const AlgoMask& mask) {
  const cost::CostInput in = cost::normalized([&] {
    cost::CostInput c = p.cost;
    c.nranks = p.nranks;
    return c;
  }());
  factor = std::max<uint64_t>(2, factor);
  minBytes = std::max<uint64_t>(1, minBytes);
  std::vector<uint64_t> sizes;
  for (uint64_t s = minBytes; s <= maxBytes; s *= factor) {
    sizes.push_back(s);
    if (s > maxBytes / factor) break;
  }
  if (sizes.empty() || sizes.back() != maxBytes) sizes.push_back(maxBytes);

  const double share =
      in.coresPerHost > 0
          ? std::max(1.0, std::ceil(static_cast<double>(in.ranksPerHost) / in.coresPerHost))
          : 1.0;
  std::ostringstream o;
  o << "# tuner: " << in.nranks << " ranks on " << in.hosts
    << (in.hosts == 1 ? " host" : " hosts") << " (" << in.ranksPerHost << " per host";
  if (in.coresPerHost > 0) o << ", " << in.coresPerHost << " cores";
  if (share > 1) o << ": time-shared x" << share;
  o << "), intra " << cost::linkClassName(in.intra);
  if (in.hosts > 1) {
    o << ", inter " << cost::linkClassName(in.inter);
    if (in.interSpeedGbps > 0) o << " " << in.interSpeedGbps << " Gb/s";
  }
  o << (p.oneSided ? ", one-sided" : "") << ", window "
    << (p.window.present() ? cost::sizeText(p.window.slotBytes) + " slot, " +
                                 cost::sizeText(p.window.roundBytes) + " rounds"
                           : std::string("none"))
    << ", chunk " << cost::sizeText(in.chunkBytes) << "\n";
  o << "# size: nccl-tests size (the larger buffer, float32); busbw with nccl-tests factors\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-14s %10s  %-18s %12s %11s  %s\n", "# collective", "size",
                "algorithm", "predicted", "busbw GB/s", "runner-up");
  o << line;
  const Coll colls[] = {Coll::kAllReduce,  Coll::kBroadcast, Coll::kReduce,
                        Coll::kAllGather,  Coll::kReduceScatter, Coll::kAllToAll,
                        Coll::kGather,     Coll::kScatter,   Coll::kBarrier};
  for (Coll coll : colls) {
    const std::vector<uint64_t> rows = coll == Coll::kBarrier ? std::vector<uint64_t>{0} : sizes;
    for (uint64_t size : rows) {
      sched::CollDesc d;
      d.coll = coll;
      d.elemSize = 4;
      d.count = std::max<uint64_t>(1, descBytes(coll, size, in.nranks) / d.elemSize);
      if (coll == Coll::kBarrier) d.count = 0;
      d.chunkBytes = in.chunkBytes;
      d.window = p.window;
      const Choice c = choose(model, d, p, mask);
      if (!c.algo) continue;
      const uint64_t bytes = d.count * d.elemSize;
      // The runner-up: the cheapest other candidate choose() would have considered.
      std::string runnerUp = "-";
      double best = kInf;
      const cost::CostInput ci = inputFor(d, p);
      for (const AlgoInfo* a : algo::allAlgorithms()) {
        const char* why = nullptr;
        if (a->coll != coll || a->quantized || a == c.algo || !algo::needsMet(*a, p, &why) ||
            !mask.allows(*a))
          continue;
        if (a->applies && p.nranks > 1 && !mask.masks(coll) && a->applies(d, p)) continue;
        const double us = predictUs(model, *a, bytes, ci);
        if (us < best) {
          best = us;
          runnerUp = std::string(a->name) + " " + cost::usText(us);
        }
      }
      const double busbw = c.predictedUs > 0 && size > 0
                               ? static_cast<double>(size) / (c.predictedUs * 1e3) *
                                     busFactor(coll, in.nranks)
                               : 0;
      std::snprintf(line, sizeof line, "%-14s %10s  %-18s %12s %11.3g  %s\n",
                    sched::collName(coll),
                    coll == Coll::kBarrier ? "-" : cost::sizeText(size).c_str(), c.algo->name,
                    cost::usText(c.predictedUs).c_str(), busbw, runnerUp.c_str());
      o << line;
    }
  }
  return o.str();
}

}  // namespace chorus::tune
