// One shared-memory connection to a peer on the same host. Internal to transports/shm/.
//
// The pair shares one segment holding two single-producer/single-consumer rings of slots, one per
// direction. A slot is a 64-byte header and kSlotPayload bytes; the producer fills slots and
// publishes them by advancing `head`, the consumer empties them and releases them by advancing
// `tail`. Both are free-running 32-bit counters (slot = counter % kSlots), and both are futex
// words: a side that would wait arms its `...Waiting` flag, re-checks, and sleeps on the word;
// the other side wakes it only when the flag is set, so the fast path makes no system call.
//
// Messages:
//   - small, or when cross-memory attach is unavailable: copied through the ring in pieces of up
//     to kSlotPayload bytes (the sender's op is done once its last piece is in a slot);
//   - large (>= the CMA threshold) when the receiver can read the sender's memory: one slot
//     carries the sender's buffer address, the receiver copies the bytes with process_vm_readv
//     straight into its buffer (one copy, no staging) and only then releases the slot; the
//     sender's op is done when the slot is released.
// Matching is FIFO: the k-th message meets the k-th posted receive; sizes and tags must agree,
// or the receive fails with kInvalidUsage naming both.
//
// Failure: cancel() writes the reason into the segment and sets the direction's state word
// (which every sleeper also watches), so the peer fails at once with the same code (usage errors
// stay usage errors, the rest become kRemoteError). Destroying the connection sets "closed": the
// peer reads what was sent before and then fails with kRemoteError. A peer that dies without
// either is found by the communicator's pid liveness check, which calls peerGone(): the same
// rule as "closed" — what it sent before it ended is still received.
//
// One-sided reads: expose() hands the peer a MemHandle for a local range, of one of two kinds.
//   - A segment handle when the range lies in a chorusMemAlloc segment (src/base/shared_alloc.h):
//     the owner's pid, the segment's fd, id and length, and the range's offset and length. The
//     reader maps the whole segment once, read-only, through /proc/<pid>/fd/<fd> (checking the
//     memory file's name carries the id, so a recycled fd number is refused) and keeps the
//     mapping for later calls; a read is then a memcpy — no system call, no page pinning. The
//     connection keeps at most kMaxPeerMappings, least recently used first out, and unmaps them
//     when it closes.
//   - Otherwise a cross-memory-attach handle: the range's address and length; read() copies
//     with process_vm_readv.
// Both are bounds-checked against the length the owner exposed. The kinds differ in size and
// the segment handle starts with a tag word, so neither is taken for the other.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>
#include <string>

#include "transports/shm/segment.h"
#include "transports/transport.h"

namespace chorus::shm {

inline constexpr uint32_t kSlots = 16;
inline constexpr uint32_t kSlotPayload = 32 << 10;
inline constexpr uint32_t kSegmentMagic = 0x4d485343;  // "CSHM"
inline constexpr uint32_t kSegmentVersion = 1;

struct SlotHeader {
  uint64_t tag;
  uint64_t msgBytes;
  uint64_t offset;      // of this piece within the message
  uint64_t remoteAddr;  // kCma: the sender's buffer
  uint32_t pieceBytes;
  uint32_t kind;        // SlotKind
  uint8_t pad[24];
};
static_assert(sizeof(SlotHeader) == 64);
enum SlotKind : uint32_t { kData = 1, kCma = 2 };

// Bits of DirCtl::state.
inline constexpr uint32_t kClosed = 1, kAborted = 2;

struct DirCtl {
  alignas(64) std::atomic<uint32_t> head;  // slots published by the producer
  std::atomic<uint32_t> consumerWaiting;
  alignas(64) std::atomic<uint32_t> tail;  // slots released by the consumer
  std::atomic<uint32_t> producerWaiting;
  alignas(64) std::atomic<uint32_t> state;  // kClosed | kAborted, set by the producer's side
  std::atomic<uint32_t> cmaOk;              // set by the consumer: it can read the producer
  int32_t abortCode;
  uint32_t abortLength;
  char abortMessage[1024];
};

struct SegHeader {
  uint32_t magic;
  uint32_t version;
  std::atomic<uint32_t> ready;  // 1 once the creator has initialised everything
  int32_t creatorRank;
  uint32_t slots;
  uint32_t slotPayload;
  std::atomic<uint32_t> attached;  // 1 once the other rank has mapped the segment
  uint8_t pad[36];
};
static_assert(sizeof(SegHeader) == 64);

// Bytes of a pair segment.
size_t pairSegmentBytes();

// Whether `h` is a segment handle (the zero-copy kind), and how many reads this process has
// served from mapped segments: for tests that check the zero-copy path is the one taken.
bool isSegmentHandle(const MemHandle& h);
uint64_t segmentReads();

class ShmConnection final : public Connection {
 public:
  // `seg` is mapped; `dir` is 0 when this side created it (it produces into ring 0).
  ShmConnection(Segment seg, int myRank, int peer, pid_t peerPid, bool creator, bool cmaAllowed,
                uint64_t cmaMinBytes);
  ~ShmConnection() override;

