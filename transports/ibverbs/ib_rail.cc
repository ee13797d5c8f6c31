#include "transports/ibverbs/ib_rail.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>

namespace chorus::ib {

namespace {
constexpr size_t kAdvertBytes = 48;
}  // namespace

// The inbox's records. Both ends are builds of one version (QpInfo checks it), so the layout
// is the host's.
struct Rail::Advert {
  uint64_t addr;
  uint64_t bytes;
  uint64_t tag;
  uint64_t total;
  uint64_t msg;
  uint32_t rkey;
  uint32_t seq;
  static void check() { static_assert(sizeof(Advert) == kAdvertBytes); }
};

struct Rail::Control {
  uint32_t code;
  uint32_t textBytes;
  uint64_t count;
  char text[240];
  static void check() { static_assert(sizeof(Control) == 256); }
};

namespace {

constexpr size_t kAbortOffset = Rail::kSlots * kAdvertBytes;
constexpr size_t kCloseOffset = kAbortOffset + 256;
constexpr size_t kBoxBytes = kCloseOffset + 256;
constexpr int kRecvDepth = 2 * static_cast<int>(Rail::kSlots) + 4;
constexpr int kSendDepth = 2 * static_cast<int>(Rail::kSlots) + 8;
constexpr int kControlReserve = 2;  // send-queue entries kept for ABORT and CLOSE
constexpr size_t kMaxChunk = size_t{1} << 30;
constexpr int kPollBatch = 16;
// How long close() and abort() wait for their control record to leave.
constexpr auto kControlBudget = std::chrono::milliseconds(500);

// Work request ids: receives carry kRecvBit; sends their kind, whether they end a message, and
// the op's sequence number.
constexpr uint64_t kRecvBit = uint64_t{1} << 63;
constexpr uint64_t kLastBit = uint64_t{1} << 62;
uint64_t sendWrId(ImmKind k, bool last, uint64_t seq) {
  return (static_cast<uint64_t>(k) << 60) | (last ? kLastBit : 0) | (seq & ((1ull << 60) - 1));
}
ImmKind wrKind(uint64_t id) { return static_cast<ImmKind>((id >> 60) & 3); }
uint64_t wrSeq(uint64_t id) { return id & ((1ull << 60) - 1); }

const char* wcStatusName(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS: return "success";
    case IBV_WC_LOC_LEN_ERR: return "local length error";
    case IBV_WC_LOC_QP_OP_ERR: return "local QP operation error";
    case IBV_WC_LOC_PROT_ERR: return "local protection error";
    case IBV_WC_WR_FLUSH_ERR: return "flushed";
    case IBV_WC_REM_ACCESS_ERR: return "remote access error";
    case IBV_WC_REM_OP_ERR: return "remote operation error";
    case IBV_WC_RETRY_EXC_ERR: return "transport retry count exceeded";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "receiver-not-ready retry count exceeded";
    case IBV_WC_REM_INV_REQ_ERR: return "remote invalid request";
    default: return "error";
  }
}

// Connections are made on callers' threads and on the transport's listener thread at once.
uint32_t randomPsn() {
  thread_local std::mt19937 gen{std::random_device{}()};
  return static_cast<uint32_t>(gen()) & 0xFFFFFF;
}

}  // namespace

// A page-aligned, registered buffer of kBoxBytes: the inbox (the peer writes it) or the outbox
// (this end's records staged for writing).
struct Rail::Box {
  const VerbsApi& api;
  void* mem = nullptr;
  ibv_mr* mr = nullptr;
  explicit Box(const VerbsApi& a) : api(a) {}
  ~Box() {
    if (mr) api.dereg_mr(mr);
    std::free(mem);
  }
  uint8_t* at(size_t off) const { return static_cast<uint8_t*>(mem) + off; }
};

Rail::Rail(const NicShare& share, uint64_t commId, int myRank, int peer)
    : share_(share), api_(share.nic->api()), comm_(commId), myRank_(myRank), peer_(peer) {}

std::string Rail::me() const {
  return "ibverbs: rank " + std::to_string(myRank_) + " (" + share_.nic->name() + ")";
}

