// What one host's caches imply for the sizes chorus picks: the host window's one-shot slot and
// two-shot round, and the working set below which the cost model prices memory traffic at
// cache rate (which moves the one-shot / two-shot / ring crossovers). A pure function of a
// machine description, so that tests can feed it machines this one is not; the caller gives it
// the detected caches (src/topology/: the kernel's figures, 0 when unknown, see
// docs/topology.md "Cache sizes and CPU identity") and lets environment variables override.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "src/base/status.h"

namespace chorus::cost {

/// Where a constant came from, for logs and chorus-topo --tune.
enum class Source : uint8_t { kTable, kDetected, kCalibrated, kCachedFile, kEnv };
/// "table", "detected cache", "calibrated", "cached file", "env override".
std::string_view sourceName(Source s);

/// One host as the derivation sees it. Cache sizes are one instance of the level as a CPU sees
/// it (0: unknown).
struct MachineDesc {
  uint64_t l2Bytes = 0;
  uint64_t l3Bytes = 0;
  int ranksOnHost = 1;  ///< ranks sharing the host window (and the L3)
};

/// The derived sizes and where each came from.
struct DerivedSizes {
  uint64_t slotBytes = 0;   ///< host window one-shot slot (CHORUS_SHM_STAGING)
  uint64_t roundBytes = 0;  ///< host window two-shot round, per rank and half
  uint64_t cacheBytes = 0;  ///< cost model: working sets up to this run at cache rate
  /// Cost model: the host's last-level cache (HostConstants::llcBytes).
  uint64_t llcBytes = 0;
  Source slotSource = Source::kTable, roundSource = Source::kTable,
         cacheSource = Source::kTable, llcSource = Source::kTable;
  /// "slot 32 KiB (table), round 256 KiB (detected cache), cache 512 KiB (table)"
  std::string toString() const;
};

/// The table's values, used for whatever the caches do not determine. They were measured on
/// the development machine (docs/performance.md), whose CPU reports a 1 MiB L2: the rules
/// below give exactly these values for a 1 MiB L2 and an unknown L3.
inline constexpr uint64_t kTableSlotBytes = 32 << 10;
inline constexpr uint64_t kTableRoundBytes = 256 << 10;
inline constexpr uint64_t kTableCacheBytes = 512 << 10;
/// The development machine's L3 (32 MiB, as its kernel reports it).
inline constexpr uint64_t kTableLlcBytes = 32 << 20;

/// The sizes `m` implies (no environment read).
DerivedSizes deriveSizes(const MachineDesc& m);

/// The sizes for this process: deriveSizes() of `m`, then CHORUS_SHM_STAGING and
/// CHORUS_SHM_STAGING_ROUND where set (source kEnv; 0 keeps its meaning: no window / rounds
/// over cross-memory attach). A malformed variable is kInvalidArgument naming it.
StatusOr<DerivedSizes> resolveSizes(const MachineDesc& m);

}  // namespace chorus::cost