  int peer() const override { return peer_; }
  StatusOr<Op> postSend(const void* src, size_t bytes, Tag tag) override;
  StatusOr<Op> postRecv(void* dst, size_t bytes, Tag tag) override;
  Status test(Op& op, bool* done) override;
  Status progress() override;
  Status check(Op& op, bool* done) override;
  Status cancel(const Status& why) override;
  void pollInfo(int* fd, short* events) const override;
  bool prepareWait(std::vector<WaitWord>& words) override;
  void endWait() override;
  bool connected() const override;
  bool canRead() const override { return readOk_; }
  StatusOr<MemHandle> expose(const void* base, size_t bytes) override;
  Status read(void* dst, const MemHandle& remote, uint64_t offset, size_t bytes) override;
  void peerGone(const Status& why) override;
  ConnStats stats() const override { return stats_; }

  // Tries one process_vm_readv of `bytes` at the peer's `addr` and records the result for the
  // peer (DirCtl::cmaOk of the incoming ring). Called once by the transport after connecting.
  void probeCrossMemoryAttach(uint64_t addr, uint64_t expect);

 private:
  enum Direction : uint64_t { kSend = 0, kRecv = 1 };
  // A peer's chorusMemAlloc segment, mapped read-only by read().
  struct PeerMapping {
    int32_t fd;
    uint64_t id;
    const std::byte* base;
    uint64_t bytes;
    uint64_t lastUse;
  };
  static constexpr size_t kMaxPeerMappings = 64;
  struct SendOp {
    const uint8_t* src;
    size_t bytes;
    Tag tag;
    size_t pushed;      // bytes placed in slots (or, for CMA, bytes once the slot is out)
    bool cma;
    uint32_t cmaSlot;   // head counter value of its CMA slot
  };
  struct RecvOp {
    uint8_t* dst;
    size_t bytes;
    Tag tag;
    size_t received;
  };

  // The mapping of the peer's segment (fd, id) of `bytes`, made on first use.
  StatusOr<const std::byte*> peerSegment(int32_t fd, uint64_t id, uint64_t bytes);
  void progressSends();
  void progressRecvs();
  void checkPeerState();
  void fail(Status why);
  std::byte* slot(int dir, uint32_t counter) const;
  std::string peerName() const;
  static Op makeOp(Direction d, uint64_t seq) { return Op{((seq + 1) << 1) | d}; }

  Segment seg_;
  DirCtl* out_;  // ring this side produces into
  DirCtl* in_;   // ring this side consumes
  int outDir_, inDir_;
  const int myRank_;
  const int peer_;
  const pid_t peerPid_;
  const bool cmaAllowed_;
  const uint64_t cmaMinBytes_;
  bool readOk_ = false;

  std::deque<SendOp> sends_;
  std::deque<RecvOp> recvs_;
  size_t pushCursor_ = 0;  // first send not yet fully placed in slots
  uint64_t posted_[2] = {0, 0};
  uint64_t completed_[2] = {0, 0};
  uint32_t outHead_ = 0;  // our copy of out_->head (we are its only writer)
  uint32_t inTail_ = 0;   // our copy of in_->tail

  bool failed_ = false;
  Status failure_;
  bool gone_ = false;  // the peer's process has ended (peerGone)
  Status goneWhy_;
  ConnStats stats_;
  std::mutex mapMu_;  // read() may be called from a thread other than the progressing one
  std::vector<PeerMapping> mappings_;
  uint64_t mapClock_ = 0;
};

}  // namespace chorus::shm