StatusOr<std::unique_ptr<Rail>> Rail::create(const NicShare& share, uint64_t commId,
                                             int myRank, int peer, int index, int count) {
  std::unique_ptr<Rail> c(new Rail(share, commId, myRank, peer));
  Status s = c->setUp(index, count);
  if (!s.ok()) return s.withContext("connection to rank " + std::to_string(peer));
  return c;
}

Status Rail::setUp(int index, int count) {
  const Nic& nic = *share_.nic;
  const std::string where = nic.name();
  channel_ = api_.create_comp_channel(nic.context());
  if (!channel_) return errnoStatus("ibv_create_comp_channel", where);
  const int flags = ::fcntl(channel_->fd, F_GETFL);
  if (flags < 0 || ::fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) != 0)
    return errnoStatus("fcntl(O_NONBLOCK)", "completion channel of " + where);
  cq_ = api_.create_cq(nic.context(), kRecvDepth + kSendDepth, this, channel_, 0);
  if (!cq_) return errnoStatus("ibv_create_cq", where);
  if (ibv_req_notify_cq(cq_, 0) != 0) return errnoStatus("ibv_req_notify_cq", where);

  ibv_qp_init_attr init{};
  init.send_cq = cq_;
  init.recv_cq = cq_;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 0;
  init.cap.max_send_wr = kSendDepth;
  init.cap.max_recv_wr = kRecvDepth;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  qp_ = api_.create_qp(nic.pd(), &init);
  if (!qp_) return errnoStatus("ibv_create_qp", where);
  Transition t = initTransition(nic);
  if (int rc = api_.modify_qp(qp_, &t.attr, t.mask); rc != 0)
    return errnoStatus("ibv_modify_qp(INIT)", where, rc);

  const long page = ::sysconf(_SC_PAGESIZE);
  for (auto* box : {&inbox_, &outbox_}) {
    *box = std::make_unique<Box>(api_);
    (*box)->mem = std::aligned_alloc(static_cast<size_t>(page),
                                     (kBoxBytes + static_cast<size_t>(page) - 1) /
                                         static_cast<size_t>(page) * static_cast<size_t>(page));
    if (!(*box)->mem) return systemError(me() + ": out of memory for the inbox");
    std::memset((*box)->mem, 0, kBoxBytes);
    const int access = box == &inbox_ ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE
                                      : IBV_ACCESS_LOCAL_WRITE;
    (*box)->mr = api_.reg_mr(nic.pd(), (*box)->mem, kBoxBytes, access);
    if (!(*box)->mr) return errnoStatus("ibv_reg_mr", "inbox of " + where);
  }
  CHORUS_RETURN_IF_ERROR(postReceives(kRecvDepth));

  maxChunk_ = std::min<size_t>(kMaxChunk, std::max<uint32_t>(nic.attr().max_msg_sz, 1));
  local_.rank = myRank_;
  local_.rail = static_cast<uint16_t>(index);
  local_.rails = static_cast<uint16_t>(count);
  local_.commId = comm_;
  local_.lid = nic.attr().lid;
  local_.port = static_cast<uint8_t>(nic.port().port);
  local_.ethernet = nic.port().ethernet;
  local_.mtu = static_cast<uint8_t>(nic.attr().active_mtu);
  local_.qpn = qp_->qp_num;
  local_.psn = randomPsn();
  std::memcpy(local_.gid, nic.gid().raw, sizeof local_.gid);
  local_.inboxAddr = reinterpret_cast<uintptr_t>(inbox_->mem);
  local_.inboxRkey = inbox_->mr->rkey;
  local_.slots = kSlots;
  return Status();
}

