// One rail of an ibverbs connection: a reliable-connected queue pair to one peer on one port
// (NIC), with its own completion queue, completion channel, inbox and credits. A connection
// (ib_connection.h) has one rail per NIC pair and cuts each message into pieces, at most one
// per rail; a rail moves pieces in order and knows nothing of the others. Internal to
// transports/ibverbs/.
//
// Data moves by RDMA write with immediate into memory the receiver advertised:
//   1. postRecv registers the piece's buffer (RegCache) and, while fewer than kSlots of this
//      rail's receives wait for data, writes an advertisement (address, rkey, size, and the
//      piece's label: the message's tag, total size and number) into slot seq % kSlots of the
//      peer's inbox, with immediate ADVERT|seq.
//   2. The sender matches its k-th piece with the k-th advertisement. Size and label must
//      agree; a mismatch fails both ends with kInvalidUsage naming both sides' messages (the
//      sender sees both and tells the receiver through an ABORT record). Otherwise it writes
//      the bytes straight into the receiver's buffer, in chunks of at most the port's message
//      size, the last with immediate DATA|seq.
//   3. The receiver's DATA completion completes its k-th receive; the sender's completion of
//      the last chunk completes its k-th send.
// A slot is free again once the data of the advertisement it carried has arrived (the sender
// read it before writing), so at most kSlots advertisements wait per direction and the
// receive queue never runs dry: it holds 2 kSlots + 4 receives (advertisements and data
// coming in, and the two control records), each reposted as it completes.
//
// Control records, written into the peer's inbox with their own immediates:
//   ABORT (code, text)  abort(), or a mismatch seen here: the peer fails everything with the
//                       code (kInvalidUsage stays, everything else is kRemoteError)
//   CLOSE (count)       close(): the data of `count` messages has been written; whatever
//                       else the peer waits for fails
// A failed completion (the peer's queue pair is gone, a retry count exhausted) fails the rail
// with kRemoteError; the queue pair then goes to the error state, flushing what was posted,
// so buffers are free again when a piece reports its failure.
//
// Waiting: progress() polls the completion queue; before it returns it re-arms the queue's
// notification, so fd() (the completion channel's) turns readable on any later completion.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "transports/ibverbs/ib_device.h"
#include "transports/ibverbs/qp_setup.h"
#include "transports/ibverbs/reg_cache.h"
#include "transports/transport.h"

namespace chorus::ib {

/// What a rail shares with its transport: the opened port and its registration caches, one
/// for send buffers (local read only: a read-only buffer can be sent, and no peer can write
/// into it) and one for receive buffers (written by the peer).
struct NicShare {
  std::shared_ptr<Nic> nic;
  std::shared_ptr<RegCache> sendCache;
  std::shared_ptr<RegCache> recvCache;
};

/// The immediate's layout: kind in the top two bits, the op's sequence number below.
enum class ImmKind : uint32_t { kData = 0, kAdvert = 1, kAbort = 2, kClose = 3 };
inline uint32_t makeImm(ImmKind k, uint64_t seq) {
  return (static_cast<uint32_t>(k) << 30) | static_cast<uint32_t>(seq & 0x3FFFFFFF);
}
inline ImmKind immKind(uint32_t imm) { return static_cast<ImmKind>(imm >> 30); }
inline uint32_t immSeq(uint32_t imm) { return imm & 0x3FFFFFFF; }

/// The message a piece belongs to: both ends compare it, so that two sides that cut
/// different messages never write one message's piece into another's buffer.
struct PieceLabel {
  Tag tag = 0;
  uint64_t total = 0;  ///< the whole message's bytes
  uint64_t msg = 0;    ///< the message's number in its direction
};

class Rail {
 public:
  static constexpr uint32_t kSlots = 32;

  /// Creates the queue pair (in INIT) and its queues, and posts the receives. `index` and
  /// `count` go into localInfo() for the handshake.
  static StatusOr<std::unique_ptr<Rail>> create(const NicShare& share, uint64_t commId,
                                                int myRank, int peer, int index, int count);
  ~Rail();

