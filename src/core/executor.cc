#include "src/core/executor.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cstring>

#include "algorithms/kernels/reduce.h"
#include "src/base/futex.h"
#include "src/base/logging.h"

namespace chorus {
namespace {

constexpr uint32_t kHeaderMagic = 0x53524843;  // "CHRS"
constexpr uint16_t kHeaderVersion = 1;
// Posted operations per peer and direction. Enough to keep a link busy while bounding the
// staging memory of recvReduce (kMaxInflight chunks per peer).
constexpr int kMaxInflight = 8;
// One-sided reads that feed a reduction go through a buffer this big: it stays in L2 while the
// bytes are reduced.
constexpr size_t kBouncePiece = 256 << 10;

bool isSendLike(sched::StepKind k) {
  return k == sched::StepKind::kSend || k == sched::StepKind::kNotify;
}
bool isRecvLike(sched::StepKind k) {
  return k == sched::StepKind::kRecv || k == sched::StepKind::kRecvReduce ||
         k == sched::StepKind::kWait;
}
bool isLocal(sched::StepKind k) {
  return k == sched::StepKind::kCopy || k == sched::StepKind::kReduce || sched::isOneSided(k);
}

// Data and header frames of the same operation carry different tags, so a stray frame of
// another operation is caught by the transport's tag check.
Tag dataTag(uint64_t seq) { return seq << 1; }
Tag headerTag(uint64_t seq) { return (seq << 1) | 1; }

const char* opName(int userOp) {
  switch (userOp) {
    case -1: return "none";
    case 0: return "sum";
    case 1: return "prod";
    case 2: return "max";
    case 3: return "min";
    case 4: return "avg";
    default: return "premulsum";
  }
}

std::string describeStep(const sched::Step& s, size_t index) {
  std::string out = "step " + std::to_string(index) + " (" + sched::stepKindName(s.kind);
  switch (s.kind) {
    case sched::StepKind::kSend:
      out += " to rank " + std::to_string(s.peer) + ", " + std::to_string(s.a.bytes) + " bytes";
      break;
    case sched::StepKind::kRecv:
    case sched::StepKind::kRecvReduce:
    case sched::StepKind::kGet:
    case sched::StepKind::kGetReduce:
      out += " from rank " + std::to_string(s.peer) + ", " + std::to_string(s.dst.bytes) + " bytes";
      break;
    case sched::StepKind::kNotify: out += " to rank " + std::to_string(s.peer); break;
    case sched::StepKind::kWait: out += " from rank " + std::to_string(s.peer); break;
    default: break;
  }
  return out + ")";
}

struct PeerState {
  int peer = -1;
  Connection* conn = nullptr;
  std::vector<uint32_t> sends;  // step indices in program order
  std::vector<uint32_t> recvs;
  size_t nextSend = 0, nextRecv = 0;
  int inflightSend = 0, inflightRecv = 0;
  WireHeader mine, theirs;
  Op headerSendOp, headerRecvOp;
  bool headerSent = false, headerRecvd = false;
};

struct Posted {
  Op op;
  uint32_t step;
  int peerIdx;
  int stagingSlot;  // -1 unless recvReduce
};

}  // namespace

std::string describeCall(const OpIdentity& id, const char* algo) {
  std::string s = sched::collName(id.coll);
  if (id.coll == sched::Coll::kSendRecv) return s;
  s += "(count=" + std::to_string(id.count) + ", " + dataTypeName(id.dtype);
  if (id.userOp != -1) s += std::string(", ") + opName(id.userOp);
  if (id.root >= 0) s += ", root=" + std::to_string(id.root);
  s += ") #" + std::to_string(id.seq);
  if (algo && *algo) s += std::string(" [") + algo + "]";
  return s;
}

std::byte* Executor::stagingFor(size_t slot, uint64_t bytes) {
  if (slot >= staging_.size()) {
    staging_.resize(slot + 1);
    stagingSize_.resize(slot + 1, 0);
  }
  if (stagingSize_[slot] < bytes) {
    staging_[slot].reset(new std::byte[bytes]);
    stagingSize_[slot] = bytes;
  }
  return staging_[slot].get();
}

std::byte* Executor::scratch(uint64_t bytes) {
  if (scratchSize_ < bytes) {
    scratch_.reset(new std::byte[bytes]);
    scratchSize_ = bytes;
  }
  return scratch_.get();
}

template <class Ptr>
Status Executor::runOneSided(const sched::Step& s, Connection* conn, uint64_t remote, Ptr ptr,
                             DataType dtype, ReduceOp op) {
  if (s.kind == sched::StepKind::kGet) return conn->read(ptr(s.dst), remote, s.dst.bytes);
  if (!bounce_) bounce_.reset(new std::byte[kBouncePiece]);
  const size_t elem = dataTypeSize(dtype);
  const size_t piece = kBouncePiece / elem * elem;
  for (uint64_t off = 0; off < s.dst.bytes; off += piece) {
    const size_t len = static_cast<size_t>(std::min<uint64_t>(piece, s.dst.bytes - off));
    CHORUS_RETURN_IF_ERROR(conn->read(bounce_.get(), remote + off, len));
    kernels::reduce(ptr(s.dst) + off, ptr(s.b) + off, bounce_.get(), len / elem, dtype, op);
  }
  return Status();
}

Status Executor::run(const sched::Schedule& schedule, std::vector<std::byte*> buffers,
                     DataType dtype, ReduceOp op, const OpIdentity& id, const ExecEnv& env) {
  const std::vector<sched::Step>& steps = schedule.steps;
  const size_t n = steps.size();
  const size_t elem = dataTypeSize(dtype);
  if (buffers.size() < 3) buffers.resize(3, nullptr);
  if (schedule.scratchBytes > 0 && buffers[sched::kScratch] == nullptr)
    buffers[sched::kScratch] = scratch(schedule.scratchBytes);
  auto ptr = [&](const sched::Range& r) { return buffers[r.buf] + r.offset; };
  // Formatted only when an error needs it: run() is on every call's hot path.
  auto call = [&] { return describeCall(id, schedule.algo.c_str()); };

  // ---- Per-peer queues and the dependency graph ------------------------------------------
  std::vector<PeerState> peers(schedule.peers.size());
  auto peerIndex = [&](int peer) -> int {
    for (size_t i = 0; i < peers.size(); ++i)
      if (peers[i].peer == peer) return static_cast<int>(i);
    return -1;
  };
  for (size_t i = 0; i < peers.size(); ++i) {
    peers[i].peer = schedule.peers[i];
    peers[i].conn = env.connection(peers[i].peer);
    if (!peers[i].conn)
      return internalError(call() + ": no connection to rank " + std::to_string(peers[i].peer));
  }
  std::vector<uint32_t> remaining(n);
  std::vector<uint32_t> depStart(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    const sched::Step& s = steps[i];
    remaining[i] = static_cast<uint32_t>(s.deps.size());
    for (uint32_t d : s.deps) depStart[d + 1]++;
    if (isSendLike(s.kind) || isRecvLike(s.kind) || sched::isOneSided(s.kind)) {
      int pi = peerIndex(s.peer);
      if (pi < 0)
        return internalError(call() + ": " + describeStep(s, i) + " names a peer missing from peers");
      if (sched::isOneSided(s.kind) && !peers[pi].conn->canRead())
        return invalidUsage(call() + " reads rank " + std::to_string(s.peer) +
                            "'s memory, which its connection cannot (one-sided algorithms need "
                            "shared memory with cross-memory attach); choose another algorithm");
      if (!sched::isOneSided(s.kind))
        (isSendLike(s.kind) ? peers[pi].sends : peers[pi].recvs).push_back(static_cast<uint32_t>(i));
    }
  }
  for (size_t i = 0; i < n; ++i) depStart[i + 1] += depStart[i];
  std::vector<uint32_t> dependents(depStart[n]);
  {
    std::vector<uint32_t> fill(depStart.begin(), depStart.end() - 1);
    for (size_t i = 0; i < n; ++i)
      for (uint32_t d : steps[i].deps) dependents[fill[d]++] = static_cast<uint32_t>(i);
  }

  std::vector<uint32_t> readyLocal;
  for (size_t i = 0; i < n; ++i)
    if (remaining[i] == 0 && isLocal(steps[i].kind)) readyLocal.push_back(static_cast<uint32_t>(i));
  size_t doneCount = 0;
  auto complete = [&](uint32_t i) {
    ++doneCount;
    for (uint32_t k = depStart[i]; k < depStart[i + 1]; ++k) {
      uint32_t j = dependents[k];
      if (--remaining[j] == 0 && isLocal(steps[j].kind)) readyLocal.push_back(j);
    }
  };

  // ---- Consistency headers: posted before any data, so they arrive first ----------------
  for (PeerState& p : peers) {
    WireHeader& h = p.mine;
    h.magic = kHeaderMagic;
    h.version = kHeaderVersion;
    h.coll = static_cast<uint8_t>(id.coll);
    h.dtype = static_cast<uint8_t>(id.dtype);
    h.op = static_cast<uint8_t>(id.userOp < 0 ? 0xff : std::min(id.userOp, 0xfe));
    h.root = id.root;
    h.seq = id.seq;
    h.count = id.count;
    h.bytesToPeer = schedule.bytesTo(p.peer);
    h.bytesFromPeer = schedule.bytesFrom(p.peer);
    h.msgsToPeer = schedule.messagesTo(p.peer);
    h.msgsFromPeer = schedule.messagesFrom(p.peer);
    std::snprintf(h.algo, sizeof(h.algo), "%s", schedule.algo.c_str());
    for (int b = 0; b < 3; ++b) h.bufAddr[b] = reinterpret_cast<uint64_t>(buffers[b]);
    CHORUS_ASSIGN_OR_RETURN(p.headerRecvOp,
                            p.conn->postRecv(&p.theirs, sizeof(WireHeader), headerTag(id.seq)));
    CHORUS_ASSIGN_OR_RETURN(p.headerSendOp,
                            p.conn->postSend(&p.mine, sizeof(WireHeader), headerTag(id.seq)));
  }
  auto checkHeader = [&](const PeerState& p) -> Status {
    const WireHeader& a = p.mine;
    const WireHeader& b = p.theirs;
    if (b.magic != kHeaderMagic || b.version != kHeaderVersion)
      return invalidUsage(call() + ": rank " + std::to_string(p.peer) +
                          " sent a malformed operation header (another chorus version, or "
                          "ranks are running different operations)");
    OpIdentity other;
    other.coll = static_cast<sched::Coll>(b.coll);
    other.seq = b.seq;
    other.count = b.count;
    other.dtype = static_cast<DataType>(b.dtype);
    other.userOp = b.op == 0xff ? -1 : b.op;
    other.root = b.root;
    char algoB[sizeof(b.algo) + 1] = {};
    std::memcpy(algoB, b.algo, sizeof(b.algo));
    bool same = a.coll == b.coll && a.seq == b.seq && a.count == b.count && a.dtype == b.dtype &&
                a.op == b.op && a.root == b.root && std::strncmp(a.algo, b.algo, sizeof(a.algo)) == 0;
    if (!same)
      return invalidUsage("rank " + std::to_string(env.rank) + " called " + call() + " but rank " +
                          std::to_string(p.peer) + " called " + describeCall(other, algoB));
    if (a.bytesToPeer != b.bytesFromPeer || a.msgsToPeer != b.msgsFromPeer ||
        a.bytesFromPeer != b.bytesToPeer || a.msgsFromPeer != b.msgsToPeer)
      return invalidUsage(call() + ": rank " + std::to_string(env.rank) + " sends " +
                          std::to_string(a.bytesToPeer) + " bytes in " +
                          std::to_string(a.msgsToPeer) + " messages to rank " +
                          std::to_string(p.peer) + ", which expects " +
                          std::to_string(b.bytesFromPeer) + " bytes in " +
                          std::to_string(b.msgsFromPeer) + "; it sends " +
                          std::to_string(b.bytesToPeer) + " bytes in " +
                          std::to_string(b.msgsToPeer) + " messages, rank " +
                          std::to_string(env.rank) + " expects " +
                          std::to_string(a.bytesFromPeer) + " in " +
                          std::to_string(a.msgsFromPeer));
    return Status();
  };

  // ---- The dataflow loop ----------------------------------------------------------------
  std::vector<Posted> posted;
  std::vector<int> freeSlots;
  int nextSlot = 0;
  size_t headersPending = peers.size() * 2;
  const Tag tag = dataTag(id.seq);
  auto lastProgress = std::chrono::steady_clock::now();
  auto lastLiveness = lastProgress;
  std::vector<pollfd> fds;
  std::vector<WaitWord> words;

  while (doneCount < n || headersPending > 0) {
    bool progressed = false;
    if (env.abortFlag && env.abortFlag->load(std::memory_order_relaxed))
      return remoteError(call() + ": the communicator was aborted on rank " +
                         std::to_string(env.rank) + " (chorusCommAbort)");

    // Headers first: a mismatch must be reported before any data op can fail on sizes.
    // A transport error seen here waits for the end of the round: if another peer's header
    // shows the calls disagree, that is the root cause and the error to report.
    if (headersPending > 0) {
      Status transportError;
      for (PeerState& p : peers) {
        bool done = false;
        if (!p.headerRecvd) {
          Status st = p.conn->test(p.headerRecvOp, &done);
          if (!st.ok()) {
            if (transportError.ok()) transportError = st.withContext(call());
          } else if (done) {
            p.headerRecvd = true;
            --headersPending;
            progressed = true;
            CHORUS_RETURN_IF_ERROR(checkHeader(p));
          }
        }
        if (!p.headerSent) {
          Status st = p.conn->test(p.headerSendOp, &done);
          if (!st.ok()) {
            if (transportError.ok()) transportError = st.withContext(call());
          } else if (done) {
            p.headerSent = true;
            --headersPending;
            progressed = true;
          }
        }
      }
      if (!transportError.ok()) return transportError;
    }

    // Post every send/recv that is at the head of its peer's queue and whose deps are done.
    for (size_t pi = 0; pi < peers.size(); ++pi) {
      PeerState& p = peers[pi];
      while (p.nextRecv < p.recvs.size() && p.inflightRecv < kMaxInflight &&
             remaining[p.recvs[p.nextRecv]] == 0) {
        uint32_t i = p.recvs[p.nextRecv++];
        const sched::Step& s = steps[i];
        int slot = -1;
        std::byte* dst = ptr(s.dst);
        if (s.kind == sched::StepKind::kRecvReduce) {
          if (freeSlots.empty()) {
            slot = nextSlot++;
          } else {
            slot = freeSlots.back();
            freeSlots.pop_back();
          }
          dst = stagingFor(static_cast<size_t>(slot), s.dst.bytes);
        }
        const uint64_t bytes = s.kind == sched::StepKind::kWait ? 0 : s.dst.bytes;
        if (bytes == 0) dst = nullptr;
        CHORUS_ASSIGN_OR_RETURN(Op o, p.conn->postRecv(dst, bytes, tag));
        posted.push_back({o, i, static_cast<int>(pi), slot});
        ++p.inflightRecv;
        progressed = true;
      }
      while (p.nextSend < p.sends.size() && p.inflightSend < kMaxInflight &&
             remaining[p.sends[p.nextSend]] == 0) {
        uint32_t i = p.sends[p.nextSend++];
        const sched::Step& s = steps[i];
        const bool note = s.kind == sched::StepKind::kNotify;
        CHORUS_ASSIGN_OR_RETURN(Op o, p.conn->postSend(note ? nullptr : ptr(s.a),
                                                       note ? 0 : s.a.bytes, tag));
        posted.push_back({o, i, static_cast<int>(pi), -1});
        ++p.inflightSend;
        progressed = true;
      }
    }

    // Local and one-sided steps inline. A one-sided step waits for its peer's header (which
    // brings the peer's buffer addresses); the others go first.
    for (size_t k = 0; k < readyLocal.size();) {
      const uint32_t i = readyLocal[k];
      const sched::Step& s = steps[i];
      if (sched::isOneSided(s.kind)) {
        const PeerState& p = peers[static_cast<size_t>(peerIndex(s.peer))];
        if (!p.headerRecvd) {
          ++k;
          continue;
        }
        CHORUS_RETURN_IF_ERROR(runOneSided(s, p.conn, p.theirs.bufAddr[s.a.buf] + s.a.offset, ptr,
                                           dtype, op)
                                   .withContext(call() + " " + describeStep(s, i)));
      } else if (s.kind == sched::StepKind::kCopy) {
        if (ptr(s.a) != ptr(s.dst)) kernels::copy(ptr(s.dst), ptr(s.a), s.dst.bytes);
      } else {
        kernels::reduce(ptr(s.dst), ptr(s.a), ptr(s.b), s.dst.bytes / elem, dtype, op);
      }
      readyLocal[k] = readyLocal.back();
      readyLocal.pop_back();
      complete(i);
      progressed = true;
    }

    // Test posted ops; completed ones unlock their dependents.
    for (size_t k = 0; k < posted.size();) {
      Posted& po = posted[k];
      PeerState& p = peers[static_cast<size_t>(po.peerIdx)];
      bool done = false;
      Status st = p.conn->test(po.op, &done);
      if (!st.ok()) return st.withContext(call() + " " + describeStep(steps[po.step], po.step));
      if (!done) {
        ++k;
        continue;
      }
      const sched::Step& s = steps[po.step];
      if (isSendLike(s.kind)) {
        --p.inflightSend;
      } else {
        --p.inflightRecv;
        if (s.kind == sched::StepKind::kRecvReduce) {
          std::byte* staged = stagingFor(static_cast<size_t>(po.stagingSlot), s.dst.bytes);
          kernels::reduce(ptr(s.dst), ptr(s.a), staged, s.dst.bytes / elem, dtype, op);
          freeSlots.push_back(po.stagingSlot);
        }
      }
      uint32_t stepIndex = po.step;
      posted[k] = posted.back();
      posted.pop_back();
      complete(stepIndex);
      progressed = true;
    }

    if (progressed) {
      lastProgress = std::chrono::steady_clock::now();
      continue;
    }

    // Nothing posted, nothing ready, headers done, steps left: the schedule itself is broken
    // (a dependency that can never be met). Say so now rather than at the timeout.
    if (posted.empty() && headersPending == 0 && readyLocal.empty() && doneCount < n)
      return internalError(call() + ": schedule cannot make progress (" +
                           std::to_string(n - doneCount) + " steps blocked on dependencies)");

    // ---- Nothing moved: spin, then yield, then block -------------------------------------
    auto now = std::chrono::steady_clock::now();
    if (now >= env.deadline) {
      std::string what = "nothing posted";
      if (!posted.empty()) what = describeStep(steps[posted.front().step], posted.front().step);
      else if (headersPending > 0) what = "the operation headers of its peers";
      return timeoutError(call() + ": timed out after " + std::to_string(env.timeoutSeconds) +
                          " s on rank " + std::to_string(env.rank) + " waiting for " + what +
                          "; " + std::to_string(n - doneCount) + " of " + std::to_string(n) +
                          " steps outstanding");
    }
    if (now - lastLiveness > std::chrono::milliseconds(100) && env.checkPeers) {
      lastLiveness = now;
      // Only peers we still wait on: one that finished its part may legitimately have exited.
      std::vector<int> waitingOn;
      for (const PeerState& p : peers)
        if (!p.headerRecvd || !p.headerSent || p.nextSend < p.sends.size() ||
            p.nextRecv < p.recvs.size() || p.inflightSend > 0 || p.inflightRecv > 0)
          waitingOn.push_back(p.peer);
      CHORUS_RETURN_IF_ERROR(env.checkPeers(waitingOn).withContext(call()));
    }
    auto idleFor = std::chrono::duration_cast<std::chrono::microseconds>(now - lastProgress);
    if (idleFor.count() < env.spinUs) continue;
    if (idleFor.count() < env.spinUs + 200) {
      sched_yield();
      continue;
    }
    fds.clear();
    words.clear();
    bool sleepOk = true;
    for (const PeerState& p : peers) {
      int fd = -1;
      short events = 0;
      p.conn->pollInfo(&fd, &events);
      if (fd >= 0) {
        if (events) fds.push_back({fd, events, 0});
      } else if (!p.conn->prepareWait(words)) {
        sleepOk = false;  // that connection can progress right now
      }
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(env.deadline - now).count();
    int waitMs = static_cast<int>(std::clamp<long long>(left, 0, 100));
    if (!sleepOk) {
      // Nothing to sleep on.
    } else if (!words.empty() && fds.empty()) {
      futex::waitAny(words, waitMs);
    } else if (!fds.empty()) {
      // Sockets and shared memory at once: poll the sockets in short slices so the shared
      // memory words are looked at every millisecond.
      if (!words.empty()) waitMs = std::min(waitMs, 1);
      if (::poll(fds.data(), fds.size(), waitMs) < 0 && errno != EINTR)
        return errnoStatus("poll", call());
    } else {
      sched_yield();
    }
    for (const PeerState& p : peers) p.conn->endWait();
  }
  return Status();
}

}  // namespace chorus
