#include "transports/tcp/tcp_connection.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "src/base/logging.h"

namespace chorus::tcp {
namespace {

// Enough iovecs to batch a burst of small messages; large ones need two each at most.
constexpr int kMaxIov = 64;
// How long cancel() may spend finishing a half-sent frame so the ABORT frame can follow it.
constexpr auto kCancelBudget = std::chrono::milliseconds(100);
// Input cancel() discards before closing; a peer still streaming is cut off with a reset.
constexpr size_t kMaxDrainBytes = 64 << 20;

bool wouldBlock(int err) { return err == EAGAIN || err == EWOULDBLOCK; }
bool connectionLost(int err) { return err == ECONNRESET || err == EPIPE || err == ENOTCONN; }

}  // namespace

TcpConnection::TcpConnection(net::Fd fd, int myRank, int peer, std::string peerAddr)
    : fd_(std::move(fd)), myRank_(myRank), peer_(peer), peerAddr_(std::move(peerAddr)) {}

std::string TcpConnection::peerName() const {
  return "rank " + std::to_string(peer_) + " (" + peerAddr_ + ")";
}

StatusOr<Op> TcpConnection::postSend(const void* src, size_t bytes, Tag tag) {
  if (failed_) return failure_;
  if (bytes > 0 && src == nullptr)
    return invalidArgument("postSend to rank " + std::to_string(peer_) + ": null buffer of " +
                           std::to_string(bytes) + " bytes");
  SendOp s{static_cast<const uint8_t*>(src), bytes, {}, 0};
  wire::encodeFrameHeader(FrameHeader{FrameType::kData, tag, bytes}, s.header);
  sends_.push_back(s);
  // Not sent yet: the next progress() sends everything posted since in one sendmsg, so a
  // header and the data behind it leave together.
  return makeOp(kSend, posted_[kSend]++);
}

StatusOr<Op> TcpConnection::postRecv(void* dst, size_t bytes, Tag tag) {
  if (failed_) return failure_;
  if (bytes > 0 && dst == nullptr)
    return invalidArgument("postRecv from rank " + std::to_string(peer_) + ": null buffer of " +
                           std::to_string(bytes) + " bytes");
  recvs_.push_back(RecvOp{static_cast<uint8_t*>(dst), bytes, tag});
  Op op = makeOp(kRecv, posted_[kRecv]++);
  // A frame may already be waiting for exactly this receive (in the buffer, or at its head).
  if (recvs_.size() == 1 && (rbegin_ < rend_ || (recvState_ == RecvState::kData && !matched_)))
    progressRecvs();
  return op;
}

Status TcpConnection::progress() {
  if (!failed_) {
    if (!gone_) progressSends();
    progressRecvs();
    // A peer known to be gone sends nothing more: what the kernel held has just been taken, so
    // an op still waiting now never completes.
    if (gone_ && !failed_ && (!sends_.empty() || !recvs_.empty())) fail(goneWhy_);
  }
  return failed_ ? failure_ : Status();
}

Status TcpConnection::test(Op& op, bool* done) {
  if (!failed_) progress().ignore();
  return check(op, done);
}

Status TcpConnection::check(Op& op, bool* done) {
  *done = false;
  const uint64_t dir = op.id & 1;
  const uint64_t seq = (op.id >> 1) - 1;
  if (op.id < 2 || seq >= posted_[dir])
    return invalidUsage("op " + std::to_string(op.id) +
                        " was not posted on the connection to rank " + std::to_string(peer_));
  if (seq < completed_[dir]) {
    *done = true;
    return Status();
  }
  if (failed_) {
    *done = true;
    return failure_;
  }
  return Status();
}

void TcpConnection::pollInfo(int* fd, short* events) const {
  if (failed_) {
    // Every op's fate is already known: test() answers at once.
    *fd = -1;
    *events = 0;
    return;
  }
  // Data waiting for a receive that is not posted: stop reading until one is (the kernel's
  // buffers, then the sender, absorb the rest).
  const bool backPressured = recvs_.empty() && (rbegin_ < rend_ ||
                                                (recvState_ == RecvState::kData && !matched_));
  short ev = 0;
  if (!backPressured) ev |= POLLIN;
  if (!sends_.empty()) ev |= POLLOUT;
  *fd = fd_.get();
  *events = ev;
}

void TcpConnection::progressSends() {
  while (!failed_ && !sends_.empty()) {
    iovec iov[kMaxIov];
    int n = 0;
    size_t want = 0;
    for (const SendOp& s : sends_) {
      if (n + 2 > kMaxIov) break;
      size_t sent = s.sent;
      if (sent < kFrameHeaderBytes) {
        iov[n++] = {const_cast<uint8_t*>(s.header) + sent, kFrameHeaderBytes - sent};
        want += kFrameHeaderBytes - sent;
        sent = kFrameHeaderBytes;
      }
      size_t off = sent - kFrameHeaderBytes;
      if (off < s.bytes) {
        iov[n++] = {const_cast<uint8_t*>(s.data) + off, s.bytes - off};
        want += s.bytes - off;
      }
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    ssize_t r = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r < 0) {
      int err = errno;
      if (err == EINTR) continue;
      if (wouldBlock(err)) return;
      if (connectionLost(err)) {
        // The peer may have said why before it went: an ABORT frame waiting in our input.
        progressRecvs();
        return onPeerGone(err);
      }
      return fail(errnoStatus("sendmsg", peerName(), err));
    }
    size_t left = static_cast<size_t>(r);
    while (left > 0) {
      SendOp& s = sends_.front();
      const size_t total = kFrameHeaderBytes + s.bytes;
      const size_t take = std::min(left, total - s.sent);
      const size_t payloadBefore = s.sent > kFrameHeaderBytes ? s.sent - kFrameHeaderBytes : 0;
      s.sent += take;
      left -= take;
      const size_t payloadAfter = s.sent > kFrameHeaderBytes ? s.sent - kFrameHeaderBytes : 0;
      stats_.bytesSent += payloadAfter - payloadBefore;
      if (s.sent < total) break;
      sends_.pop_front();
      ++completed_[kSend];
    }
    // A short write means the socket buffer is full; asking again would only return EAGAIN.
    if (static_cast<size_t>(r) < want) return;
  }
}

// Reads what the socket has into the receive buffer (which must be empty); false when nothing
// came (would block) or the connection failed.
bool TcpConnection::fillBuffer() {
  rbegin_ = rend_ = 0;
  while (true) {
    ssize_t r = ::recv(fd_.get(), rbuf_.data(), rbuf_.size(), MSG_DONTWAIT);
    if (r > 0) {
      rend_ = static_cast<size_t>(r);
      return true;
    }
    if (r == 0) {
      onPeerGone(0);
      return false;
    }
    const int err = errno;
    if (err == EINTR) continue;
    if (!wouldBlock(err)) {
      if (connectionLost(err)) onPeerGone(err);
      else fail(errnoStatus("recv", peerName(), err));
    }
    return false;
  }
}

// Small frames come many to a read: the socket is read into rbuf_ and frames are taken from
// there. A large payload is read straight into its receive buffer (no copy), together with
// whatever follows it into rbuf_.
void TcpConnection::progressRecvs() {
  while (!failed_) {
    if (recvState_ == RecvState::kHeader) {
      if (rbegin_ == rend_ && !fillBuffer()) return;
      const size_t take = std::min(kFrameHeaderBytes - headerFilled_, rend_ - rbegin_);
      std::memcpy(header_ + headerFilled_, rbuf_.data() + rbegin_, take);
      rbegin_ += take;
      headerFilled_ += take;
      if (headerFilled_ == kFrameHeaderBytes) onHeader();
      continue;
    }
    if (recvState_ == RecvState::kAbort) {
      readAbortMessage();
      return;
    }

    // A DATA frame: pair it with the oldest posted receive, or leave it for one to be posted.
    if (!matched_) {
      if (recvs_.empty()) return;
      const RecvOp& want = recvs_.front();
      if (want.bytes != frame_.length || want.tag != frame_.tag) {
        Status mismatch = invalidUsage(
            "rank " + std::to_string(peer_) + " sent a message of " +
            std::to_string(frame_.length) + " bytes (tag " + std::to_string(frame_.tag) +
            ") but rank " + std::to_string(myRank_) + " posted a receive of " +
            std::to_string(want.bytes) + " bytes (tag " + std::to_string(want.tag) + ")");
        // The stream cannot be resynchronised; tell the sender why, without waiting.
        abortStream(mismatch, net::Clock::now());
        return;
      }
      matched_ = true;
      payloadFilled_ = 0;
    }
    RecvOp& r = recvs_.front();
    if (payloadFilled_ < r.bytes && rbegin_ < rend_) {
      const size_t take = std::min(r.bytes - payloadFilled_, rend_ - rbegin_);
      std::memcpy(r.data + payloadFilled_, rbuf_.data() + rbegin_, take);
      rbegin_ += take;
      payloadFilled_ += take;
      stats_.bytesRecv += take;
    }
    if (payloadFilled_ < r.bytes) {
      // rbuf_ is empty here. A payload larger than the buffer goes straight to its destination.
      const size_t left = r.bytes - payloadFilled_;
      if (left < rbuf_.size()) {
        if (!fillBuffer()) return;
        continue;
      }
      rbegin_ = rend_ = 0;
      iovec iov[2] = {{r.data + payloadFilled_, left}, {rbuf_.data(), rbuf_.size()}};
      ssize_t n = ::readv(fd_.get(), iov, 2);
      if (n == 0) return onPeerGone(0);
      if (n < 0) {
        int err = errno;
        if (err == EINTR) continue;
        if (wouldBlock(err)) return;
        if (connectionLost(err)) return onPeerGone(err);
        return fail(errnoStatus("readv", peerName(), err));
      }
      const size_t k = std::min(static_cast<size_t>(n), left);
      payloadFilled_ += k;
      stats_.bytesRecv += k;
      rend_ = static_cast<size_t>(n) - k;
    }
    if (payloadFilled_ == r.bytes) {
      recvs_.pop_front();
      ++completed_[kRecv];
      matched_ = false;
      payloadFilled_ = 0;
      recvState_ = RecvState::kHeader;
    }
  }
}

void TcpConnection::onHeader() {
  FrameHeader f;
  if (!wire::decodeFrameHeader(header_, &f) ||
      (f.type == FrameType::kAbort && f.length > kMaxAbortMessage))
    return fail(remoteError(peerName() + " sent a corrupt frame header (protocol error)"));
  headerFilled_ = 0;
  frame_ = f;
  if (f.type == FrameType::kAbort) {
    abortMessage_.clear();
    recvState_ = RecvState::kAbort;
  } else {
    recvState_ = RecvState::kData;
    matched_ = false;
    payloadFilled_ = 0;
  }
}

void TcpConnection::readAbortMessage() {
  if (rbegin_ < rend_) {
    const size_t take = std::min(frame_.length - abortMessage_.size(), rend_ - rbegin_);
    abortMessage_.append(reinterpret_cast<const char*>(rbuf_.data() + rbegin_), take);
    rbegin_ += take;
  }
  while (abortMessage_.size() < frame_.length) {
    char buf[kMaxAbortMessage];
    ssize_t r = ::recv(fd_.get(), buf, frame_.length - abortMessage_.size(), MSG_DONTWAIT);
    if (r == 0) return onPeerGone(0);
    if (r < 0) {
      int err = errno;
      if (err == EINTR) continue;
      if (wouldBlock(err)) return;
      if (connectionLost(err)) return onPeerGone(err);
      return fail(errnoStatus("recv", peerName(), err));
    }
    abortMessage_.append(buf, static_cast<size_t>(r));
  }
  // A usage error stays one on every rank; anything else is, from here, the peer's failure.
  const Code code = frame_.tag == static_cast<uint64_t>(Code::kInvalidUsage) ? Code::kInvalidUsage
                                                                             : Code::kRemoteError;
  fail(Status(code, "rank " + std::to_string(peer_) + " aborted: " + abortMessage_));
}

void TcpConnection::onPeerGone(int err) {
  std::string msg = peerName() + " closed the connection";
  if (err != 0) msg += std::string(" (") + std::strerror(err) + ")";
  fail(remoteError(msg));
}

void TcpConnection::peerGone(const Status& why) {
  // The peer is silent (its heartbeats stopped) or has failed: nothing more will come. What
  // already reached this host still completes, now or when its receive is posted; every other
  // op fails with `why` (progress()). Nothing more is sent: a silent peer would not read it,
  // and a full socket must not hold this up.
  if (failed_ || gone_) return;
  gone_ = true;
  goneWhy_ = why;
  progress().ignore();
}

void TcpConnection::fail(Status why) {
  if (failed_) return;
  if (!sends_.empty() || !recvs_.empty()) {
    CHORUS_LOG(INFO, NET) << "tcp: connection from rank " << myRank_ << " to " << peerName()
                          << " failed with " << sends_.size() << " sends and " << recvs_.size()
                          << " receives outstanding: " << why.toString();
  }
  failed_ = true;
  failure_ = std::move(why);
  // The caller may free its buffers as soon as their ops report failure.
  sends_.clear();
  recvs_.clear();
}

Status TcpConnection::cancel(const Status& why) {
  if (failed_) return Status();
  Status reason = why.ok() ? internalError("connection cancelled without a reason") : why;
  abortStream(reason, net::Clock::now() + kCancelBudget);
  return Status();
}

void TcpConnection::abortStream(const Status& why, net::Deadline deadline) {
  // The ABORT frame may only start at a frame boundary: finish a half-sent frame first.
  bool atBoundary = true;
  if (!sends_.empty() && sends_.front().sent > 0) {
    const SendOp& s = sends_.front();
    atBoundary = pushBounded(s.header, s.data, s.bytes, s.sent, deadline);
  }
  bool told = false;
  if (atBoundary) {
    const std::string msg = why.message().substr(0, kMaxAbortMessage);
    uint8_t header[kFrameHeaderBytes];
    wire::encodeFrameHeader(
        FrameHeader{FrameType::kAbort, static_cast<uint64_t>(why.code()), msg.size()}, header);
    told = pushBounded(header, reinterpret_cast<const uint8_t*>(msg.data()), msg.size(), 0,
                       deadline);
  }
  // Input still queued at close() would make the kernel answer with a reset instead of a FIN;
  // drain it so the ABORT frame is followed by a clean end of stream. Anything the peer sends
  // after the close is answered with a reset, which fails its blocked sends at once.
  std::vector<uint8_t> sink(64 << 10);
  size_t drained = 0;
  while (drained < kMaxDrainBytes) {
    ssize_t r = ::recv(fd_.get(), sink.data(), sink.size(), MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    drained += static_cast<size_t>(r);
  }
  fd_.reset();
  CHORUS_LOG(INFO, NET) << "tcp: rank " << myRank_ << " aborting its connection to " << peerName()
                        << (told ? "" : " (peer not told: socket busy)") << ": "
                        << why.toString();
  fail(why);
}

bool TcpConnection::pushBounded(const uint8_t* header, const uint8_t* data, size_t dataLen,
                                size_t sent, net::Deadline deadline) {
  const size_t total = kFrameHeaderBytes + dataLen;
  while (sent < total) {
    iovec iov[2];
    int n = 0;
    if (sent < kFrameHeaderBytes)
      iov[n++] = {const_cast<uint8_t*>(header) + sent, kFrameHeaderBytes - sent};
    const size_t off = sent > kFrameHeaderBytes ? sent - kFrameHeaderBytes : 0;
    if (off < dataLen) iov[n++] = {const_cast<uint8_t*>(data) + off, dataLen - off};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    ssize_t r = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r > 0) {
      sent += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && !wouldBlock(errno)) return false;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - net::Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_.get(), POLLOUT, 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
  }
  return true;
}

}  // namespace chorus::tcp