Status Rail::connectTo(const QpInfo& remote) {
  CHORUS_RETURN_IF_ERROR(compatible(local_, remote));
  if (remote.rank != peer_)
    return invalidArgument(me() + ": the queue pair offered as rank " + std::to_string(peer_) +
                           "'s is rank " + std::to_string(remote.rank) + "'s");
  if (remote.slots != kSlots)
    return invalidArgument(me() + ": rank " + std::to_string(peer_) + " has " +
                           std::to_string(remote.slots) + " inbox slots, this build " +
                           std::to_string(kSlots));
  remote_ = remote;
  const Nic& nic = *share_.nic;
  Transition rtr = rtrTransition(nic, local_, remote);
  if (int rc = api_.modify_qp(qp_, &rtr.attr, rtr.mask); rc != 0)
    return errnoStatus("ibv_modify_qp(RTR)", "queue pair to rank " + std::to_string(peer_), rc);
  Transition rts = rtsTransition(nic, local_);
  if (int rc = api_.modify_qp(qp_, &rts.attr, rts.mask); rc != 0)
    return errnoStatus("ibv_modify_qp(RTS)", "queue pair to rank " + std::to_string(peer_), rc);
  connected_ = true;
  return Status();
}

Status Rail::postReceives(int n) {
  for (int i = 0; i < n; ++i) {
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    wr.wr_id = kRecvBit;
    wr.num_sge = 0;  // writes with immediate land by address; the receive only counts them
    if (int rc = ibv_post_recv(qp_, &wr, &bad); rc != 0)
      return errnoStatus("ibv_post_recv", "queue pair to rank " + std::to_string(peer_), rc);
  }
  return Status();
}

Status Rail::writeToPeer(ImmKind kind, uint64_t seq, uint64_t localOffset,
                                 uint64_t remoteOffset, size_t bytes, uint64_t wrId) {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(outbox_->at(localOffset));
  sge.length = static_cast<uint32_t>(bytes);
  sge.lkey = outbox_->mr->lkey;
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = wrId;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(makeImm(kind, seq));
  wr.wr.rdma.remote_addr = remote_.inboxAddr + remoteOffset;
  wr.wr.rdma.rkey = remote_.inboxRkey;
  if (int rc = ibv_post_send(qp_, &wr, &bad); rc != 0)
    return errnoStatus("ibv_post_send", "queue pair to rank " + std::to_string(peer_), rc);
  ++sqOutstanding_;
  return Status();
}

StatusOr<uint64_t> Rail::postSend(const void* src, size_t bytes, const PieceLabel& label) {
  return post(0, const_cast<void*>(src), bytes, label);
}

StatusOr<uint64_t> Rail::postRecv(void* dst, size_t bytes, const PieceLabel& label) {
  return post(1, dst, bytes, label);
}

StatusOr<uint64_t> Rail::post(int d, void* data, size_t bytes, const PieceLabel& label) {
  if (failed_) return failure_;
  if (gone_) return goneWhy_;
  if (closedByPeer_)
    return remoteError(me() + ": rank " + std::to_string(peer_) + " closed the connection");
  if (!connected_)
    return invalidUsage(me() + ": " + (d == 0 ? "postSend" : "postRecv") +
                        " before the connection was made");
  Rec r;
  r.data = data;
  r.bytes = bytes;
  r.label = label;
  CHORUS_ASSIGN_OR_RETURN(r.reg, cache(d).acquire(data, bytes));
  ops_[d].push_back(std::move(r));
  return posted_[d]++;
}

// Retired pieces succeeded: only those leave.
bool Rail::done(int d, uint64_t seq, Status* status) const {
  if (seq < base_[d]) {
    *status = Status();
    return true;
  }
  const Rec& r = ops_[d][seq - base_[d]];
  if (r.done) *status = r.status;
  return r.done;
}

Status Rail::progress() {
  if (failed_) return failure_;
  if (!connected_) return Status();
  // Consume the channel's events first, re-arm, then poll: a completion that arrives after the
  // poll finds the queue armed and wakes fd().
  ibv_cq* evCq = nullptr;
  void* evCtx = nullptr;
  unsigned events = 0;
  while (api_.get_cq_event(channel_, &evCq, &evCtx) == 0) ++events;
  if (events > 0) {
    api_.ack_cq_events(cq_, events);
  }
  if (ibv_req_notify_cq(cq_, 0) != 0) {
    fail(errnoStatus("ibv_req_notify_cq", "queue pair to rank " + std::to_string(peer_)));
    return failure_;
  }
  Status s = pollCompletions();
  if (s.ok() && !failed_) s = issue();
  if (!s.ok()) fail(s);
  if (failed_) return failure_;
  if (closedByPeer_ && !gone_) {
    failUnfinished(remoteError(me() + ": rank " + std::to_string(peer_) +
                               " closed the connection after sending " +
                               std::to_string(peerSent_) + " messages"));
  }
  retire();
  return Status();
}

