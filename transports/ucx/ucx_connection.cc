#include "transports/ucx/ucx_connection.h"

#include <poll.h>

#include <chrono>
#include <cstring>

#include "src/base/config.h"
#include "src/base/logging.h"

namespace chorus::ucx {
namespace {

using Clock = std::chrono::steady_clock;
using OpRec = UcxConnection::OpRec;

// A control message: kind, code, count (8 bytes), then the reason's text.
constexpr size_t kControlHeaderBytes = 16;
constexpr size_t kControlBytes = 512;
// How long cancel() waits for its ABORT to leave, and the destructor for its CLOSE and the
// endpoint's flush.
constexpr int kCancelBudgetMs = 100;
constexpr int kCloseBudgetMs = 500;
// How long after the worker last had something to do a connection with a transfer under way
// keeps its caller progressing instead of sleeping on the worker's fd.
constexpr int kBusyWindowUs = 5000;
// Progress calls that find nothing to do before a gone peer's connection gives up on what it
// waits for (what the peer delivered is taken in these).
constexpr int kDrainRounds = 64;
// Records of retired ops a connection keeps for reuse, at most.
constexpr size_t kSpareRecords = 64;
// A mismatched message up to this size is received into scratch memory (to release UCX's hold
// on it); a larger one stays with the worker until it is destroyed.
constexpr size_t kDiscardMaxBytes = 64 << 10;

// Exposed ranges kept mapped, and peers' keys kept unpacked, per connection (see the header).
constexpr size_t kKeptMappings = 8;
constexpr size_t kKeptKeys = 8;
// A MemHandle: the range's address and length, then the packed remote key.
constexpr size_t kHandleHeaderBytes = 16;

// UCX wants a valid address even for zero bytes.
uint8_t gEmpty = 0;

void onSend(void* /*request*/, ucs_status_t status, void* user) {
  auto* r = static_cast<OpRec*>(user);
  r->done = true;
  r->status = status;
  ++*r->events;
}

// A bounced receive lands in the record's own buffer: only a message of the receive's length
// and tag reaches the caller's. A longer one ends as UCS_ERR_MESSAGE_TRUNCATED, with its length.
void onRecv(void* /*request*/, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  auto* r = static_cast<OpRec*>(user);
  r->done = true;
  r->status = status;
  if (info && (status == UCS_OK || status == UCS_ERR_MESSAGE_TRUNCATED)) {
    r->length = info->length;
    r->senderTag = info->sender_tag;
    if (r->bounced) {
      r->mismatch = status != UCS_OK || info->length != r->bytes ||
                    ((info->sender_tag ^ r->tag) & kMessageTagMask) != 0;
      if (!r->mismatch && r->bytes > 0) std::memcpy(r->data, r->bounce, r->bytes);
    }
  }
  ++*r->events;
}

// Contiguous bytes, completion reported to `r` by the send or the receive callback.
ucp_request_param_t requestParam(OpRec* r, bool send) {
  ucp_request_param_t p{};
  p.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  if (send) {
    p.cb.send = &onSend;
  } else {
    p.cb.recv = &onRecv;
  }
  p.user_data = r;
  p.datatype = ucp_dt_make_contig(1);
  return p;
}
ucp_request_param_t sendParam(OpRec* r) { return requestParam(r, true); }
ucp_request_param_t recvParam(OpRec* r) { return requestParam(r, false); }

bool pending(const OpRec& r) { return !r.done; }

}  // namespace

// The endpoint's error handler may run until the endpoint is closed; what it writes lives on
// the heap so a close that never finishes cannot make it write into a destroyed connection.
struct EndpointError {
  bool failed = false;
  ucs_status_t status = UCS_OK;
};

void UcxConnection::onEndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* e = static_cast<EndpointError*>(arg);
  if (!e->failed) e->status = status;
  e->failed = true;
}

UcxConnection::UcxConnection(std::shared_ptr<Worker> worker, uint64_t commId, int myRank,
                             int peer, bool peerErrMode, bool readable, double readSeconds)
    : worker_(std::move(worker)),
      w_(worker_->handle()),
      comm_(commBits(commId)),
      myRank_(myRank),
      peer_(peer),
      peerErrMode_(peerErrMode),
      readable_(readable),
      readSeconds_(readSeconds),
      epErr_(new EndpointError()) {}

