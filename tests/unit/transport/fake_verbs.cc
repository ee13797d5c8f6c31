#include "tests/unit/transport/fake_verbs.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>

namespace chorus::ib::fake {
namespace {

struct Mr {
  std::unique_ptr<ibv_mr> mr;
  int access = 0;
};

struct Cq {
  std::unique_ptr<ibv_cq> cq;
  std::deque<ibv_wc> wcs;
  bool armed = false;
};

struct Channel {
  std::unique_ptr<ibv_comp_channel> ch;
  int writeFd = -1;
  ibv_cq* fired = nullptr;
  int pending = 0;
};

struct Qp {
  std::unique_ptr<ibv_qp> qp;
  int device = 0;
  ibv_qp_cap cap{};
  ibv_qp_attr attr{};  // what the transitions set
  std::deque<uint64_t> recvs;
  uint32_t sqInFlight = 0;
  bool unplugged = false;
};

struct Context {
  std::unique_ptr<ibv_context> ctx;
  int device = 0;
};

struct World {
  std::mutex mu;
  Options opts;
  ibv_device devices[8]{};
  std::map<ibv_context*, Context> contexts;
  std::map<ibv_pd*, std::unique_ptr<ibv_pd>> pds;
  std::map<uint32_t, Mr> mrs;  // by key (lkey == rkey)
  std::map<ibv_cq*, Cq> cqs;
  std::map<ibv_comp_channel*, Channel> channels;
  std::map<uint32_t, Qp> qps;  // by number
  std::vector<ModifyCall> modifies;
  uint32_t nextKey = 0x100;
  uint32_t nextQpn = 0x40;
  int rnrViolations = 0;
  int forkInits = 0;
  uint64_t written[8] = {};
};

World& world() {
  static World* w = new World();
  return *w;
}

int deviceIndex(ibv_device* d) {
  World& w = world();
  for (int i = 0; i < 8; ++i)
    if (d == &w.devices[i]) return i;
  return -1;
}

// With w.mu held.
bool ethernetOf(const World& w, int device) {
  return w.opts.ethernet || (device >= 0 && (w.opts.roceDevices >> device) & 1u);
}
ibv_mtu mtuOf(const World& w, int device) {
  return device >= 0 && static_cast<size_t>(device) < w.opts.deviceMtu.size()
             ? w.opts.deviceMtu[static_cast<size_t>(device)]
             : w.opts.mtu;
}

uint16_t lidOf(int device) { return static_cast<uint16_t>(0x10 + device); }
void gidOf(int device, int index, uint8_t* raw) {
  std::memset(raw, 0, 16);
  raw[0] = 0xfe;
  raw[1] = 0x80;
  raw[14] = static_cast<uint8_t>(device);
  raw[15] = static_cast<uint8_t>(index);
}

// With w.mu held. Completions of one queue pair, on the queue of `cq`.
void pushWc(World& w, ibv_cq* cq, const ibv_wc& wc) {
  Cq& c = w.cqs.at(cq);
  c.wcs.push_back(wc);
  if (c.armed && cq->channel) {
    c.armed = false;
    Channel& ch = w.channels.at(cq->channel);
    ch.fired = cq;
    ++ch.pending;
    const char b = 1;
    if (::write(ch.writeFd, &b, 1) != 1) std::abort();
  }
}

ibv_wc completion(uint64_t id, ibv_wc_status st, ibv_wc_opcode op, uint32_t qpn) {
  ibv_wc wc{};
  wc.wr_id = id;
  wc.status = st;
  wc.opcode = op;
  wc.qp_num = qpn;
  return wc;
}

// A registered range with `key` covering [addr, addr + len) with `access`, or nullptr.
const Mr* covering(World& w, uint32_t key, uint64_t addr, uint64_t len, int access) {
  auto it = w.mrs.find(key);
  if (it == w.mrs.end()) return nullptr;
  const ibv_mr& m = *it->second.mr;
  const auto base = reinterpret_cast<uintptr_t>(m.addr);
  if (addr < base || addr + len > base + m.length) return nullptr;
  if ((it->second.access & access) != access) return nullptr;
  return &it->second;
}

// Whether the queue pair `to` is the connected peer of `from` (with w.mu held).
bool pairedWith(World& w, const Qp& from, const Qp& to) {
  const ibv_qp_attr& a = from.attr;
  const ibv_qp_attr& b = to.attr;
  if (to.unplugged) return false;
  if (to.qp->state != IBV_QPS_RTR && to.qp->state != IBV_QPS_RTS) return false;
  if (b.dest_qp_num != from.qp->qp_num) return false;
  if (a.sq_psn != b.rq_psn || a.path_mtu != b.path_mtu) return false;
  if (ethernetOf(w, to.device)) {
    uint8_t gid[16];
    gidOf(to.device, a.ah_attr.grh.sgid_index, gid);
    return a.ah_attr.is_global && std::memcmp(gid, a.ah_attr.grh.dgid.raw, 16) == 0;
  }
  return !a.ah_attr.is_global && a.ah_attr.dlid == lidOf(to.device);
}

int postSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  World& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  Qp& q = w.qps.at(qp->qp_num);
  for (; wr; wr = wr->next) {
    const bool signaled = (wr->send_flags & IBV_SEND_SIGNALED) != 0;
    if (q.qp->state == IBV_QPS_ERR) {
      if (signaled) {
        ++q.sqInFlight;
        pushWc(w, qp->send_cq,
               completion(wr->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, qp->qp_num));
      }
      continue;
    }
    if (q.qp->state != IBV_QPS_RTS || !signaled || q.sqInFlight >= q.cap.max_send_wr ||
        wr->num_sge > static_cast<int>(q.cap.max_send_sge) ||
        (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM)) {
      *bad = wr;
      return q.sqInFlight >= q.cap.max_send_wr ? ENOMEM : EINVAL;
    }
    ++q.sqInFlight;
    auto done = [&](ibv_wc_status st) {
      pushWc(w, qp->send_cq, completion(wr->wr_id, st, IBV_WC_RDMA_WRITE, qp->qp_num));
    };
    uint64_t len = 0;
    bool localOk = true;
    for (int i = 0; i < wr->num_sge; ++i) {
      const ibv_sge& s = wr->sg_list[i];
      if (s.length > 0 && !covering(w, s.lkey, s.addr, s.length, 0)) localOk = false;
      len += s.length;
    }
    if (!localOk) {
      done(IBV_WC_LOC_PROT_ERR);
      continue;
    }
    auto target = w.qps.find(q.attr.dest_qp_num);
    if (target == w.qps.end() || !pairedWith(w, q, target->second)) {
      done(IBV_WC_RETRY_EXC_ERR);
      continue;
    }
    Qp& t = target->second;
    if (len > w.opts.maxMsg) {
      done(IBV_WC_LOC_LEN_ERR);
      continue;
    }
    if (len > 0 &&
        !covering(w, wr->wr.rdma.rkey, wr->wr.rdma.remote_addr, len, IBV_ACCESS_REMOTE_WRITE)) {
      done(IBV_WC_REM_ACCESS_ERR);
      continue;
    }
    const bool imm = wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
    if (imm && t.recvs.empty()) {
      ++w.rnrViolations;
      done(IBV_WC_RNR_RETRY_EXC_ERR);
      continue;
    }
    auto* dst = reinterpret_cast<uint8_t*>(wr->wr.rdma.remote_addr);
    for (int i = 0; i < wr->num_sge; ++i) {
      const ibv_sge& s = wr->sg_list[i];
      std::memcpy(dst, reinterpret_cast<const void*>(s.addr), s.length);
      dst += s.length;
    }
    w.written[q.device] += len;
    if (imm) {
      ibv_wc wc = completion(t.recvs.front(), IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM,
                             t.qp->qp_num);
      t.recvs.pop_front();
      wc.byte_len = static_cast<uint32_t>(len);
      wc.imm_data = wr->imm_data;
      wc.wc_flags = IBV_WC_WITH_IMM;
      pushWc(w, t.qp->recv_cq, wc);
    }
    done(IBV_WC_SUCCESS);
  }
  return 0;
}

int postRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  World& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  Qp& q = w.qps.at(qp->qp_num);
  for (; wr; wr = wr->next) {
    if (q.qp->state == IBV_QPS_ERR) {
      pushWc(w, qp->recv_cq,
             completion(wr->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, qp->qp_num));
      continue;
    }
    if (q.qp->state == IBV_QPS_RESET || q.recvs.size() >= q.cap.max_recv_wr ||
        wr->num_sge > static_cast<int>(q.cap.max_recv_sge)) {
      *bad = wr;
      return q.recvs.size() >= q.cap.max_recv_wr ? ENOMEM : EINVAL;
    }
    q.recvs.push_back(wr->wr_id);
  }
  return 0;
}

