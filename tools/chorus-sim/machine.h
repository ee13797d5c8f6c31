// The machine a simulation runs on: hosts of identical make, ranks placed on them, and the
// resources a message or a reduction occupies on its way.
//
// A resource is one direction of one link (a PCIe link, an NVLink bundle, the CPU interconnect),
// a port (a GPU's NVLinks into the NVSwitch fabric, a NIC's transmit or receive side, a CPU
// rank's shared-memory port) or a rank's memory (for copies and reductions). Each has a
// capacity in bytes per microsecond (1 GB/s = 1000 B/us). A route is the list of resources a
// message from one rank to another crosses, its latency, and a ceiling on its own rate (the
// path's bottleneck as src/topology computes it, which already sums parallel NVSwitch fabrics).
//
// Placement (Machine::fromSystem): rank r is on host r / ranksPerHost, local rank l = r mod
// ranksPerHost. With GPUs in the topology, local rank l drives the l-th GPU (in file order); the
// host must have at least ranksPerHost GPUs. Without GPUs, ranks are CPU processes spread over
// the CPU nodes in blocks. Each rank uses the NIC nearest its device (best path type, then
// bandwidth, then file order); a host without a NIC gets one at Constants::defaultNicGbps.
//
// Routes:
//   GPU-GPU over NVLink (NVL):  the sender's NVLink egress port, the receiver's ingress port
//                               (each the sum of the GPU's NVLinks), plus the link itself when
//                               direct; latency: the path's + Constants::gpuMessageUs
//   other paths in a host:      each link of System::path() in its direction, + the CPU
//                               ranks' shared-memory ports; latency: the path's + software
//   between hosts:              device -> NIC links, NIC transmit port, the network (below),
//                               NIC receive port, NIC -> device links; latency: both paths
//                               + 2 x nicLatencyUs + switchLatencyUs
//
// The network between the NICs (NetSpec, Machine::setNetwork):
//   switch   one non-blocking switch (the default): nothing but its latency.
//   fattree  two levels: leaf switches of `hostsPerLeaf` hosts (all their NICs), every leaf
//            linked to a non-blocking spine by uplinks of (the leaf's NIC bandwidth) / oversub
//            each way. A message between leaves also crosses the sender leaf's uplink and the
//            receiver leaf's downlink from the spine, and two more switches (leaf, spine, leaf).
//   rails    NIC i of every host on rail i: leaf switch (group of `hostsPerLeaf` hosts, rail
//            i), the same uplinks to a spine. A message from NIC i to NIC j != i of another
//            host, or to another group, goes through the spine.
// The spine and each leaf's switching are non-blocking. At oversub 1 an uplink can never be a
// bottleneck (what goes up a leaf's uplink left through its NICs, whose sum it equals), so
// it is not made a resource; the network then adds only latency.
// Not modelled yet: NVLink domains across hosts, PCIe switch internals beyond their links,
// routing within the spine (adaptive routing, ECMP collisions), congestion control.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/cost/cost_model.h"
#include "src/topology/system.h"
#include "tools/chorus-sim/constants.h"

namespace chorus::sim {

inline constexpr double kUnlimited = std::numeric_limits<double>::infinity();

struct Resource {
  std::string name;
  double capacity = kUnlimited;  ///< bytes per µs; kUnlimited: never a bottleneck
  /// A token bucket in front of the resource (an emulated link: tc tbf): while it holds
  /// tokens the resource is not a bottleneck; tokens fill at `capacity` less what passes, up
  /// to this many bytes, and drain at what passes less `capacity`. 0: a plain link.
  double burstBytes = 0;
};

struct Route {
  std::vector<int> resources;
  double latencyUs = 0;
  double cap = kUnlimited;  ///< bytes per µs: the flow's own ceiling
};

/// A machine without a topology file, for tests and back-of-the-envelope runs: every rank has a
/// port out and a port in at `intraGBps`, every host one NIC at `nicGBps` each way. A message
/// crosses the sender's out port and the receiver's in port, and between hosts also the
/// sender's NIC transmit side and the receiver's NIC receive side. `memGBps` <= 0 makes copies
/// and reductions free.
///
/// With `cpu`, each rank also gets a CPU ("rankL.cpu") and, with `cores` > 0, the host a pool
/// of that many cores ("cpus") its ranks share; with `machineCores` > 0 one more pool
/// ("machine:cpus") that every rank of every host shares, for hosts that are network
/// namespaces or containers of one machine (tests/netns). Their capacity is in CPU microseconds
/// per microsecond (1 per rank: a rank is one thread; the cores for a pool), not bytes: the
/// engine puts a rank's software costs on them (EngineOptions::msgUs and the others). The
/// machine's pool ties the hosts together, so a run on it cannot be folded by host.
struct FlatSpec {
  int hosts = 1;
  int ranksPerHost = 2;
  double intraGBps = 1;
  double intraLatencyUs = 1;
  double nicGBps = 1;
  double interLatencyUs = 1;
  double memGBps = 0;
  bool cpu = false;
  int cores = 0;  ///< with `cpu`: CPUs per host its ranks share; 0: one per rank, no sharing
  int machineCores = 0;  ///< with `cpu`: CPUs all hosts' ranks share; 0: no such pool
};

/// The network between the hosts' NICs (see above).
struct NetSpec {
  enum class Kind : uint8_t { kSwitch, kFatTree, kRails };
  Kind kind = Kind::kSwitch;
  int hostsPerLeaf = 0;  ///< fattree / rails: hosts under one leaf switch; 0: all hosts
  double oversub = 1;    ///< a leaf's downlink bandwidth / its uplink bandwidth (>= 1)
};

class Machine {
 public:
  static StatusOr<Machine> flat(const FlatSpec& spec);
  /// Hosts made like `system`. nicGbps > 0 overrides every NIC's speed.
  static StatusOr<Machine> fromSystem(const topo::System& system, int hosts, int ranksPerHost,
                                      const Constants& k, double nicGbps = 0);