StatusOr<std::unique_ptr<UcxConnection>> UcxConnection::create(
    std::shared_ptr<Worker> worker, uint64_t commId, int myRank, int peer,
    const std::vector<uint8_t>& address, bool peerErrMode, bool readable) {
  CHORUS_ASSIGN_OR_RETURN(const double readSeconds, config::getDouble("CHORUS_TIMEOUT"));
  std::unique_ptr<UcxConnection> c(new UcxConnection(std::move(worker), commId, myRank, peer,
                                                     peerErrMode, readable, readSeconds));
  std::lock_guard<FutexMutex> lock(c->worker_->mutex());
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  p.address = reinterpret_cast<const ucp_address_t*>(address.data());
  p.err_mode = peerErrMode ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  if (peerErrMode) {
    p.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.err_handler.cb = &UcxConnection::onEndpointError;
    p.err_handler.arg = c->epErr_.get();
  }
  ucs_status_t st = ucp_ep_create(c->w_, &p, &c->ep_);
  if (st != UCS_OK)
    return systemError("ucx: rank " + std::to_string(myRank) + ": ucp_ep_create to rank " +
                       std::to_string(peer) + ": " + statusText(st));
  countEndpoint(1);
  c->postControlReceive();
  return c;
}

UcxConnection::~UcxConnection() {
  std::lock_guard<FutexMutex> lock(worker_->mutex());
  const bool healthy = !failed_ && !gone_ && !closedByPeer_ && !epErr_->failed;
  // Tell the peer how many messages it will get, so it fails what waits beyond them.
  if (healthy && ep_) sendControl(ControlKind::kClose, 0, posted_[kSend], "", kCloseBudgetMs);
  if (closeAfterControl_) {
    // An ABORT still on its way: give it the close budget, then close (by force if it is
    // still stuck).
    const auto deadline = Clock::now() + std::chrono::milliseconds(kCloseBudgetMs);
    while (!ctrlSend_->done && !epErr_->failed && Clock::now() < deadline)
      ucp_worker_progress(w_);
    closeAfterControl_ = false;
    closeEndpoint(!ctrlSend_->done);
  }
  releaseMemory();
  closeEndpoint(!healthy);
  cancelReceives();
  if (!drainRequests(kCloseBudgetMs)) {
    // UCX still holds requests whose callbacks point at these records: leave them to it.
    CHORUS_LOG(WARN, NET) << "ucx: rank " << myRank_ << ": requests to " << peerName()
                          << " still outstanding after " << kCloseBudgetMs << " ms at close";
    auto leave = [](std::unique_ptr<OpRec>& r) {
      if (!r || !r->request || r->done) return;
      r->events = &r->ownEvents;
      r.release();
    };
    for (auto& d : ops_)
      for (auto& r : d) leave(r);
    leave(ctrlRecv_);
    leave(ctrlSend_);
    leave(discard_);
  }
  // An endpoint close that did not finish may still report an error.
  if (closeUnfinished_) epErr_.release();
}

std::string UcxConnection::peerName() const { return "rank " + std::to_string(peer_); }

void UcxConnection::start(OpRec& r, ucs_status_ptr_t p) {
  if (UCS_PTR_IS_ERR(p)) {
    r.done = true;
    r.status = UCS_PTR_STATUS(p);
    ++events_;
  } else if (p == nullptr) {
    r.done = true;  // completed at once; no callback comes
    r.status = UCS_OK;
    ++events_;
  } else {
    r.request = p;
  }
}

std::unique_ptr<OpRec> UcxConnection::newRec() {
  std::unique_ptr<OpRec> r;
  if (spare_.empty()) {
    r = std::make_unique<OpRec>();
  } else {
    r = std::move(spare_.back());
    spare_.pop_back();
    r->request = nullptr;
    r->started = r->done = r->counted = r->bounced = r->mismatch = false;
    r->status = UCS_OK;
    r->length = 0;
    r->senderTag = 0;
  }
  r->events = &events_;
  return r;
}

void UcxConnection::postControlReceive() {
  ctrlRecv_ = newRec();
  ctrlIn_.assign(kControlBytes, 0);
  ucp_request_param_t p = recvParam(ctrlRecv_.get());
  // The callback always runs, so the length is always known.
  p.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  start(*ctrlRecv_, ucp_tag_recv_nbx(w_, ctrlIn_.data(), ctrlIn_.size(),
                                     controlTag(comm_, peer_), ~ucp_tag_t{0}, &p));
}

