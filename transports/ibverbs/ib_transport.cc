#include "transports/ibverbs/ib_transport.h"

#include <poll.h>

#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include "src/base/logging.h"
#include "transports/ibverbs/ib_connection.h"
#include "transports/ibverbs/ib_device.h"
#include "transports/ibverbs/qp_setup.h"
#include "transports/ibverbs/verbs_api.h"
#include "transports/tcp/tcp_transport.h"

namespace chorus::ib {
namespace {

// The endpoint blob: magic, version, rank, link layer, communicator id, then the side
// channel's tcp endpoint.
constexpr uint32_t kBlobMagic = 0x56424943;  // "CIBV"
constexpr uint32_t kBlobVersion = 1;
constexpr size_t kBlobHeaderBytes = 4 + 4 + 4 + 4 + 8;
// Tags of the two side-channel records.
constexpr Tag kInfoTag = 1;
constexpr Tag kReadyTag = 2;

struct Endpoint {
  int rank = -1;
  bool ethernet = false;
  uint64_t commId = 0;
  EndpointBlob tcp;
};

template <typename T>
void put(EndpointBlob& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);
}

template <typename T>
T get(const EndpointBlob& in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof v);
  return v;
}

EndpointBlob encode(const Endpoint& e) {
  EndpointBlob b;
  put<uint32_t>(b, kBlobMagic);
  put<uint32_t>(b, kBlobVersion);
  put<int32_t>(b, e.rank);
  put<uint32_t>(b, e.ethernet ? 1 : 0);
  put<uint64_t>(b, e.commId);
  b.insert(b.end(), e.tcp.begin(), e.tcp.end());
  return b;
}

StatusOr<Endpoint> decode(const EndpointBlob& b) {
  if (b.size() < kBlobHeaderBytes || get<uint32_t>(b, 0) != kBlobMagic)
    return invalidArgument("not a chorus ibverbs endpoint (" + std::to_string(b.size()) +
                           " bytes)");
  if (get<uint32_t>(b, 4) != kBlobVersion)
    return invalidArgument("ibverbs endpoint of version " + std::to_string(get<uint32_t>(b, 4)) +
                           ", this build speaks " + std::to_string(kBlobVersion));
  Endpoint e;
  e.rank = get<int32_t>(b, 8);
  e.ethernet = get<uint32_t>(b, 12) != 0;
  e.commId = get<uint64_t>(b, 16);
  e.tcp.assign(b.begin() + kBlobHeaderBytes, b.end());
  return e;
}

// Sends `out` and receives `in` (of in->size() bytes) on the side channel, bounded.
Status exchange(Connection& c, const std::vector<uint8_t>& out, std::vector<uint8_t>* in,
                Tag tag, net::Deadline deadline) {
  CHORUS_ASSIGN_OR_RETURN(Op s, c.postSend(out.data(), out.size(), tag));
  CHORUS_ASSIGN_OR_RETURN(Op r, c.postRecv(in->data(), in->size(), tag));
  bool sent = false, got = false;
  for (;;) {
    if (!sent) CHORUS_RETURN_IF_ERROR(c.test(s, &sent));
    if (!got) CHORUS_RETURN_IF_ERROR(c.test(r, &got));
    if (sent && got) return Status();
    const auto now = net::Clock::now();
    if (now >= deadline)
      return timeoutError("the queue-pair handshake with rank " + std::to_string(c.peer()) +
                          " did not finish in time");
    pollfd p{-1, 0, 0};
    c.pollInfo(&p.fd, &p.events);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    ::poll(&p, p.fd >= 0 ? 1 : 0, static_cast<int>(std::min<int64_t>(left, 100)));
  }
}

class IbTransport final : public Transport {
 public:
  IbTransport(const TransportContext& ctx, NicShare share, std::unique_ptr<Transport> side)
      : ctx_(ctx), share_(std::move(share)), side_(std::move(side)) {}

  std::string_view name() const override { return "ibverbs"; }
  TransportCaps caps() const override { return {}; }

  Reach canConnect(const PeerIdentity& self, const PeerIdentity& peer,
                   const EndpointBlob& peerBlob) const override {
    (void)self, (void)peer;
    auto e = decode(peerBlob);
    if (!e.ok() || e->ethernet != share_.nic->port().ethernet) return {};
    return Reach{true, kIbScore, cost::LinkClass::kInfiniBand};
  }

