// The transport contract: how to reach one peer, and nothing about collectives.
//
// A transport kind registers a factory (CHORUS_REGISTER_TRANSPORT, in its own folder); the
// communicator creates one Transport of every registered kind the job allows (CHORUS_TRANSPORT)
// and never names one. At init every rank calls listen() and the resulting EndpointBlob travels
// to all peers in the bootstrap record. For each peer the communicator takes the transport with
// the best canConnect() score and calls connect(p, p's blob). Both sides of a pair call
// connect() for each other; the transport decides internally who dials and who accepts, and
// must not deadlock when both call it at once.
//
// A Connection is ordered and reliable in each direction. Messages are matched in FIFO order:
// the k-th postSend on one side meets the k-th postRecv on the other, and their sizes and tags
// must agree (a mismatch fails the receiving op with kInvalidUsage naming both sizes/tags).
// test() never blocks and drives the connection's progress. cancel() fails every outstanding op
// with `why` and tells the peer (best effort), whose ops then fail with `why`'s code
// (kInvalidUsage stays kInvalidUsage, everything else becomes kRemoteError) and its message.
// A closed peer (EOF, reset) fails outstanding and future ops with kRemoteError naming the peer
// — but only those its delivered messages cannot complete: a peer that sent everything and
// left has not failed anyone (peerGone() says the same for peers whose end is not seen on the
// connection itself, such as a shared-memory peer whose process is gone).
//
// One-sided access. A transport whose connections can read peer memory (caps().oneSidedRead)
// names memory with a MemHandle: the owner's connection expose()s a local range (an address
// for cross-memory attach; a registration's rkey for UCX and ibverbs; an IPC handle for CUDA),
// the handle travels to the peer, and the peer's connection read()s through it.
//
// The host window. A transport with caps().hostWindow can create, for a communicator whose
// ranks all share one host, a HostWindow: memory every rank maps, a region per rank, and the
// words ranks signal each other through. Window algorithms (algorithms/direct/*_staged.cc) run
// on it without messages or system calls; see algorithms/common/schedule.h.
#pragma once

#include <poll.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/futex.h"
#include "src/base/socket_util.h"
#include "src/base/status.h"
#include "src/cost/cost_model.h"
#include "src/cost/machine.h"

namespace chorus {

using Tag = uint64_t;
using EndpointBlob = std::vector<uint8_t>;

/// Fixed-size fields of an EndpointBlob, in this host's byte order (a job's ranks share it).
namespace blob {
template <typename T>
void put(EndpointBlob& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);
}
/// The caller has checked that `in` holds sizeof(T) bytes at `at`.
template <typename T>
T get(const EndpointBlob& in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof v);
  return v;
}
}  // namespace blob

/// What a transport may know of a rank: where its process runs (from the bootstrap record).
struct PeerIdentity {
  int rank = -1;
  uint64_t hostId = 0;        ///< equal for ranks on the same host
  int32_t pid = 0;
  uint64_t pidNamespace = 0;  ///< inode of /proc/self/ns/pid: pid checks need the same one
};

/// canConnect's answer: reachable with a score (higher wins) over a link class, or not.
struct Reach {
  bool ok = false;
  int score = 0;
  cost::LinkClass link = cost::LinkClass::kEthernet;
};

/// Opaque handle of one posted send or receive, valid on the connection that made it.
struct Op {
  uint64_t id = 0;
};

/// Bytes moved by one connection; the communicator adds them up per transport and host class.
struct ConnStats {
  uint64_t bytesSent = 0;
  uint64_t bytesRecv = 0;
};

/// Names memory a peer may read, as the owner's transport serialized it.
struct MemHandle {
  static constexpr size_t kMaxBytes = 60;
  uint32_t size = 0;
  uint8_t bytes[kMaxBytes] = {};
};
static_assert(sizeof(MemHandle) == 64);

class Connection {
 public:
  virtual ~Connection() = default;
  virtual int peer() const = 0;