int pollCq(ibv_cq* cq, int n, ibv_wc* out) {
  World& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  Cq& c = w.cqs.at(cq);
  int got = 0;
  while (got < n && !c.wcs.empty()) {
    out[got] = c.wcs.front();
    c.wcs.pop_front();
    // A send-queue entry is free once its completion is polled.
    if (out[got].opcode != IBV_WC_RECV_RDMA_WITH_IMM && out[got].opcode != IBV_WC_RECV) {
      for (auto& [num, q] : w.qps)
        if (q.qp->send_cq == cq && q.sqInFlight > 0 && out[got].qp_num == num) {
          --q.sqInFlight;
          break;
        }
    }
    ++got;
  }
  return got;
}

int reqNotify(ibv_cq* cq, int) {
  World& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  w.cqs.at(cq).armed = true;
  return 0;
}

// ---- The table's control calls ---------------------------------------------------------------

int forkInit() {
  std::lock_guard<std::mutex> lock(world().mu);
  ++world().forkInits;
  return 0;
}

ibv_device** getDeviceList(int* num) {
  World& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  if (w.opts.nullList) {
    errno = w.opts.listErrno;
    return nullptr;
  }
  auto** list = new ibv_device*[static_cast<size_t>(w.opts.devices) + 1];
  for (int i = 0; i < w.opts.devices; ++i) list[i] = &w.devices[i];
  list[w.opts.devices] = nullptr;
  if (num) *num = w.opts.devices;
  return list;
}

