#include "transports/shm/shm_connection.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "src/base/futex.h"
#include "src/base/logging.h"
#include "src/base/shared_alloc.h"

namespace chorus::shm {
namespace {

constexpr size_t kSlotBytes = sizeof(SlotHeader) + kSlotPayload;
constexpr size_t kCtlBytes = (sizeof(DirCtl) + 63) / 64 * 64;
constexpr size_t kRingBytes = kSlots * kSlotBytes;
// A cross-memory-attach receive copies at most this much per progress call, so one huge message
// does not keep the thread from its other connections, its deadline and abort checks.
constexpr size_t kCmaPiece = 4 << 20;

// Reads `bytes` of process `pid` at `remote` into `dst`; partial transfers are continued.
Status readProcess(pid_t pid, int peer, void* dst, uint64_t remote, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    iovec local{static_cast<char*>(dst) + done, bytes - done};
    iovec far{reinterpret_cast<void*>(remote + done), bytes - done};
    ssize_t r = ::process_vm_readv(pid, &local, 1, &far, 1, 0);
    if (r < 0) {
      int err = errno;
      if (err == EINTR) continue;
      if (err == ESRCH)
        return remoteError("rank " + std::to_string(peer) + " (pid " + std::to_string(pid) +
                           ") exited while its memory was being read");
      // The peer unmapped what it announced for this call: it left the call (failed, aborted,
      // or is exiting) while it was still being read — a peer failure, like ESRCH. A schedule
      // whose peers are in the call never reads memory they have freed (the checker proves
      // every get happens before its owner's end).
      if (err == EFAULT)
        return remoteError("rank " + std::to_string(peer) + " (pid " + std::to_string(pid) +
                           ") no longer maps the memory being read: it left the call");
      return errnoStatus("process_vm_readv", "rank " + std::to_string(peer) + ", " +
                                                 std::to_string(bytes - done) + " bytes",
                         err);
    }
    if (r == 0)
      return remoteError("rank " + std::to_string(peer) + "'s memory became unreadable mid-copy");
    done += static_cast<size_t>(r);
  }
  return Status();
}

void wakeIfWaiting(const std::atomic<uint32_t>& waiting, const std::atomic<uint32_t>* word) {
  // Pairs with the waiter's fence between arming its flag and re-reading the word: either it
  // sees our store, or we see its flag.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (waiting.load(std::memory_order_relaxed)) futex::wakeAll(word);
}

}  // namespace

size_t pairSegmentBytes() { return sizeof(SegHeader) + 2 * kCtlBytes + 2 * kRingBytes; }

ShmConnection::ShmConnection(Segment seg, int myRank, int peer, pid_t peerPid, bool creator,
                             bool cmaAllowed, uint64_t cmaMinBytes)
    : seg_(std::move(seg)),
      outDir_(creator ? 0 : 1),
      inDir_(creator ? 1 : 0),
      myRank_(myRank),
      peer_(peer),
      peerPid_(peerPid),
      cmaAllowed_(cmaAllowed),
      cmaMinBytes_(cmaMinBytes) {
  std::byte* ctl = seg_.data() + sizeof(SegHeader);
  out_ = reinterpret_cast<DirCtl*>(ctl + outDir_ * kCtlBytes);
  in_ = reinterpret_cast<DirCtl*>(ctl + inDir_ * kCtlBytes);
  outHead_ = out_->head.load(std::memory_order_relaxed);
  inTail_ = in_->tail.load(std::memory_order_relaxed);
}

ShmConnection::~ShmConnection() {
  for (const PeerMapping& m : mappings_)
    ::munmap(const_cast<std::byte*>(m.base), m.bytes);
  if (!seg_.mapped()) return;
  out_->state.fetch_or(kClosed, std::memory_order_release);
  futex::wakeAll(&out_->state);
}

bool ShmConnection::connected() const {
  return reinterpret_cast<const SegHeader*>(seg_.data())->attached.load(std::memory_order_acquire);
}

std::byte* ShmConnection::slot(int dir, uint32_t counter) const {
  return seg_.data() + sizeof(SegHeader) + 2 * kCtlBytes + static_cast<size_t>(dir) * kRingBytes +
         static_cast<size_t>(counter % kSlots) * kSlotBytes;
}