  /// `src`/`dst` must stay valid until test() reports done. bytes may be 0.
  /// Posting queues the op; it may not move until the connection is next progressed (test() or
  /// progress()), so several sends posted together leave in one system call.
  virtual StatusOr<Op> postSend(const void* src, size_t bytes, Tag tag) = 0;
  virtual StatusOr<Op> postRecv(void* dst, size_t bytes, Tag tag) = 0;
  /// Never blocks. Sets *done when `op` has completed (send: buffer reusable; recv: data landed).
  /// Drives the connection's progress (progress(), then check()).
  virtual Status test(Op& op, bool* done) = 0;
  /// Moves what can move now (sends, receives) without blocking. A caller with many ops on one
  /// connection calls it once, then check()s each op: one pass over the socket, not one per op.
  /// Returns the connection's failure, if it has failed.
  virtual Status progress() { return Status(); }
  /// Like test() without progressing: whether `op` completed by what progress() last did.
  virtual Status check(Op& op, bool* done) { return test(op, done); }
  /// Fails all outstanding ops with `why` and notifies the peer. Idempotent.
  virtual Status cancel(const Status& why) = 0;

  /// For blocking waits: the fd to poll and the events that mean "progress may be possible now"
  /// (POLLOUT only while sends are pending). fd -1 means the caller must keep polling test().
  virtual void pollInfo(int* fd, short* events) const = 0;
  /// The longest a caller may sleep on pollInfo()'s fd before progressing again, in ms (-1: as
  /// long as it likes). For a transport whose fd can miss an event.
  virtual int pollSliceMs() const { return -1; }

  /// False while the peer has not finished its side of connect() (shared memory: the creator of
  /// a segment returns before its peer has mapped it). The communicator waits, bounded, until
  /// every new connection says true, so no rank leaves connection setup before its peers.
  virtual bool connected() const { return true; }

  /// For blocking waits on transports without an fd. Arms the peer's wake-up and appends the
  /// words to sleep on; returns false instead when progress is possible right now (do not
  /// sleep). The caller calls endWait() after sleeping.
  virtual bool prepareWait(std::vector<WaitWord>& /*words*/) { return false; }
  virtual void endWait() {}

  /// The peer's process has ended (seen by the communicator's liveness check, not on the
  /// connection): from now on, ops that what the peer delivered before it ended can complete
  /// still complete; every other op, now or later, fails with `why`.
  virtual void peerGone(const Status& /*why*/) {}

  /// One-sided access (caps().oneSidedRead): makes `bytes` at `base` readable by this peer and
  /// returns the handle the peer reads it through.
  virtual bool canRead() const { return false; }
  virtual StatusOr<MemHandle> expose(const void* /*base*/, size_t /*bytes*/) {
    return internalError("this connection cannot expose memory to its peer");
  }
  /// Blocking: `bytes` at `offset` of the peer's exposed memory `remote` into `dst`.
  virtual Status read(void* /*dst*/, const MemHandle& /*remote*/, uint64_t /*offset*/,
                      size_t /*bytes*/) {
    return internalError("this connection cannot read peer memory");
  }

  virtual ConnStats stats() const = 0;
};

/// The consistency header of one call, as the host window carries it (24 bytes of the line its
/// owner's signal word lives in; 4-byte fields so it packs into the line).
struct WindowHeader {
  uint32_t seq = 0;      ///< the call number's low 32 bits (peers are never 2^32 calls apart)
  uint32_t countLo = 0;  ///< the call's count
  uint32_t countHi = 0;
  int32_t root = -1;
  uint8_t coll = 0;
  uint8_t dtype = 0;
  uint8_t op = 0;
  /// What differs between ranks and is not checked: kHeaderInSegments.
  uint8_t flags = 0;
  uint16_t algo = 0;  ///< the algorithm's registry index (equal on every rank of one build)
  uint16_t pad2 = 0;
  uint64_t count() const { return (static_cast<uint64_t>(countHi) << 32) | countLo; }
  void setCount(uint64_t c) {
    countLo = static_cast<uint32_t>(c);
    countHi = static_cast<uint32_t>(c >> 32);
  }
  bool operator==(const WindowHeader&) const = default;
  /// The same call (every field but the flags).
  bool sameCall(WindowHeader other) const {
    other.flags = flags;
    return other == *this;
  }
};

