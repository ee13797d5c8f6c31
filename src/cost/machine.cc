#include "src/cost/machine.h"

#include <algorithm>

#include "src/base/config.h"
#include "src/cost/cost_model.h"

namespace chorus::cost {

namespace {

uint64_t pow2Floor(uint64_t v) {
  uint64_t p = 1;
  while (p <= v / 2) p *= 2;
  return v == 0 ? 0 : p;
}

}  // namespace

std::string_view sourceName(Source s) {
  switch (s) {
    case Source::kTable: return "table";
    case Source::kDetected: return "detected cache";
    case Source::kCalibrated: return "calibrated";
    case Source::kCachedFile: return "cached file";
    case Source::kEnv: return "env override";
  }
  return "?";
}

std::string DerivedSizes::toString() const {
  return "slot " + sizeText(slotBytes) + " (" + std::string(sourceName(slotSource)) +
         "), round " + sizeText(roundBytes) + " (" + std::string(sourceName(roundSource)) +
         "), cache " + sizeText(cacheBytes) + " (" + std::string(sourceName(cacheSource)) +
         "), last-level cache " + sizeText(llcBytes) + " (" +
         std::string(sourceName(llcSource)) + ")";
}

// The reasoning, per size:
//
// round: a two-shot staged round keeps live, per rank and core, its input chunk, its own round
//   area being filled, the slices it reduces out of every peer's area (another round's worth
//   in all) and the output it writes: about four rounds. A quarter of the L2 keeps all of it
//   there, so the extra staging copy never reaches DRAM; a round the L2 cannot hold spills
//   every copy (the issue 16 measurements: a 1 MiB round on a 1 MiB L2 halved the busbw). The
//   whole window's round areas (ranks x 2 halves) must also stay within half the L3, which
//   all ranks of the host share. Powers of two in [64 KiB, 1 MiB]: below 64 KiB the per-round
//   signals dominate.
// slot: a one-shot staged all-reduce reads every rank's slot and reduces them; it is worth
//   its n-fold reads only while latency dominates, which the slot bounds. 1/32 of the L2
//   keeps n slots and the output in the L2 for the few ranks one host window serves, and
//   gives the table's 32 KiB on the 1 MiB L2 it was measured on. Powers of two in
//   [8 KiB, 128 KiB].
// cache: the cost model's cache rule asks whether a call's working set (inputs, outputs,
//   staging) stays in the core's cache; half the L2 leaves room for the rest of the process.
//   Bounded to [128 KiB, 8 MiB].
// What the caches do not determine keeps the table's value (source "table").
DerivedSizes deriveSizes(const MachineDesc& m) {
  DerivedSizes d;
  d.slotBytes = kTableSlotBytes;
  d.roundBytes = kTableRoundBytes;
  d.cacheBytes = kTableCacheBytes;
  d.llcBytes = kTableLlcBytes;
  if (m.l2Bytes > 0) {
    d.roundBytes = std::clamp<uint64_t>(pow2Floor(m.l2Bytes / 4), 64 << 10, 1 << 20);
    d.slotBytes = std::clamp<uint64_t>(pow2Floor(m.l2Bytes / 32), 8 << 10, 128 << 10);
    d.cacheBytes = std::clamp<uint64_t>(m.l2Bytes / 2, 128 << 10, 8 << 20);
    d.roundSource = d.slotSource = d.cacheSource = Source::kDetected;
  }
  if (m.l3Bytes > 0) {
    d.llcBytes = m.l3Bytes;
    d.llcSource = Source::kDetected;
    const uint64_t ranks = static_cast<uint64_t>(std::max(1, m.ranksOnHost));
    const uint64_t cap = std::max<uint64_t>(pow2Floor(m.l3Bytes / (4 * ranks)), 64 << 10);
    if (cap < d.roundBytes || d.roundSource == Source::kTable) {
      d.roundBytes = std::min(d.roundBytes, cap);
      d.roundSource = Source::kDetected;
    }
  }
  return d;
}

StatusOr<DerivedSizes> resolveSizes(const MachineDesc& m) {
  DerivedSizes d = deriveSizes(m);
  if (config::isSet("CHORUS_SHM_STAGING")) {
    CHORUS_ASSIGN_OR_RETURN(d.slotBytes, config::getBytes("CHORUS_SHM_STAGING"));
    d.slotSource = Source::kEnv;
  }
  if (config::isSet("CHORUS_SHM_STAGING_ROUND")) {
    CHORUS_ASSIGN_OR_RETURN(d.roundBytes, config::getBytes("CHORUS_SHM_STAGING_ROUND"));
    d.roundSource = Source::kEnv;
  }
  return d;
}

}  // namespace chorus::cost