// Takes every completion there is. The first failed one fails the connection, but only after
// the whole batch was taken: what arrived before it still completes its op.
Status Rail::pollCompletions() {
  ibv_wc wc[kPollBatch];
  Status broken;
  for (;;) {
    const int n = ibv_poll_cq(cq_, kPollBatch, wc);
    if (n < 0)
      return systemError(me() + ": ibv_poll_cq on the queue pair to rank " +
                         std::to_string(peer_) + " failed");
    for (int i = 0; i < n; ++i) {
      const ibv_wc& w = wc[i];
      const bool recv = (w.wr_id & kRecvBit) != 0;
      if (!recv) --sqOutstanding_;
      if (w.status != IBV_WC_SUCCESS) {
        if (failed_ || gone_ || closedByPeer_ || !broken.ok()) continue;  // flushed, or after
        broken = remoteError(me() + ": the queue pair to rank " + std::to_string(peer_) +
                             " failed (" + wcStatusName(w.status) + ", vendor error " +
                             std::to_string(w.vendor_err) + "): rank " + std::to_string(peer_) +
                             " is gone or unreachable");
        continue;
      }
      if (recv) {
        if (!(w.wc_flags & IBV_WC_WITH_IMM))
          return internalError(me() + ": a completion without immediate from rank " +
                               std::to_string(peer_));
        if (broken.ok()) CHORUS_RETURN_IF_ERROR(postReceives(1));
        handleImmediate(ntohl(w.imm_data));
        if (failed_) return failure_;
        continue;
      }
      if (wrKind(w.wr_id) == ImmKind::kData && (w.wr_id & kLastBit)) {
        const uint64_t seq = wrSeq(w.wr_id);
        Rec& r = ops_[0][seq - base_[0]];
        cache(0).release(r.reg);
        r.done = true;
      }
    }
    if (n < kPollBatch) return broken;
  }
}

void Rail::handleImmediate(uint32_t imm) {
  const uint32_t seq = immSeq(imm);
  switch (immKind(imm)) {
    case ImmKind::kAdvert: {
      if (seq != immSeq(makeImm(ImmKind::kAdvert, advertsIn_))) {
        fail(internalError(me() + ": advertisement " + std::to_string(seq) + " from rank " +
                           std::to_string(peer_) + " out of order"));
        return;
      }
      Advert a;
      std::memcpy(&a, inbox_->at((advertsIn_ % kSlots) * sizeof(Advert)), sizeof a);
      adverts_.push_back(a);
      ++advertsIn_;
      return;
    }
    case ImmKind::kData: {
      if (received_ >= advertised_ || seq != immSeq(makeImm(ImmKind::kData, received_))) {
        fail(internalError(me() + ": data for receive " + std::to_string(seq) + " from rank " +
                           std::to_string(peer_) + " out of order"));
        return;
      }
      Rec& r = ops_[1][received_ - base_[1]];
      cache(1).release(r.reg);
      r.done = true;
      ++received_;
      return;
    }
    case ImmKind::kAbort: {
      Control c;
      std::memcpy(&c, inbox_->at(kAbortOffset), sizeof c);
      const std::string text(c.text, std::min<size_t>(c.textBytes, sizeof c.text));
      fail(static_cast<Code>(c.code) == Code::kInvalidUsage ? invalidUsage(text)
                                                            : remoteError(text));
      return;
    }
    case ImmKind::kClose: {
      Control c;
      std::memcpy(&c, inbox_->at(kCloseOffset), sizeof c);
      closedByPeer_ = true;
      peerSent_ = c.count;
      return;
    }
  }
}