StatusOr<Op> UcxConnection::postSend(const void* src, size_t bytes, Tag tag) {
  std::lock_guard<FutexMutex> lock(worker_->mutex());
  if (failed_) return failure_;
  if (bytes > 0 && src == nullptr)
    return invalidArgument("postSend to rank " + std::to_string(peer_) + ": null buffer of " +
                           std::to_string(bytes) + " bytes");
  // Nobody is left to receive it (the op fails; the connection still delivers what arrived).
  if (gone_) return goneWhy_;
  if (closedByPeer_) return remoteError(peerName() + " closed the connection");
  auto r = newRec();
  r->data = const_cast<void*>(src);
  r->bytes = bytes;
  r->length = bytes;
  r->tag = tag;
  ucp_request_param_t p = sendParam(r.get());
  const ucs_status_ptr_t req =
      ucp_tag_send_nbx(ep_, bytes ? src : &gEmpty, bytes, dataTag(comm_, myRank_, tag), &p);
  if (req == nullptr && ops_[kSend].empty()) {
    // Gone at once with nothing before it (a small message): reported done from now on, no
    // record kept. Counted now, before anyone can ask.
    stats_.bytesSent += bytes;
    spare_.push_back(std::move(r));
    ++base_[kSend];
    return makeOp(kSend, posted_[kSend]++);
  }
  start(*r, req);
  ops_[kSend].push_back(std::move(r));
  return makeOp(kSend, posted_[kSend]++);
}

StatusOr<Op> UcxConnection::postRecv(void* dst, size_t bytes, Tag tag) {
  std::lock_guard<FutexMutex> lock(worker_->mutex());
  if (failed_) return failure_;
  if (bytes > 0 && dst == nullptr)
    return invalidArgument("postRecv from rank " + std::to_string(peer_) + ": null buffer of " +
                           std::to_string(bytes) + " bytes");
  auto r = newRec();
  r->data = dst;
  r->bytes = bytes;
  r->tag = tag;
  ops_[kRecv].push_back(std::move(r));
  const Op op = makeOp(kRecv, posted_[kRecv]++);
  // Hands it to UCX if its turn has come; the message may be waiting already.
  matchReceives();
  return op;
}

// Hands the posted receives to UCX, oldest first, each once every earlier one has been (so UCX
// matches them to the peer's messages in order): a small one at once into its bounce buffer, a
// larger one once the peer's next message is there and agrees with it.
void UcxConnection::matchReceives() {
  while (!failed_ && matched_ < posted_[kRecv]) {
    OpRec& r = *ops_[kRecv][matched_ - base_[kRecv]];
    if (r.bytes <= kBounceBytes) {
      postBounced(r);
      continue;
    }
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h msg = ucp_tag_probe_nb(w_, dataTag(comm_, peer_, 0), kMatchMask, 1, &info);
    if (!msg) return;
    const uint64_t sentTag = info.sender_tag & kMessageTagMask;
    if (info.length != r.bytes || sentTag != (r.tag & kMessageTagMask)) {
      if (info.length <= kDiscardMaxBytes) {
        discard_ = newRec();
        discardBuf_.resize(info.length + 1);
        ucp_request_param_t p = recvParam(discard_.get());
        start(*discard_, ucp_tag_msg_recv_nbx(w_, discardBuf_.data(), info.length, msg, &p));
      }
      return failMismatch(mismatch(info.length, sentTag, r));
    }
    r.length = info.length;
    r.started = true;
    ++matched_;
    ucp_request_param_t p = recvParam(&r);
    start(r, ucp_tag_msg_recv_nbx(w_, r.bytes ? r.data : &gEmpty, r.bytes, msg, &p));
  }
}

void UcxConnection::postBounced(OpRec& r) {
  r.started = true;
  r.bounced = true;
  ++matched_;
  ucp_request_param_t p = recvParam(&r);
  // The callback always runs (UCX 1.13 reports no length or tag on an immediate completion).
  p.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  start(r, ucp_tag_recv_nbx(w_, r.bounce, r.bytes, dataTag(comm_, peer_, 0), kMatchMask, &p));
}

Status UcxConnection::mismatch(size_t sentBytes, uint64_t sentTag, const OpRec& r) const {
  return invalidUsage("rank " + std::to_string(peer_) + " sent a message of " +
                      std::to_string(sentBytes) + " bytes (tag " + std::to_string(sentTag) +
                      ") but rank " + std::to_string(myRank_) + " posted a receive of " +
                      std::to_string(r.bytes) + " bytes (tag " + std::to_string(r.tag) + ")" +
                      (r.tag > kMessageTagMask ? " (tags compared on their low 28 bits)" : ""));
}

void UcxConnection::failMismatch(Status why) {
  // Matching cannot resume past a message nobody takes; tell the sender why, then fail.
  sendControl(ControlKind::kAbort, static_cast<uint32_t>(Code::kInvalidUsage), 0, why.message(),
              kCancelBudgetMs);
  fail(std::move(why));
}

