#include "transports/shm/shm_window.h"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "src/base/futex.h"

namespace chorus::shm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x57534843;  // "CHSW"
constexpr uint32_t kVersion = 1;
constexpr size_t kInlineBytes = 32;

struct SegHeader {
  uint32_t magic;
  uint32_t version;
  uint32_t nranks;
  uint32_t pad0;
  uint64_t slotBytes;
  uint64_t roundBytes;
  std::atomic<uint32_t> ready;
  std::atomic<uint32_t> attached;
  uint8_t pad[24];
};
static_assert(sizeof(SegHeader) == 64);

size_t roundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

uint32_t wordOf(uint64_t seq, uint32_t count) {
  return (static_cast<uint32_t>(seq & 0xff) << 24) | (count & 0xffffff);
}

// `v` (a line's word) against call `seq`'s k-th signal: the line is in a later call, or in this
// one with at least k signals.
bool wordReached(uint32_t v, uint64_t seq, uint32_t k) {
  const int8_t ahead = static_cast<int8_t>(static_cast<uint8_t>(v >> 24) -
                                           static_cast<uint8_t>(seq & 0xff));
  if (ahead != 0) return ahead > 0;
  return (v & 0xffffff) >= k;
}

}  // namespace

struct ShmWindow::Line {
  std::atomic<uint32_t> word;
  WindowHeader header;
  uint32_t pad;
  std::byte inl[kInlineBytes];  // the first bytes of the region
};
static_assert(sizeof(ShmWindow::Line) == 64);
static_assert(sizeof(WindowHeader) == 24);

struct ShmWindow::RankCtl {
  alignas(64) std::atomic<uint32_t> waiters;  // ranks sleeping on one of this rank's words
  alignas(64) std::atomic<uint32_t> failed;   // 0, or 1 + Code once this rank's communicator failed
  uint32_t failLength;
  char failMessage[512];
};

ShmWindow::~ShmWindow() = default;

void ShmWindow::mapRanks() {
  ctls_.clear();
  lines_[0].clear();
  lines_[1].clear();
  for (int r = 0; r < nranks_; ++r) {
    std::byte* base = seg_.data() + sizeof(SegHeader) + static_cast<size_t>(r) * rankBytes_;
    ctls_.push_back(reinterpret_cast<RankCtl*>(base));
    for (int p = 0; p < 2; ++p)
      lines_[p].push_back(reinterpret_cast<Line*>(base + roundUp(sizeof(RankCtl), 64) +
                                                  static_cast<size_t>(p) * parityBytes_));
  }
}

std::byte* ShmWindow::region(int rank, int parity) const {
  return line(rank, static_cast<uint64_t>(parity)).inl;
}

