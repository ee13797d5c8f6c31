#include "transports/ibverbs/ib_connection.h"

#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>

namespace chorus::ib {

std::vector<Piece> stripe(size_t bytes, uint64_t msg, int rails, size_t minStripeBytes) {
  if (rails <= 1 || bytes == 0 || bytes < minStripeBytes)
    return {Piece{rails <= 1 ? 0 : static_cast<int>(msg % static_cast<uint64_t>(rails)), 0,
                  bytes}};
  const size_t n = static_cast<size_t>(rails);
  const size_t per = ((bytes + n - 1) / n + kStripeAlign - 1) / kStripeAlign * kStripeAlign;
  std::vector<Piece> pieces;
  for (int r = 0; r < rails && per * static_cast<size_t>(r) < bytes; ++r) {
    const size_t offset = per * static_cast<size_t>(r);
    pieces.push_back(Piece{r, offset, std::min(per, bytes - offset)});
  }
  return pieces;
}

StatusOr<std::unique_ptr<IbConnection>> IbConnection::create(const std::vector<NicShare>& nics,
                                                             uint64_t commId, int myRank,
                                                             int peer, size_t minStripeBytes) {
  std::unique_ptr<IbConnection> c(new IbConnection(myRank, peer, minStripeBytes));
  const int count = static_cast<int>(nics.size());
  for (int i = 0; i < count; ++i) {
    CHORUS_ASSIGN_OR_RETURN(auto rail, Rail::create(nics[static_cast<size_t>(i)], commId,
                                                    myRank, peer, i, count));
    c->rails_.push_back(std::move(rail));
  }
  if (count > 1) {
    const std::string where = "connection to rank " + std::to_string(peer);
    c->epollFd_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (c->epollFd_ < 0) return errnoStatus("epoll_create1", where);
    for (int i = 0; i < count; ++i) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u32 = static_cast<uint32_t>(i);
      if (::epoll_ctl(c->epollFd_, EPOLL_CTL_ADD, c->rails_[static_cast<size_t>(i)]->fd(),
                      &ev) != 0)
        return errnoStatus("epoll_ctl", where);
    }
  }
  return c;
}

IbConnection::~IbConnection() {
  if (connected_ && !failed_) {
    const uint64_t written = messagesWritten();
    for (auto& rail : rails_) rail->close(written);
  }
  rails_.clear();
  if (epollFd_ >= 0) ::close(epollFd_);
}

std::vector<QpInfo> IbConnection::localInfo() const {
  std::vector<QpInfo> out;
  for (const auto& rail : rails_) out.push_back(rail->localInfo());
  return out;
}

Status IbConnection::railMismatch(int theirs) const {
  return invalidArgument("ibverbs: rank " + std::to_string(myRank_) + " stripes over " +
                         std::to_string(rails()) + " NIC(s) and rank " + std::to_string(peer_) +
                         " over " + std::to_string(theirs) +
                         ": every rank needs the same CHORUS_IB_NICS_PER_RANK");
}

Status IbConnection::connectTo(const std::vector<QpInfo>& remote) {
  if (remote.size() != rails_.size()) return railMismatch(static_cast<int>(remote.size()));
  for (size_t i = 0; i < remote.size(); ++i) {
    if (remote[i].rail != i || remote[i].rails != remote.size())
      return invalidArgument(me() + ": record " + std::to_string(i) + " of rank " +
                             std::to_string(peer_) + " announces rail " +
                             std::to_string(remote[i].rail) + " of " +
                             std::to_string(remote[i].rails));
    CHORUS_RETURN_IF_ERROR(rails_[i]->connectTo(remote[i]));
  }
  connected_ = true;
  return Status();
}

StatusOr<Op> IbConnection::postSend(const void* src, size_t bytes, Tag tag) {
  return post(0, const_cast<void*>(src), bytes, tag);
}

StatusOr<Op> IbConnection::postRecv(void* dst, size_t bytes, Tag tag) {
  return post(1, dst, bytes, tag);
}