// Frees what UCX finished with, fails the connection on an op UCX failed or a bounced receive
// that met the wrong message, and retires the completed ops at the front (keeping their records
// for reuse).
void UcxConnection::settle() {
  settled_ = events_;
  for (uint64_t d : {kSend, kRecv}) {
    for (auto& r : ops_[d]) {
      if (!r->done) continue;
      if (r->request) {
        ucp_request_free(r->request);
        r->request = nullptr;
      }
      if (failed_) continue;
      if (r->mismatch) {
        failMismatch(mismatch(r->length, r->senderTag & kMessageTagMask, *r));
      } else if (r->status != UCS_OK) {
        if (gone_) {
          fail(goneWhy_);
        } else if (epErr_->failed) {
          fail(remoteError(peerName() + " failed or closed its end: " +
                           statusText(epErr_->status)));
        } else {
          fail(remoteError("ucx: " + std::string(d == kSend ? "send to " : "receive from ") +
                           peerName() + " failed: " + statusText(r->status)));
        }
      }
    }
    while (!ops_[d].empty()) {
      OpRec& f = *ops_[d].front();
      if (!f.done || f.status != UCS_OK || f.mismatch || f.request) break;
      countBytes(d, f);
      if (spare_.size() < kSpareRecords) spare_.push_back(std::move(ops_[d].front()));
      ops_[d].pop_front();
      ++base_[d];
    }
  }
  for (OpRec* r : {ctrlSend_.get(), discard_.get()})
    if (r && r->done && r->request) {
      ucp_request_free(r->request);
      r->request = nullptr;
    }
}

void UcxConnection::handleControl() {
  if (!ctrlRecv_ || !ctrlRecv_->done) return;
  std::unique_ptr<OpRec> r = std::move(ctrlRecv_);
  if (r->request) ucp_request_free(r->request);
  if (r->status == UCS_ERR_CANCELED) return;
  if (r->status != UCS_OK || r->length < kControlHeaderBytes)
    return fail(remoteError(peerName() + " sent a malformed control message (" +
                            statusText(r->status) + ", " + std::to_string(r->length) +
                            " bytes)"));
  uint32_t kind = 0, code = 0;
  uint64_t count = 0;
  std::memcpy(&kind, ctrlIn_.data(), 4);
  std::memcpy(&code, ctrlIn_.data() + 4, 4);
  std::memcpy(&count, ctrlIn_.data() + 8, 8);
  const std::string text(reinterpret_cast<const char*>(ctrlIn_.data()) + kControlHeaderBytes,
                         r->length - kControlHeaderBytes);
  if (kind == static_cast<uint32_t>(ControlKind::kClose)) {
    closedByPeer_ = true;
    peerSent_ = count;
    return;
  }
  if (kind != static_cast<uint32_t>(ControlKind::kAbort))
    return fail(remoteError(peerName() + " sent an unknown control message (kind " +
                            std::to_string(kind) + ")"));
  // A usage error stays one on every rank; anything else is, from here, the peer's failure.
  const Code mapped = code == static_cast<uint32_t>(Code::kInvalidUsage) ? Code::kInvalidUsage
                                                                         : Code::kRemoteError;
  fail(Status(mapped, peerName() + " aborted: " + text));
}