/// Header flag (WindowHeader::flags, exec::WireHeader::flags): the call's input and output lie
/// in chorusMemAlloc segments on this rank, which its peers on the host read as plain memory.
/// Set only on calls that ask (exec::OpIdentity::segments).
inline constexpr uint8_t kHeaderInSegments = 1;
static_assert(sizeof(WindowHeader) == 24);

/// How a window wait gives up: at the deadline, on an abort, or when `checkPeer` says the rank
/// it waits for is gone (called at most every 100 ms). It spins for `spinUs` first.
struct WaitPolicy {
  /// While it spins, a waiter gives up its core once every this many microseconds without
  /// progress (sched_yield). When the rank it waits for shares the core — more ranks than cores,
  /// other work on the machine, or the scheduler placing both on one core for a while — that
  /// rank runs now instead of after the whole spin: a 2-rank 8 B all-reduce under a compile on
  /// both cores took 30 us per call with a plain 20 us spin. Alone on its core the yield returns
  /// at once, and a peer on another core answers well within it, so the spin's latency stays.
  static constexpr int kSpinYieldUs = 2;
  /// The spin's yield: gives up the core when kSpinYieldUs have passed since `*last` (the last
  /// yield or the last progress), and moves `*last` to `now` when it does.
  static void yieldWhileSpinning(std::chrono::steady_clock::time_point now,
                                 std::chrono::steady_clock::time_point* last) {
    if (now - *last < std::chrono::microseconds(kSpinYieldUs)) return;
    sched_yield();
    *last = now;
  }
  int spinUs = 20;
  /// After the spin: how long it yields between looks before it sleeps.
  int yieldUs = 200;
  /// When waiting gives up. Unset (the clock's epoch, the default): timeoutSeconds after the
  /// wait begins — what a communicator's calls use, so that a call whose data is already there
  /// reads no clock; a run of a plan counts from its first wait.
  std::chrono::steady_clock::time_point deadline;
  double timeoutSeconds = 300;
  /// The deadline of a wait that began at `start`.
  std::chrono::steady_clock::time_point deadlineFrom(
      std::chrono::steady_clock::time_point start) const {
    if (deadline.time_since_epoch().count() != 0) return deadline;
    return start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                       std::chrono::duration<double>(timeoutSeconds));
  }
  const std::atomic<bool>* abortFlag = nullptr;
  std::function<Status(int rank)> checkPeer;
};

/// Memory shared by every rank of a communicator whose ranks all share one host. Per rank and
/// per parity of the call number: a region (slot + two round areas, see
/// sched::WindowGeometry) and a line with the rank's signal word and its header. Signals are
/// counted per call: a rank's first signal of call s publishes its header ("entering s"), its
/// k-th says "k".
class HostWindow {
 public:
  virtual ~HostWindow() = default;
  virtual uint64_t slotBytes() const = 0;
  virtual uint64_t roundBytes() const = 0;
  /// `rank`'s region for calls of `parity` (0 or 1), slotBytes + 2 roundBytes long.
  virtual std::byte* region(int rank, int parity) const = 0;
  /// This rank enters call `seq`: publishes `h` and its first signal.
  virtual void enter(uint64_t seq, const WindowHeader& h) = 0;
  /// This rank's k-th signal (k >= 2) of call `seq`.
  virtual void signal(uint64_t seq, uint32_t k) = 0;
  /// Non-blocking: `rank` has made k signals of call `seq`, or is in a later call.
  virtual bool reached(int rank, uint64_t seq, uint32_t k) const = 0;
  /// Blocks until reached(rank, seq, k), bounded by `w`; fails as soon as the rank marked
  /// itself failed (with its reason), or is gone without having reached it.
  virtual Status await(int rank, uint64_t seq, uint32_t k, const WaitPolicy& w) = 0;
  /// The header `rank` published for call `seq` (valid once reached(rank, seq, 1)).
  virtual WindowHeader header(int rank, uint64_t seq) const = 0;
  /// Tells every other rank this rank's communicator failed: their waits on it end at once.
  virtual void markFailed(const Status& why) = 0;
};

