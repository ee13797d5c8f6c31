#include "transports/ibverbs/ib_device.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "src/base/config.h"

namespace chorus::ib {

StatusOr<HcaFilter> HcaFilter::parse(const std::string& spec) {
  HcaFilter f;
  size_t at = 0;
  if (at < spec.size() && spec[at] == '^') f.exclude = true, ++at;
  if (at < spec.size() && spec[at] == '=') f.exact = true, ++at;
  while (at < spec.size()) {
    size_t end = spec.find(',', at);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(at, end - at);
    at = end + 1;
    if (item.empty()) continue;
    Item it;
    const size_t colon = item.find(':');
    it.device = item.substr(0, colon);
    if (colon != std::string::npos) {
      const std::string port = item.substr(colon + 1);
      char* stop = nullptr;
      const long p = std::strtol(port.c_str(), &stop, 10);
      if (port.empty() || *stop != '\0' || p < 1 || p > 255)
        return invalidArgument("CHORUS_IB_HCA='" + spec + "': port '" + port + "' of '" +
                               item + "' is not a port number (1-255)");
      it.port = static_cast<int>(p);
    }
    if (it.device.empty())
      return invalidArgument("CHORUS_IB_HCA='" + spec + "': item '" + item +
                             "' names no device");
    f.items.push_back(it);
  }
  return f;
}

bool HcaFilter::accepts(const std::string& device, int port) const {
  if (items.empty()) return true;
  bool listed = false;
  for (const Item& it : items) {
    const bool name = exact ? device == it.device : device.rfind(it.device, 0) == 0;
    if (name && (it.port < 0 || it.port == port)) listed = true;
  }
  return listed != exclude;
}

namespace {

StatusOr<int> intSetting(const char* name, int lo, int hi) {
  CHORUS_ASSIGN_OR_RETURN(int64_t v, config::getInt(name));
  if (v < lo || v > hi)
    return invalidArgument(std::string(name) + "=" + std::to_string(v) + " is outside " +
                           std::to_string(lo) + ".." + std::to_string(hi));
  return static_cast<int>(v);
}

}  // namespace

StatusOr<IbSettings> IbSettings::fromEnvironment() {
  IbSettings s;
  CHORUS_ASSIGN_OR_RETURN(s.hca, HcaFilter::parse(config::getString("CHORUS_IB_HCA")));
  CHORUS_ASSIGN_OR_RETURN(s.gidIndex, intSetting("CHORUS_IB_GID_INDEX", 0, 255));
  CHORUS_ASSIGN_OR_RETURN(s.trafficClass, intSetting("CHORUS_IB_TC", 0, 255));
  CHORUS_ASSIGN_OR_RETURN(s.serviceLevel, intSetting("CHORUS_IB_SL", 0, 15));
  CHORUS_ASSIGN_OR_RETURN(s.timeout, intSetting("CHORUS_IB_TIMEOUT", 1, 31));
  CHORUS_ASSIGN_OR_RETURN(s.retryCount, intSetting("CHORUS_IB_RETRY_CNT", 0, 7));
  CHORUS_ASSIGN_OR_RETURN(int fork, intSetting("CHORUS_IB_FORK_INIT", 0, 1));
  s.forkInit = fork == 1;
  CHORUS_ASSIGN_OR_RETURN(s.nicsPerRank, intSetting("CHORUS_IB_NICS_PER_RANK", 1, 16));
  CHORUS_ASSIGN_OR_RETURN(uint64_t minStripe, config::getBytes("CHORUS_IB_STRIPE_MIN_BYTES"));
  if (minStripe < 1)
    return invalidArgument("CHORUS_IB_STRIPE_MIN_BYTES=" + std::to_string(minStripe) +
                           " is not a positive byte count");
  s.stripeMinBytes = static_cast<size_t>(minStripe);
  return s;
}

StatusOr<std::vector<PortInfo>> findPorts(const VerbsApi& api, const HcaFilter& filter) {
  int num = 0;
  errno = 0;
  ibv_device** list = api.get_device_list(&num);
  if (!list) {
    const int err = errno;
    return systemError(std::string("no RDMA device: ibv_get_device_list: ") +
                       (err ? std::strerror(err) : "no list") +
                       (err == ENOSYS ? " (the kernel has no RDMA support)" : ""));
  }
  struct Free {
    const VerbsApi& api;
    ibv_device** list;
    ~Free() { api.free_device_list(list); }
  } free{api, list};
  if (num == 0) return systemError("no RDMA device (ibv_get_device_list found none)");
  std::vector<PortInfo> found;
  std::vector<std::string> problems;
  for (int i = 0; i < num; ++i) {
    const char* n = api.get_device_name(list[i]);
    const std::string name = n ? n : "?";
    ibv_context* ctx = api.open_device(list[i]);
    if (!ctx) {
      problems.push_back("ibv_open_device(" + name + "): " + std::strerror(errno));
      continue;
    }
    ibv_device_attr dattr{};
    if (api.query_device(ctx, &dattr) != 0) {
      problems.push_back("ibv_query_device(" + name + "): " + std::strerror(errno));
      api.close_device(ctx);
      continue;
    }
    for (int p = 1; p <= dattr.phys_port_cnt; ++p) {
      if (!filter.accepts(name, p)) continue;
      ibv_port_attr pattr{};
      if (api.query_port(ctx, static_cast<uint8_t>(p), &pattr) != 0) {
        problems.push_back("ibv_query_port(" + name + ":" + std::to_string(p) +
                           "): " + std::strerror(errno));
        continue;
      }
      if (pattr.state != IBV_PORT_ACTIVE) {
        problems.push_back(name + ":" + std::to_string(p) + " is not active");
        continue;
      }
      found.push_back(PortInfo{name, p, pattr.link_layer == IBV_LINK_LAYER_ETHERNET,
                               static_cast<int>(pattr.active_mtu)});
    }
    api.close_device(ctx);
  }
  if (found.empty()) {
    std::string why = std::to_string(num) + " RDMA device(s) but no active port";
    if (!filter.items.empty()) why += " that CHORUS_IB_HCA accepts";
    for (const std::string& p : problems) why += "; " + p;
    return systemError(why);
  }
  return found;
}

StatusOr<std::vector<PortInfo>> portsForRank(const std::vector<PortInfo>& ports, int perRank,
                                             int localRank) {
  if (perRank < 1 || static_cast<size_t>(perRank) > ports.size())
    return invalidArgument("CHORUS_IB_NICS_PER_RANK=" + std::to_string(perRank) + " but " +
                           std::to_string(ports.size()) + " active port(s) pass CHORUS_IB_HCA");
  std::vector<PortInfo> mine;
  const size_t first = static_cast<size_t>(std::max(localRank, 0)) *
                       static_cast<size_t>(perRank);
  for (size_t i = 0; i < static_cast<size_t>(perRank); ++i)
    mine.push_back(ports[(first + i) % ports.size()]);
  const auto mtuBytes = [](int mtu) { return std::to_string(128 << mtu); };
  for (const PortInfo& p : mine) {
    const PortInfo& a = mine.front();
    if (p.ethernet != a.ethernet)
      return invalidArgument("ibverbs: one rank would stripe over " + a.name() + " (" +
                             (a.ethernet ? "RoCE" : "InfiniBand") + ") and " + p.name() + " (" +
                             (p.ethernet ? "RoCE" : "InfiniBand") +
                             "): a rank's NICs must share a link layer (pick ports with "
                             "CHORUS_IB_HCA)");
    if (p.mtu != a.mtu)
      return invalidArgument("ibverbs: one rank would stripe over " + a.name() + " (MTU " +
                             mtuBytes(a.mtu) + ") and " + p.name() + " (MTU " + mtuBytes(p.mtu) +
                             "): a rank's NICs must have the same active MTU (pick ports with "
                             "CHORUS_IB_HCA)");
  }
  return mine;
}

StatusOr<std::shared_ptr<Nic>> Nic::open(const VerbsApi& api, const PortInfo& port,
                                         const IbSettings& settings) {
  std::shared_ptr<Nic> nic(new Nic(api, port, settings));
  int num = 0;
  ibv_device** list = api.get_device_list(&num);
  if (!list) return errnoStatus("ibv_get_device_list", port.device);
  for (int i = 0; i < num && !nic->ctx_; ++i) {
    const char* n = api.get_device_name(list[i]);
    if (n && port.device == n) nic->ctx_ = api.open_device(list[i]);
  }
  const int err = errno;
  api.free_device_list(list);
  if (!nic->ctx_) return errnoStatus("ibv_open_device", port.device, err);
  const std::string where = nic->name();
  if (api.query_port(nic->ctx_, static_cast<uint8_t>(port.port), &nic->attr_) != 0)
    return errnoStatus("ibv_query_port", where);
  if (api.query_gid(nic->ctx_, static_cast<uint8_t>(port.port), settings.gidIndex,
                    &nic->gid_) != 0)
    return errnoStatus("ibv_query_gid", where + " index " + std::to_string(settings.gidIndex));
  nic->pd_ = api.alloc_pd(nic->ctx_);
  if (!nic->pd_) return errnoStatus("ibv_alloc_pd", where);
  return nic;
}

Nic::~Nic() {
  if (pd_) api_.dealloc_pd(pd_);
  if (ctx_) api_.close_device(ctx_);
}

}  // namespace chorus::ib