Status UcxConnection::progressLocked() {
  if (failed_) {
    if (closeAfterControl_) {
      ucp_worker_progress(w_);
      if (ctrlSend_->done || epErr_->failed) {
        closeAfterControl_ = false;
        releaseMemory();
        closeEndpoint(false);  // a flush: what the ABORT handed UCX leaves first
      }
    }
    return failure_;
  }
  // A few rounds while the worker finds work, stopping once an op of this connection finished:
  // the caller learns of it at once.
  const uint64_t seen = events_;
  for (int i = 0; i < 4 && ucp_worker_progress(w_) != 0; ++i) {
    ++worker_->progressed;
    if (events_ != seen) break;
  }
  handleControl();
  if (matched_ < posted_[kRecv]) matchReceives();
  if (events_ != settled_) settle();
  if (failed_) return failure_;
  // A failed endpoint: the peer is gone; what it delivered is still received.
  if (epErr_->failed && !gone_ && !closedByPeer_) {
    gone_ = true;
    goneWhy_ = remoteError(peerName() + " failed or closed its end: " +
                           statusText(epErr_->status));
  }
  if (closedByPeer_) {
    // The peer's last peerSent_ messages are all there will be: once every receive they can
    // complete has, a receive beyond them, or any send, never will.
    bool deliverablePending = false;
    for (size_t i = 0; i < ops_[kRecv].size() && base_[kRecv] + i < peerSent_; ++i)
      if (pending(*ops_[kRecv][i])) deliverablePending = true;
    bool sendPending = false;
    for (const auto& r : ops_[kSend])
      if (pending(*r)) sendPending = true;
    if (!deliverablePending && (posted_[kRecv] > peerSent_ || sendPending))
      fail(remoteError(peerName() + " closed the connection"));
  }
  if (gone_ && !failed_) {
    bool anyPending = false;
    for (const auto& d : ops_)
      for (const auto& r : d)
        if (pending(*r)) anyPending = true;
    if (anyPending) {
      // Take what already reached this worker, then fail what is still waiting.
      int quiet = 0;
      for (int i = 0; i < 100 * kDrainRounds && quiet < kDrainRounds; ++i)
        quiet = ucp_worker_progress(w_) != 0 ? 0 : quiet + 1;
      handleControl();
      matchReceives();
      settle();
      anyPending = false;
      for (const auto& d : ops_)
        for (const auto& r : d)
          if (pending(*r)) anyPending = true;
      if (anyPending && !failed_) fail(goneWhy_);
    }
  }
  return failed_ ? failure_ : Status();
}

Status UcxConnection::progress() {
  std::lock_guard<FutexMutex> lock(worker_->mutex());
  return progressLocked();
}

Status UcxConnection::test(Op& op, bool* done) {
  std::lock_guard<FutexMutex> lock(worker_->mutex());
  progressLocked().ignore();
  return checkLocked(op, done);
}

Status UcxConnection::check(Op& op, bool* done) {
  std::lock_guard<FutexMutex> lock(worker_->mutex());
  return checkLocked(op, done);
}

void UcxConnection::countBytes(uint64_t dir, OpRec& r) {
  if (r.counted) return;
  r.counted = true;
  (dir == kSend ? stats_.bytesSent : stats_.bytesRecv) += r.length;
}

Status UcxConnection::checkLocked(const Op& op, bool* done) {
  *done = false;
  const uint64_t dir = op.id & 1;
  const uint64_t seq = (op.id >> 1) - 1;
  if (op.id < 2 || seq >= posted_[dir])
    return invalidUsage("op " + std::to_string(op.id) +
                        " was not posted on the connection to rank " + std::to_string(peer_));
  if (seq < base_[dir]) {
    *done = true;
    return Status();
  }
  OpRec& r = *ops_[dir][seq - base_[dir]];
  if (r.done && r.status == UCS_OK && !r.mismatch) {
    // Counted as it is reported: statistics read right after the call include it.
    countBytes(dir, r);
    *done = true;
    return Status();
  }
  if (failed_) {
    *done = true;
    return failure_;
  }
  return Status();
}

// Whether progress() has something to do without the worker: a control message, a waiting
// message for a posted receive, a finished request, a failure to act on.
bool UcxConnection::readyLocked() const {
  if (ctrlRecv_ && ctrlRecv_->done) return true;
  if (epErr_->failed && !gone_ && !closedByPeer_) return true;
  if (gone_ || closedByPeer_) return true;
  for (const auto& d : ops_)
    for (const auto& r : d)
      if (r->done) return true;
  // Bounced receives are in UCX's hands already; a larger one waits for a probe to find its
  // message.
  if (matched_ < posted_[kRecv]) {
    if (ops_[kRecv][matched_ - base_[kRecv]]->bytes <= kBounceBytes) return true;
    ucp_tag_recv_info_t info{};
    if (ucp_tag_probe_nb(w_, dataTag(comm_, peer_, 0), kMatchMask, 0, &info)) return true;
  }
  return false;
}

void UcxConnection::pollInfo(int* fd, short* events) const {
  *fd = -1;
  *events = 0;
  std::lock_guard<FutexMutex> lock(worker_->mutex());
  // With nothing to do now, arm the worker: its fd then wakes a poll() on the next event. Any
  // work found on the way means "do not sleep" (fd -1, and prepareWait() says so too).
  if (failed_ || readyLocked()) return;
  const auto now = Clock::now();
  // Progress since the last look counts as work now (it happened at most a spin ago).
  if (worker_->progressed != worker_->progressedSeen) {
    worker_->progressedSeen = worker_->progressed;
    worker_->lastEvent = now;
  }
  if (ucp_worker_progress(w_) != 0) {
    worker_->lastEvent = now;
    return;
  }
  if (readyLocked()) return;
  // A worker busy moments ago keeps being progressed: between two fragments of a large
  // message progress finds nothing for a moment, and the worker's fd may not wake a sleeper
  // when the next one is there (see pollSliceMs()).
  if (now - worker_->lastEvent < std::chrono::microseconds(kBusyWindowUs)) return;
  if (ucp_worker_arm(w_) != UCS_OK) return;  // UCS_ERR_BUSY: events arrived meanwhile
  *fd = worker_->eventFd();
  *events = POLLIN;
}

