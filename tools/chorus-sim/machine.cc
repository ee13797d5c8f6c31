#include "tools/chorus-sim/machine.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace chorus::sim {

namespace {

constexpr double kBytesPerUsPerGBps = 1000;

double rateOf(double gbps) { return gbps > 0 ? gbps * kBytesPerUsPerGBps : kUnlimited; }

// Builds one host's resources from a System: two per link (one per direction), then ports.
class HostBuilder {
 public:
  explicit HostBuilder(const topo::System& s) : sys_(s) {
    for (const topo::Link& l : s.links()) {
      const std::string a = s.node(l.a).name, b = s.node(l.b).name;
      add(a + ">" + b, rateOf(l.bandwidthGBps));
      add(b + ">" + a, rateOf(l.bandwidthGBps));
    }
  }
  int add(std::string name, double capacity) {
    resources.push_back({std::move(name), capacity});
    return static_cast<int>(resources.size()) - 1;
  }
  // The directed links along a path's nodes; false when two consecutive nodes share no link.
  bool follow(const std::vector<int>& nodes, Route& r) const {
    for (size_t i = 1; i < nodes.size(); ++i) {
      const int u = nodes[i - 1], v = nodes[i];
      int found = -1;
      for (int li : sys_.linksOf(u)) {
        const topo::Link& l = sys_.links()[static_cast<size_t>(li)];
        if ((l.a == u && l.b == v) || (l.a == v && l.b == u)) {
          found = 2 * li + (l.a == u ? 0 : 1);
          break;
        }
      }
      if (found < 0) return false;
      r.resources.push_back(found);
    }
    return true;
  }
  std::vector<Resource> resources;

 private:
  const topo::System& sys_;
};

// The nearest NIC of `dev`: best path type, then bandwidth, then file order; -1 when none.
int nearestNic(const topo::System& s, int dev, const std::vector<int>& nics) {
  int best = -1;
  topo::Path bestPath;
  for (int n : nics) {
    const topo::Path p = s.path(dev, n);
    if (p.type == topo::PathType::kDis) continue;
    if (best < 0 || p.type < bestPath.type ||
        (p.type == bestPath.type && p.bandwidthGBps > bestPath.bandwidthGBps)) {
      best = n;
      bestPath = p;
    }
  }
  return best;
}

}  // namespace

StatusOr<Machine> Machine::flat(const FlatSpec& spec) {
  if (spec.hosts < 1 || spec.ranksPerHost < 1)
    return invalidArgument("machine: " + std::to_string(spec.hosts) + " hosts of " +
                           std::to_string(spec.ranksPerHost) +
                           " ranks (both must be at least 1)");
  if (!(spec.intraGBps > 0) || !(spec.nicGBps > 0))
    return invalidArgument("machine: link bandwidths must be positive");
  Machine m;
  m.hosts_ = spec.hosts;
  m.perHost_ = spec.ranksPerHost;
  const int k = spec.ranksPerHost;
  for (int l = 0; l < k; ++l) {
    m.local_.push_back({"rank" + std::to_string(l) + ".out", rateOf(spec.intraGBps)});
    m.local_.push_back({"rank" + std::to_string(l) + ".in", rateOf(spec.intraGBps)});
    m.local_.push_back({"rank" + std::to_string(l) + ".mem", rateOf(spec.memGBps)});
    m.memory_.push_back(3 * l + 2);
  }
  const int tx = static_cast<int>(m.local_.size());
  m.local_.push_back({"nic.tx", rateOf(spec.nicGBps)});
  m.local_.push_back({"nic.rx", rateOf(spec.nicGBps)});
  m.intra_.resize(static_cast<size_t>(k * k));
  for (int a = 0; a < k; ++a)
    for (int b = 0; b < k; ++b)
      m.intra_[static_cast<size_t>(a * k + b)] = {{3 * a, 3 * b + 1}, spec.intraLatencyUs,
                                                  kUnlimited};
  // A message between hosts also leaves through the rank's port and enters through the peer's.
  for (int l = 0; l < k; ++l) {
    m.toNic_.push_back({{3 * l}, 0, kUnlimited});
    m.fromNic_.push_back({{3 * l + 1}, 0, kUnlimited});
  }
  m.nicTx_.assign(static_cast<size_t>(k), tx);
  m.nicRx_.assign(static_cast<size_t>(k), tx + 1);
  m.rail_.assign(static_cast<size_t>(k), 0);
  m.railGBps_ = {spec.nicGBps};
  m.interLatencyUs_ = spec.interLatencyUs;
  m.nicGbps_ = spec.nicGBps * 8;
  if (spec.cores < 0) return invalidArgument("machine: " + std::to_string(spec.cores) + " cores");
  if (spec.machineCores < 0)
    return invalidArgument("machine: " + std::to_string(spec.machineCores) + " shared cores");
  if (spec.machineCores > 0 && !spec.cpu)
    return invalidArgument("machine: shared cores need CPUs (FlatSpec::cpu)");
  if (spec.cpu) {
    for (int l = 0; l < k; ++l) {
      m.cpu_.push_back(static_cast<int>(m.local_.size()));
      m.local_.push_back({"rank" + std::to_string(l) + ".cpu", 1});
    }
    if (spec.cores > 0) {
      m.cpuPool_ = static_cast<int>(m.local_.size());
      m.local_.push_back({"cpus", static_cast<double>(spec.cores)});
    }
    m.machineCores_ = spec.machineCores;
    m.addMachineCores();
  }
  std::ostringstream o;
  o << spec.hosts << " host(s) x " << k << " ranks, flat: " << spec.intraGBps << " GB/s / "
    << spec.intraLatencyUs << " us per rank port, NIC " << spec.nicGBps << " GB/s / "
    << spec.interLatencyUs << " us";
  if (spec.cpu)
    o << ", CPU per rank"
      << (spec.cores > 0 ? ", " + std::to_string(spec.cores) + " cores per host" : std::string())
      << (spec.machineCores > 0 ? ", " + std::to_string(spec.machineCores) + " cores shared by all"
                                : std::string());
  m.summary_ = o.str();
  return m;
}

