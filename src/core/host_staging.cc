#include "src/core/host_staging.h"

#include <sched.h>

#include <cstring>
#include <thread>

#include "algorithms/kernels/reduce.h"
#include "src/base/futex.h"
#include "src/base/logging.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x54534843;  // "CHST"
constexpr uint32_t kVersion = 2;
// After the spin, a waiter yields this long before it sleeps on the futex.
constexpr int kYieldUs = 200;

struct SegHeader {
  uint32_t magic;
  uint32_t version;
  uint32_t nranks;
  uint32_t slotBytes;
  std::atomic<uint32_t> ready;
  std::atomic<uint32_t> attached;
  uint64_t roundBytes;
  uint8_t pad[32];
};
static_assert(sizeof(SegHeader) == 64);

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

size_t roundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

// A rank's step word during round t: 2t+1 once its part of the round is in its area, 2t+2 once
// it has done its share of the round.
uint32_t stepOf(uint64_t round, int phase) {
  return static_cast<uint32_t>(2 * round + static_cast<uint64_t>(phase));
}

}  // namespace

// One cache line per rank and parity: the sequence word, the operation header and, for tiny
// messages, the data itself. A reader that sees the number has the rest in the same line, so a
// small all-reduce costs about one cache-line transfer per peer each way.
struct HostStaging::OpHeader {
  std::atomic<uint32_t> seq;  // low 32 bits of the last operation published in this parity
  uint8_t coll;
  uint8_t dtype;
  uint8_t op;      // the user's op, 0xff when none
  uint8_t mode;    // HostStaging::Mode: how the operation runs
  int32_t root;
  uint32_t pad;
  uint64_t fullSeq;
  uint64_t count;
  std::byte inl[kInlineBytes];
};
static_assert(sizeof(HostStaging::OpHeader) == 64);

struct HostStaging::RankCtl {
  OpHeader line[2];                     // by parity
  alignas(64) std::atomic<uint32_t> waiters;  // ranks sleeping on one of this rank's seq words
  alignas(64) std::atomic<uint32_t> step;         // two-shot: 2t+1 once round t is copied in,
                                                  // 2t+2 once its slice is reduced
  alignas(64) std::atomic<uint32_t> stepWaiters;  // ranks sleeping on `step`
  alignas(64) std::atomic<uint32_t> failed;   // 0, or 1 + Code once this rank's communicator failed
  uint32_t failLength;
  char failMessage[512];
};

HostStaging::~HostStaging() = default;

HostStaging::RankCtl& HostStaging::ctl(int rank) const {
  return *reinterpret_cast<RankCtl*>(seg_.data() + sizeof(SegHeader) +
                                     static_cast<size_t>(rank) * rankBytes_);
}

std::byte* HostStaging::data(int rank, int parity) const {
  return seg_.data() + sizeof(SegHeader) + static_cast<size_t>(rank) * rankBytes_ +
         roundUp(sizeof(RankCtl), 64) + static_cast<size_t>(parity) * slotBytes_;
}

std::byte* HostStaging::area(int rank, int parity) const {
  return data(rank, 0) + 2 * slotBytes_ + static_cast<size_t>(parity) * roundBytes_;
}