ConnStats UcxConnection::stats() const {
  std::lock_guard<FutexMutex> lock(worker_->mutex());
  return stats_;
}

void UcxConnection::fail(Status why) {
  if (failed_) return;
  size_t outstanding = 0;
  for (const auto& d : ops_)
    for (const auto& r : d)
      if (pending(*r)) ++outstanding;
  if (outstanding > 0) {
    CHORUS_LOG(INFO, NET) << "ucx: connection from rank " << myRank_ << " to " << peerName()
                          << " (error mode " << (peerErrMode_ ? "peer" : "none")
                          << ") failed with " << outstanding
                          << " ops outstanding: " << why.toString();
  }
  failed_ = true;
  failure_ = std::move(why);
  // Receives no message has reached end at once when cancelled. Closing the endpoint by force
  // completes every request on it (UCS_ERR_CANCELED), so the callers' buffers are free once
  // their ops report the failure. Receives never handed to UCX, and bounced ones, hold none of
  // the callers' memory. An ABORT that has not left yet (a UCX endpoint is wired up on first
  // use, with the peer's help) keeps the endpoint open while no caller's buffer is in UCX's
  // hands: later progress() calls let it out, then close the endpoint.
  cancelReceives();
  bool inUcx = false;
  for (const auto& d : ops_)
    for (const auto& r : d)
      if (r->request && !r->done && !r->bounced) inUcx = true;
  if (!inUcx && ep_ && ctrlSend_ && !ctrlSend_->done && !epErr_->failed) {
    closeAfterControl_ = true;
  } else {
    releaseMemory();
    closeEndpoint(true);
  }
  drainRequests(kCancelBudgetMs);
}

void UcxConnection::cancelReceives() {
  // A receive waiting in UCX's expected queue belongs to the worker, not to the endpoint:
  // closing the endpoint does not end it, cancelling does (at once, UCS_ERR_CANCELED). One
  // already matched to a message ends with that message or with the endpoint.
  for (auto& r : ops_[kRecv])
    if (r->request && !r->done) ucp_request_cancel(w_, r->request);
  if (ctrlRecv_ && ctrlRecv_->request && !ctrlRecv_->done)
    ucp_request_cancel(w_, ctrlRecv_->request);
}

Status UcxConnection::cancel(const Status& why) {
  std::lock_guard<FutexMutex> lock(worker_->mutex());
  if (failed_) return Status();
  Status reason = why.ok() ? internalError("connection cancelled without a reason") : why;
  sendControl(ControlKind::kAbort, static_cast<uint32_t>(reason.code()), 0, reason.message(),
              kCancelBudgetMs);
  CHORUS_LOG(INFO, NET) << "ucx: rank " << myRank_ << " aborting its connection to "
                        << peerName() << ": " << reason.toString();
  fail(reason);
  return Status();
}

void UcxConnection::peerGone(const Status& why) {
  std::lock_guard<FutexMutex> lock(worker_->mutex());
  if (failed_ || gone_) return;
  gone_ = true;
  goneWhy_ = why;
  progressLocked().ignore();
}

void UcxConnection::sendControl(ControlKind kind, uint32_t code, uint64_t count,
                                const std::string& text, int budgetMs) {
  if (!ep_ || ctrlSend_) return;  // one control message per connection, at most
  const size_t n = std::min(text.size(), kControlBytes - kControlHeaderBytes);
  ctrlOut_.assign(kControlHeaderBytes + n, 0);
  const uint32_t k = static_cast<uint32_t>(kind);
  std::memcpy(ctrlOut_.data(), &k, 4);
  std::memcpy(ctrlOut_.data() + 4, &code, 4);
  std::memcpy(ctrlOut_.data() + 8, &count, 8);
  std::memcpy(ctrlOut_.data() + kControlHeaderBytes, text.data(), n);
  ctrlSend_ = newRec();
  ucp_request_param_t p = sendParam(ctrlSend_.get());
  start(*ctrlSend_, ucp_tag_send_nbx(ep_, ctrlOut_.data(), ctrlOut_.size(),
                                     controlTag(comm_, myRank_), &p));
  const auto deadline = Clock::now() + std::chrono::milliseconds(budgetMs);
  while (!ctrlSend_->done && !epErr_->failed && Clock::now() < deadline) ucp_worker_progress(w_);
  if (ctrlSend_->done && ctrlSend_->request) {
    ucp_request_free(ctrlSend_->request);
    ctrlSend_->request = nullptr;
  }
}