std::string ShmConnection::peerName() const {
  return "rank " + std::to_string(peer_) + " (shm)";
}

void ShmConnection::probeCrossMemoryAttach(uint64_t addr, uint64_t expect) {
  uint64_t got = 0;
  Status st = readProcess(peerPid_, peer_, &got, addr, sizeof got);
  readOk_ = st.ok() && got == expect;
  if (readOk_) {
    in_->cmaOk.store(1, std::memory_order_release);
    return;
  }
  static std::once_flag once;
  std::call_once(once, [&] {
    CHORUS_LOG(INFO, NET) << "shm: cross-memory attach to rank " << peer_ << " refused ("
                          << (st.ok() ? std::string("read back a wrong value") : st.message())
                          << "); large messages are copied through shared slots and direct "
                             "(one-sided) algorithms are not used";
  });
}

StatusOr<Op> ShmConnection::postSend(const void* src, size_t bytes, Tag tag) {
  if (failed_) return failure_;
  // Nobody reads the ring of a peer whose process has ended: a send that fits in free slots
  // would otherwise complete as if delivered. The connection itself stays usable for what the
  // peer delivered before it went.
  if (gone_) return goneWhy_;
  bool cma = cmaAllowed_ && bytes >= cmaMinBytes_ && bytes > kSlotPayload &&
             out_->cmaOk.load(std::memory_order_acquire) != 0;
  sends_.push_back({static_cast<const uint8_t*>(src), bytes, tag, 0, cma, 0});
  Op op = makeOp(kSend, posted_[kSend]++);
  progressSends();
  return op;
}

StatusOr<Op> ShmConnection::postRecv(void* dst, size_t bytes, Tag tag) {
  if (failed_) return failure_;
  recvs_.push_back({static_cast<uint8_t*>(dst), bytes, tag, 0});
  return makeOp(kRecv, posted_[kRecv]++);
}

void ShmConnection::progressSends() {
  // Sends still queued when the peer went fail in checkPeerState(); none is placed from then on.
  while (!gone_ && pushCursor_ < sends_.size()) {
    SendOp& s = sends_[pushCursor_];
    if (outHead_ - out_->tail.load(std::memory_order_acquire) >= kSlots) break;  // ring full
    auto* h = reinterpret_cast<SlotHeader*>(slot(outDir_, outHead_));
    h->tag = s.tag;
    h->msgBytes = s.bytes;
    if (s.cma) {
      h->kind = kCma;
      h->offset = 0;
      h->pieceBytes = 0;
      h->remoteAddr = reinterpret_cast<uint64_t>(s.src);
      s.cmaSlot = outHead_;
      s.pushed = s.bytes;
    } else {
      const size_t piece = std::min<size_t>(kSlotPayload, s.bytes - s.pushed);
      h->kind = kData;
      h->offset = s.pushed;
      h->pieceBytes = static_cast<uint32_t>(piece);
      h->remoteAddr = 0;
      if (piece) std::memcpy(reinterpret_cast<std::byte*>(h + 1), s.src + s.pushed, piece);
      s.pushed += piece;
    }
    out_->head.store(++outHead_, std::memory_order_release);
    wakeIfWaiting(out_->consumerWaiting, &out_->head);
    if (s.pushed == s.bytes) ++pushCursor_;
  }
  // Retire from the front, in order: copied sends once placed, CMA sends once their slot is
  // released (the receiver has finished reading our buffer).
  while (pushCursor_ > 0) {
    const SendOp& s = sends_.front();
    if (s.cma &&
        static_cast<int32_t>(out_->tail.load(std::memory_order_acquire) - s.cmaSlot) <= 0)
      break;
    stats_.bytesSent += s.bytes;
    sends_.pop_front();
    --pushCursor_;
    ++completed_[kSend];
  }
}

