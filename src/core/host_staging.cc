#include "src/core/host_staging.h"

#include <sched.h>

#include <cstring>
#include <thread>

#include "algorithms/kernels/reduce.h"
#include "src/core/futex.h"
#include "src/core/logging.h"

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x54534843;  // "CHST"
constexpr uint32_t kVersion = 1;
// After the spin, a waiter yields this long before it sleeps on the futex.
constexpr int kYieldUs = 200;

struct SegHeader {
  uint32_t magic;
  uint32_t version;
  uint32_t nranks;
  uint32_t slotBytes;
  std::atomic<uint32_t> ready;
  std::atomic<uint32_t> attached;
  uint8_t pad[40];
};
static_assert(sizeof(SegHeader) == 64);

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

size_t roundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

}  // namespace

// One cache line per rank and parity: the sequence word, the operation header and, for tiny
// messages, the data itself. A reader that sees the number has the rest in the same line, so a
// small all-reduce costs about one cache-line transfer per peer each way.
struct HostStaging::OpHeader {
  std::atomic<uint32_t> seq;  // low 32 bits of the last operation published in this parity
  uint8_t coll;
  uint8_t dtype;
  uint8_t op;      // the user's op, 0xff when none
  uint8_t staged;  // 1: this operation runs through the slots
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

StatusOr<std::unique_ptr<HostStaging>> HostStaging::create(int rank, int nranks, uint64_t commId,
                                                           int rank0Pid, size_t slotBytes,
                                                           const WaitEnv& env) {
  std::unique_ptr<HostStaging> h(new HostStaging());
  h->rank_ = rank;
  h->nranks_ = nranks;
  h->slotBytes_ = roundUp(std::max<size_t>(slotBytes, 64), 64);
  h->rankBytes_ = roundUp(sizeof(RankCtl), 64) + 2 * h->slotBytes_;
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
            sh->nranks != static_cast<uint32_t>(nranks) || sh->slotBytes != h->slotBytes_)
          return invalidUsage("host staging segment " + name +
                              " has another layout (ranks with different chorus versions or "
                              "CHORUS_SHM_STAGING settings?)");
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
  std::atomic<uint32_t>& word = c.line[seq & 1].seq;
  const uint32_t target = static_cast<uint32_t>(seq);
  // Values in one parity's word only grow, and never past target + 2 while we wait for target.
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
      return remoteError(describeCall(id, "oneshot") + ": the communicator was aborted on rank " +
                         std::to_string(rank_) + " (chorusCommAbort)");
    if (now >= deadline)
      return timeoutError(describeCall(id, "oneshot") + ": timed out after " +
                          std::to_string(env.timeoutSeconds) + " s on rank " +
                          std::to_string(rank_) + " waiting for rank " + std::to_string(rank) +
                          " to enter the operation");
    if (now - lastCheck > std::chrono::milliseconds(100) && env.checkPeers) {
      lastCheck = now;
      CHORUS_RETURN_IF_ERROR(env.checkPeers({rank}).withContext(describeCall(id, "oneshot")));
    }
    if (waited < env.spinUs + kYieldUs) {
      sched_yield();
      continue;
    }
    c.waiters.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t v = word.load(std::memory_order_seq_cst);
    if (!reached(v) && !c.failed.load(std::memory_order_acquire)) {
      WaitWord w{&word, v};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
      futex::waitAny({&w, 1}, static_cast<int>(std::clamp<long long>(left, 1, 100)));
    }
    c.waiters.fetch_sub(1, std::memory_order_relaxed);
  }
}

Status HostStaging::publish(const OpIdentity& id, const void* payload, size_t bytes,
                            bool staged, const WaitEnv& env, Clock::time_point deadline) {
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
  h.staged = staged ? 1 : 0;
  h.seq.store(static_cast<uint32_t>(s), std::memory_order_release);
  // Pairs with the sleeper's seq_cst increment of `waiters` before its last look at `seq`.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (me.waiters.load(std::memory_order_relaxed)) futex::wakeAll(&h.seq);
  return Status();
}

Status HostStaging::checkHeader(int rank, const OpIdentity& id, bool staged) const {
  const OpHeader& h = ctl(rank).line[id.seq & 1];
  const uint8_t op = static_cast<uint8_t>(id.userOp < 0 ? 0xff : std::min(id.userOp, 0xfe));
  if (h.fullSeq == id.seq && h.count == id.count && h.root == id.root &&
      h.coll == static_cast<uint8_t>(id.coll) && h.dtype == static_cast<uint8_t>(id.dtype) &&
      h.op == op && h.staged == (staged ? 1 : 0))
    return Status();
  OpIdentity other;
  other.coll = static_cast<sched::Coll>(h.coll);
  other.seq = h.fullSeq;
  other.count = h.count;
  other.dtype = static_cast<DataType>(h.dtype);
  other.userOp = h.op == 0xff ? -1 : h.op;
  other.root = h.root;
  return invalidUsage("rank " + std::to_string(rank_) + " called " +
                      describeCall(id, staged ? "oneshot" : "") + " but rank " +
                      std::to_string(rank) + " called " +
                      describeCall(other, h.staged ? "oneshot" : "a schedule"));
}

Status HostStaging::announce(const OpIdentity& id, const WaitEnv& env) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(env.timeoutSeconds));
  return publish(id, nullptr, 0, false, env, deadline);
}

Status HostStaging::allReduce(const OpIdentity& id, const void* send, void* recv, uint64_t count,
                              DataType dtype, ReduceOp op, const WaitEnv& env) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(env.timeoutSeconds));
  const size_t bytes = count * dataTypeSize(dtype);
  if (bytes > slotBytes_)
    return internalError("staged all-reduce of " + std::to_string(bytes) + " bytes exceeds the " +
                         std::to_string(slotBytes_) + "-byte slot");
  CHORUS_RETURN_IF_ERROR(publish(id, send, bytes, true, env, deadline));
  for (int q = 0; q < nranks_; ++q) {
    if (q == rank_) continue;
    CHORUS_RETURN_IF_ERROR(waitFor(q, id.seq, id, env, deadline));
    CHORUS_RETURN_IF_ERROR(checkHeader(q, id, true));
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
}

}  // namespace chorus
