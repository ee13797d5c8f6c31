// One ibverbs connection: a reliable-connected queue pair to one peer, with its own completion
// queue and completion channel. Internal to transports/ibverbs/.
//
// Data moves by RDMA write with immediate into memory the receiver advertised:
//   1. postRecv registers the buffer (RegCache) and, while fewer than kSlots of this end's
//      receives wait for data, writes an advertisement (address, rkey, size, tag) into slot
//      seq % kSlots of the peer's inbox, with immediate ADVERT|seq.
//   2. The sender matches its k-th send with the k-th advertisement. Size and tag must agree;
//      a mismatch fails both ends with kInvalidUsage naming both sides (the sender sees both
//      and tells the receiver through an ABORT record). Otherwise it writes the bytes straight
//      into the receiver's buffer, in chunks of at most the port's message size, the last with
//      immediate DATA|seq.
//   3. The receiver's DATA completion completes its k-th receive; the sender's completion of
//      the last chunk completes its k-th send.
// A slot is free again once the data of the advertisement it carried has arrived (the sender
// read it before writing), so at most kSlots advertisements wait per direction and the
// receive queue never runs dry: it holds 2 kSlots + 4 receives (advertisements and data
// coming in, and the two control records), each reposted as it completes.
//
// Control records, written into the peer's inbox with their own immediates:
//   ABORT (code, text)  cancel(), or a mismatch seen here: the peer fails everything with the
//                       code (kInvalidUsage stays, everything else is kRemoteError)
//   CLOSE (count)       the destructor: the data of `count` sends has been written; whatever
//                       else the peer waits for fails
// A failed completion (the peer's queue pair is gone, a retry count exhausted) fails the
// connection with kRemoteError; the queue pair then goes to the error state, flushing what was
// posted, so buffers are free again when an op reports its failure.
//
// Waiting: progress() polls the completion queue; before it returns it re-arms the queue's
// notification, so pollInfo()'s fd (the completion channel's) turns readable on any later
// completion.
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

/// What a connection shares with its transport: the opened port and its registration caches,
/// one for send buffers (local read only: a read-only buffer can be sent, and no peer can
/// write into it) and one for receive buffers (written by the peer).
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

class IbConnection final : public Connection {
 public:
  static constexpr uint32_t kSlots = 32;

  /// Creates the queue pair (in INIT) and its queues, and posts the receives.
  static StatusOr<std::unique_ptr<IbConnection>> create(const NicShare& share, uint64_t commId,
                                                        int myRank, int peer);
  ~IbConnection() override;

  /// What the peer needs to connect to this end.
  const QpInfo& localInfo() const { return local_; }
  /// INIT -> RTR -> RTS toward `remote` (the peer's localInfo()).
  Status connectTo(const QpInfo& remote);

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

  /// The queue pair (tests look at its state).
  ibv_qp* qp() const { return qp_; }

 private:
  struct Rec {
    void* data = nullptr;
    size_t bytes = 0;
    Tag tag = 0;
    RegCache::Ref reg;
    bool done = false;
    Status status;
  };
  struct Advert;
  struct Control;
  struct Box;

  IbConnection(const NicShare& share, uint64_t commId, int myRank, int peer);
  Status setUp();
  Status postReceives(int n);
  Status writeToPeer(ImmKind kind, uint64_t seq, uint64_t localOffset, uint64_t remoteOffset,
                     size_t bytes, uint64_t wrId);
  Status pollCompletions();
  void handleImmediate(uint32_t imm);
  Status issue();
  Status sendData(uint64_t seq, Rec& r, const Advert& a);
  Rec* find(const Op& op);
  RegCache& cache(int direction) const {
    return direction == 0 ? *share_.sendCache : *share_.recvCache;
  }
  void retire();
  void fail(const Status& why);
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

  // Ops by direction (0 send, 1 receive) and sequence number: ops_[d][i] is op base_[d] + i.
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
  Status failure_;
  ConnStats stats_;
};

}  // namespace chorus::ib
