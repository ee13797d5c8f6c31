// The cost vocabulary: link classes, their constants, and what a summary of an algorithm's
// traffic costs in time. Nothing here knows an algorithm: each algorithm describes its own
// busiest rank as a Traffic (next to its builder, algorithms/<family>/), the tuner
// (src/tuning/) compares them. Transports name the link class they offer a peer.
//
// The model. Traffic summarizes what the busiest rank does: message hops on the critical path,
// messages it sends and receives (consistency headers and notify/wait included), bytes it moves
// over intra-host links and bytes through its host's NIC, one-sided reads, local copies and
// reductions, blocking waits. Constants turn that into time:
//
//   call      per-call executor overhead (window plans: their own, much smaller one, once per
//             synchronisation on the window), plus the cache-line transfers between cores on
//             the call's path x lineUs
//   latency   hops x latencyUs of the slowest link class involved
//   messages  messages x stepOverheadUs (CPU per message, sender and receiver each)
//   wire      max(intra bytes / intra bandwidth, NIC bytes / inter bandwidth), plus a chain's
//             pipeline fill at the slowest link's bandwidth
//   memory    (2 x copied + 3 x reduced bytes + 2 x the bytes quantization kernels touch)
//             / memory bandwidth (cache or DRAM by working set), plus the host window's
//             bytes read from other cores / crossCoreGBps (the reads that fetch them are the
//             kernels' own loads, stalled on another core's cache: no overlap is credited)
//   one-sided read bytes / intra bandwidth + reads x getOverheadUs
//   waits     waits x 3 x ceil(ranksPerHost / cores) x contextSwitchUs, only when the host's
//             ranks outnumber its cores: a waiter hands its core to each of the core's other
//             ranks and back, and does so again while the rank it waits for, on another
//             core, has not had its turn yet (fitted: 4 ranks on 2 cores took 10-18 µs a
//             call of one wait where one hand-over measured 1.7-2.7 µs)
//
// Time-sharing: with more ranks on a host than cores, every rank's CPU work (call, messages,
// memory, one-sided reads, and the cpuShare of wire time that is really the CPU copying, as
// over loopback TCP or shared memory) is multiplied by ceil(ranksPerHost / cores).
// The terms add: the model does not credit overlap, which keeps it simple and, for the CPU-bound
// transports of a small host, close to what is measured. Hops count pipelining: a chunked ring
// pays its 2(n-1) steps plus one hop per extra chunk on the critical path, while every chunk's
// message overhead is CPU work.
//
// Calibration is a matter of the constants (one table in cost_model.cc, overridable per model
// with setConstants()/setHost()/applyOverrides()); fitFromPingPong() turns a ping-pong sweep into
// a link's latency and bandwidth. The defaults are fitted to this project's 2-core development
// machine (docs/performance.md): shared memory with cross-memory attach and TCP loopback.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/base/status.h"