void ShmConnection::progressRecvs() {
  while (!recvs_.empty()) {
    if (in_->head.load(std::memory_order_acquire) == inTail_) return;
    const auto* h = reinterpret_cast<const SlotHeader*>(slot(inDir_, inTail_));
    RecvOp& r = recvs_.front();
    if (h->offset == 0 && r.received == 0 && (h->msgBytes != r.bytes || h->tag != r.tag)) {
      return fail(invalidUsage(peerName() + " sent a message of " + std::to_string(h->msgBytes) +
                               " bytes (tag " + std::to_string(h->tag) + ") where rank " +
                               std::to_string(myRank_) + " expects " + std::to_string(r.bytes) +
                               " bytes (tag " + std::to_string(r.tag) + ")"));
    }
    if (h->kind == kData) {
      if (h->offset != r.received || h->offset + h->pieceBytes > r.bytes)
        return fail(remoteError(peerName() + " sent a corrupt slot (protocol error)"));
      if (h->pieceBytes)
        std::memcpy(r.dst + h->offset, reinterpret_cast<const std::byte*>(h + 1), h->pieceBytes);
      r.received += h->pieceBytes;
    } else if (h->kind == kCma) {
      const size_t piece = std::min(kCmaPiece, r.bytes - r.received);
      Status st = readProcess(peerPid_, peer_, r.dst + r.received, h->remoteAddr + r.received, piece);
      if (!st.ok()) return fail(st.withContext("receiving from " + peerName()));
      r.received += piece;
      if (r.received < r.bytes) return;  // the rest on the next call
    } else {
      return fail(remoteError(peerName() + " sent a corrupt slot (protocol error)"));
    }
    in_->tail.store(++inTail_, std::memory_order_release);
    wakeIfWaiting(in_->producerWaiting, &in_->tail);
    if (r.received == r.bytes) {
      stats_.bytesRecv += r.bytes;
      recvs_.pop_front();
      ++completed_[kRecv];
    }
  }
}

void ShmConnection::checkPeerState() {
  const uint32_t st = in_->state.load(std::memory_order_acquire);
  if (st == 0 && gone_) {
    // Gone without a word: the same rule as closed. Its writes are all visible now (the process
    // has ended), so an empty ring means nothing more will come.
    const bool drained = in_->head.load(std::memory_order_acquire) == inTail_;
    if ((!recvs_.empty() && drained) || !sends_.empty()) fail(goneWhy_);
    return;
  }
  if (st == 0) return;
  if (st & kAborted) {
    const Code code = in_->abortCode == static_cast<int32_t>(Code::kInvalidUsage)
                          ? Code::kInvalidUsage
                          : Code::kRemoteError;
    const size_t len = std::min<size_t>(in_->abortLength, sizeof(in_->abortMessage));
    return fail(Status(code, "rank " + std::to_string(peer_) + " aborted: " +
                                 std::string(in_->abortMessage, len)));
  }
  // Closed: what it sent before closing is still readable; anything more never comes.
  const bool drained = in_->head.load(std::memory_order_acquire) == inTail_;
  if ((!recvs_.empty() && drained) || !sends_.empty())
    fail(remoteError(peerName() + " closed the connection"));
}

void ShmConnection::peerGone(const Status& why) {
  if (gone_) return;
  gone_ = true;
  goneWhy_ = why;
}

Status ShmConnection::progress() {
  if (!failed_) {
    progressSends();
    progressRecvs();
    if (!failed_) checkPeerState();
  }
  return failed_ ? failure_ : Status();
}

Status ShmConnection::test(Op& op, bool* done) {
  progress().ignore();
  return check(op, done);
}

Status ShmConnection::check(Op& op, bool* done) {
  const uint64_t dir = op.id & 1;
  const uint64_t seq = (op.id >> 1) - 1;
  *done = seq < completed_[dir];
  if (*done) return Status();
  return failed_ ? failure_ : Status();
}

void ShmConnection::fail(Status why) {
  if (failed_) return;
  failed_ = true;
  failure_ = std::move(why);
}

Status ShmConnection::cancel(const Status& why) {
  if (failed_ && (out_->state.load(std::memory_order_relaxed) & kAborted)) return Status();
  Status reason = why.ok() ? internalError("connection cancelled without a reason") : why;
  const std::string& msg = reason.message();
  const size_t len = std::min(msg.size(), sizeof(out_->abortMessage));
  std::memcpy(out_->abortMessage, msg.data(), len);
  out_->abortLength = static_cast<uint32_t>(len);
  out_->abortCode = static_cast<int32_t>(reason.code());
  out_->state.fetch_or(kAborted, std::memory_order_release);
  futex::wakeAll(&out_->state);
  fail(reason);
  return Status();
}

void ShmConnection::pollInfo(int* fd, short* events) const {
  *fd = -1;
  *events = 0;
}