StatusOr<std::unique_ptr<HostStaging>> HostStaging::create(int rank, int nranks, uint64_t commId,
                                                           int rank0Pid, size_t slotBytes,
                                                           size_t roundBytes, const WaitEnv& env) {
  std::unique_ptr<HostStaging> h(new HostStaging());
  h->rank_ = rank;
  h->nranks_ = nranks;
  h->slotBytes_ = roundUp(std::max<size_t>(slotBytes, 64), 64);
  h->roundBytes_ = roundUp(roundBytes, 4096);
  h->rankBytes_ = roundUp(sizeof(RankCtl), 64) + 2 * h->slotBytes_ + 2 * h->roundBytes_;
  const size_t bytes = sizeof(SegHeader) + static_cast<size_t>(nranks) * h->rankBytes_;
  const std::string name = shm::segmentName(rank0Pid, commId, "host");
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(env.timeoutSeconds));
  std::vector<int> others;
  for (int r = 0; r < nranks; ++r)
    if (r != rank) others.push_back(r);
  auto pause = std::chrono::microseconds(20);
  auto lastCheck = Clock::now();
  // Bounded, and a dead peer ends the wait within ~100 ms.
  auto idle = [&](const std::string& what) -> Status {
    auto now = Clock::now();
    if (now >= deadline)
      return timeoutError("host staging segment " + name + ": " + what + " for " +
                          std::to_string(env.timeoutSeconds) + " s");
    if (now - lastCheck > std::chrono::milliseconds(100) && env.checkPeers) {
      lastCheck = now;
      CHORUS_RETURN_IF_ERROR(env.checkPeers(others).withContext("host staging segment"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
    return Status();
  };

  if (rank == 0) {
    CHORUS_ASSIGN_OR_RETURN(h->seg_, shm::Segment::create(name, bytes));
    auto* sh = reinterpret_cast<SegHeader*>(h->seg_.data());
    sh->magic = kMagic;
    sh->version = kVersion;
    sh->nranks = static_cast<uint32_t>(nranks);
    sh->slotBytes = static_cast<uint32_t>(h->slotBytes_);
    sh->roundBytes = h->roundBytes_;
    sh->ready.store(1, std::memory_order_release);
    while (sh->attached.load(std::memory_order_acquire) < static_cast<uint32_t>(nranks - 1))
      CHORUS_RETURN_IF_ERROR(idle("waiting for every rank to map it"));
    h->seg_.unlink();  // the last rank to map it removed the name already
    return h;
  }
  while (true) {
    StatusOr<shm::Segment> seg = shm::Segment::open(name, bytes);
    if (seg.ok()) {
      auto* sh = reinterpret_cast<SegHeader*>(seg->data());
      if (sh->ready.load(std::memory_order_acquire) == 1) {
        if (sh->magic != kMagic || sh->version != kVersion ||
            sh->nranks != static_cast<uint32_t>(nranks) || sh->slotBytes != h->slotBytes_ || sh->roundBytes != h->roundBytes_)
          return invalidUsage("host staging segment " + name +
                              " has another layout (ranks with different chorus versions or "
                              "CHORUS_SHM_STAGING / CHORUS_SHM_STAGING_ROUND settings?)");
        if (sh->attached.fetch_add(1, std::memory_order_acq_rel) + 1 ==
            static_cast<uint32_t>(nranks - 1))
          seg->removeName();
        h->seg_ = std::move(seg).value();
        return h;
      }
    } else if (seg.status().code() != Code::kTimeout) {
      return seg.status();
    }
    CHORUS_RETURN_IF_ERROR(idle("rank 0 has not created it"));
  }
}

Status HostStaging::waitFor(int rank, uint64_t seq, const OpIdentity& id, const WaitEnv& env,
                            Clock::time_point deadline) {
  RankCtl& c = ctl(rank);
  return waitWord(rank, c.line[seq & 1].seq, c.waiters, static_cast<uint32_t>(seq),
                  "to enter the operation", id, "oneshot", env, deadline);
}

Status HostStaging::waitStep(int rank, uint32_t step, const OpIdentity& id, const WaitEnv& env,
                             Clock::time_point deadline) {
  RankCtl& c = ctl(rank);
  return waitWord(rank, c.step, c.stepWaiters, step, "to reach the next two-shot step", id,
                  "twoshot-staged", env, deadline);
}

Status HostStaging::waitWord(int rank, std::atomic<uint32_t>& word,
                             std::atomic<uint32_t>& waiters, uint32_t target, const char* what,
                             const OpIdentity& id, const char* algo, const WaitEnv& env,
                             Clock::time_point deadline) {
  RankCtl& c = ctl(rank);
  // Values of a word only grow, and never past target + 2 while we wait for target.
  auto reached = [&](uint32_t v) { return static_cast<int32_t>(v - target) >= 0; };
  // A peer whose communicator failed may have published this operation without finishing it:
  // its data is never used once it has said so.
  if (reached(word.load(std::memory_order_acquire)) &&
      !c.failed.load(std::memory_order_acquire))
    return Status();
  auto peerFailed = [&]() -> Status {
    const uint32_t f = c.failed.load(std::memory_order_acquire);
    const Code code = f - 1 == static_cast<uint32_t>(Code::kInvalidUsage) ? Code::kInvalidUsage
                                                                         : Code::kRemoteError;
    const size_t len = std::min<size_t>(c.failLength, sizeof(c.failMessage));
    return Status(code, "rank " + std::to_string(rank) + " aborted: " +
                            std::string(c.failMessage, len));
  };
  const auto start = Clock::now();
  auto lastCheck = start;
  while (true) {
    // Spinning only pays when the peer runs on another core at the same time; with more ranks
    // than cores (spinUs 0) the peer needs this core, so give it up at once.
    if (env.spinUs > 0) {
      for (int i = 0; i < 16; ++i) {
        if (reached(word.load(std::memory_order_acquire))) break;
        cpuRelax();
      }
    }
    if (c.failed.load(std::memory_order_acquire)) return peerFailed();
    if (reached(word.load(std::memory_order_acquire))) return Status();
    const auto now = Clock::now();
    const auto waited = std::chrono::duration_cast<std::chrono::microseconds>(now - start).count();
    if (waited < env.spinUs) continue;
    if (env.abortFlag && env.abortFlag->load(std::memory_order_relaxed))
      return remoteError(describeCall(id, algo) + ": the communicator was aborted on rank " +
                         std::to_string(rank_) + " (chorusCommAbort)");
    if (now >= deadline)
      return timeoutError(describeCall(id, algo) + ": timed out after " +
                          std::to_string(env.timeoutSeconds) + " s on rank " +
                          std::to_string(rank_) + " waiting for rank " + std::to_string(rank) +
                          " " + what);
    if (now - lastCheck > std::chrono::milliseconds(100) && env.checkPeers) {
      lastCheck = now;
      CHORUS_RETURN_IF_ERROR(env.checkPeers({rank}).withContext(describeCall(id, algo)));
    }
    if (waited < env.spinUs + kYieldUs) {
      sched_yield();
      continue;
    }
    waiters.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t v = word.load(std::memory_order_seq_cst);
    if (!reached(v) && !c.failed.load(std::memory_order_acquire)) {
      WaitWord w{&word, v};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
      futex::waitAny({&w, 1}, static_cast<int>(std::clamp<long long>(left, 1, 100)));
    }
    waiters.fetch_sub(1, std::memory_order_relaxed);
  }
}

void HostStaging::setStep(uint32_t step) {
  RankCtl& me = ctl(rank_);
  me.step.store(step, std::memory_order_release);
  // Pairs with the sleeper's seq_cst increment of `stepWaiters` before its last look.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (me.stepWaiters.load(std::memory_order_relaxed)) futex::wakeAll(&me.step);
}

Status HostStaging::publish(const OpIdentity& id, const void* payload, size_t bytes, Mode mode,
                            const WaitEnv& env, Clock::time_point deadline) {
  const uint64_t s = id.seq;
  const int parity = static_cast<int>(s & 1);
  // This parity's line and slot were last read during operation s-2, which every rank has
  // finished once it has published s-1 (usually long known: no wait, no cache miss).
  if (s >= 2)
    for (int q = 0; q < nranks_; ++q)
      if (q != rank_) CHORUS_RETURN_IF_ERROR(waitFor(q, s - 1, id, env, deadline));
  RankCtl& me = ctl(rank_);
  OpHeader& h = me.line[parity];
  if (bytes > kInlineBytes) {
    std::memcpy(data(rank_, parity), payload, bytes);
  } else if (bytes) {
    std::memcpy(h.inl, payload, bytes);
  }
  h.fullSeq = s;
  h.count = id.count;
  h.root = id.root;
  h.coll = static_cast<uint8_t>(id.coll);
  h.dtype = static_cast<uint8_t>(id.dtype);
  h.op = static_cast<uint8_t>(id.userOp < 0 ? 0xff : std::min(id.userOp, 0xfe));
  h.mode = mode;
  h.seq.store(static_cast<uint32_t>(s), std::memory_order_release);
  // Pairs with the sleeper's seq_cst increment of `waiters` before its last look at `seq`.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (me.waiters.load(std::memory_order_relaxed)) futex::wakeAll(&h.seq);
  return Status();
}

Status HostStaging::checkHeader(int rank, const OpIdentity& id, Mode mode) const {
  const OpHeader& h = ctl(rank).line[id.seq & 1];
  const uint8_t op = static_cast<uint8_t>(id.userOp < 0 ? 0xff : std::min(id.userOp, 0xfe));
  if (h.fullSeq == id.seq && h.count == id.count && h.root == id.root &&
      h.coll == static_cast<uint8_t>(id.coll) && h.dtype == static_cast<uint8_t>(id.dtype) &&
      h.op == op && h.mode == mode)
    return Status();
  OpIdentity other;
  other.coll = static_cast<sched::Coll>(h.coll);
  other.seq = h.fullSeq;
  other.count = h.count;
  other.dtype = static_cast<DataType>(h.dtype);
  other.userOp = h.op == 0xff ? -1 : h.op;
  other.root = h.root;
  auto how = [](uint8_t m) {
    return m == kOneShot     ? "oneshot"
           : m == kTwoShot   ? "twoshot-staged"
           : m == kAllGather ? "direct-staged"
                             : "a schedule";
  };
  return invalidUsage("rank " + std::to_string(rank_) + " called " +
                      describeCall(id, mode == kSchedule ? "" : how(mode)) + " but rank " +
                      std::to_string(rank) + " called " + describeCall(other, how(h.mode)));
}

Status HostStaging::announce(const OpIdentity& id, const WaitEnv& env) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(env.timeoutSeconds));
  return publish(id, nullptr, 0, kSchedule, env, deadline);
}

