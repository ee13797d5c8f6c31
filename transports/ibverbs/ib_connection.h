// One ibverbs connection to one peer: one rail (ib_rail.h: a queue pair with its own
// completion queue, inbox and credits) per NIC pair, rail i of one end joined to rail i of the
// other. Internal to transports/ibverbs/.
//
// Striping. Message k of a direction is cut by stripe(): a message of at least
// CHORUS_IB_STRIPE_MIN_BYTES, on several rails, goes in one contiguous piece per rail (equal
// sizes, rounded up to kStripeAlign, the last piece shorter); any other message goes whole on
// rail k mod rails, so small messages take the NICs in turn. Both ends cut the k-th send and
// the k-th receive alike when their sizes agree; each piece carries its message's tag, size
// and number, so when they do not, the rail where the two cuts first meet reports the
// mismatch (never writing into the wrong buffer). A rail splits its piece further into writes
// of at most its port's max_msg_sz.
//
// Order. Rails are independent queues, so pieces of consecutive messages arrive interleaved;
// message k completes once each of its pieces has, and never before message k-1 of the same
// direction (sends and receives are matched and completed in posting order, as with one rail).
//
// Failure. A rail that fails fails the connection: every other rail is failed with the same
// status — after an ABORT record on each if the failure started here (cancel(), a mismatch
// seen here), so the peer reports the same reason on every rail. peerGone() and the peer's
// CLOSE reach every rail. Stats count each message once, when it completes.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "transports/ibverbs/ib_rail.h"
#include "transports/transport.h"

namespace chorus::ib {

/// Where striped pieces start: a page, so that each rail's writes start page-aligned.
inline constexpr size_t kStripeAlign = 4096;

/// One contiguous piece of a message: bytes [offset, offset + bytes) go on `rail`.
struct Piece {
  int rail = 0;
  size_t offset = 0;
  size_t bytes = 0;
  bool operator==(const Piece&) const = default;
};

/// How message number `msg` of `bytes` bytes is cut over `rails` rails (see above). Never an
/// empty piece, except the single piece of an empty message.
std::vector<Piece> stripe(size_t bytes, uint64_t msg, int rails, size_t minStripeBytes);

class IbConnection final : public Connection {
 public:
  /// One rail per entry of `nics` (all in INIT).
  static StatusOr<std::unique_ptr<IbConnection>> create(const std::vector<NicShare>& nics,
                                                        uint64_t commId, int myRank, int peer,
                                                        size_t minStripeBytes);
  ~IbConnection() override;

  /// What the peer needs: one record per rail, in rail order.
  std::vector<QpInfo> localInfo() const;
  /// Every rail INIT -> RTR -> RTS toward the peer's records (same count, same order).
  Status connectTo(const std::vector<QpInfo>& remote);
  /// The error when the peer announces `theirs` rails and this end has rails().
  Status railMismatch(int theirs) const;

  int rails() const { return static_cast<int>(rails_.size()); }
  const Rail& rail(int i) const { return *rails_[static_cast<size_t>(i)]; }
  /// Rail 0's queue pair (tests look at its state).
  ibv_qp* qp() const { return rails_.front()->qp(); }

  int peer() const override { return peer_; }
  StatusOr<Op> postSend(const void* src, size_t bytes, Tag tag) override;
  StatusOr<Op> postRecv(void* dst, size_t bytes, Tag tag) override;
  Status test(Op& op, bool* done) override;
  Status progress() override;
  Status check(Op& op, bool* done) override;
  Status cancel(const Status& why) override;
  void peerGone(const Status& why) override;
  void pollInfo(int* fd, short* events) const override;
  ConnStats stats() const override { return stats_; }

 private:
  struct PiecePosted {
    int rail;
    uint64_t seq;  // the piece's number on its rail
  };
  struct Msg {
    size_t bytes = 0;
    std::vector<PiecePosted> pieces;
    bool done = false;
    Status status;
  };

  IbConnection(int myRank, int peer, size_t minStripeBytes)
      : myRank_(myRank), peer_(peer), minStripe_(minStripeBytes) {}
  StatusOr<Op> post(int d, void* data, size_t bytes, Tag tag);
  void complete();
  void retire();
  void failAll(const Status& why, bool tellPeer);
  uint64_t messagesWritten() const;
  std::string me() const { return "ibverbs: rank " + std::to_string(myRank_); }

  const int myRank_;
  const int peer_;
  const size_t minStripe_;
  std::vector<std::unique_ptr<Rail>> rails_;
  int epollFd_ = -1;  // several rails: readable when any rail's completion channel is
  bool connected_ = false;

  // Messages by direction (0 send, 1 receive): msgs_[d][i] is message base_[d] + i; those
  // below done_[d] have reported.
  std::deque<Msg> msgs_[2];
  uint64_t base_[2] = {0, 0};
  uint64_t posted_[2] = {0, 0};
  uint64_t done_[2] = {0, 0};
  bool failed_ = false;
  Status failure_;
  ConnStats stats_;
};

}  // namespace chorus::ib
