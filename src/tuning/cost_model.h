// The cost model and the tuner: a predicted time for every (collective, algorithm, size, layout)
// and the choice of the cheapest eligible algorithm.
//
// The model. An algorithm's schedule is summarized by what its busiest rank does (Traffic):
// message hops on the critical path, messages it sends and receives (consistency headers and
// notify/wait included), bytes it moves over intra-host links and bytes through its host's NIC,
// one-sided reads, local copies and reductions, blocking waits. Constants turn that into time:
//
//   call      per-call executor overhead (staged one-shot: its own, much smaller one)
//   latency   hops x latencyUs of the slowest link class involved
//   messages  messages x stepOverheadUs (CPU per message, sender and receiver each)
//   wire      max(intra bytes / intra bandwidth, NIC bytes / inter bandwidth), plus a chain's
//             pipeline fill at the slowest link's bandwidth
//   memory    (2 x copied + 3 x reduced bytes) / memory bandwidth (cache or DRAM by working set)
//   one-sided read bytes / intra bandwidth + reads x getOverheadUs
//   waits     waits x contextSwitchUs, only when the host's ranks outnumber its cores
//
// Time-sharing: with more ranks on a host than cores, every rank's CPU work (call, messages,
// memory, one-sided reads, and the cpuShare of wire time that is really the CPU copying, as
// over loopback TCP or shared memory) is multiplied by ceil(ranksPerHost / cores).
// The terms add: the model does not credit overlap, which keeps it simple and, for the CPU-bound
// transports of a small host, close to what is measured. Hops count pipelining: a chunked ring
// pays its 2(n-1) steps plus one hop per extra chunk on the critical path, while every chunk's
// message overhead is CPU work.
//
// Flat algorithms on several hosts are assumed to run in Layout::ringOrder() (each host boundary
// crossed once by a ring or chain); direct exchanges (one-shot, pairwise, linear) send the host's
// share of all cross-host traffic through one NIC.
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

#include "algorithms/common/schedule.h"
#include "algorithms/registry.h"
#include "src/base/status.h"

namespace chorus::topo {
class Layout;
}

namespace chorus::tune {

/// The kinds of link a message can cross.
enum class LinkClass : uint8_t { kShm, kTcpLoopback, kEthernet, kInfiniBand, kNvlink, kPcie };
inline constexpr int kNumLinkClasses = 6;
/// "shm", "tcp-loopback", "ethernet", "infiniband", "nvlink", "pcie".
std::string_view linkClassName(LinkClass c);
StatusOr<LinkClass> parseLinkClass(std::string_view name);

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
  /// Executor overhead per call: schedule lookup, per-peer state, headers posted.
  double callOverheadUs = 2;
  /// Host staging one-shot per call: publish the sequence word, see every peer's.
  double stagedCallUs = 0.2;
  /// Per blocking wait when the host's ranks outnumber its cores (yield / futex hand-over).
  double contextSwitchUs = 2.5;
};

/// The layout and links a prediction is for.
struct CostInput {
  int nranks = 1;
  int hosts = 1;
  int ranksPerHost = 1;  ///< of the largest host
  LinkClass intra = LinkClass::kShm;       ///< between ranks of one host
  LinkClass inter = LinkClass::kEthernet;  ///< between hosts (unused with one host)
  double interSpeedGbps = 0;               ///< measured NIC speed; 0: the class's nominal
  int coresPerHost = 0;                    ///< 0: unknown (no time-sharing modelled)
  uint64_t chunkBytes = 256 << 10;         ///< pipelining chunk (CHORUS_CHUNK_SIZE)
  /// All-reduces up to this many bytes run one-shot through host staging (0: no staging).
  uint64_t stagingBytes = 0;
  /// Larger all-reduces run two-shot through the staging segment in rounds of roundBytes
  /// (0: two-shot, where eligible, reads peers over cross-memory attach).
  uint64_t roundBytes = 0;
};