  /// Gives every NIC port (transmit and receive) a token bucket of `us` microseconds of its
  /// rate, at least `minBytes` (what tc tbf does to the netns hosts' links, tests/netns/
  /// hosts.sh); 0 takes them away. The buckets start full.
  Status setNicBurst(double us, double minBytes);
  double burstBytes(int id) const {
    return id < hostResources() ? local_[localId(id)].burstBytes : 0;
  }
  /// Puts the hosts on `net` (default: one non-blocking switch). `switchLatencyUs` is paid per
  /// switch traversed beyond the first (which the route latency already holds).
  Status setNetwork(const NetSpec& net, double switchLatencyUs);
  /// Why the hosts cannot stand for each other when folding (the network tells them apart:
  /// several leaves, or shared uplinks); empty when they can.
  const std::string& notFoldable() const { return notFoldable_; }

  int nranks() const { return hosts_ * perHost_; }
  int hosts() const { return hosts_; }
  int ranksPerHost() const { return perHost_; }
  int hostOf(int rank) const { return rank / perHost_; }

  /// Every resource: the hosts' (host h's id = h x localResources() + local id), then the
  /// network's uplinks, then the machine's shared cores (FlatSpec::machineCores).
  int numResources() const { return hostResources() + static_cast<int>(net_.size()); }
  int localResources() const { return static_cast<int>(local_.size()); }
  int hostResources() const { return hosts_ * localResources(); }
  double capacity(int id) const {
    return id < hostResources() ? local_[localId(id)].capacity
                                : net_[static_cast<size_t>(id - hostResources())].capacity;
  }
  /// "h3:gpu0>nvswitch" style: the host and the resource's name within it.
  std::string resourceName(int id) const;
  /// The resources, latency and ceiling of a message from `src` to `dst` (src != dst).
  Route route(int src, int dst) const;
  /// The same into `out`, whose resource list keeps its capacity (no allocation per message).
  void routeInto(int src, int dst, Route& out) const;
  /// The rank's memory, which its copies and reductions occupy.
  int memory(int rank) const;
  /// Whether the ranks have CPUs (FlatSpec::cpu), and a rank's: its own, then its host's pool
  /// and the machine's when there are. A resource of these counts CPU microseconds, not bytes.
  bool hasCpu() const { return !cpu_.empty(); }
  std::vector<int> cpus(int rank) const;
  bool isCpu(int id) const;

  /// Whether the ranks drive GPUs (else CPU processes): which quantization rate applies.
  bool gpuRanks() const { return gpuRanks_; }
  /// The link classes and NIC speed the tuner should plan with.
  cost::LinkClass intraClass() const { return intraClass_; }
  cost::LinkClass interClass() const { return interClass_; }
  double nicGbps() const { return nicGbps_; }
  /// One line: hosts, ranks, devices, NICs.
  const std::string& summary() const { return summary_; }

 private:
  size_t localId(int id) const { return static_cast<size_t>(id) % local_.size(); }
  int global(int host, int local) const { return host * static_cast<int>(local_.size()) + local; }
  void appendShifted(Route& to, const Route& from, int host) const;
  int leafOf(int host, int rail) const;
  void addMachineCores();  // the machine's pool after the network's resources, when asked

  int hosts_ = 1, perHost_ = 1;
  std::vector<Resource> local_;   // one host's resources; host h's id = h * size + local id
  std::vector<Route> intra_;      // perHost_ x perHost_, local ids
  std::vector<Route> toNic_, fromNic_;  // per local rank, local ids, without the NIC ports
  std::vector<int> nicTx_, nicRx_, memory_;  // per local rank, local ids
  std::vector<int> cpu_;          // per local rank, local ids; empty: no CPUs
  int cpuPool_ = -1;              // local id of the host's shared cores, -1: none
  int machineCores_ = 0;          // FlatSpec::machineCores
  int machinePool_ = -1;          // global id of the machine's shared cores, -1: none
  std::vector<int> rail_;         // per local rank: the index of its NIC among the host's
  std::vector<double> railGBps_;  // per NIC of a host (rail), GB/s
  double interLatencyUs_ = 0;     // NICs and switch
  NetSpec netSpec_;
  int leafHosts_ = 1;             // hosts per leaf switch
  std::vector<Resource> net_;     // leaf L's uplink (2L) and downlink (2L + 1), when oversub > 1,
                                  // then the machine's cores
  bool uplinks_ = false;          // net_ begins with the leaves' links
  double extraSwitchUs_ = 0;      // two more switches for a message through the spine
  std::string notFoldable_;
  bool gpuRanks_ = false;
  cost::LinkClass intraClass_ = cost::LinkClass::kShm, interClass_ = cost::LinkClass::kEthernet;
  double nicGbps_ = 0;
  std::string summary_;
};

}  // namespace chorus::sim