namespace chorus::cost {

/// The kinds of link a message can cross. Transports say which one reaches a peer.
enum class LinkClass : uint8_t { kShm, kTcpLoopback, kEthernet, kInfiniBand, kNvlink, kPcie };
inline constexpr int kNumLinkClasses = 6;
/// "shm", "tcp-loopback", "ethernet", "infiniband", "nvlink", "pcie".
std::string_view linkClassName(LinkClass c);
StatusOr<LinkClass> parseLinkClass(std::string_view name);
/// Of two classes, the one a job should plan with when ranks disagree: the slower.
LinkClass slower(LinkClass a, LinkClass b);

/// What one link class costs.
struct LinkConstants {
  /// One message hop on the critical path beyond the CPU overheads: wire, wake-up of the peer.
  double latencyUs = 1;
  /// Streaming rate of one rank's traffic (of one NIC's, for inter-host links), one direction.
  double bandwidthGBps = 1;
  /// CPU time per message, paid once by the sender and once by the receiver.
  double stepOverheadUs = 0;
  /// CPU time per one-sided read call (shm: one process_vm_readv), on top of its bytes.
  double getOverheadUs = 0;
  /// Fraction of bytes / bandwidth that is the rank's own CPU copying (loopback TCP, shm: 1;
  /// kernel TCP over a NIC: about 0.3; RDMA, NVLink, PCIe DMA: 0). It is what time-sharing
  /// stretches.
  double cpuShare = 0;
  /// The line rate bandwidthGBps assumes (Ethernet, InfiniBand); 0 when speed does not apply.
  /// A measured speed (CostInput::interSpeedGbps) rescales bandwidthGBps by speed / nominal.
  double nominalGbps = 0;
};

/// What the host's CPU and memory cost.
struct HostConstants {
  /// Memory traffic one core sustains (bytes read + written per second, GB/s) on working sets
  /// beyond cacheBytes, and within them.
  double memBwGBps = 30;
  double cacheBwGBps = 100;
  uint64_t cacheBytes = 1 << 20;
  /// Executor overhead per call: plan lookup, per-peer state, headers posted.
  double callOverheadUs = 2;
  /// Per synchronisation of a plan that runs through the host window (no messages): the
  /// executor's own steps around publishing a word and seeing every peer's (a one-shot has
  /// one, a two-shot 2 x rounds + 1: Traffic::waits); the line transfers come on top.
  double stagedCallUs = 0.1;
  /// One-way transfer of a written cache line from one core to another (Traffic::lineTransfers).
  double lineUs = 0.06;
  /// The rate at which a core reads what another has just written (Traffic::windowBytes).
  double crossCoreGBps = 60;
  /// One hand-over of a core between two ranks waiting on it by sched_yield (see "waits").
  double contextSwitchUs = 0.42;
  /// The host's last-level cache, which all its ranks share: zero-copy reads of chorusMemAlloc
  /// segments (CostInput::segments) are priced as copies while the host's working set fits in
  /// half of it.
  uint64_t llcBytes = 32 << 20;
};

/// The layout and links a prediction is for.
struct CostInput {
  int nranks = 1;
  int hosts = 1;
  int ranksPerHost = 1;  ///< of the largest host
  /// Every host holds ranksPerHost ranks (hierarchical schedules apply).
  bool equalHosts = true;
  LinkClass intra = LinkClass::kShm;       ///< between ranks of one host
  LinkClass inter = LinkClass::kEthernet;  ///< between hosts (unused with one host)
  double interSpeedGbps = 0;               ///< measured NIC speed; 0: the class's nominal
  int coresPerHost = 0;                    ///< 0: unknown (no time-sharing modelled)
  uint64_t chunkBytes = 256 << 10;         ///< pipelining chunk (CHORUS_CHUNK_SIZE)
  /// The host window's streaming round (CollDesc::window.roundBytes), 0 without a window.
  uint64_t roundBytes = 0;
  /// Quantized calls: packed bytes per byte of the call's type (0: not quantized).
  double packedRatio = 0;
  /// One-sided reads on one host over shared memory read chorusMemAlloc segments: a memcpy
  /// from a mapping (no system call, no page pinning) instead of cross-memory attach.
  bool segments = false;
};

/// The input with its counts made consistent: at least one rank and host, ranks per host within
/// [1, nranks], one host holding every rank when hosts == 1.
CostInput normalized(CostInput in);

/// What the busiest rank of one algorithm does (see the top of this file). Fractional values
/// are averages (uneven slices, all-to-allv).
struct Traffic {
  double hops = 0;          ///< message hops on the critical path
  double headerPeers = 0;   ///< peers the consistency header goes to (and comes from)
  double messages = 0;      ///< schedule messages sent + received (notifies and waits too)
  double interShare = 0;    ///< fraction of messages that cross hosts
  double bytesIntra = 0;    ///< larger of bytes sent / received over intra-host links
  double bytesNic = 0;      ///< bytes through the host's NIC, one direction
  double fillBytes = 0;     ///< moved before a pipeline's last stage starts (chain: n-2 chunks)
  double waits = 0;         ///< blocking waits (receives, waits, headers)
  double copyBytes = 0;     ///< local copies
  double reduceBytes = 0;   ///< bytes of each operand of local reductions
  double getBytes = 0;      ///< one-sided reads
  double gets = 0;          ///< one-sided read calls
  double quantBytes = 0;    ///< bytes of the call's type quantized or dequantized
  double workingSet = 0;    ///< bytes touched, for the cache rule
  /// Cache-line transfers between cores, one after another, on the critical path (the host
  /// window's flags and the first lines of what they publish).
  double lineTransfers = 0;
  /// Bytes read from other ranks' areas of the host window, which another core has just
  /// written: they come at the cross-core rate, on top of the memory terms.
  double windowBytes = 0;
  bool staged = false;      ///< runs through the host window only (no executor messages)
};

/// A prediction term by term (µs), for logs and calibration.
struct Breakdown {
  double callUs = 0, latencyUs = 0, messageUs = 0, wireUs = 0, memoryUs = 0, oneSidedUs = 0,
         waitUs = 0;
  double totalUs() const {
    return callUs + latencyUs + messageUs + wireUs + memoryUs + oneSidedUs + waitUs;
  }
  /// "call 2.0 + lat 3.0 + msg 12.0 + wire 0.0 + mem 0.0 + get 0.0 + wait 0.0 = 17.0 us"
  std::string toString() const;
};

class CostModel {
 public:
  /// The default constants (the table in cost_model.cc).
  CostModel();