bool ShmConnection::prepareWait(std::vector<WaitWord>& words) {
  if (failed_) return false;
  const bool wantIn = !recvs_.empty();
  const bool wantOut = !sends_.empty();
  // A CMA receive in the middle of its copy has work to do now.
  if (wantIn && recvs_.front().received > 0) return false;
  if (wantIn) in_->consumerWaiting.store(1, std::memory_order_relaxed);
  if (wantOut) out_->producerWaiting.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const uint32_t st = in_->state.load(std::memory_order_acquire);
  const uint32_t head = in_->head.load(std::memory_order_acquire);
  const uint32_t tail = out_->tail.load(std::memory_order_acquire);
  if (st != 0 || (wantIn && head != inTail_)) return false;
  // Sends wait for slots to free up (or for a CMA slot's release): any release may unblock them.
  if (wantOut) {
    const bool full = outHead_ - tail >= kSlots;
    const bool cmaDone =
        pushCursor_ > 0 && sends_.front().cma &&
        static_cast<int32_t>(tail - sends_.front().cmaSlot) > 0;
    if ((pushCursor_ < sends_.size() && !full) || cmaDone) return false;
  }
  words.push_back({&in_->state, st});
  if (wantIn) words.push_back({&in_->head, head});
  if (wantOut) words.push_back({&out_->tail, tail});
  return true;
}

void ShmConnection::endWait() {
  in_->consumerWaiting.store(0, std::memory_order_relaxed);
  out_->producerWaiting.store(0, std::memory_order_relaxed);
}

namespace {

// A cross-memory-attach handle: the exposed range's address and length in the owner's process.
struct CmaHandle {
  uint64_t addr;
  uint64_t bytes;
};

// A segment handle: a range of a chorusMemAlloc segment (see shm_connection.h).
struct SegHandle {
  uint64_t tag;       // kSegTag
  int32_t pid;        // the owner, in the pid namespace both sides share (cross-memory attach
  int32_t fd;         // works between them, which the transport checked at connect)
  uint64_t id;        // the segment's id in the owner's process
  uint64_t segBytes;  // the segment's whole length
  uint64_t offset;    // the exposed range in it
  uint64_t bytes;
};
static_assert(sizeof(SegHandle) <= MemHandle::kMaxBytes && sizeof(SegHandle) != sizeof(CmaHandle));
constexpr uint64_t kSegTag = 0x6765732d73726863ull;  // "chrs-seg"

std::atomic<uint64_t> segmentReadCount{0};

}  // namespace

bool isSegmentHandle(const MemHandle& h) {
  uint64_t tag = 0;
  if (h.size != sizeof(SegHandle)) return false;
  std::memcpy(&tag, h.bytes, sizeof tag);
  return tag == kSegTag;
}

uint64_t segmentReads() { return segmentReadCount.load(std::memory_order_relaxed); }

StatusOr<MemHandle> ShmConnection::expose(const void* base, size_t bytes) {
  MemHandle h;
  mem::SegmentRef seg;
  if (mem::find(base, bytes, &seg)) {
    const SegHandle s{kSegTag, static_cast<int32_t>(seg.pid), seg.fd, seg.id, seg.bytes,
                      seg.offset, bytes};
    h.size = sizeof s;
    std::memcpy(h.bytes, &s, sizeof s);
    return h;
  }
  const CmaHandle c{reinterpret_cast<uint64_t>(base), bytes};
  h.size = sizeof c;
  std::memcpy(h.bytes, &c, sizeof c);
  return h;
}

