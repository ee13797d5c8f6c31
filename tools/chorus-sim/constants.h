// The simulator's device and link constants: everything chorus-sim assumes about hardware that a
// topology file does not say, in one table (constants.cc) with where each value comes from.
//
// What a topology file does say (PCIe generation and width, NVLink counts, NIC speeds, link
// latencies of src/topology/system.cc's defaults) is read from the System and not repeated here.
// These constants fill the gaps: the rate at which a rank reduces or copies memory, the
// latency a message pays in software and in the network, the shared-memory path between CPU
// ranks. They are frozen values, not fitted to any measurement or published figure; a change to
// one says why in its commit.
#pragma once

#include <string>
#include <string_view>

#include "src/base/status.h"

namespace chorus::sim {

struct Constants {
  /// Memory traffic a CPU rank sustains for copies and reductions, GB/s (bytes read + written).
  double cpuMemGBps = 0;
  /// The same for a GPU rank (HBM), GB/s.
  double gpuMemGBps = 0;
  /// Shared memory between two CPU ranks of one host: per-rank port rate (GB/s, one direction)
  /// and the latency of one message (µs, software included).
  double shmGBps = 0;
  double shmLatencyUs = 0;
  /// Software latency of one message between two GPUs of a host (launch / proxy), µs, on top of
  /// the links' own latency.
  double gpuMessageUs = 0;
  /// One NIC's latency, each end (µs), and one switch traversal (µs).
  double nicLatencyUs = 0;
  double switchLatencyUs = 0;
  /// The NIC a host is given when its topology has none, Gb/s.
  double defaultNicGbps = 0;
  /// Bytes of memory traffic per byte of a step: a reduction reads two operands and writes one,
  /// a copy reads one and writes one (the cost model's 3x and 2x).
  double reduceTraffic = 3;
  double copyTraffic = 2;
  /// Quantization steps (quantize, dequantize, requantize): memory bytes per byte the kernel
  /// touches (its inputs read plus its output written), on a CPU rank and on a GPU rank. A copy
  /// touches its bytes twice at factor 1; 2 means "half a copy's rate".
  double cpuQuantTraffic = 2;
  double gpuQuantTraffic = 1;
};

/// The frozen table (constants.cc).
const Constants& defaultConstants();

/// Sets the constant called `name` (as constantsTable() lists it) to `value`, for what-if runs
/// that take a term out of the model; the frozen table is not changed. Fails naming the known
/// names when `name` is not one, or when `value` is negative or not finite.
Status setConstant(Constants& k, std::string_view name, double value);

/// One line per constant with its value and source, for docs and `chorus-sim --constants`.
std::string constantsTable(const Constants& k);

}  // namespace chorus::sim