  const LinkConstants& constants(LinkClass c) const { return links_[static_cast<size_t>(c)]; }
  void setConstants(LinkClass c, const LinkConstants& k) { links_[static_cast<size_t>(c)] = k; }
  const HostConstants& host() const { return host_; }
  void setHost(const HostConstants& h) { host_ = h; }
  /// The constants of `c` at `speedGbps` (bandwidth rescaled when the class has a nominal rate;
  /// speed 0 keeps the table's value).
  LinkConstants linkAt(LinkClass c, double speedGbps) const;

  /// Applies "class.field=value,..." overrides, e.g. "shm.latency=0.8,tcp-loopback.bw=3,
  /// host.membw=25". Link fields: latency, bw, step, get, cpu, nominal; host fields: membw,
  /// cachebw, cache (bytes), llc (bytes), call, staged, line, cross, ctx. Unknown names or
  /// non-positive bandwidths are kInvalidArgument naming the item; nothing is applied then.
  Status applyOverrides(std::string_view spec);

  /// The time of `t` on `in`'s layout and links, term by term.
  Breakdown explain(const Traffic& t, const CostInput& in) const;
  double predictUs(const Traffic& t, const CostInput& in) const {
    return explain(t, in).totalUs();
  }

  /// The constants, one line per link class and one for the host.
  std::string constantsTable() const;

 private:
  std::array<LinkConstants, kNumLinkClasses> links_;
  HostConstants host_;
};

/// The model with the default constants.
const CostModel& defaultCostModel();

/// Latency and bandwidth of a link from ping-pong samples (bytes, one-way µs = half a round
/// trip): a weighted least-squares fit of t = latency + bytes / bandwidth, each sample weighted
/// by 1/t² so that small messages fix the latency and large ones the bandwidth. The fitted
/// intercept includes the CPU overheads of one message (a send and a receive), so the result's
/// latencyUs is the intercept minus 2 x prior.stepOverheadUs; the other fields come from
/// `prior`. Clamped to latency [0.01, 10^4] µs and bandwidth [10^-3, 2000] GB/s. With no
/// samples, returns `prior`; with one size only, keeps prior's bandwidth and fits the latency.
LinkConstants fitFromPingPong(const std::vector<std::pair<uint64_t, double>>& samples,
                              const LinkConstants& prior = LinkConstants{});

/// "8 B", "32 KiB", "4 MiB" (exact multiples only).
std::string sizeText(uint64_t bytes);
/// "0.20 us", "17.0 us", "3.10 ms".
std::string usText(double us);

}  // namespace chorus::cost