StatusOr<const std::byte*> ShmConnection::peerSegment(int32_t fd, uint64_t id, uint64_t bytes) {
  for (PeerMapping& m : mappings_)
    if (m.fd == fd && m.id == id) {
      m.lastUse = ++mapClock_;
      return m.base;
    }
  const std::string what = "/proc/" + std::to_string(peerPid_) + "/fd/" + std::to_string(fd);
  const std::string who = peerName() + ", " + what;
  const int f = ::open(what.c_str(), O_RDONLY | O_CLOEXEC);
  if (f < 0) {
    // The peer ended (ESRCH/ENOENT on its /proc entry) or closed the fd: it freed the segment
    // while a peer could still read it, or left the call.
    if (errno == ENOENT || errno == ESRCH)
      return remoteError(peerName() + " no longer holds the memory segment being read "
                                      "(it freed it or exited)");
    return errnoStatus("open", who);
  }
  // The file we opened, by its own name: the owner may have recycled the fd number.
  char link[128] = {};
  const std::string self = "/proc/self/fd/" + std::to_string(f);
  const ssize_t n = ::readlink(self.c_str(), link, sizeof link - 1);
  const std::string expect = "/memfd:" + mem::segmentName(id);
  struct stat st {};
  const bool same = n > 0 && std::string_view(link, static_cast<size_t>(n)).starts_with(expect) &&
                    (n == static_cast<ssize_t>(expect.size()) || link[expect.size()] == ' ') &&
                    ::fstat(f, &st) == 0 && static_cast<uint64_t>(st.st_size) >= bytes;
  if (!same) {
    ::close(f);
    return remoteError(who + " is not the memory segment " + mem::segmentName(id) + " of " +
                       std::to_string(bytes) + " bytes it exposed (freed and replaced)");
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, f, 0);
  const int err = errno;
  ::close(f);
  if (p == MAP_FAILED) return errnoStatus("mmap", who, err);
  if (mappings_.size() >= kMaxPeerMappings) {
    auto lru = std::min_element(mappings_.begin(), mappings_.end(),
                                [](const PeerMapping& a, const PeerMapping& b) {
                                  return a.lastUse < b.lastUse;
                                });
    ::munmap(const_cast<std::byte*>(lru->base), lru->bytes);
    mappings_.erase(lru);
  }
  mappings_.push_back(PeerMapping{fd, id, static_cast<const std::byte*>(p), bytes, ++mapClock_});
  return static_cast<const std::byte*>(p);
}

Status ShmConnection::read(void* dst, const MemHandle& remote, uint64_t offset, size_t bytes) {
  if (failed_) return failure_;
  if (!readOk_) return internalError(peerName() + ": cross-memory attach is not available");
  if (isSegmentHandle(remote)) {
    SegHandle s;
    std::memcpy(&s, remote.bytes, sizeof s);
    if (s.pid != static_cast<int32_t>(peerPid_))
      return invalidUsage(peerName() + " (pid " + std::to_string(peerPid_) +
                          ") sent a segment handle of pid " + std::to_string(s.pid));
    if (s.offset > s.segBytes || s.bytes > s.segBytes - s.offset)
      return invalidUsage(peerName() + " sent a segment handle whose range [" +
                          std::to_string(s.offset) + ", +" + std::to_string(s.bytes) +
                          ") lies outside its segment of " + std::to_string(s.segBytes));
    if (offset > s.bytes || bytes > s.bytes - offset)
      return invalidUsage("reading bytes [" + std::to_string(offset) + ", " +
                          std::to_string(offset + bytes) + ") of " + peerName() +
                          "'s memory, which exposed only " + std::to_string(s.bytes));
    if (bytes == 0) return Status();
    // As with cross-memory attach, a peer whose process ended is not read any more, though a
    // mapping of its segment would still show its last bytes.
    if (gone_) return goneWhy_;
    std::lock_guard<std::mutex> lock(mapMu_);
    auto base = peerSegment(s.fd, s.id, s.segBytes);
    if (!base.ok()) return base.status();
    std::memcpy(dst, *base + s.offset + offset, bytes);
    segmentReadCount.fetch_add(1, std::memory_order_relaxed);
    return Status();
  }
  CmaHandle c;
  if (remote.size != sizeof c)
    return invalidUsage(peerName() + " sent a memory handle of " + std::to_string(remote.size) +
                        " bytes, neither a cross-memory-attach nor a segment one");
  std::memcpy(&c, remote.bytes, sizeof c);
  if (offset > c.bytes || bytes > c.bytes - offset)
    return invalidUsage("reading bytes [" + std::to_string(offset) + ", " +
                        std::to_string(offset + bytes) + ") of " + peerName() +
                        "'s memory, which exposed only " + std::to_string(c.bytes));
  Status st = readProcess(peerPid_, peer_, dst, c.addr + offset, bytes);
  if (!st.ok()) {
    checkPeerState();
    if (failed_) return failure_;
  }
  return st;
}

}  // namespace chorus::shm
