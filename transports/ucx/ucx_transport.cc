#include "transports/ucx/ucx_transport.h"

#include <dirent.h>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "src/base/config.h"
#include "src/base/logging.h"
#include "transports/ucx/ucx_connection.h"
#include "transports/ucx/ucx_worker.h"

namespace chorus::ucx {
namespace {

// Below the tcp transport's 10 (and shm's): over TCP and shared memory chorus's own transports
// are the reference. With an RDMA-class device UCX is the only way to use it, and wins.
constexpr int kUcxScore = 5;
constexpr int kUcxRdmaScore = 30;

// The endpoint blob: magic, version, rank, communicator id, host id, then the worker address.
constexpr uint32_t kBlobMagic = 0x58435543;  // "CUCX"
constexpr uint32_t kBlobVersion = 1;
constexpr size_t kBlobHeaderBytes = 4 + 4 + 4 + 4 + 8 + 8;

struct Endpoint {
  int rank = -1;
  uint64_t commId = 0;
  uint64_t hostId = 0;
  std::vector<uint8_t> address;
};

EndpointBlob encode(const Endpoint& e) {
  EndpointBlob b;
  blob::put<uint32_t>(b, kBlobMagic);
  blob::put<uint32_t>(b, kBlobVersion);
  blob::put<int32_t>(b, e.rank);
  blob::put<uint32_t>(b, static_cast<uint32_t>(e.address.size()));
  blob::put<uint64_t>(b, e.commId);
  blob::put<uint64_t>(b, e.hostId);
  b.insert(b.end(), e.address.begin(), e.address.end());
  return b;
}

StatusOr<Endpoint> decode(const EndpointBlob& b) {
  if (b.size() < kBlobHeaderBytes || blob::get<uint32_t>(b, 0) != kBlobMagic)
    return invalidArgument("not a chorus ucx endpoint (" + std::to_string(b.size()) + " bytes)");
  if (blob::get<uint32_t>(b, 4) != kBlobVersion)
    return invalidArgument("ucx endpoint of version " + std::to_string(blob::get<uint32_t>(b, 4)) +
                           ", this build speaks " + std::to_string(kBlobVersion));
  Endpoint e;
  e.rank = blob::get<int32_t>(b, 8);
  const uint32_t len = blob::get<uint32_t>(b, 12);
  e.commId = blob::get<uint64_t>(b, 16);
  e.hostId = blob::get<uint64_t>(b, 24);
  if (b.size() != kBlobHeaderBytes + len)
    return invalidArgument("ucx endpoint of " + std::to_string(b.size()) +
                           " bytes announces a worker address of " + std::to_string(len));
  e.address.assign(b.begin() + kBlobHeaderBytes, b.end());
  return e;
}

// Whether UCX_TLS lets UCX carry same-host traffic through shared memory (unset, "all", a
// negated list, or naming a shared-memory transport).
bool sharedMemoryAllowed() {
  const char* tls = std::getenv("UCX_TLS");
  if (!tls || !*tls || tls[0] == '^') return true;
  for (const std::string& item : tlsItems(tls))
    for (const char* sm : {"all", "sm", "shm", "posix", "sysv", "cma", "knem", "xpmem"})
      if (item == sm) return true;
  return false;
}

enum class OneSided { kAuto, kOn, kOff };

StatusOr<OneSided> oneSidedSetting() {
  const std::string v = config::getString("CHORUS_UCX_ONESIDED");
  if (v == "auto") return OneSided::kAuto;
  if (v == "on") return OneSided::kOn;
  if (v == "off") return OneSided::kOff;
  return invalidArgument("CHORUS_UCX_ONESIDED='" + v + "' is none of auto, on, off");
}

enum class ErrMode { kAuto, kPeer, kNone };

StatusOr<ErrMode> errModeSetting() {
  const std::string v = config::getString("CHORUS_UCX_ERR_MODE");
  if (v == "auto") return ErrMode::kAuto;
  if (v == "peer") return ErrMode::kPeer;
  if (v == "none") return ErrMode::kNone;
  return invalidArgument("CHORUS_UCX_ERR_MODE='" + v + "' is none of auto, peer, none");
}

class UcxTransport final : public Transport {
 public:
  UcxTransport(const TransportContext& ctx, ErrMode mode, OneSided oneSided)
      : ctx_(ctx), mode_(mode), oneSided_(oneSided) {}

  std::string_view name() const override { return "ucx"; }
  TransportCaps caps() const override {
    TransportCaps c;
    c.oneSidedRead = oneSided_ != OneSided::kOff;
    c.memRegistration = c.oneSidedRead;
    c.senderAloneCompletes = false;  // wire-up and rendezvous need the receiving worker
    c.forkedPeers = false;
    return c;
  }

  Reach canConnect(const PeerIdentity& self, const PeerIdentity& peer,
                   const EndpointBlob& peerBlob) const override {
    if (peerBlob.empty() || !decode(peerBlob).ok()) return {};
    const bool same = peer.hostId == self.hostId;
    if (hasRdmaDevice())
      return Reach{true, kUcxRdmaScore,
                   same ? cost::LinkClass::kShm : cost::LinkClass::kInfiniBand};
    return Reach{true, kUcxScore,
                 same ? cost::LinkClass::kTcpLoopback : cost::LinkClass::kEthernet};
  }