Status HostStaging::allReduce(const OpIdentity& id, const void* send, void* recv, uint64_t count,
                              DataType dtype, ReduceOp op, const WaitEnv& env) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(env.timeoutSeconds));
  const size_t bytes = count * dataTypeSize(dtype);
  if (bytes > slotBytes_)
    return internalError("staged all-reduce of " + std::to_string(bytes) + " bytes exceeds the " +
                         std::to_string(slotBytes_) + "-byte slot");
  CHORUS_RETURN_IF_ERROR(publish(id, send, bytes, kOneShot, env, deadline));
  for (int q = 0; q < nranks_; ++q) {
    if (q == rank_) continue;
    CHORUS_RETURN_IF_ERROR(waitFor(q, id.seq, id, env, deadline));
    CHORUS_RETURN_IF_ERROR(checkHeader(q, id, kOneShot));
  }
  // In rank order on every rank, so every rank computes the same expression (bitwise equal).
  const int parity = static_cast<int>(id.seq & 1);
  auto* out = static_cast<std::byte*>(recv);
  if (count == 0) return Status();
  auto term = [&](int q) -> const std::byte* {
    return bytes > kInlineBytes ? data(q, parity) : ctl(q).line[parity].inl;
  };
  kernels::reduce(out, term(0), term(1), count, dtype, op);
  for (int q = 2; q < nranks_; ++q) kernels::reduce(out, out, term(q), count, dtype, op);
  return Status();
}

