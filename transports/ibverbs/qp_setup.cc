#include "transports/ibverbs/qp_setup.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace chorus::ib {
namespace {

constexpr uint32_t kMagic = 0x51424943;  // "CIBQ"
constexpr uint32_t kVersion = 2;  // 2: rails; 48-byte advertisements
// The responder's minimal RNR NAK timer (12: 0.64 ms) and an unbounded RNR retry (7): a write
// with immediate that finds no receive posted waits for one instead of failing the pair.
constexpr uint8_t kMinRnrTimer = 12;
constexpr uint8_t kRnrRetryForever = 7;
constexpr uint8_t kHopLimit = 255;

class Writer {
 public:
  template <typename T>
  void put(T v) {
    const size_t at = out.size();
    out.resize(at + sizeof v);
    std::memcpy(out.data() + at, &v, sizeof v);
  }
  std::vector<uint8_t> out;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& b) : in(b) {}
  template <typename T>
  T get() {
    T v;
    std::memcpy(&v, in.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  const std::vector<uint8_t>& in;
  size_t at = 0;
};

}  // namespace

std::vector<uint8_t> QpInfo::encode() const {
  Writer w;
  w.out.reserve(kWireBytes);
  w.put<uint32_t>(kMagic);
  w.put<uint32_t>(kVersion);
  w.put<int32_t>(rank);
  w.put<uint16_t>(rail);
  w.put<uint16_t>(rails);
  w.put<uint64_t>(commId);
  w.put<uint16_t>(lid);
  w.put<uint8_t>(port);
  w.put<uint8_t>(ethernet ? 1 : 0);
  w.put<uint8_t>(mtu);
  for (int i = 0; i < 3; ++i) w.put<uint8_t>(0);
  w.put<uint32_t>(qpn);
  w.put<uint32_t>(psn);
  for (uint8_t g : gid) w.put<uint8_t>(g);
  w.put<uint64_t>(inboxAddr);
  w.put<uint32_t>(inboxRkey);
  w.put<uint32_t>(slots);
  return std::move(w.out);
}

StatusOr<QpInfo> QpInfo::decode(const std::vector<uint8_t>& b, const std::string& from) {
  if (b.size() != kWireBytes)
    return invalidArgument("ibverbs: " + from + " sent a queue-pair record of " +
                           std::to_string(b.size()) + " bytes, not " +
                           std::to_string(kWireBytes));
  Reader r(b);
  if (r.get<uint32_t>() != kMagic)
    return invalidArgument("ibverbs: " + from + " sent something that is no queue-pair record");
  const uint32_t version = r.get<uint32_t>();
  if (version != kVersion)
    return invalidArgument("ibverbs: " + from + " speaks version " + std::to_string(version) +
                           ", this build " + std::to_string(kVersion));
  QpInfo q;
  q.rank = r.get<int32_t>();
  q.rail = r.get<uint16_t>();
  q.rails = r.get<uint16_t>();
  q.commId = r.get<uint64_t>();
  q.lid = r.get<uint16_t>();
  q.port = r.get<uint8_t>();
  q.ethernet = r.get<uint8_t>() != 0;
  q.mtu = r.get<uint8_t>();
  for (int i = 0; i < 3; ++i) r.get<uint8_t>();
  q.qpn = r.get<uint32_t>();
  q.psn = r.get<uint32_t>();
  for (uint8_t& g : q.gid) g = r.get<uint8_t>();
  q.inboxAddr = r.get<uint64_t>();
  q.inboxRkey = r.get<uint32_t>();
  q.slots = r.get<uint32_t>();
  if (q.mtu < IBV_MTU_256 || q.mtu > IBV_MTU_4096)
    return invalidArgument("ibverbs: " + from + " announces path MTU code " +
                           std::to_string(q.mtu) + " (valid: 1-5)");
  if (q.rails == 0 || q.rail >= q.rails)
    return invalidArgument("ibverbs: " + from + " announces rail " + std::to_string(q.rail) +
                           " of " + std::to_string(q.rails));
  if (q.qpn >= (1u << 24) || q.psn >= (1u << 24))
    return invalidArgument("ibverbs: " + from + " announces a queue pair number or PSN "
                           "beyond 24 bits");
  return q;
}

Status compatible(const QpInfo& local, const QpInfo& remote) {
  const std::string peer = "rank " + std::to_string(remote.rank);
  if (remote.commId != local.commId)
    return invalidArgument("ibverbs: " + peer + "'s queue pair belongs to another communicator");
  if (remote.ethernet != local.ethernet)
    return invalidArgument(std::string("ibverbs: ") + "this rank's port is " +
                           (local.ethernet ? "RoCE" : "InfiniBand") + ", " + peer + "'s is " +
                           (remote.ethernet ? "RoCE" : "InfiniBand") +
                           ": one fabric cannot join them (pick ports with CHORUS_IB_HCA)");
  if (remote.slots == 0)
    return invalidArgument("ibverbs: " + peer + " announces an inbox without slots");
  return Status();
}

Transition initTransition(const Nic& nic) {
  Transition t;
  t.attr.qp_state = IBV_QPS_INIT;
  t.attr.pkey_index = 0;
  t.attr.port_num = static_cast<uint8_t>(nic.port().port);
  t.attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  t.mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  return t;
}

Transition rtrTransition(const Nic& nic, const QpInfo& local, const QpInfo& remote) {
  Transition t;
  ibv_qp_attr& a = t.attr;
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = static_cast<ibv_mtu>(std::min(local.mtu, remote.mtu));
  a.dest_qp_num = remote.qpn;
  a.rq_psn = remote.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = kMinRnrTimer;
  a.ah_attr.port_num = static_cast<uint8_t>(nic.port().port);
  a.ah_attr.sl = static_cast<uint8_t>(nic.settings().serviceLevel);
  a.ah_attr.src_path_bits = 0;
  if (local.ethernet) {
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid, sizeof remote.gid);
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(nic.settings().gidIndex);
    a.ah_attr.grh.hop_limit = kHopLimit;
    a.ah_attr.grh.traffic_class = static_cast<uint8_t>(nic.settings().trafficClass);
    a.ah_attr.grh.flow_label = 0;
  } else {
    a.ah_attr.is_global = 0;
    a.ah_attr.dlid = remote.lid;
  }
  t.mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  return t;
}

Transition rtsTransition(const Nic& nic, const QpInfo& local) {
  Transition t;
  ibv_qp_attr& a = t.attr;
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = local.psn;
  a.timeout = static_cast<uint8_t>(nic.settings().timeout);
  a.retry_cnt = static_cast<uint8_t>(nic.settings().retryCount);
  a.rnr_retry = kRnrRetryForever;
  a.max_rd_atomic = 1;
  t.mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
           IBV_QP_MAX_QP_RD_ATOMIC;
  return t;
}

}  // namespace chorus::ib
