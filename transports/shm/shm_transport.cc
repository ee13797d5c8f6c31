#include "transports/shm/shm_transport.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "src/base/config.h"
#include "src/base/logging.h"
#include "src/cost/machine.h"
#include "transports/shm/segment.h"
#include "transports/shm/shm_connection.h"
#include "transports/shm/shm_window.h"

namespace chorus {
namespace shm {
namespace {

constexpr int kShmScore = 20;
constexpr uint8_t kBlobVersion = 1;
// What a peer reads from our memory to prove cross-memory attach works.
constexpr uint64_t kProbeValue = 0x6368727573636d61;  // "chruscma"
const volatile uint64_t probeWord = kProbeValue;

struct Blob {
  uint8_t version = kBlobVersion;
  int32_t pid = 0;
  uint64_t ipcNs = 0;
  uint64_t pidNs = 0;
  uint64_t probeAddr = 0;
};

EndpointBlob encode(const Blob& b) {
  EndpointBlob out(1 + 4 + 8 * 3);
  uint8_t* p = out.data();
  *p++ = b.version;
  std::memcpy(p, &b.pid, 4);
  std::memcpy(p + 4, &b.ipcNs, 8);
  std::memcpy(p + 12, &b.pidNs, 8);
  std::memcpy(p + 20, &b.probeAddr, 8);
  return out;
}

bool decode(const EndpointBlob& in, Blob* b) {
  if (in.size() != 1 + 4 + 8 * 3 || in[0] != kBlobVersion) return false;
  const uint8_t* p = in.data() + 1;
  std::memcpy(&b->pid, p, 4);
  std::memcpy(&b->ipcNs, p + 4, 8);
  std::memcpy(&b->pidNs, p + 12, 8);
  std::memcpy(&b->probeAddr, p + 20, 8);
  return true;
}

class ShmTransport final : public Transport {
 public:
  ShmTransport(int myRank, uint64_t commId) : myRank_(myRank), commId_(commId) {
    static std::once_flag swept;
    std::call_once(swept, [] { sweepStaleSegments(); });
    self_.pid = static_cast<int32_t>(::getpid());
    self_.ipcNs = ipcNamespace();
    self_.pidNs = pidNamespace();
    self_.probeAddr = reinterpret_cast<uint64_t>(&probeWord);
  }

  std::string_view name() const override { return "shm"; }
  TransportCaps caps() const override {
    TransportCaps c;
    c.oneSidedRead = true;  // each connection says whether cross-memory attach works to its peer
    // CHORUS_SHM_STAGING=0 turns the window off; unset, the slot is derived (never 0).
    auto slot = config::getBytes("CHORUS_SHM_STAGING");
    c.hostWindow = !config::isSet("CHORUS_SHM_STAGING") || (slot.ok() && *slot > 0);
    return c;
  }

  Reach canConnect(const PeerIdentity& self, const PeerIdentity& peer,
                   const EndpointBlob& peerBlob) const override {
    Blob b;
    if (!decode(peerBlob, &b)) return {};
    // The same host and the same IPC namespace share /dev/shm; the pid namespace must match too
    // for process_vm_readv and for the liveness checks to name the right process.
    if (peer.hostId != self.hostId || b.ipcNs != self_.ipcNs || b.pidNs != self_.pidNs) return {};
    return {true, kShmScore, cost::LinkClass::kShm};
  }

  StatusOr<std::unique_ptr<Transport>> forSplit(const TransportContext& child) override {
    // The endpoint (pid, namespaces) is the process's own: the child publishes the same one.
    return makeShmTransport(child.rank, child.commId);
  }

  StatusOr<std::unique_ptr<HostWindow>> createWindow(int rank, int nranks,
                                                     const PeerIdentity& rank0,
                                                     const WaitPolicy& w,
                                                     const cost::MachineDesc& machine) override {
    cost::MachineDesc m = machine;
    m.ranksOnHost = nranks;
    CHORUS_ASSIGN_OR_RETURN(const cost::DerivedSizes sizes, cost::resolveSizes(m));
    const uint64_t slot = sizes.slotBytes, round = sizes.roundBytes;
    if (rank == 0) {
      CHORUS_LOG(INFO, INIT) << "host window sizes: " << sizes.toString();
    }
    if (slot == 0) return invalidUsage("the host window is disabled (CHORUS_SHM_STAGING=0)");
    CHORUS_ASSIGN_OR_RETURN(auto win,
                            ShmWindow::create(rank, nranks, commId_, rank0.pid, slot, round, w));
    return std::unique_ptr<HostWindow>(std::move(win));
  }

