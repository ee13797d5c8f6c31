// The tuner: for one call, the cheapest registered algorithm the platform can run.
//
// Candidates are the registry's entries for the call's collective. An entry is skipped when the
// platform does not meet its needs (one-sided reads, the host window), when CHORUS_ALGO masks
// it, or when it says it does not apply (AlgoInfo::applies; an entry the mask names is kept
// anyway — its builder then builds its fallback). The rest are priced with the cost model
// (src/cost/cost_model.h) from their own cost terms (AlgoInfo::traffic), and the cheapest wins;
// exact ties go to the registry's order. Choice::why lists every candidate with its prediction
// and every skipped one with its reason, for the INFO log and chorus-topo --tune.
//
// CHORUS_ALGO masks like NCCL_ALGO: "ring" keeps only the ring wherever a collective has one;
// "allreduce:tree,broadcast:binomial" keeps the named ones for their collectives; collectives it
// does not mention keep every candidate. A mask that leaves nothing the platform can run is an
// error naming what was asked for and why it cannot run.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "algorithms/registry.h"
#include "src/base/status.h"
#include "src/cost/cost_model.h"

namespace chorus::topo {
class Layout;
}

namespace chorus::tune {

/// CHORUS_ALGO, parsed against the registry.
class AlgoMask {
 public:
  /// "" (no mask), "ring", or "allreduce:ring,broadcast:chain". An item no registered algorithm
  /// matches is kInvalidArgument listing the known names.
  static StatusOr<AlgoMask> parse(std::string_view spec);

  bool empty() const { return allowed_.empty(); }
  /// True when the mask names algorithms for `coll` (its quantized algorithms and the others are
  /// masked apart: "allreduce:ring" leaves quantized all-reduces free, "quant_direct" leaves
  /// the unquantized ones).
  bool masks(sched::Coll coll, bool quantized = false) const {
    return allowed_.count({coll, quantized}) > 0;
  }
  /// True when `a` may run: its collective is not masked, or the mask names it.
  bool allows(const algo::AlgoInfo& a) const;
  /// "allreduce:tree,allreduce:ring" — what the mask keeps for `coll`.
  std::string describe(sched::Coll coll, bool quantized = false) const;

 private:
  std::map<std::pair<sched::Coll, bool>, std::vector<const algo::AlgoInfo*>> allowed_;
};

/// What every rank agreed at communicator creation; the rest of the Platform follows from the
/// layout. chorus-topo --tune builds the same thing from its flags, so its table is the one a
/// job of that shape would use.
struct Agreement {
  bool oneSided = false;                             ///< every pair can read the other
  cost::LinkClass intra = cost::LinkClass::kShm;     ///< slowest link inside any host
  cost::LinkClass inter = cost::LinkClass::kEthernet;
  uint32_t minCores = 0;                             ///< fewest cores of any rank's host
  uint32_t minNicMbps = 0;                           ///< slowest nearest NIC (0: unknown)
  sched::WindowGeometry window;                      ///< the host window, when there is one
  uint64_t chunkBytes = 256 << 10;                   ///< CHORUS_CHUNK_SIZE
};

/// The CostInput of a layout (ranks, hosts, ranks per host, equal hosts).
cost::CostInput costInputFor(const topo::Layout& layout, cost::LinkClass intra,
                             cost::LinkClass inter, int coresPerHost);
/// The Platform selection sees for `layout` with `agreed`.
algo::Platform platformFor(const topo::Layout& layout, const Agreement& agreed);

/// What `a` does for `bytes` (count x element size as CollDesc counts), as the tuner prices it:
/// a single rank only copies; every consistency header costs a wait.
cost::Traffic trafficOf(const algo::AlgoInfo& a, uint64_t bytes, const cost::CostInput& in);
cost::Breakdown explain(const cost::CostModel& model, const algo::AlgoInfo& a, uint64_t bytes,
                        const cost::CostInput& in);
double predictUs(const cost::CostModel& model, const algo::AlgoInfo& a, uint64_t bytes,
                 const cost::CostInput& in);
/// By name, with the default constants; +infinity when `algo` is not registered for `coll`.
double predictUs(sched::Coll coll, std::string_view algo, uint64_t bytes,
                 const cost::CostInput& in);

/// The tuner's pick for one call.
struct Choice {
  const algo::AlgoInfo* algo = nullptr;  ///< nullptr: nothing can run; `why` says why
  double predictedUs = 0;
  std::string why;
};

Choice choose(const cost::CostModel& model, const sched::CollDesc& d, const algo::Platform& p,
              const AlgoMask& mask = {});

/// Per collective and message size (nccl-tests sizes: the larger buffer in bytes, float32,
/// minBytes, minBytes x factor, ... up to maxBytes), the algorithm choose() picks, its
/// predicted time and busbw (nccl-tests factors), and the runner-up. For chorus-topo --tune
/// and CHORUS_DEBUG=INFO.
std::string decisionTable(const cost::CostModel& model, const algo::Platform& p,
                          uint64_t minBytes = 8, uint64_t maxBytes = 256ull << 20,
                          uint64_t factor = 4, const AlgoMask& mask = {});

/// nccl-tests' bus bandwidth factor for `coll` on n ranks.
double busFactor(sched::Coll coll, int nranks);
/// Bytes of the CollDesc count for an nccl-tests size (the larger buffer).
uint64_t descBytes(sched::Coll coll, uint64_t size, int nranks);

}  // namespace chorus::tune