Status Rail::issue() {
  const int room = kSendDepth - kControlReserve;
  // Advertise posted receives while the peer has free slots.
  while (advertised_ < posted_[1] && advertised_ - received_ < kSlots && sqOutstanding_ < room) {
    Rec& r = ops_[1][advertised_ - base_[1]];
    if (r.done) break;  // failed (closed peer): nothing more to advertise
    Advert a{reinterpret_cast<uintptr_t>(r.data), r.bytes, r.label.tag, r.label.total,
             r.label.msg, r.reg.rkey(), static_cast<uint32_t>(advertised_)};
    const size_t off = (advertised_ % kSlots) * sizeof(Advert);
    std::memcpy(outbox_->at(off), &a, sizeof a);
    CHORUS_RETURN_IF_ERROR(writeToPeer(ImmKind::kAdvert, advertised_, off, off, sizeof a,
                                       sendWrId(ImmKind::kAdvert, false, advertised_)));
    ++advertised_;
  }
  // Write sends into the receives the peer advertised, in order.
  while (sendsIssued_ < posted_[0] && !adverts_.empty() && sqOutstanding_ < room) {
    Rec& r = ops_[0][sendsIssued_ - base_[0]];
    if (r.done) break;
    const Advert a = adverts_.front();
    if (a.bytes != r.bytes || a.tag != r.label.tag || a.total != r.label.total ||
        a.msg != r.label.msg) {
      const Status why = mismatch(r, a);
      sendControl(ImmKind::kAbort, static_cast<uint32_t>(why.code()), 0, why.message());
      toldPeer_ = true;
      return why;
    }
    const uint64_t before = sendsIssued_;
    CHORUS_RETURN_IF_ERROR(sendData(sendsIssued_, r, a));
    if (sendsIssued_ == before) break;  // the send queue filled first; continue next time
  }
  return Status();
}

// The two ends' messages differ. Pieces of different messages meet only after the ends cut
// an earlier pair of messages differently (their sizes differed): the numbers say so.
Status Rail::mismatch(const Rec& r, const Advert& a) const {
  std::string text = "ibverbs: message mismatch: rank " + std::to_string(myRank_) + " sent " +
                     std::to_string(r.label.total) + " bytes with tag " +
                     std::to_string(r.label.tag) + " to rank " + std::to_string(peer_) +
                     ", whose matching receive is of " + std::to_string(a.total) +
                     " bytes with tag " + std::to_string(a.tag);
  if (a.msg != r.label.msg)
    text += " (send " + std::to_string(r.label.msg) + " met receive " + std::to_string(a.msg) +
            ": an earlier pair of messages differed in size)";
  return invalidUsage(text);
}

// Posts the chunks of send `seq` from chunkOffset_ on, as far as the send queue allows; the
// last carries the immediate. On finishing, the advertisement is used up.
Status Rail::sendData(uint64_t seq, Rec& r, const Advert& a) {
  const int room = kSendDepth - kControlReserve;
  bool finished = false;
  while (!finished && sqOutstanding_ < room) {
    const size_t len = std::min(maxChunk_, r.bytes - chunkOffset_);
    const bool last = chunkOffset_ + len == r.bytes;
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uintptr_t>(r.data) + chunkOffset_;
    sge.length = static_cast<uint32_t>(len);
    sge.lkey = r.reg.lkey();
    ibv_send_wr wr{};
    ibv_send_wr* bad = nullptr;
    wr.wr_id = sendWrId(ImmKind::kData, last, seq);
    wr.sg_list = len > 0 ? &sge : nullptr;
    wr.num_sge = len > 0 ? 1 : 0;
    wr.opcode = last ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (last) wr.imm_data = htonl(makeImm(ImmKind::kData, a.seq));
    wr.wr.rdma.remote_addr = a.addr + chunkOffset_;
    wr.wr.rdma.rkey = a.rkey;
    if (int rc = ibv_post_send(qp_, &wr, &bad); rc != 0)
      return errnoStatus("ibv_post_send", "queue pair to rank " + std::to_string(peer_), rc);
    ++sqOutstanding_;
    chunkOffset_ += len;
    finished = last;
  }
  if (finished) {
    adverts_.pop_front();
    ++sendsIssued_;
    chunkOffset_ = 0;
  }
  return Status();
}