void freeDeviceList(ibv_device** list) { delete[] list; }

const char* getDeviceName(ibv_device* d) {
  static const char* names[8] = {"fake_0", "fake_1", "fake_2", "fake_3",
                                 "fake_4", "fake_5", "fake_6", "fake_7"};
  const int i = deviceIndex(d);
  return i < 0 ? nullptr : names[i];
}

ibv_context* openDevice(ibv_device* d) {
  World& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  Context c;
  c.ctx = std::make_unique<ibv_context>();
  c.device = deviceIndex(d);
  c.ctx->device = d;
  c.ctx->ops.post_send = &postSend;
  c.ctx->ops.post_recv = &postRecv;
  c.ctx->ops.poll_cq = &pollCq;
  c.ctx->ops.req_notify_cq = &reqNotify;
  ibv_context* p = c.ctx.get();
  w.contexts.emplace(p, std::move(c));
  return p;
}

int closeDevice(ibv_context* ctx) {
  std::lock_guard<std::mutex> lock(world().mu);
  return world().contexts.erase(ctx) == 1 ? 0 : EINVAL;
}

int queryDevice(ibv_context*, ibv_device_attr* a) {
  *a = ibv_device_attr{};
  a->phys_port_cnt = 1;
  a->max_qp_wr = 4096;
  return 0;
}

int queryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* a) {
  World& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  if (port != 1) return EINVAL;
  *a = ibv_port_attr{};
  const int device = w.contexts.at(ctx).device;
  a->state = w.opts.portActive ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  a->active_mtu = mtuOf(w, device);
  a->max_mtu = IBV_MTU_4096;
  a->max_msg_sz = w.opts.maxMsg;
  a->link_layer = ethernetOf(w, device) ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
  a->lid = ethernetOf(w, device) ? 0 : lidOf(device);
  return 0;
}