/// A CostInput for `layout`'s ranks.
CostInput costInputFor(const topo::Layout& layout, LinkClass intra, LinkClass inter,
                       int coresPerHost);

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
  double workingSet = 0;    ///< bytes touched, for the cache rule
  bool staged = false;      ///< the host-staging one-shot (no executor, no messages)
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

/// The tuner's pick for one call.
struct Choice {
  const algo::AlgoInfo* algo = nullptr;  ///< nullptr when the collective has no algorithm
  double predictedUs = 0;
  std::string why;  ///< the candidates and their predictions, for INFO logs
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
  /// cachebw, cache (bytes), call, staged, ctx. Unknown names or non-positive bandwidths are
  /// kInvalidArgument naming the item; nothing is applied then.
  Status applyOverrides(std::string_view spec);

  /// What `algo` of `coll` does on `bytes` (count x element size, as CollDesc counts: the whole
  /// vector for all-reduce, broadcast, reduce; one rank's block for all-gather, reduce-scatter,
  /// gather, scatter; one peer's block for all-to-all(v)). Zeroes for an unknown algorithm.
  Traffic traffic(sched::Coll coll, std::string_view algo, uint64_t bytes,
                  const CostInput& in) const;
  Breakdown explain(sched::Coll coll, std::string_view algo, uint64_t bytes,
                    const CostInput& in) const;
  /// Predicted time in µs; +infinity when `algo` is not registered for `coll`.
  double predictUs(sched::Coll coll, std::string_view algo, uint64_t bytes,
                   const CostInput& in) const;

  /// The cheapest eligible algorithm for `d` on platform `p`: one-sided algorithms only when
  /// p.oneSided; all-reduce one-shot through host staging when the message fits
  /// p.stagingBytes. Ties go to the earlier entry of the registry.
  Choice choose(sched::Coll coll, const sched::CollDesc& d, const algo::Platform& p,
                const CostInput& in) const;

  /// Per collective and message size (nccl-tests sizes: the larger buffer in bytes, float32,
  /// minBytes, minBytes x factor, ... up to maxBytes), the algorithm choose() picks, its
  /// predicted time and busbw (nccl-tests factors), and the runner-up. For chorus-topo --tune
  /// and CHORUS_DEBUG=INFO.
  std::string decisionTable(const algo::Platform& p, const CostInput& in, uint64_t minBytes = 8,
                            uint64_t maxBytes = 256ull << 20, uint64_t factor = 4) const;

  /// The constants, one line per link class and one for the host.
  std::string constantsTable() const;

 private:
  std::array<LinkConstants, kNumLinkClasses> links_;
  HostConstants host_;
};

/// The model with the default constants.
const CostModel& defaultCostModel();

/// defaultCostModel().predictUs / choose / decisionTable.
double predictUs(sched::Coll coll, std::string_view algo, uint64_t bytes, const CostInput& in);
Choice choose(sched::Coll coll, const sched::CollDesc& d, const algo::Platform& p,
              const CostInput& in);
std::string decisionTable(const algo::Platform& p, const CostInput& in);

/// True when `a`'s schedules contain one-sided steps (probed once per algorithm on 2 ranks).
bool needsOneSided(const algo::AlgoInfo& a);

/// Latency and bandwidth of a link from ping-pong samples (bytes, one-way µs = half a round
/// trip): a weighted least-squares fit of t = latency + bytes / bandwidth, each sample weighted
/// by 1/t² so that small messages fix the latency and large ones the bandwidth. The fitted
/// intercept includes the CPU overheads of one message (a send and a receive), so the result's
/// latencyUs is the intercept minus 2 x prior.stepOverheadUs; the other fields come from
/// `prior`. Clamped to latency [0.01, 10^4] µs and bandwidth [10^-3, 2000] GB/s. With no
/// samples, returns `prior`; with one size only, keeps prior's bandwidth and fits the latency.
LinkConstants fitFromPingPong(const std::vector<std::pair<uint64_t, double>>& samples,
                              const LinkConstants& prior = LinkConstants{});

}  // namespace chorus::tune
