// The ibverbs detector: state, link layer and active speed x width of every RDMA port, from
// libibverbs.so.1 loaded with dlopen through the verbs table (src/base/verbs_api.h; the types
// come from the rdma-core headers, so it is built only with CHORUS_HAVE_IBVERBS). It refines
// the ports sysfs found and adds those it missed.
#include "src/topology/detect_internal.h"

#ifdef CHORUS_HAVE_IBVERBS
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "src/base/verbs_api.h"

namespace chorus::topo::detail {
namespace {

// Per-lane signalling rate (Gb/s) of ibv_port_attr::active_speed, and the lanes of active_width.
double ibvLaneGbps(uint8_t speed) {
  switch (speed) {
    case 1: return 2.5;    // SDR
    case 2: return 5;      // DDR
    case 4: return 10;     // QDR
    case 8: return 10;     // FDR10
    case 16: return 14;    // FDR
    case 32: return 25;    // EDR
    case 64: return 50;    // HDR
    case 128: return 100;  // NDR
    default: return 0;
  }
}
int ibvLanes(uint8_t width) {
  switch (width) {
    case 1: return 1;
    case 2: return 4;
    case 4: return 8;
    case 8: return 12;
    case 16: return 2;
    default: return 0;
  }
}

}  // namespace

DetectorReport detectIbverbs(const DetectOptions& o, Inventory& inv) {
  DetectorReport r{"ibverbs", DetectorState::kUnavailable, ""};
  std::string why;
  const ib::VerbsApi* api = ib::verbs(&why);
  if (!api) {
    r.detail = why + "; RDMA ports from sysfs only";
    return r;
  }
  auto getList = api->get_device_list;
  auto freeList = api->free_device_list;
  auto getName = api->get_device_name;
  auto open = api->open_device;
  auto closeDev = api->close_device;
  auto queryDevice = api->query_device;
  auto queryPort = api->query_port;
  int num = 0;
  errno = 0;
  ibv_device** list = getList(&num);
  if (!list) {
    r.state = DetectorState::kUsed;
    r.detail = std::string("no RDMA devices (ibv_get_device_list: ") +
               (errno ? std::strerror(errno) : "empty") + ")";
    return r;
  }
  std::vector<std::string> problems;
  int ports = 0;
  for (int i = 0; i < num; ++i) {
    std::string name = getName(list[i]) ? getName(list[i]) : "";
    ibv_context* ctx = open(list[i]);
    if (!ctx) {
      problems.push_back("ibv_open_device(" + name + "): " + std::strerror(errno));
      continue;
    }
    ibv_device_attr dattr{};
    if (queryDevice(ctx, &dattr) != 0) {
      problems.push_back("ibv_query_device(" + name + "): " + std::strerror(errno));
      closeDev(ctx);
      continue;
    }
    std::error_code ec;
    fs::path real = fs::canonical(fs::path(o.sysfsRoot) / "class/infiniband" / name, ec);
    std::string busId = ec ? std::string() : busIdOfPath(real);
    for (int p = 1; p <= dattr.phys_port_cnt; ++p) {
      ibv_port_attr pattr;
      std::memset(&pattr, 0, sizeof(pattr));
      if (queryPort(ctx, static_cast<uint8_t>(p), &pattr) != 0) {
        problems.push_back("ibv_query_port(" + name + ", " + std::to_string(p) + "): " + std::strerror(errno));
        continue;
      }
      auto it = std::find_if(inv.rdma.begin(), inv.rdma.end(),
                             [&](const RdmaPort& x) { return x.hca == name && x.port == p; });
      if (it == inv.rdma.end()) {
        inv.rdma.push_back(RdmaPort{name, p, busId, NicKind::kUnknown, 0, false, ""});
        it = inv.rdma.end() - 1;
      }
      it->up = pattr.state == IBV_PORT_ACTIVE;
      if (pattr.link_layer == IBV_LINK_LAYER_ETHERNET) it->kind = NicKind::kRoce;
      else if (pattr.link_layer == IBV_LINK_LAYER_INFINIBAND) it->kind = NicKind::kInfiniBand;
      double gbps = ibvLaneGbps(pattr.active_speed) * ibvLanes(pattr.active_width);
      if (gbps > 0) it->speedGbps = gbps;
      ++ports;
    }
    closeDev(ctx);
  }
  freeList(list);
  r.state = DetectorState::kUsed;
  r.detail = countOf(static_cast<size_t>(num), "RDMA device") + ", " +
             countOf(static_cast<size_t>(ports), "port");
  for (const std::string& p : problems) r.detail += "; " + p;
  return r;
}

}  // namespace chorus::topo::detail
#endif  // CHORUS_HAVE_IBVERBS