  Status listen(EndpointBlob* out) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!worker_) {
      CHORUS_ASSIGN_OR_RETURN(worker_, Worker::create(ctx_.rank));
      std::lock_guard<FutexMutex> wlock(worker_->mutex());
      ucp_address_t* addr = nullptr;
      size_t len = 0;
      ucs_status_t st = ucp_worker_get_address(worker_->handle(), &addr, &len);
      if (st != UCS_OK) {
        return systemError("ucx: rank " + std::to_string(ctx_.rank) +
                           ": ucp_worker_get_address: " + statusText(st));
      }
      Endpoint e;
      e.rank = ctx_.rank;
      e.commId = ctx_.commId;
      e.hostId = ctx_.self.hostId;
      const auto* p = reinterpret_cast<const uint8_t*>(addr);
      e.address.assign(p, p + len);
      ucp_worker_release_address(worker_->handle(), addr);
      blob_ = encode(e);
      CHORUS_LOG(INFO, NET) << "ucx: rank " << ctx_.rank << " worker ready (" << len
                            << "-byte address)";
    }
    *out = blob_;
    return Status();
  }

  StatusOr<std::unique_ptr<Connection>> connect(int peer, const EndpointBlob& peerBlob,
                                                double /*timeoutSeconds*/) override {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string me = "ucx: rank " + std::to_string(ctx_.rank);
    if (!worker_) return invalidUsage(me + ": connect() called before listen()");
    if (peer < 0 || peer == ctx_.rank || peer >= kMaxRanks)
      return invalidArgument(me + ": cannot connect to rank " + std::to_string(peer));
    auto e = decode(peerBlob);
    if (!e.ok()) return e.status().withContext(me + ", endpoint of rank " + std::to_string(peer));
    if (e->rank != peer)
      return invalidArgument(me + ": the endpoint given for rank " + std::to_string(peer) +
                             " is rank " + std::to_string(e->rank) + "'s");
    if (e->commId != ctx_.commId)
      return invalidArgument(me + ": the endpoint of rank " + std::to_string(peer) +
                             " belongs to another communicator (a stale or foreign endpoint)");
    const bool same = e->hostId == ctx_.self.hostId;
    // PEER mode drops UCX's shared-memory lanes: same-host pairs that may use shared memory go
    // without it and learn of a dead peer from the communicator's liveness check.
    bool peerMode = mode_ == ErrMode::kPeer;
    if (mode_ == ErrMode::kAuto) peerMode = !same || !sharedMemoryAllowed();
    // One-sided reads where UCX does them in hardware: with an RDMA-class device. Elsewhere
    // UCX 1.13 emulates a get of ordinary memory with messages the peer's progress serves (it
    // gives such memory no RMA lane over tcp, posix or cma): only when asked for.
    const bool readable = oneSided_ == OneSided::kOn ||
                          (oneSided_ == OneSided::kAuto && hasRdmaDevice());
    CHORUS_ASSIGN_OR_RETURN(auto c, UcxConnection::create(worker_, ctx_.commId, ctx_.rank, peer,
                                                          e->address, peerMode, readable));
    CHORUS_LOG(INFO, NET) << me << " endpoint to rank " << peer << " ("
                          << (same ? "same host" : "other host") << ", error mode "
                          << (peerMode ? "peer" : "none")
                          << (readable ? ", one-sided reads" : "") << ")";
    return std::unique_ptr<Connection>(std::move(c));
  }

  StatusOr<std::unique_ptr<Transport>> forSplit(const TransportContext& child) override {
    if (child.rank >= kMaxRanks)
      return invalidArgument("ucx: rank " + std::to_string(child.rank) + " is beyond the " +
                             std::to_string(kMaxRanks) + " ranks the tag layout holds");
    return std::unique_ptr<Transport>(new UcxTransport(child, mode_, oneSided_));
  }

 private:
  const TransportContext ctx_;
  const ErrMode mode_;
  const OneSided oneSided_;
  std::mutex mu_;  // serialises listen() and connect()
  std::shared_ptr<Worker> worker_;
  EndpointBlob blob_;
};

// Whether the kernel lists any RDMA device: a cheap look before asking UCX (which costs a
// context) whether it can use one.
bool kernelHasRdmaDevice() {
  DIR* d = ::opendir("/sys/class/infiniband");
  if (!d) return false;
  bool any = false;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') any = true;
  ::closedir(d);
  return any;
}

bool namedInTransportList() {
  const std::string list = config::getString("CHORUS_TRANSPORT");
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t end = list.find(',', pos);
    if (end == std::string::npos) end = list.size();
    if (list.compare(pos, end - pos, "ucx") == 0) return true;
    pos = end + 1;
  }
  return false;
}

const char* unavailable() {
  if (namedInTransportList()) return nullptr;
  if (kernelHasRdmaDevice() && hasRdmaDevice()) return nullptr;
  return "no RDMA-class device for UCX here, and over TCP or shared memory chorus's own "
         "transports serve (CHORUS_TRANSPORT=ucx uses it anyway)";
}

StatusOr<std::unique_ptr<Transport>> createUcx(const TransportContext& ctx) {
  CHORUS_ASSIGN_OR_RETURN(ErrMode mode, errModeSetting());
  CHORUS_ASSIGN_OR_RETURN(OneSided oneSided, oneSidedSetting());
  if (ctx.rank >= kMaxRanks || ctx.nranks > kMaxRanks)
    return invalidArgument("ucx: " + std::to_string(ctx.nranks) + " ranks exceed the " +
                           std::to_string(kMaxRanks) + " the tag layout holds");
  return std::unique_ptr<Transport>(new UcxTransport(ctx, mode, oneSided));
}

CHORUS_REGISTER_TRANSPORT({
    .name = "ucx",
    .description = "UCX tag matching, one UCP worker per communicator: RDMA fabrics, or any "
                   "UCX_TLS (selected by default only with an RDMA-class device)",
    .unavailable = &unavailable,
    .create = &createUcx,
});

}  // namespace

Census census() {
  const LiveCounts c = liveCounts();
  return Census{c.contexts, c.workers, c.endpoints};
}

}  // namespace chorus::ucx