StatusOr<std::unique_ptr<ShmWindow>> ShmWindow::create(int rank, int nranks, uint64_t commId,
                                                       int32_t rank0Pid, uint64_t slotBytes,
                                                       uint64_t roundBytes, const WaitPolicy& w) {
  std::unique_ptr<ShmWindow> h(new ShmWindow());
  h->rank_ = rank;
  h->nranks_ = nranks;
  h->slotBytes_ = roundUp(std::max<uint64_t>(slotBytes, 64), 64);
  h->roundBytes_ = roundUp(roundBytes, 4096);
  h->parityBytes_ = roundUp(sizeof(Line) - kInlineBytes + h->slotBytes_ + 2 * h->roundBytes_, 64);
  h->rankBytes_ = roundUp(sizeof(RankCtl), 64) + 2 * h->parityBytes_;
  const size_t bytes = sizeof(SegHeader) + static_cast<size_t>(nranks) * h->rankBytes_;
  const std::string name = segmentName(rank0Pid, commId, "window");
  auto pause = std::chrono::microseconds(20);
  auto lastCheck = Clock::now();
  const auto deadline = w.deadlineFrom(lastCheck);
  // Bounded, and a dead peer ends the wait within ~100 ms.
  auto idle = [&](const std::string& what) -> Status {
    auto now = Clock::now();
    if (now >= deadline)
      return timeoutError("host window " + name + ": " + what + " for " +
                          std::to_string(w.timeoutSeconds) + " s");
    if (now - lastCheck > std::chrono::milliseconds(100) && w.checkPeer) {
      lastCheck = now;
      for (int r = 0; r < nranks; ++r)
        if (r != rank) CHORUS_RETURN_IF_ERROR(w.checkPeer(r).withContext("host window"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
    return Status();
  };

  if (rank == 0) {
    CHORUS_ASSIGN_OR_RETURN(h->seg_, Segment::create(name, bytes));
    auto* sh = reinterpret_cast<SegHeader*>(h->seg_.data());
    sh->magic = kMagic;
    sh->version = kVersion;
    sh->nranks = static_cast<uint32_t>(nranks);
    sh->slotBytes = h->slotBytes_;
    sh->roundBytes = h->roundBytes_;
    sh->ready.store(1, std::memory_order_release);
    while (sh->attached.load(std::memory_order_acquire) < static_cast<uint32_t>(nranks - 1))
      CHORUS_RETURN_IF_ERROR(idle("waiting for every rank to map it"));
    h->seg_.unlink();  // the last rank to map it removed the name already
    h->mapRanks();
    return h;
  }
  while (true) {
    StatusOr<Segment> seg = Segment::open(name, bytes);
    if (seg.ok()) {
      auto* sh = reinterpret_cast<SegHeader*>(seg->data());
      if (sh->ready.load(std::memory_order_acquire) == 1) {
        if (sh->magic != kMagic || sh->version != kVersion ||
            sh->nranks != static_cast<uint32_t>(nranks) || sh->slotBytes != h->slotBytes_ ||
            sh->roundBytes != h->roundBytes_)
          return invalidUsage("host window " + name +
                              " has another layout (ranks with different chorus versions or "
                              "CHORUS_SHM_STAGING / CHORUS_SHM_STAGING_ROUND settings?)");
        if (sh->attached.fetch_add(1, std::memory_order_acq_rel) + 1 ==
            static_cast<uint32_t>(nranks - 1))
          seg->removeName();
        h->seg_ = std::move(seg).value();
        h->mapRanks();
        return h;
      }
    } else if (seg.status().code() != Code::kTimeout) {
      return seg.status();
    }
    CHORUS_RETURN_IF_ERROR(idle("rank 0 has not created it"));
  }
}

void ShmWindow::publish(uint64_t seq, uint32_t count) {
  line(rank_, seq).word.store(wordOf(seq, count), std::memory_order_release);
  // Pairs with the sleeper's seq_cst increment of `waiters` before its last look at the word.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (ctl(rank_).waiters.load(std::memory_order_relaxed))
    futex::wakeAll(&line(rank_, seq).word);
}

void ShmWindow::enter(uint64_t seq, const WindowHeader& h) {
  line(rank_, seq).header = h;
  publish(seq, 1);
}

void ShmWindow::signal(uint64_t seq, uint32_t k) { publish(seq, k); }

bool ShmWindow::reached(int rank, uint64_t seq, uint32_t k) const {
  return wordReached(line(rank, seq).word.load(std::memory_order_acquire), seq, k);
}

WindowHeader ShmWindow::header(int rank, uint64_t seq) const { return line(rank, seq).header; }

Status ShmWindow::failureOf(int rank) const {
  const RankCtl& c = ctl(rank);
  const uint32_t f = c.failed.load(std::memory_order_acquire);
  const Code code = f - 1 == static_cast<uint32_t>(Code::kInvalidUsage) ? Code::kInvalidUsage
                                                                       : Code::kRemoteError;
  const size_t len = std::min<size_t>(c.failLength, sizeof(c.failMessage));
  return Status(code, "rank " + std::to_string(rank) + " aborted: " +
                          std::string(c.failMessage, len));
}

Status ShmWindow::await(int rank, uint64_t seq, uint32_t k, const WaitPolicy& w) {
  RankCtl& c = ctl(rank);
  std::atomic<uint32_t>& word = line(rank, seq).word;
  // A peer whose communicator failed may have signalled without finishing what the signal
  // promises: nothing it published is used once it has said so.
  if (wordReached(word.load(std::memory_order_acquire), seq, k) &&
      !c.failed.load(std::memory_order_acquire))
    return Status();
  const auto start = Clock::now();
  const auto deadline = w.deadlineFrom(start);
  auto lastCheck = start;
  auto lastYield = start;
  while (true) {
    // Spinning only pays when the peer runs on another core at the same time; with more ranks
    // than cores (spinUs 0) the peer needs this core, so give it up at once.
    if (w.spinUs > 0) {
      for (int i = 0; i < 16; ++i) {
        if (wordReached(word.load(std::memory_order_acquire), seq, k)) break;
        cpuRelax();
      }
    }
    if (c.failed.load(std::memory_order_acquire)) return failureOf(rank);
    if (wordReached(word.load(std::memory_order_acquire), seq, k)) return Status();
    const auto now = Clock::now();
    const auto waited = std::chrono::duration_cast<std::chrono::microseconds>(now - start).count();
    if (waited < w.spinUs) {
      WaitPolicy::yieldWhileSpinning(now, &lastYield);  // the peer may share this core
      continue;
    }
    if (w.abortFlag && w.abortFlag->load(std::memory_order_relaxed))
      return remoteError("the communicator was aborted on rank " + std::to_string(rank_) +
                         " (chorusCommAbort)");
    if (now >= deadline)
      return timeoutError("timed out after " + std::to_string(w.timeoutSeconds) + " s on rank " +
                          std::to_string(rank_) + " waiting for rank " + std::to_string(rank) +
                          "'s signal " + std::to_string(k) + " of the call");
    if (now - lastCheck > std::chrono::milliseconds(100) && w.checkPeer) {
      lastCheck = now;
      // Gone after reaching it is no failure (checked above and again here, after the check).
      Status alive = w.checkPeer(rank);
      if (!alive.ok()) {
        // It may have failed, said so and exited since we looked: its reason, not "gone".
        if (c.failed.load(std::memory_order_acquire)) return failureOf(rank);
        if (wordReached(word.load(std::memory_order_acquire), seq, k)) return Status();
        return alive;
      }
    }
    if (waited < w.spinUs + w.yieldUs) {
      sched_yield();
      continue;
    }
    c.waiters.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t v = word.load(std::memory_order_seq_cst);
    if (!wordReached(v, seq, k) && !c.failed.load(std::memory_order_acquire)) {
      WaitWord ww{&word, v};
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
      futex::waitAny({&ww, 1}, static_cast<int>(std::clamp<long long>(left, 1, 100)));
    }
    c.waiters.fetch_sub(1, std::memory_order_relaxed);
  }
}

void ShmWindow::markFailed(const Status& why) {
  RankCtl& me = ctl(rank_);
  if (me.failed.load(std::memory_order_relaxed)) return;
  const std::string& msg = why.message();
  const size_t len = std::min(msg.size(), sizeof(me.failMessage));
  std::memcpy(me.failMessage, msg.data(), len);
  me.failLength = static_cast<uint32_t>(len);
  me.failed.store(1 + static_cast<uint32_t>(why.code()), std::memory_order_release);
  futex::wakeAll(&line(rank_, 0).word);
  futex::wakeAll(&line(rank_, 1).word);
}

}  // namespace chorus::shm