  Status listen(EndpointBlob* out) override {
    *out = encode(self_);
    return Status();
  }

  StatusOr<std::unique_ptr<Connection>> connect(int peer, const EndpointBlob& peerBlob,
                                                double timeoutSeconds) override {
    Blob them;
    if (!decode(peerBlob, &them))
      return invalidUsage("rank " + std::to_string(peer) +
                          " published a malformed shm endpoint (another chorus version?)");
    CHORUS_ASSIGN_OR_RETURN(int64_t cmaFlag, config::getInt("CHORUS_SHM_CMA"));
    const bool cma = cmaFlag != 0;
    CHORUS_ASSIGN_OR_RETURN(uint64_t cmaMin, config::getBytes("CHORUS_SHM_CMA_MIN"));
    const bool creator = myRank_ < peer;
    const int lo = creator ? myRank_ : peer, hi = creator ? peer : myRank_;
    // Built by appending: g++ 12 warns falsely on "literal" + std::string (PR105651).
    std::string pair = "p";
    pair += std::to_string(lo);
    pair += '-';
    pair += std::to_string(hi);
    const std::string name = segmentName(creator ? self_.pid : them.pid, commId_, pair);
    const size_t bytes = pairSegmentBytes();
    Segment seg;
    if (creator) {
      CHORUS_ASSIGN_OR_RETURN(seg, Segment::create(name, bytes));
      auto* h = reinterpret_cast<SegHeader*>(seg.data());
      h->magic = kSegmentMagic;
      h->version = kSegmentVersion;
      h->creatorRank = myRank_;
      h->slots = kSlots;
      h->slotPayload = kSlotPayload;
      h->ready.store(1, std::memory_order_release);
    } else {
      CHORUS_ASSIGN_OR_RETURN(seg, attach(name, bytes, peer, timeoutSeconds));
    }
    auto conn = std::make_unique<ShmConnection>(std::move(seg), myRank_, peer, them.pid, creator,
                                                cma, cmaMin);
    if (cma) conn->probeCrossMemoryAttach(them.probeAddr, kProbeValue);
    CHORUS_LOG(TRACE, NET) << "shm: connected to rank " << peer << " through " << name
                           << (conn->canRead() ? " (cross-memory attach)" : "");
    return std::unique_ptr<Connection>(std::move(conn));
  }

 private:
  // Waits (bounded) for the creator's segment, maps it and removes its name.
  StatusOr<Segment> attach(const std::string& name, size_t bytes, int peer, double timeoutSeconds) {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeoutSeconds);
    auto pause = std::chrono::microseconds(50);
    while (true) {
      StatusOr<Segment> seg = Segment::open(name, bytes);
      if (seg.ok()) {
        auto* h = reinterpret_cast<const SegHeader*>(seg->data());
        if (h->ready.load(std::memory_order_acquire) == 1) {
          seg->removeName();
          const_cast<SegHeader*>(h)->attached.store(1, std::memory_order_release);
          if (h->magic != kSegmentMagic || h->version != kSegmentVersion ||
              h->slots != kSlots || h->slotPayload != kSlotPayload)
            return invalidUsage("rank " + std::to_string(peer) +
                                "'s shared-memory segment has another layout (another chorus "
                                "version?)");
          return seg;
        }
      } else if (seg.status().code() != Code::kTimeout) {
        return seg.status();
      }
      if (Clock::now() >= deadline)
        return timeoutError("rank " + std::to_string(peer) + " has not created the shared-memory "
                            "segment " + name + " yet");
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(2000));
    }
  }

  const int myRank_;
  const uint64_t commId_;
  Blob self_;
};

StatusOr<std::unique_ptr<Transport>> createShm(const TransportContext& ctx) {
  return makeShmTransport(ctx.rank, ctx.commId);
}

CHORUS_REGISTER_TRANSPORT({
    .name = "shm",
    .description = "shared memory between ranks of one host: slot rings, cross-memory attach, "
                   "the host window",
    .create = &createShm,
});

}  // namespace
}  // namespace shm

std::unique_ptr<Transport> makeShmTransport(int myRank, uint64_t commId) {
  return std::make_unique<shm::ShmTransport>(myRank, commId);
}

}  // namespace chorus