/// What a transport can do.
struct TransportCaps {
  bool oneSidedRead = false;     ///< its connections can read peer memory
  bool memRegistration = false;  ///< expose() registers memory (costs a call; handles are keys)
  bool hostWindow = false;       ///< createWindow() works when all ranks share one host
  /// A send completes while only its sender progresses (false: the receiver's progress is
  /// needed too, as for UCX's endpoint wire-up and rendezvous or receiver-advertised buffers).
  bool senderAloneCompletes = true;
  /// A process forked after this one made a transport of the kind can make and use its own
  /// (false: UCX's context does not survive fork; registered RDMA memory and fork do not mix).
  bool forkedPeers = true;
};

/// What a transport instance is created with.
struct TransportContext {
  int rank = 0;
  int nranks = 1;
  uint64_t commId = 0;  ///< the communicator's id, equal on every rank
  PeerIdentity self;
  /// The bootstrap root's address, for transports that pick an interface by the route to it
  /// (nullptr: none, e.g. a split).
  const net::SockAddr* root = nullptr;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string_view name() const = 0;
  virtual TransportCaps caps() const = 0;
  /// Whether this transport reaches `peer`, from what it published (`peerBlob`, possibly empty).
  virtual Reach canConnect(const PeerIdentity& self, const PeerIdentity& peer,
                           const EndpointBlob& peerBlob) const = 0;
  /// Starts accepting connections; the blob is what peers need to reach us.
  virtual Status listen(EndpointBlob* out) = 0;
  /// Bounded by `timeoutSeconds`. Both ends of a pair call this for each other.
  virtual StatusOr<std::unique_ptr<Connection>> connect(int peer, const EndpointBlob& peerBlob,
                                                        double timeoutSeconds) = 0;
  /// The same kind of transport, configured alike, for a communicator split from this one.
  virtual StatusOr<std::unique_ptr<Transport>> forSplit(const TransportContext& child) = 0;
  /// Collective over all ranks of the communicator (caps().hostWindow, every rank on this
  /// host and connected through this transport); rank 0 creates it, the others attach.
  /// Bounded by w.deadline. `machine` is what the host's caches say (the window sizes itself
  /// with cost::resolveSizes; the default, nothing known, gives the table's sizes).
  virtual StatusOr<std::unique_ptr<HostWindow>> createWindow(
      int rank, int nranks, const PeerIdentity& rank0, const WaitPolicy& w,
      const cost::MachineDesc& machine = {}) {
    (void)rank, (void)nranks, (void)rank0, (void)w, (void)machine;
    return invalidUsage(std::string(name()) + " cannot make a host window");
  }
};

/// A transport kind. Registered once, in its own folder: CHORUS_REGISTER_TRANSPORT({...}).
struct TransportFactory {
  const char* name;         ///< "tcp", "shm", ... (CHORUS_TRANSPORT names these)
  const char* description;  ///< one line, for chorus-info
  /// Why the kind cannot be used in this process (no device, no library), or nullptr.
  const char* (*unavailable)() = nullptr;
  StatusOr<std::unique_ptr<Transport>> (*create)(const TransportContext& ctx) = nullptr;
};

class TransportRegistration {
 public:
  explicit TransportRegistration(const TransportFactory& f);
};

#define CHORUS_REGISTER_TRANSPORT_CAT2(a, b) a##b
#define CHORUS_REGISTER_TRANSPORT_CAT(a, b) CHORUS_REGISTER_TRANSPORT_CAT2(a, b)
#define CHORUS_REGISTER_TRANSPORT(...)                                        \
  static const ::chorus::TransportRegistration CHORUS_REGISTER_TRANSPORT_CAT( \
      chorusTransportRegistration_, __LINE__)(::chorus::TransportFactory __VA_ARGS__)

/// Every registered transport kind, by name.
std::span<const TransportFactory* const> allTransports();
const TransportFactory* findTransport(std::string_view name);

}  // namespace chorus