void UcxConnection::closeEndpoint(bool force) {
  if (!ep_) return;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t req = ucp_ep_close_nbx(ep_, &p);
  ep_ = nullptr;
  countEndpoint(-1);
  if (!UCS_PTR_IS_PTR(req)) return;
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(force ? kCancelBudgetMs : kCloseBudgetMs);
  while (ucp_request_check_status(req) == UCS_INPROGRESS && !epErr_->failed &&
         Clock::now() < deadline)
    ucp_worker_progress(w_);
  if (ucp_request_check_status(req) == UCS_INPROGRESS) {
    closeUnfinished_ = true;
    CHORUS_LOG(WARN, NET) << "ucx: rank " << myRank_ << ": closing the endpoint to "
                          << peerName() << " did not finish in time; left to UCX";
  }
  ucp_request_free(req);
}

bool UcxConnection::drainRequests(int budgetMs) {
  auto busy = [&] {
    for (const auto& d : ops_)
      for (const auto& r : d)
        if (r->request && !r->done) return true;
    for (const OpRec* r : {ctrlRecv_.get(), ctrlSend_.get(), discard_.get()})
      if (r && r->request && !r->done) return true;
    return false;
  };
  const auto deadline = Clock::now() + std::chrono::milliseconds(budgetMs);
  while (busy() && Clock::now() < deadline) ucp_worker_progress(w_);
  auto release = [&](OpRec* r) {
    if (r && r->request && r->done) {
      ucp_request_free(r->request);
      r->request = nullptr;
    }
  };
  for (const auto& d : ops_)
    for (const auto& r : d) release(r.get());
  for (OpRec* r : {ctrlRecv_.get(), ctrlSend_.get(), discard_.get()}) release(r);
  return !busy();
}

// ---- One-sided reads ---------------------------------------------------------------------

StatusOr<MemHandle> UcxConnection::expose(const void* base, size_t bytes) {
  std::lock_guard<FutexMutex> lock(worker_->mutex());
  if (!readable_)
    return internalError("ucx: the connection to " + peerName() + " offers no one-sided reads");
  if (failed_) return failure_;
  if (bytes > 0 && base == nullptr)
    return invalidArgument("ucx: exposing a null range of " + std::to_string(bytes) + " bytes");
  const ucp_context_h ctx = worker_->context();
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = bytes ? const_cast<void*>(base) : &gEmpty;
  mp.length = bytes ? bytes : 1;
  ucp_mem_h mem = nullptr;
  ucs_status_t st = ucp_mem_map(ctx, &mp, &mem);
  if (st != UCS_OK)
    return systemError("ucx: rank " + std::to_string(myRank_) + ": ucp_mem_map of " +
                       std::to_string(bytes) + " bytes for " + peerName() + ": " +
                       statusText(st));
  void* packed = nullptr;
  size_t packedBytes = 0;
  st = ucp_rkey_pack(ctx, mem, &packed, &packedBytes);
  if (st != UCS_OK || packedBytes > MemHandle::kMaxBytes - kHandleHeaderBytes) {
    if (st == UCS_OK) ucp_rkey_buffer_release(packed);
    ucp_mem_unmap(ctx, mem);
    if (st != UCS_OK)
      return systemError("ucx: rank " + std::to_string(myRank_) + ": ucp_rkey_pack: " +
                         statusText(st));
    return internalError("ucx: the remote key of an exposed range is " +
                         std::to_string(packedBytes) + " bytes; a memory handle holds " +
                         std::to_string(MemHandle::kMaxBytes - kHandleHeaderBytes));
  }
  MemHandle h;
  const uint64_t header[2] = {reinterpret_cast<uint64_t>(base), bytes};
  std::memcpy(h.bytes, header, kHandleHeaderBytes);
  std::memcpy(h.bytes + kHandleHeaderBytes, packed, packedBytes);
  h.size = static_cast<uint32_t>(kHandleHeaderBytes + packedBytes);
  ucp_rkey_buffer_release(packed);
  exposed_.push_back(mem);
  while (exposed_.size() > kKeptMappings) {
    ucp_mem_unmap(ctx, exposed_.front());
    exposed_.pop_front();
  }
  return h;
}