StatusOr<Machine> Machine::fromSystem(const topo::System& sys, int hosts, int ranksPerHost,
                                      const Constants& k, double nicGbps) {
  if (hosts < 1 || ranksPerHost < 1)
    return invalidArgument("machine: " + std::to_string(hosts) + " hosts of " +
                           std::to_string(ranksPerHost) + " ranks (both must be at least 1)");
  Machine m;
  m.hosts_ = hosts;
  m.perHost_ = ranksPerHost;
  HostBuilder hb(sys);
  const std::vector<int> gpus = sys.ofType(topo::NodeType::kGpu);
  const std::vector<int> cpus = sys.ofType(topo::NodeType::kCpu);
  const bool gpu = !gpus.empty();
  const size_t K = static_cast<size_t>(ranksPerHost);
  if (gpu && K > gpus.size())
    return invalidArgument("machine: " + std::to_string(ranksPerHost) +
                           " ranks per host, but the topology has only " +
                           std::to_string(gpus.size()) + " GPUs");
  if (!gpu && cpus.empty())
    return invalidArgument("machine: the topology has neither GPUs nor CPUs to place ranks on");

  // Devices and per-rank resources.
  std::vector<int> dev(K), out(K, -1), in(K, -1);
  for (size_t l = 0; l < K; ++l) {
    const std::string rank = "rank" + std::to_string(l);
    if (gpu) {
      dev[l] = gpus[l];
      double nvl = 0;
      for (int li : sys.linksOf(dev[l]))
        if (sys.links()[static_cast<size_t>(li)].type == topo::LinkType::kNvLink)
          nvl += sys.links()[static_cast<size_t>(li)].bandwidthGBps;
      const std::string& name = sys.node(dev[l]).name;
      if (nvl > 0) {
        out[l] = hb.add(name + ".nvl-out", rateOf(nvl));
        in[l] = hb.add(name + ".nvl-in", rateOf(nvl));
      }
      m.memory_.push_back(hb.add(name + ".hbm", rateOf(k.gpuMemGBps)));
    } else {
      dev[l] = cpus[l * cpus.size() / K];
      out[l] = hb.add(rank + ".shm-out", rateOf(k.shmGBps));
      in[l] = hb.add(rank + ".shm-in", rateOf(k.shmGBps));
      m.memory_.push_back(hb.add(rank + ".mem", rateOf(k.cpuMemGBps)));
    }
  }

  // Routes inside a host.
  bool nvlink = false, allNvlink = true;
  m.intra_.resize(K * K);
  for (size_t a = 0; a < K; ++a) {
    for (size_t b = 0; b < K; ++b) {
      if (a == b) continue;
      Route& r = m.intra_[a * K + b];
      if (gpu) {
        const topo::Path p = sys.path(dev[a], dev[b]);
        if (p.type == topo::PathType::kDis)
          return invalidArgument("machine: no path between " + sys.node(dev[a]).name + " and " +
                                 sys.node(dev[b]).name + " in the topology");
        r.latencyUs = p.latencyUs + k.gpuMessageUs;
        r.cap = rateOf(p.bandwidthGBps);
        if (p.type == topo::PathType::kNvl && out[a] >= 0 && in[b] >= 0) {
          nvlink = true;
          r.resources = {out[a], in[b]};
          if (p.nodes.size() == 2) hb.follow(p.nodes, r);
        } else {
          allNvlink = false;
          if (!hb.follow(p.nodes, r))
            return internalError("machine: a path of the topology has a hop without a link");
        }
      } else {
        r.resources.push_back(out[a]);
        r.latencyUs = k.shmLatencyUs;
        if (dev[a] != dev[b]) {
          const topo::Path p = sys.path(dev[a], dev[b]);
          if (p.type == topo::PathType::kDis)
            return invalidArgument("machine: no path between CPU nodes " +
                                   sys.node(dev[a]).name + " and " + sys.node(dev[b]).name);
          r.latencyUs += p.latencyUs;
          r.cap = rateOf(p.bandwidthGBps);
          if (!hb.follow(p.nodes, r))
            return internalError("machine: a path of the topology has a hop without a link");
        }
        r.resources.push_back(in[b]);
      }
    }
  }

  // NICs: the nearest one of each rank's device, or one made up for the host.
  std::vector<int> nics;
  for (int n : sys.ofType(topo::NodeType::kNic))
    if (sys.node(n).linkUp) nics.push_back(n);
  std::vector<std::pair<int, int>> ports(sys.nodes().size(), {-1, -1});
  int madeUp = -1;
  bool unknownSpeed = false;
  m.railGBps_.assign(std::max<size_t>(nics.size(), 1), 0);
  bool infiniband = !nics.empty();
  double slowest = 0;
  m.toNic_.resize(K);
  m.fromNic_.resize(K);
  for (size_t l = 0; l < K; ++l) {
    const int nic = nearestNic(sys, dev[l], nics);
    double gbps = nicGbps > 0 ? nicGbps : k.defaultNicGbps;
    if (nic < 0) {
      infiniband = false;
      if (madeUp < 0) {
        madeUp = hb.add("nic.tx", rateOf(gbps / 8));
        hb.add("nic.rx", rateOf(gbps / 8));
      }
      m.nicTx_.push_back(madeUp);
      m.nicRx_.push_back(madeUp + 1);
      m.rail_.push_back(0);
      m.railGBps_[0] = gbps / 8;
    } else {
      const topo::Node& n = sys.node(nic);
      if (nicGbps <= 0 && n.speedGbps > 0) gbps = n.speedGbps;
      unknownSpeed = unknownSpeed || (nicGbps <= 0 && n.speedGbps <= 0);
      if (n.nicKind != topo::NicKind::kInfiniBand) infiniband = false;
      auto& port = ports[static_cast<size_t>(nic)];
      if (port.first < 0) {
        const std::string name = n.netDevice.empty() ? n.name : n.netDevice;
        port.first = hb.add(name + ".tx", rateOf(gbps / 8));
        port.second = hb.add(name + ".rx", rateOf(gbps / 8));
      }
      m.nicTx_.push_back(port.first);
      m.nicRx_.push_back(port.second);
      const size_t rail = static_cast<size_t>(
          std::find(nics.begin(), nics.end(), nic) - nics.begin());
      m.rail_.push_back(static_cast<int>(rail));
      m.railGBps_[rail] = gbps / 8;
      const topo::Path p = sys.path(dev[l], nic);
      Route& to = m.toNic_[l];
      Route& from = m.fromNic_[l];
      to.latencyUs = from.latencyUs = p.latencyUs;
      to.cap = from.cap = rateOf(p.bandwidthGBps);
      std::vector<int> back(p.nodes.rbegin(), p.nodes.rend());
      if (!hb.follow(p.nodes, to) || !hb.follow(back, from))
        return internalError("machine: a path of the topology has a hop without a link");
    }
    slowest = slowest > 0 ? std::min(slowest, gbps) : gbps;
  }
  for (size_t i = 0; i < nics.size(); ++i)
    if (m.railGBps_[i] <= 0) {
      const double s = sys.node(nics[i]).speedGbps;
      m.railGBps_[i] = (nicGbps > 0 ? nicGbps : s > 0 ? s : k.defaultNicGbps) / 8;
    }
  m.interLatencyUs_ = 2 * k.nicLatencyUs + k.switchLatencyUs + (gpu ? k.gpuMessageUs : 0);
  m.gpuRanks_ = gpu;
  m.local_ = std::move(hb.resources);
  m.nicGbps_ = slowest;
  m.intraClass_ = gpu ? (nvlink && allNvlink ? cost::LinkClass::kNvlink : cost::LinkClass::kPcie)
                      : cost::LinkClass::kShm;
  m.interClass_ = infiniband ? cost::LinkClass::kInfiniBand : cost::LinkClass::kEthernet;
  std::ostringstream o;
  o << hosts << " host(s) x " << ranksPerHost << " ranks on " << (gpu ? "GPUs" : "CPUs")
    << ", intra-host " << cost::linkClassName(m.intraClass_);
  if (hosts > 1)
    o << ", inter-host " << cost::linkClassName(m.interClass_) << " at " << slowest << " Gb/s"
      << (madeUp >= 0 ? " (no NIC in the topology: the default)" : "")
      << (unknownSpeed ? " (a NIC speed the topology does not give: the default; --nic-gbps)"
                       : "");
  if (gpu && !nvlink) o << "; no NVLink in the topology";
  m.summary_ = o.str();
  return m;
}