int queryGid(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid) {
  World& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  if (port != 1 || index < 0 || index > 15) return EINVAL;
  gidOf(w.contexts.at(ctx).device, index, gid->raw);
  return 0;
}

ibv_pd* allocPd(ibv_context* ctx) {
  World& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  auto pd = std::make_unique<ibv_pd>();
  pd->context = ctx;
  ibv_pd* p = pd.get();
  w.pds.emplace(p, std::move(pd));
  return p;
}

int deallocPd(ibv_pd* pd) {
  std::lock_guard<std::mutex> lock(world().mu);
  return world().pds.erase(pd) == 1 ? 0 : EINVAL;
}

ibv_mr* regMr(ibv_pd* pd, void* addr, size_t len, int access) {
  World& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  Mr m;
  m.mr = std::make_unique<ibv_mr>();
  m.mr->context = pd->context;
  m.mr->pd = pd;
  m.mr->addr = addr;
  m.mr->length = len;
  m.mr->lkey = m.mr->rkey = w.nextKey++;
  m.access = access;
  ibv_mr* p = m.mr.get();
  w.mrs.emplace(p->lkey, std::move(m));
  return p;
}

int deregMr(ibv_mr* mr) {
  std::lock_guard<std::mutex> lock(world().mu);
  return world().mrs.erase(mr->lkey) == 1 ? 0 : EINVAL;
}

ibv_comp_channel* createChannel(ibv_context* ctx) {
  World& w = world();
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  std::lock_guard<std::mutex> lock(w.mu);
  Channel c;
  c.ch = std::make_unique<ibv_comp_channel>();
  c.ch->context = ctx;
  c.ch->fd = fds[0];
  c.writeFd = fds[1];
  ibv_comp_channel* p = c.ch.get();
  w.channels.emplace(p, std::move(c));
  return p;
}

int destroyChannel(ibv_comp_channel* ch) {
  World& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  auto it = w.channels.find(ch);
  if (it == w.channels.end()) return EINVAL;
  ::close(it->second.ch->fd);
  ::close(it->second.writeFd);
  w.channels.erase(it);
  return 0;
}

ibv_cq* createCq(ibv_context* ctx, int cqe, void* cqContext, ibv_comp_channel* ch, int) {
  World& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  Cq c;
  c.cq = std::make_unique<ibv_cq>();
  c.cq->context = ctx;
  c.cq->channel = ch;
  c.cq->cq_context = cqContext;
  c.cq->cqe = cqe;
  ibv_cq* p = c.cq.get();
  w.cqs.emplace(p, std::move(c));
  return p;
}

int destroyCq(ibv_cq* cq) {
  std::lock_guard<std::mutex> lock(world().mu);
  return world().cqs.erase(cq) == 1 ? 0 : EINVAL;
}

int getCqEvent(ibv_comp_channel* ch, ibv_cq** cq, void** cqContext) {
  char b;
  if (::read(ch->fd, &b, 1) != 1) return -1;  // errno EAGAIN: the fd is nonblocking
  World& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  Channel& c = w.channels.at(ch);
  --c.pending;
  *cq = c.fired;
  *cqContext = c.fired ? c.fired->cq_context : nullptr;
  return 0;
}

void ackCqEvents(ibv_cq*, unsigned) {}

ibv_qp* createQp(ibv_pd* pd, ibv_qp_init_attr* init) {
  World& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  if (init->qp_type != IBV_QPT_RC || !init->send_cq || !init->recv_cq) {
    errno = EINVAL;
    return nullptr;
  }
  Qp q;
  q.qp = std::make_unique<ibv_qp>();
  q.qp->context = pd->context;
  q.qp->pd = pd;
  q.qp->send_cq = init->send_cq;
  q.qp->recv_cq = init->recv_cq;
  q.qp->qp_type = IBV_QPT_RC;
  q.qp->state = IBV_QPS_RESET;
  q.qp->qp_num = w.nextQpn++;
  q.device = w.contexts.at(pd->context).device;
  q.cap = init->cap;
  ibv_qp* p = q.qp.get();
  w.qps.emplace(p->qp_num, std::move(q));
  return p;
}