  Status listen(EndpointBlob* out) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (blob_.empty()) {
      Endpoint e;
      e.rank = ctx_.rank;
      e.ethernet = share_.nic->port().ethernet;
      e.commId = ctx_.commId;
      Status s = side_->listen(&e.tcp);
      if (!s.ok()) return s.withContext("ibverbs side channel of rank " +
                                        std::to_string(ctx_.rank));
      blob_ = encode(e);
    }
    *out = blob_;
    return Status();
  }

  StatusOr<std::unique_ptr<Connection>> connect(int peer, const EndpointBlob& peerBlob,
                                                double timeoutSeconds) override {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string me = "ibverbs: rank " + std::to_string(ctx_.rank);
    if (blob_.empty()) return invalidUsage(me + ": connect() called before listen()");
    if (peer < 0 || peer == ctx_.rank || peer >= ctx_.nranks)
      return invalidArgument(me + ": cannot connect to rank " + std::to_string(peer));
    auto e = decode(peerBlob);
    if (!e.ok()) return e.status().withContext(me + ", endpoint of rank " + std::to_string(peer));
    if (e->rank != peer)
      return invalidArgument(me + ": the endpoint given for rank " + std::to_string(peer) +
                             " is rank " + std::to_string(e->rank) + "'s");
    if (e->commId != ctx_.commId)
      return invalidArgument(me + ": the endpoint of rank " + std::to_string(peer) +
                             " belongs to another communicator (a stale or foreign endpoint)");
    const net::Deadline deadline = net::deadlineIn(timeoutSeconds);
    CHORUS_ASSIGN_OR_RETURN(auto conn,
                            IbConnection::create(share_, ctx_.commId, ctx_.rank, peer));
    CHORUS_ASSIGN_OR_RETURN(auto side, side_->connect(peer, e->tcp, timeoutSeconds));
    std::vector<uint8_t> theirs(QpInfo::kWireBytes);
    CHORUS_RETURN_IF_ERROR(
        exchange(*side, conn->localInfo().encode(), &theirs, kInfoTag, deadline));
    const std::string from = "rank " + std::to_string(peer);
    CHORUS_ASSIGN_OR_RETURN(QpInfo remote, QpInfo::decode(theirs, from));
    CHORUS_RETURN_IF_ERROR(conn->connectTo(remote));
    // Both queue pairs can receive once both ends got here.
    std::vector<uint8_t> ready(1, 1), peerReady(1);
    CHORUS_RETURN_IF_ERROR(exchange(*side, ready, &peerReady, kReadyTag, deadline));
    CHORUS_LOG(INFO, NET) << me << " queue pair " << remote.qpn << " of rank " << peer
                          << " connected (" << share_.nic->name() << ", "
                          << (remote.ethernet ? "RoCE" : "InfiniBand") << ")";
    return std::unique_ptr<Connection>(std::move(conn));
  }

  StatusOr<std::unique_ptr<Transport>> forSplit(const TransportContext& child) override {
    CHORUS_ASSIGN_OR_RETURN(auto side, side_->forSplit(child));
    return std::unique_ptr<Transport>(new IbTransport(child, share_, std::move(side)));
  }

 private:
  const TransportContext ctx_;
  const NicShare share_;
  std::unique_ptr<Transport> side_;
  std::mutex mu_;  // serialises listen() and connect()
  EndpointBlob blob_;
};

// unavailable() returns a C string that must outlive the call: each distinct reason is kept.
const char* keep(const std::string& why) {
  static std::mutex mu;
  static auto* kept = new std::set<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  return kept->insert(why).first->c_str();
}

const char* unavailable() {
  std::string why;
  const VerbsApi* api = verbs(&why);
  if (!api) return keep(why);
  auto settings = IbSettings::fromEnvironment();
  if (!settings.ok()) return keep(settings.status().message());
  auto ports = findPorts(*api, settings->hca);
  if (!ports.ok()) return keep(ports.status().message());
  return nullptr;
}

StatusOr<std::unique_ptr<Transport>> createIb(const TransportContext& ctx) {
  std::string why;
  const VerbsApi* api = verbs(&why);
  if (!api) return systemError("ibverbs: " + why);
  CHORUS_ASSIGN_OR_RETURN(IbSettings settings, IbSettings::fromEnvironment());
  if (settings.forkInit) {
    static std::once_flag once;
    std::call_once(once, [api] {
      if (int rc = api->fork_init(); rc != 0) {
        CHORUS_LOG(WARN, NET) << "ibverbs: ibv_fork_init: " << std::strerror(rc)
                              << " (do not fork while chorus has memory registered)";
      }
    });
  }
  CHORUS_ASSIGN_OR_RETURN(auto ports, findPorts(*api, settings.hca));
  NicShare share;
  CHORUS_ASSIGN_OR_RETURN(share.nic, Nic::open(*api, ports.front(), settings));
  const long page = ::sysconf(_SC_PAGESIZE);
  share.cache = std::make_shared<RegCache>(*api, share.nic->pd(),
                                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                                           static_cast<size_t>(page));
  CHORUS_ASSIGN_OR_RETURN(net::SockAddr addr, net::chooseLocalAddress(ctx.root));
  auto side = makeTcpTransport(ctx.rank, ctx.commId, addr);
  std::string unused;
  for (size_t i = 1; i < ports.size(); ++i)
    unused += (unused.empty() ? "" : ", ") + ports[i].device + ":" + std::to_string(ports[i].port);
  CHORUS_LOG(INFO, NET) << "ibverbs (experimental, not verified on hardware): rank " << ctx.rank
                        << " uses " << share.nic->name() << " through " << api->origin << " ("
                        << (share.nic->port().ethernet ? "RoCE, GID index " +
                                                             std::to_string(settings.gidIndex)
                                                       : std::string("InfiniBand"))
                        << ")" << (unused.empty() ? "" : "; one port per transport, unused: ")
                        << unused;
  return std::unique_ptr<Transport>(new IbTransport(ctx, std::move(share), std::move(side)));
}

CHORUS_REGISTER_TRANSPORT({
    .name = "ibverbs",
    .description = "libibverbs RC queue pairs, RDMA write with immediate (experimental: tested "
                   "against a fake verbs layer only; never chosen by default)",
    .unavailable = &unavailable,
    .create = &createIb,
});

}  // namespace
}  // namespace chorus::ib