Status Machine::setNicBurst(double us, double minBytes) {
  if (!(us >= 0) || !std::isfinite(us) || !(minBytes >= 0) || !std::isfinite(minBytes))
    return invalidArgument("NIC burst: " + std::to_string(us) + " us, at least " +
                           std::to_string(minBytes) + " bytes (must be finite, non-negative)");
  std::vector<int> ports(nicTx_);
  ports.insert(ports.end(), nicRx_.begin(), nicRx_.end());
  for (int id : ports) {
    Resource& r = local_[static_cast<size_t>(id)];
    r.burstBytes = us > 0 ? std::max(r.capacity * us, minBytes) : 0;
  }
  return Status();
}

Status Machine::setNetwork(const NetSpec& net, double switchLatencyUs) {
  if (net.hostsPerLeaf < 0)
    return invalidArgument("network: " + std::to_string(net.hostsPerLeaf) +
                           " hosts per leaf (must be at least 1, or 0 for all hosts)");
  if (!(net.oversub >= 1) || !std::isfinite(net.oversub))
    return invalidArgument("network: oversubscription ratio " + std::to_string(net.oversub) +
                           " (must be a finite number >= 1)");
  if (!(switchLatencyUs >= 0)) return invalidArgument("network: negative switch latency");
  netSpec_ = net;
  net_.clear();
  uplinks_ = false;
  notFoldable_.clear();
  extraSwitchUs_ = 2 * switchLatencyUs;
  leafHosts_ = net.hostsPerLeaf == 0 ? hosts_ : std::min(net.hostsPerLeaf, hosts_);
  if (net.kind == NetSpec::Kind::kSwitch) {
    addMachineCores();
    return Status::okStatus();
  }
  const bool rails = net.kind == NetSpec::Kind::kRails;
  const int groups = (hosts_ + leafHosts_ - 1) / leafHosts_;
  const int perGroup = rails ? static_cast<int>(railGBps_.size()) : 1;
  double hostGBps = 0;
  for (double g : railGBps_) hostGBps += g;
  // One fat-tree leaf holds every host: nothing ever goes up, so there is nothing to share.
  if (net.oversub > 1 && (rails || groups > 1)) {
    for (int g = 0; g < groups; ++g) {
      const int members = std::min(leafHosts_, hosts_ - g * leafHosts_);
      for (int r = 0; r < perGroup; ++r) {
        const double down = members * (rails ? railGBps_[static_cast<size_t>(r)] : hostGBps);
        const std::string name = "leaf" + std::to_string(g) + (rails ? "." + std::to_string(r)
                                                                      : std::string());
        net_.push_back({name + ".up", rateOf(down / net.oversub)});
        net_.push_back({name + ".down", rateOf(down / net.oversub)});
      }
    }
  }
  if (groups > 1)
    notFoldable_ = "the network has " + std::to_string(groups) + " groups of leaf switches";
  else if (!net_.empty() && hosts_ > 1)
    notFoldable_ = "the hosts share oversubscribed rail uplinks";
  uplinks_ = !net_.empty();
  addMachineCores();
  return Status::okStatus();
}