int modifyQp(ibv_qp* qp, ibv_qp_attr* a, int mask) {
  World& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  w.modifies.push_back(ModifyCall{qp->qp_num, *a, mask});
  Qp& q = w.qps.at(qp->qp_num);
  if (!(mask & IBV_QP_STATE)) return EINVAL;
  const ibv_qp_state from = q.qp->state;
  const ibv_qp_state to = a->qp_state;
  auto has = [&](int m) { return (mask & m) == m; };
  if (to == IBV_QPS_ERR) {
    q.qp->state = IBV_QPS_ERR;
    for (uint64_t id : q.recvs)
      pushWc(w, qp->recv_cq, completion(id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, qp->qp_num));
    q.recvs.clear();
    return 0;
  }
  if (from == IBV_QPS_RESET && to == IBV_QPS_INIT &&
      has(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) && a->port_num == 1) {
    q.attr.port_num = a->port_num;
    q.attr.qp_access_flags = a->qp_access_flags;
  } else if (from == IBV_QPS_INIT && to == IBV_QPS_RTR &&
             has(IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) &&
             a->path_mtu <= mtuOf(w, q.device) &&
             (ethernetOf(w, q.device) ? a->ah_attr.is_global == 1 : a->ah_attr.dlid != 0)) {
    q.attr.ah_attr = a->ah_attr;
    q.attr.path_mtu = a->path_mtu;
    q.attr.dest_qp_num = a->dest_qp_num;
    q.attr.rq_psn = a->rq_psn;
  } else if (from == IBV_QPS_RTR && to == IBV_QPS_RTS &&
             has(IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                 IBV_QP_MAX_QP_RD_ATOMIC)) {
    q.attr.sq_psn = a->sq_psn;
    q.attr.timeout = a->timeout;
    q.attr.retry_cnt = a->retry_cnt;
    q.attr.rnr_retry = a->rnr_retry;
  } else {
    return EINVAL;
  }
  q.qp->state = to;
  return 0;
}

int destroyQp(ibv_qp* qp) {
  std::lock_guard<std::mutex> lock(world().mu);
  return world().qps.erase(qp->qp_num) == 1 ? 0 : EINVAL;
}

const VerbsApi kTable = {
    "fake verbs",  &forkInit,    &getDeviceList, &freeDeviceList, &getDeviceName,
    &openDevice,   &closeDevice, &queryDevice,   &queryPort,      &queryGid,
    &allocPd,      &deallocPd,   &regMr,         &deregMr,        &createChannel,
    &destroyChannel, &createCq,  &destroyCq,     &getCqEvent,     &ackCqEvents,
    &createQp,     &modifyQp,    &destroyQp,
};

}  // namespace

void install(const Options& o) {
  {
    std::lock_guard<std::mutex> lock(world().mu);
    world().opts = o;
  }
  setVerbsForTesting(&kTable);
}

const Options& options() { return world().opts; }

Live live() {
  World& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  Live l;
  l.contexts = static_cast<int>(w.contexts.size());
  l.pds = static_cast<int>(w.pds.size());
  l.mrs = static_cast<int>(w.mrs.size());
  l.cqs = static_cast<int>(w.cqs.size());
  l.channels = static_cast<int>(w.channels.size());
  l.qps = static_cast<int>(w.qps.size());
  return l;
}

std::vector<ModifyCall> modifyCalls() {
  std::lock_guard<std::mutex> lock(world().mu);
  return world().modifies;
}

int rnrViolations() {
  std::lock_guard<std::mutex> lock(world().mu);
  return world().rnrViolations;
}

uint64_t bytesWritten(int device) {
  std::lock_guard<std::mutex> lock(world().mu);
  return device >= 0 && device < 8 ? world().written[device] : 0;
}

int forkInitCalls() {
  std::lock_guard<std::mutex> lock(world().mu);
  return world().forkInits;
}

void unplug(uint32_t qpn) {
  std::lock_guard<std::mutex> lock(world().mu);
  auto it = world().qps.find(qpn);
  if (it != world().qps.end()) it->second.unplugged = true;
}

}  // namespace chorus::ib::fake