  /// What the peer needs to connect to this end.
  const QpInfo& localInfo() const { return local_; }
  /// INIT -> RTR -> RTS toward `remote` (the peer's localInfo()).
  Status connectTo(const QpInfo& remote);

  /// Posts a piece; returns its sequence number in its direction (0 send, 1 receive).
  StatusOr<uint64_t> postSend(const void* src, size_t bytes, const PieceLabel& label);
  StatusOr<uint64_t> postRecv(void* dst, size_t bytes, const PieceLabel& label);
  /// Whether piece `seq` of direction `d` is done, and its status if so.
  bool done(int d, uint64_t seq, Status* status) const;
  Status progress();
  /// Tells the peer `why` (ABORT record, best effort, bounded), then fails.
  void abort(const Status& why);
  /// Fails every piece not done with `why`; the queue pair goes to the error state.
  void fail(const Status& why);
  void peerGone(const Status& why);
  /// The CLOSE record: `messages` messages of this connection were written.
  void close(uint64_t messages);

  bool failed() const { return failed_; }
  /// Whether this end sent the peer an ABORT for its failure (a mismatch seen here).
  bool toldPeer() const { return toldPeer_; }
  const Status& failure() const { return failure_; }
  uint64_t sendsIssued() const { return sendsIssued_; }
  int fd() const { return channel_ ? channel_->fd : -1; }
  const Nic& nic() const { return *share_.nic; }
  /// The queue pair (tests look at its state).
  ibv_qp* qp() const { return qp_; }

 private:
  struct Rec {
    void* data = nullptr;
    size_t bytes = 0;
    PieceLabel label;
    RegCache::Ref reg;
    bool done = false;
    Status status;
  };
  struct Advert;
  struct Control;
  struct Box;

  Rail(const NicShare& share, uint64_t commId, int myRank, int peer);
  Status setUp(int index, int count);
  StatusOr<uint64_t> post(int d, void* data, size_t bytes, const PieceLabel& label);
  Status postReceives(int n);
  Status writeToPeer(ImmKind kind, uint64_t seq, uint64_t localOffset, uint64_t remoteOffset,
                     size_t bytes, uint64_t wrId);
  Status pollCompletions();
  void handleImmediate(uint32_t imm);
  Status issue();
  Status sendData(uint64_t seq, Rec& r, const Advert& a);
  Status mismatch(const Rec& r, const Advert& a) const;
  RegCache& cache(int direction) const {
    return direction == 0 ? *share_.sendCache : *share_.recvCache;
  }
  void retire();
  void failUnfinished(const Status& why);
  void sendControl(ImmKind kind, uint32_t code, uint64_t count, const std::string& text);
  std::string me() const;

  NicShare share_;
  const VerbsApi& api_;
  const uint64_t comm_;
  const int myRank_;
  const int peer_;
  QpInfo local_;
  QpInfo remote_;
  size_t maxChunk_ = 0;

  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  std::unique_ptr<Box> inbox_;   // the peer writes here
  std::unique_ptr<Box> outbox_;  // what this end writes into the peer's inbox, staged
  bool connected_ = false;

  // Pieces by direction (0 send, 1 receive) and sequence number: ops_[d][i] is base_[d] + i.
  std::deque<Rec> ops_[2];
  uint64_t base_[2] = {0, 0};
  uint64_t posted_[2] = {0, 0};
  uint64_t advertised_ = 0;   // receives advertised to the peer
  uint64_t received_ = 0;     // receives whose data arrived
  uint64_t sendsIssued_ = 0;  // sends whose data was written (the last chunk posted)
  size_t chunkOffset_ = 0;    // progress through the send being written
  std::deque<Advert> adverts_;  // the peer's advertisements not yet matched, from sendsIssued_
  uint64_t advertsIn_ = 0;
  int sqOutstanding_ = 0;

  bool closedByPeer_ = false;
  uint64_t peerSent_ = 0;
  bool gone_ = false;
  Status goneWhy_;
  bool failed_ = false;
  bool toldPeer_ = false;
  Status failure_;
};

}  // namespace chorus::ib