void Machine::addMachineCores() {
  machinePool_ = -1;
  if (machineCores_ <= 0) return;
  machinePool_ = hostResources() + static_cast<int>(net_.size());
  net_.push_back({"cpus", static_cast<double>(machineCores_)});
  if (notFoldable_.empty() && hosts_ > 1) notFoldable_ = "the hosts share the machine's cores";
}

int Machine::leafOf(int host, int rail) const {
  const int group = host / leafHosts_;
  return netSpec_.kind == NetSpec::Kind::kRails
             ? group * static_cast<int>(railGBps_.size()) + rail
             : group;
}

std::string Machine::resourceName(int id) const {
  if (id == machinePool_) return "machine:cpus";
  if (id >= hostResources()) return "net:" + net_[static_cast<size_t>(id - hostResources())].name;
  return "h" + std::to_string(id / static_cast<int>(local_.size())) + ":" +
         local_[localId(id)].name;
}

// `from` (host-local ids) on `host`, after what `to` holds.
void Machine::appendShifted(Route& to, const Route& from, int host) const {
  for (int id : from.resources) to.resources.push_back(global(host, id));
  to.latencyUs += from.latencyUs;
  to.cap = std::min(to.cap, from.cap);
}

Route Machine::route(int src, int dst) const {
  Route r;
  routeInto(src, dst, r);
  return r;
}