StatusOr<ucp_rkey_h> UcxConnection::remoteKey(const MemHandle& remote) {
  for (const RemoteKey& k : keys_)
    if (k.handle.size == remote.size && std::memcmp(k.handle.bytes, remote.bytes, remote.size) == 0)
      return k.key;
  ucp_rkey_h key = nullptr;
  ucs_status_t st = ucp_ep_rkey_unpack(ep_, remote.bytes + kHandleHeaderBytes, &key);
  if (st != UCS_OK)
    return invalidUsage("ucx: " + peerName() + " sent a memory handle whose remote key UCX " +
                        "cannot unpack: " + statusText(st));
  keys_.push_back({remote, key});
  while (keys_.size() > kKeptKeys) {
    ucp_rkey_destroy(keys_.front().key);
    keys_.pop_front();
  }
  return key;
}

Status UcxConnection::read(void* dst, const MemHandle& remote, uint64_t offset, size_t bytes) {
  std::unique_lock<FutexMutex> lock(worker_->mutex());
  if (!readable_)
    return internalError("ucx: the connection to " + peerName() + " offers no one-sided reads");
  if (failed_) return failure_;
  if (remote.size <= kHandleHeaderBytes || remote.size > MemHandle::kMaxBytes)
    return invalidUsage(peerName() + " sent a memory handle of " + std::to_string(remote.size) +
                        " bytes, not a UCX one");
  uint64_t header[2];
  std::memcpy(header, remote.bytes, kHandleHeaderBytes);
  const uint64_t addr = header[0], exposedBytes = header[1];
  if (offset > exposedBytes || bytes > exposedBytes - offset)
    return invalidUsage("reading bytes [" + std::to_string(offset) + ", " +
                        std::to_string(offset + bytes) + ") of " + peerName() +
                        "'s memory, which exposed only " + std::to_string(exposedBytes));
  if (bytes == 0) return Status();
  if (dst == nullptr) return invalidArgument("ucx: read into a null buffer");
  if (gone_) return goneWhy_;
  CHORUS_ASSIGN_OR_RETURN(ucp_rkey_h key, remoteKey(remote));
  // The record lives on the heap: if UCX still holds the request when this call must return,
  // its callback may write to it later.
  auto r = newRec();
  ucp_request_param_t p = sendParam(r.get());
  start(*r, ucp_get_nbx(ep_, dst, bytes, addr + offset, key, &p));
  const auto deadline =
      Clock::now() + std::chrono::microseconds(static_cast<int64_t>(readSeconds_ * 1e6));
  const std::string what = "ucx: reading " + std::to_string(bytes) + " bytes of " + peerName() +
                           "'s memory";
  while (!r->done) {
    ucp_worker_progress(w_);
    if (r->done) break;
    if (failed_ || epErr_->failed || gone_) {
      // Another thread's cancel(), or the peer failed: the endpoint's close ends the request.
      if (!failed_)
        fail(gone_ ? goneWhy_
                   : remoteError(what + ": the peer failed: " + statusText(epErr_->status)));
      break;
    }
    if (Clock::now() > deadline) {
      fail(timeoutError(what + " did not finish within CHORUS_TIMEOUT (" +
                        std::to_string(readSeconds_) + " s)"));
      break;
    }
    // Let a thread that cancels the connection (chorusCommAbort) in between progress calls.
    lock.unlock();
    lock.lock();
  }
  if (!r->done) {
    // fail() closed the endpoint by force, which completes the request; give it its budget.
    const auto until = Clock::now() + std::chrono::milliseconds(kCancelBudgetMs);
    while (!r->done && Clock::now() < until) ucp_worker_progress(w_);
  }
  if (r->request) {
    if (!r->done) {
      CHORUS_LOG(WARN, NET) << what << ": UCX still holds the request; left to it";
      r->events = &r->ownEvents;
      r.release();
      return failure_;
    }
    ucp_request_free(r->request);
  }
  if (r->status != UCS_OK && !failed_)
    fail(remoteError(what + " failed: " + statusText(r->status)));
  return failed_ ? failure_ : Status();
}

void UcxConnection::releaseMemory() {
  for (const RemoteKey& k : keys_) ucp_rkey_destroy(k.key);
  keys_.clear();
  for (ucp_mem_h m : exposed_) ucp_mem_unmap(worker_->context(), m);
  exposed_.clear();
}

}  // namespace chorus::ucx