Status HostStaging::enter(const OpIdentity& id, Mode mode, const WaitEnv& env,
                          Clock::time_point deadline) {
  CHORUS_RETURN_IF_ERROR(publish(id, nullptr, 0, mode, env, deadline));
  for (int q = 0; q < nranks_; ++q) {
    if (q == rank_) continue;
    CHORUS_RETURN_IF_ERROR(waitFor(q, id.seq, id, env, deadline));
    CHORUS_RETURN_IF_ERROR(checkHeader(q, id, mode));
  }
  return Status();
}

Status HostStaging::fillRound(uint64_t t, const std::byte* src, size_t bytes,
                              const OpIdentity& id, const WaitEnv& env,
                              Clock::time_point deadline) {
  // This half was last read in round t-2, which every rank has finished once it has copied
  // round t-1 in.
  if (t >= 1)
    for (int q = 0; q < nranks_; ++q)
      if (q != rank_) CHORUS_RETURN_IF_ERROR(waitStep(q, stepOf(t - 1, 1), id, env, deadline));
  std::memcpy(area(rank_, static_cast<int>(t & 1)), src, bytes);
  setStep(stepOf(t, 1));
  return Status();
}

Status HostStaging::twoShot(const OpIdentity& id, const void* send, void* recv, uint64_t count,
                            DataType dtype, ReduceOp op, const WaitEnv& env) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(env.timeoutSeconds));
  if (roundBytes_ == 0) return internalError("two-shot all-reduce without a two-shot area");
  CHORUS_RETURN_IF_ERROR(enter(id, kTwoShot, env, deadline));
  const size_t es = dataTypeSize(dtype);
  const uint64_t perRound = roundBytes_ / es;
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  // Reduce and copy out in pieces that stay in the L1/L2 cache between the two.
  const uint64_t piece = std::max<uint64_t>(1, (64 << 10) / es);
  for (uint64_t begin = 0; begin < count; begin += perRound) {
    const uint64_t n = std::min(perRound, count - begin);
    const uint64_t t = rounds_++;
    const int parity = static_cast<int>(t & 1);
    CHORUS_RETURN_IF_ERROR(fillRound(t, in + begin * es, n * es, id, env, deadline));
    for (int q = 0; q < nranks_; ++q)
      if (q != rank_) CHORUS_RETURN_IF_ERROR(waitStep(q, stepOf(t, 1), id, env, deadline));

    // My slice, reduced from every rank's area in rank order (the same expression on every
    // element, whoever computes it), into my output and back into my area for the others.
    auto sliceOf = [&](int r) {
      const uint64_t base = n / static_cast<uint64_t>(nranks_);
      const uint64_t extra = n % static_cast<uint64_t>(nranks_);
      const auto ur = static_cast<uint64_t>(r);
      return std::pair<uint64_t, uint64_t>{ur * base + std::min(ur, extra),
                                           base + (ur < extra ? 1 : 0)};
    };
    const auto [myBegin, myCount] = sliceOf(rank_);
    for (uint64_t off = 0; off < myCount; off += piece) {
      const uint64_t len = std::min(piece, myCount - off);
      const uint64_t at = (myBegin + off) * es;
      std::byte* dst = out + begin * es + at;
      kernels::reduce(dst, area(0, parity) + at, area(1, parity) + at, len, dtype, op);
      for (int q = 2; q < nranks_; ++q)
        kernels::reduce(dst, dst, area(q, parity) + at, len, dtype, op);
      std::memcpy(area(rank_, parity) + at, dst, len * es);
    }
    setStep(stepOf(t, 2));
    for (int k = 1; k < nranks_; ++k) {
      const int q = (rank_ + k) % nranks_;
      CHORUS_RETURN_IF_ERROR(waitStep(q, stepOf(t, 2), id, env, deadline));
      const auto [qBegin, qCount] = sliceOf(q);
      std::memcpy(out + (begin + qBegin) * es, area(q, parity) + qBegin * es, qCount * es);
    }
  }
  return Status();
}