void Machine::routeInto(int src, int dst, Route& r) const {
  r.resources.clear();
  r.latencyUs = 0;
  r.cap = kUnlimited;
  const int ha = hostOf(src), hb = hostOf(dst);
  const size_t la = static_cast<size_t>(src % perHost_), lb = static_cast<size_t>(dst % perHost_);
  if (ha == hb) return appendShifted(r, intra_[la * static_cast<size_t>(perHost_) + lb], ha);
  appendShifted(r, toNic_[la], ha);
  r.resources.push_back(global(ha, nicTx_[la]));
  r.resources.push_back(global(hb, nicRx_[lb]));
  appendShifted(r, fromNic_[lb], hb);
  r.latencyUs += interLatencyUs_;
  if (netSpec_.kind != NetSpec::Kind::kSwitch) {
    const int from = leafOf(ha, rail_[la]), to = leafOf(hb, rail_[lb]);
    if (from != to) {
      r.latencyUs += extraSwitchUs_;
      if (uplinks_) {
        r.resources.push_back(hostResources() + 2 * from);
        r.resources.push_back(hostResources() + 2 * to + 1);
      }
    }
  }
}

int Machine::memory(int rank) const {
  return global(hostOf(rank), memory_[static_cast<size_t>(rank % perHost_)]);
}

std::vector<int> Machine::cpus(int rank) const {
  if (cpu_.empty()) return {};
  std::vector<int> ids{global(hostOf(rank), cpu_[static_cast<size_t>(rank % perHost_)])};
  if (cpuPool_ >= 0) ids.push_back(global(hostOf(rank), cpuPool_));
  if (machinePool_ >= 0) ids.push_back(machinePool_);
  return ids;
}

bool Machine::isCpu(int id) const {
  if (id == machinePool_) return true;
  if (id >= hostResources()) return false;
  const int l = static_cast<int>(localId(id));
  return l == cpuPool_ || std::find(cpu_.begin(), cpu_.end(), l) != cpu_.end();
}

}  // namespace chorus::sim