// Every piece or none: a message with pieces on some rails only would put the two ends' rails
// out of step, so a rail refusing a later piece fails the connection.
StatusOr<Op> IbConnection::post(int d, void* data, size_t bytes, Tag tag) {
  if (failed_) return failure_;
  if (!connected_)
    return invalidUsage(me() + ": " + (d == 0 ? "postSend" : "postRecv") +
                        " before the connection was made");
  const uint64_t n = posted_[d];
  const PieceLabel label{tag, bytes, n};
  Msg m;
  m.bytes = bytes;
  for (const Piece& p : stripe(bytes, n, rails(), minStripe_)) {
    Rail& rail = *rails_[static_cast<size_t>(p.rail)];
    void* at = static_cast<uint8_t*>(data) + p.offset;
    auto seq = d == 0 ? rail.postSend(at, p.bytes, label) : rail.postRecv(at, p.bytes, label);
    if (!seq.ok()) {
      if (m.pieces.empty()) return seq.status();
      failAll(seq.status().withContext(me() + ", piece " + std::to_string(m.pieces.size()) +
                                       " of message " + std::to_string(n) + " to rank " +
                                       std::to_string(peer_)),
              true);
      return failure_;
    }
    m.pieces.push_back(PiecePosted{p.rail, *seq});
  }
  msgs_[d].push_back(std::move(m));
  ++posted_[d];
  return Op{((n + 1) << 1) | static_cast<uint64_t>(d)};
}

Status IbConnection::test(Op& op, bool* done) {
  progress().ignore();
  return check(op, done);
}

Status IbConnection::check(Op& op, bool* done) {
  *done = false;
  const int d = static_cast<int>(op.id & 1);
  const uint64_t n = (op.id >> 1) - 1;
  if (op.id < 2 || n >= posted_[d])
    return invalidArgument(me() + ": op " + std::to_string(op.id) +
                           " was not posted on the connection to rank " + std::to_string(peer_));
  if (n < base_[d]) {  // retired: only messages that succeeded leave
    *done = true;
    return Status();
  }
  const Msg& m = msgs_[d][n - base_[d]];
  if (m.done) {
    *done = true;
    return m.status;
  }
  return failed_ ? failure_ : Status();
}

Status IbConnection::progress() {
  if (failed_) return failure_;
  if (!connected_) return Status();
  for (auto& rail : rails_) {
    const Status s = rail->progress();
    if (!s.ok()) {
      failAll(s, rail->toldPeer());
      break;
    }
  }
  complete();
  retire();
  return failed_ ? failure_ : Status();
}

// Message k reports once all its pieces are done, and not before message k - 1.
void IbConnection::complete() {
  for (int d = 0; d < 2; ++d) {
    while (done_[d] < posted_[d]) {
      Msg& m = msgs_[d][done_[d] - base_[d]];
      Status first;
      bool all = true;
      for (const PiecePosted& p : m.pieces) {
        Status s;
        if (!rails_[static_cast<size_t>(p.rail)]->done(d, p.seq, &s)) {
          all = false;
          break;
        }
        if (first.ok() && !s.ok()) first = s;
      }
      if (!all) break;
      m.done = true;
      m.status = first;
      if (first.ok()) (d == 0 ? stats_.bytesSent : stats_.bytesRecv) += m.bytes;
      ++done_[d];
    }
  }
}

void IbConnection::retire() {
  for (int d = 0; d < 2; ++d) {
    while (!msgs_[d].empty() && msgs_[d].front().done && msgs_[d].front().status.ok()) {
      msgs_[d].pop_front();
      ++base_[d];
    }
  }
}

void IbConnection::failAll(const Status& why, bool tellPeer) {
  if (failed_) return;
  failed_ = true;
  failure_ = why;
  for (auto& rail : rails_) {
    if (rail->failed()) continue;
    if (tellPeer) {
      rail->abort(why);
    } else {
      rail->fail(why);
    }
  }
  complete();
}

Status IbConnection::cancel(const Status& why) {
  if (failed_) return Status();
  failAll(why, true);
  return Status();
}

void IbConnection::peerGone(const Status& why) {
  if (failed_) return;
  for (auto& rail : rails_) rail->peerGone(why);
  complete();
}

void IbConnection::pollInfo(int* fd, short* events) const {
  *fd = rails_.size() == 1 ? rails_.front()->fd() : epollFd_;
  *events = POLLIN;
}

// Messages whose every piece was written, in order: the count a CLOSE record carries.
uint64_t IbConnection::messagesWritten() const {
  uint64_t n = base_[0];
  for (const Msg& m : msgs_[0]) {
    for (const PiecePosted& p : m.pieces)
      if (p.seq >= rails_[static_cast<size_t>(p.rail)]->sendsIssued()) return n;
    ++n;
  }
  return n;
}

}  // namespace chorus::ib
