// The algorithm component: what every registered algorithm says about itself, and the registry.
//
// An algorithm is one file in algorithms/<family>/ holding its builder, its cost terms and one
// registration (CHORUS_REGISTER_ALGORITHM at the bottom). The tuner (src/tuning/) picks among
// the registered entries, CHORUS_ALGO masks them by name, chorus-info lists them, and the unit
// tests run the symbolic checker over every one. Nothing outside this registry compares an
// algorithm's name: what the communicator needs to know about an algorithm is in its entry.
//
// Names are short and unique per collective ("ring"); the qualified form "<coll>:<name>"
// ("allreduce:ring", collName() spelling) is accepted wherever a name is looked up.
// Schedule::algo carries the short name of what was built (a builder that does not apply to a
// layout builds its flat fallback and names that).
#pragma once

#include <span>
#include <string_view>

#include "algorithms/common/schedule.h"
#include "src/cost/cost_model.h"

namespace chorus::algo {

/// What an algorithm needs of the communicator's connections: a hard requirement, checked at
/// selection (a forced algorithm whose needs are not met is refused with a message).
enum class Needs : uint8_t {
  kMessages,    ///< send/recv/notify/wait: any transport
  kOneSided,    ///< also get/getReduce of peers' buffers: every pair of ranks can read the other
  kHostWindow,  ///< gets, signals and awaits through the host window: all ranks on one host
};
const char* needsName(Needs n);

/// How a builder numbers ranks. Where the layout's ring order differs from the rank numbering
/// (hosts holding interleaved ranks, NUMA groups), the communicator builds ring-ordered
/// algorithms for the rank's position in that order and renumbers the result back
/// (renumberFromRing), so each host boundary is crossed once per ring.
enum class RankOrder : uint8_t {
  kByRank,         ///< built for real ranks (host-aware and direct builders)
  kRingPositions,  ///< peers (and the root) renumbered; nothing is placed by rank
  kRingBlocks,     ///< also the rank-indexed blocks of the output (all-gather) or input
                   ///< (reduce-scatter); the builder never lets a step straddle two blocks
};

/// What selection may rely on. Every field is agreed by all ranks at communicator creation, so
/// every rank makes the same choice.
struct Platform {
  int nranks = 1;
  /// Every pair of ranks can read the other's memory (Needs::kOneSided algorithms run).
  bool oneSided = false;
  /// The host window, when all ranks share one (Needs::kHostWindow algorithms run).
  sched::WindowGeometry window;
  /// The layout and links, for the cost terms.
  cost::CostInput cost;
};

/// Why an algorithm does not apply to a call on a platform (nullptr: it applies). The tuner
/// skips it and logs the reason; a mask that names it still runs it (its builder then builds
/// its flat fallback, under that fallback's name).
using Applies = const char* (*)(const sched::CollDesc&, const Platform&);

struct AlgoInfo {
  sched::Coll coll;
  const char* name;         ///< unique within coll, e.g. "ring"
  const char* description;  ///< one line, for chorus-info and logs
  /// The rank's schedule, not yet finalized (see makeSchedule()).
  sched::Schedule (*build)(const sched::CollDesc&, int rank, int nranks);
  /// What its busiest rank does for `bytes` (the CollDesc count in bytes) on `in`, which is
  /// normalized and has nranks > 1. See src/cost/cost_model.h.
  cost::Traffic (*traffic)(sched::Coll coll, double bytes, const cost::CostInput& in);
  Needs needs = Needs::kMessages;
  RankOrder order = RankOrder::kByRank;
  Applies applies = nullptr;  ///< nullptr: applies everywhere its needs are met
  /// Exact ties in the tuner go to the lower value, then to the registry's order: the plain
  /// algorithm of each collective (ring, chain, pairwise, linear) says 0, so where a
  /// specialised one costs exactly the same (two ranks, one host) the plain one runs.
  int tiePriority = 1;
  /// A quantized collective (algorithms/quant): offered only to calls that carry a
  /// quantization config (CollDesc::quant), and those calls are offered nothing else. Their
  /// names, and only theirs, start with "quant_" (checked at registration), so a list of names
  /// (chorus-info, chorusGetAlgorithmInfo, CHORUS_ALGO) tells them apart.
  bool quantized = false;
  /// Every rank's plan exchanges its header with every other rank, at every count, so what the
  /// headers carry besides the call (kHeaderInSegments: whose buffers lie in chorusMemAlloc
  /// segments) reaches every rank alike. Implied for Needs::kHostWindow (every window plan
  /// awaits every peer); tests/unit/schedules checks both on every rank of 2 to 7.
  bool hearsEveryPeer = false;
};

/// Adds an entry at static initialization; use through CHORUS_REGISTER_ALGORITHM.
class Registration {
 public:
  explicit Registration(const AlgoInfo& info);
};

#define CHORUS_REGISTER_ALGORITHM_CAT2(a, b) a##b
#define CHORUS_REGISTER_ALGORITHM_CAT(a, b) CHORUS_REGISTER_ALGORITHM_CAT2(a, b)
/// CHORUS_REGISTER_ALGORITHM({.coll = ..., .name = ..., ...}): registers one algorithm.
#define CHORUS_REGISTER_ALGORITHM(...)                                                    \
  static const ::chorus::algo::Registration CHORUS_REGISTER_ALGORITHM_CAT(              \
      chorusAlgorithmRegistration_, __LINE__)(::chorus::algo::AlgoInfo __VA_ARGS__)

/// Every registered algorithm, sorted by collective, tiePriority, then name (a stable,
/// build-independent order: the tuner breaks exact ties by it).
std::span<const AlgoInfo* const> allAlgorithms();

/// The algorithm named `name` ("ring" or "allreduce:ring") for `coll`, or nullptr.
const AlgoInfo* findAlgorithm(sched::Coll coll, std::string_view name);

/// The entry's position in allAlgorithms() (equal on every rank of one build); kNoAlgorithm
/// when it is not registered.
inline constexpr uint16_t kNoAlgorithm = 0xffff;
uint16_t algorithmIndex(const AlgoInfo* a);
const AlgoInfo* algorithmAt(uint16_t index);

/// Whether every rank's plan of `a` hears every other rank's header: AlgoInfo::hearsEveryPeer,
/// or a host-window algorithm.
inline bool everyRankHearsEveryRank(const AlgoInfo& a) {
  return a.hearsEveryPeer || a.needs == Needs::kHostWindow;
}

/// Whether the platform meets `a`'s needs; when not, *why says what is missing.
bool needsMet(const AlgoInfo& a, const Platform& p, const char** why);

/// build() followed by finalize(): what an executor runs, for real ranks.
sched::Schedule makeSchedule(const AlgoInfo& algo, const sched::CollDesc& d, int rank, int nranks);

/// The schedule of `algo` for `rank`, with the rank order of a layout applied as algo.order
/// says: ringOrder[i] is the rank at ring position i (the identity, or empty, when the layout
/// keeps rank order). Finalized. CollDesc::hostOf is read in rank numbering.
sched::Schedule makeScheduleInOrder(const AlgoInfo& algo, const sched::CollDesc& d, int rank,
                                    int nranks, std::span<const int> ringOrder);

}  // namespace chorus::algo