Status HostStaging::allGather(const OpIdentity& id, const void* send, void* recv, uint64_t count,
                              size_t elemSize, const WaitEnv& env) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(env.timeoutSeconds));
  if (roundBytes_ == 0) return internalError("staged all-gather without a round area");
  CHORUS_RETURN_IF_ERROR(enter(id, kAllGather, env, deadline));
  const size_t es = elemSize;
  const uint64_t perRound = std::max<uint64_t>(1, roundBytes_ / es);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  const uint64_t blockBytes = count * es;
  std::byte* mine = out + static_cast<uint64_t>(rank_) * blockBytes;
  for (uint64_t begin = 0; begin < count; begin += perRound) {
    const uint64_t n = std::min(perRound, count - begin);
    const uint64_t t = rounds_++;
    const int parity = static_cast<int>(t & 1);
    CHORUS_RETURN_IF_ERROR(fillRound(t, in + begin * es, n * es, id, env, deadline));
    if (in != mine) std::memcpy(mine + begin * es, area(rank_, parity), n * es);
    for (int k = 1; k < nranks_; ++k) {
      const int q = (rank_ + k) % nranks_;
      CHORUS_RETURN_IF_ERROR(waitStep(q, stepOf(t, 1), id, env, deadline));
      std::memcpy(out + static_cast<uint64_t>(q) * blockBytes + begin * es, area(q, parity),
                  n * es);
    }
    setStep(stepOf(t, 2));
  }
  return Status();
}

void HostStaging::markFailed(const Status& why) {
  RankCtl& me = ctl(rank_);
  if (me.failed.load(std::memory_order_relaxed)) return;
  const std::string& msg = why.message();
  const size_t len = std::min(msg.size(), sizeof(me.failMessage));
  std::memcpy(me.failMessage, msg.data(), len);
  me.failLength = static_cast<uint32_t>(len);
  me.failed.store(1 + static_cast<uint32_t>(why.code()), std::memory_order_release);
  futex::wakeAll(&me.line[0].seq);
  futex::wakeAll(&me.line[1].seq);
  futex::wakeAll(&me.step);
}

}  // namespace chorus
