// Pieces the communicator's files share (internal to src/core/).
#pragma once

#include <cstdint>
#include <vector>

#include "src/base/status.h"
#include "src/bootstrap/peer_info.h"
#include "src/core/peers.h"
#include "src/cost/cost_model.h"
#include "src/tuning/tuner.h"

namespace chorus {

/// One rank's vote in the agreement at creation (comm_create.cc).
struct Vote {
  static constexpr size_t kBytes = 48;
  uint8_t flags = 0;
  cost::LinkClass intra = cost::LinkClass::kShm;
  cost::LinkClass inter = cost::LinkClass::kEthernet;
  uint32_t cores = 0;
  uint32_t nicMbps = 0;
  /// A host leader's self-calibration (src/core/calibration.h) and derived cache rule
  /// (cost/machine.h); 0 from every other rank and when CHORUS_TUNE=off.
  float memBwGBps = 0, cacheBwGBps = 0;
  uint32_t cacheKiB = 0;
  uint32_t llcKiB = 0;  ///< the leader's last-level cache (cost::DerivedSizes::llcBytes)
  /// The leader's measured link terms (cost::LinkCalibration; 0: not measured).
  float lineNs = 0, crossCoreGBps = 0, handoffUs = 0, tcpLatencyUs = 0, tcpBwGBps = 0;

  static Vote of(const Peers& peers, uint32_t cores, uint32_t nicMbps);
  std::vector<uint8_t> encode() const;
  static StatusOr<Vote> decode(const std::vector<uint8_t>& in);
  /// Everyone's votes into what the communicator relies on; `window.slotBytes` is 1 when a
  /// host window may be made (setupWindow() then fills its geometry), 0 otherwise.
  static tune::Agreement combine(const std::vector<Vote>& votes, uint64_t chunkBytes);
  /// Puts the slowest calibrated host's terms (lowest rates, longest times) and the smallest
  /// derived cache of the leaders' votes into `model` (the busiest host sets a collective's
  /// time); a term nobody voted keeps the model's value.
  static void applyHostTerms(const std::vector<Vote>& votes, cost::CostModel* model);
};

/// What this rank's host offers: cores, and the speed of the rank's nearest NIC (Mb/s, 0 when
/// unknown). Also fills `self`'s NUMA node and NIC.
struct HostFacts {
  uint32_t cores = 0;
  uint32_t nicMbps = 0;
};
StatusOr<HostFacts> hostFacts(PeerInfo* self);

/// Folds `v` into the id hash `h` (communicator ids).
uint64_t mixId(uint64_t h, uint64_t v);

}  // namespace chorus