void Rail::retire() {
  for (int d = 0; d < 2; ++d) {
    const uint64_t limit = d == 0 ? sendsIssued_ : received_;
    while (!ops_[d].empty() && base_[d] < limit && ops_[d].front().done &&
           ops_[d].front().status.ok()) {
      ops_[d].pop_front();
      ++base_[d];
    }
  }
}

void Rail::failUnfinished(const Status& why) {
  for (int d = 0; d < 2; ++d)
    for (Rec& r : ops_[d]) {
      if (r.done) continue;
      cache(d).release(r.reg);
      r.done = true;
      r.status = why;
    }
}

void Rail::fail(const Status& why) {
  if (failed_) return;
  failed_ = true;
  failure_ = why;
  // The error state flushes every posted request: no byte moves into or out of an op's buffer
  // once the op has reported its failure.
  if (qp_) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    api_.modify_qp(qp_, &a, IBV_QP_STATE);
  }
  failUnfinished(why);
}

void Rail::sendControl(ImmKind kind, uint32_t code, uint64_t count,
                               const std::string& text) {
  if (!connected_ || failed_) return;
  Control c{};
  c.code = code;
  c.count = count;
  c.textBytes = static_cast<uint32_t>(std::min(text.size(), sizeof c.text));
  std::memcpy(c.text, text.data(), c.textBytes);
  const size_t off = kind == ImmKind::kAbort ? kAbortOffset : kCloseOffset;
  std::memcpy(outbox_->at(off), &c, sizeof c);
  if (!writeToPeer(kind, 0, off, off, sizeof c, sendWrId(kind, false, 0)).ok()) return;
  // Best effort, bounded: wait for the record to leave before the queue pair goes away.
  const auto until = std::chrono::steady_clock::now() + kControlBudget;
  ibv_wc wc[kPollBatch];
  while (std::chrono::steady_clock::now() < until) {
    const int n = ibv_poll_cq(cq_, kPollBatch, wc);
    if (n < 0) return;
    bool left = false;
    for (int i = 0; i < n; ++i) {
      if (wc[i].wr_id & kRecvBit) continue;
      --sqOutstanding_;
      if (wrKind(wc[i].wr_id) == kind) left = true;
    }
    if (left) return;
  }
}

void Rail::abort(const Status& why) {
  if (failed_) return;
  sendControl(ImmKind::kAbort, static_cast<uint32_t>(why.code()), 0, why.message());
  toldPeer_ = true;
  fail(why);
}

void Rail::peerGone(const Status& why) {
  if (failed_ || gone_) return;
  // What the peer delivered before it went is in the completion queue: take it first. Its
  // queue pair's failure, if already seen, is the same news: ops fail with `why`.
  if (connected_) pollCompletions().ignore();
  if (failed_) return;
  gone_ = true;
  goneWhy_ = why;
  failUnfinished(why);
}

void Rail::close(uint64_t messages) {
  if (connected_ && !failed_ && !gone_ && !closedByPeer_)
    sendControl(ImmKind::kClose, 0, messages, "");
}

Rail::~Rail() {
  if (qp_) api_.destroy_qp(qp_);
  for (int d = 0; d < 2; ++d)
    for (Rec& r : ops_[d]) cache(d).release(r.reg);
  inbox_.reset();
  outbox_.reset();
  if (cq_) {
    // Events taken but not yet acknowledged would make destroy_cq wait.
    ibv_cq* evCq = nullptr;
    void* evCtx = nullptr;
    unsigned events = 0;
    while (channel_ && api_.get_cq_event(channel_, &evCq, &evCtx) == 0) ++events;
    if (events > 0) api_.ack_cq_events(cq_, events);
    api_.destroy_cq(cq_);
  }
  if (channel_) api_.destroy_comp_channel(channel_);
}

}  // namespace chorus::ib
