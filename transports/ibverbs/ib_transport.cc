#include "transports/ibverbs/ib_transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "src/base/config.h"
#include "src/base/logging.h"
#include "src/base/socket_util.h"
#include "src/base/thread_name.h"
#include "src/base/verbs_api.h"
#include "transports/ibverbs/ib_connection.h"
#include "transports/ibverbs/ib_device.h"
#include "transports/ibverbs/qp_setup.h"

namespace chorus::ib {
namespace {

// The endpoint blob: magic, version, rank, link layer, communicator id, then the address of
// the side channel's listening socket.
constexpr uint32_t kBlobMagic = 0x56424943;  // "CIBV"
constexpr uint32_t kBlobVersion = 1;
constexpr size_t kBlobHeaderBytes = 4 + 4 + 4 + 4 + 8;
constexpr int kListenBacklog = 1024;
// A dialer refused for this long has exited (its listener was up when the blob was published).
constexpr double kRefusedGraceSeconds = 1.0;
// The acceptor's bound on one handshake, so that one silent dialer cannot hold up the others.
constexpr double kHandshakeSeconds = 10.0;

struct Endpoint {
  int rank = -1;
  bool ethernet = false;
  uint64_t commId = 0;
  net::SockAddr side;
};

EndpointBlob encode(const Endpoint& e) {
  EndpointBlob b;
  blob::put<uint32_t>(b, kBlobMagic);
  blob::put<uint32_t>(b, kBlobVersion);
  blob::put<int32_t>(b, e.rank);
  blob::put<uint32_t>(b, e.ethernet ? 1 : 0);
  blob::put<uint64_t>(b, e.commId);
  const std::vector<uint8_t> addr = net::encodeAddress(e.side);
  b.insert(b.end(), addr.begin(), addr.end());
  return b;
}

StatusOr<Endpoint> decode(const EndpointBlob& b) {
  if (b.size() < kBlobHeaderBytes || blob::get<uint32_t>(b, 0) != kBlobMagic)
    return invalidArgument("not a chorus ibverbs endpoint (" + std::to_string(b.size()) +
                           " bytes)");
  if (blob::get<uint32_t>(b, 4) != kBlobVersion)
    return invalidArgument("ibverbs endpoint of version " +
                           std::to_string(blob::get<uint32_t>(b, 4)) + ", this build speaks " +
                           std::to_string(kBlobVersion));
  Endpoint e;
  e.rank = blob::get<int32_t>(b, 8);
  e.ethernet = blob::get<uint32_t>(b, 12) != 0;
  e.commId = blob::get<uint64_t>(b, 16);
  CHORUS_ASSIGN_OR_RETURN(e.side, net::decodeAddress(b.data() + kBlobHeaderBytes,
                                                     b.size() - kBlobHeaderBytes));
  return e;
}

// The handshake over the side channel, the lower rank dialing the higher, one QpInfo record
// per rail (each names the rail count):
//   dialer -> acceptor   its records (the dialer's queue pairs, in INIT)
//   acceptor             if the rail counts differ: its first record, then both ends fail
//                        naming both ranks and counts; else RTR, RTS toward each
//   acceptor -> dialer   its records (its queue pairs, now able to receive)
//   dialer               RTR, RTS
//   dialer -> acceptor   one byte: the dialer can receive too
// The acceptor's side runs on the transport's listener thread, whatever connect() call its
// rank is in: no order of connect() calls over the ranks can wait in a cycle. Neither end
// writes on the queue pair before the other can receive.
class IbTransport final : public Transport {
 public:
  IbTransport(const TransportContext& ctx, std::vector<NicShare> nics, size_t minStripeBytes,
              const net::SockAddr& listenAddr)
      : ctx_(ctx), nics_(std::move(nics)), minStripe_(minStripeBytes), listenAddr_(listenAddr) {}

  ~IbTransport() override {
    stop_ = true;
    if (listener_.joinable()) {
      const uint64_t one = 1;
      if (::write(wake_.get(), &one, sizeof one) < 0) {
        // The listener notices stop_ within its poll slice instead.
      }
      listener_.join();
    }
  }

  std::string_view name() const override { return "ibverbs"; }
  TransportCaps caps() const override {
    TransportCaps c;
    c.senderAloneCompletes = false;  // receivers advertise the buffers senders write into
    c.forkedPeers = false;
    return c;
  }

  Reach canConnect(const PeerIdentity& self, const PeerIdentity& peer,
                   const EndpointBlob& peerBlob) const override {
    (void)self, (void)peer;
    auto e = decode(peerBlob);
    if (!e.ok() || e->ethernet != ethernet()) return {};
    return Reach{true, kIbScore, cost::LinkClass::kInfiniBand};
  }

  Status listen(EndpointBlob* out) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (blob_.empty()) {
      Endpoint e;
      e.rank = ctx_.rank;
      e.ethernet = ethernet();
      e.commId = ctx_.commId;
      auto fd = net::listenOn(listenAddr_, kListenBacklog, &e.side);
      if (!fd.ok()) return fd.status().withContext(me() + ": side channel");
      listenFd_ = net::Fd(*fd);
      const int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
      if (wake < 0) return errnoStatus("eventfd", me() + ": side channel");
      wake_ = net::Fd(wake);
      listener_ = std::thread([this] {
        nameThisThread("chorus-ib");
        serve();
      });
      blob_ = encode(e);
      CHORUS_LOG(INFO, NET) << me() << " side channel listening on " << e.side.toString();
    }
    *out = blob_;
    return Status();
  }

  StatusOr<std::unique_ptr<Connection>> connect(int peer, const EndpointBlob& peerBlob,
                                                double timeoutSeconds) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (blob_.empty()) return invalidUsage(me() + ": connect() called before listen()");
    }
    if (peer < 0 || peer == ctx_.rank || peer >= ctx_.nranks)
      return invalidArgument(me() + ": cannot connect to rank " + std::to_string(peer));
    auto e = decode(peerBlob);
    if (!e.ok())
      return e.status().withContext(me() + ", endpoint of rank " + std::to_string(peer));
    if (e->rank != peer)
      return invalidArgument(me() + ": the endpoint given for rank " + std::to_string(peer) +
                             " is rank " + std::to_string(e->rank) + "'s");
    if (e->commId != ctx_.commId)
      return invalidArgument(me() + ": the endpoint of rank " + std::to_string(peer) +
                             " belongs to another communicator (a stale or foreign endpoint)");
    const net::Deadline deadline = net::deadlineIn(timeoutSeconds);
    std::unique_ptr<IbConnection> c;
    if (ctx_.rank < peer) {
      CHORUS_ASSIGN_OR_RETURN(c, dial(peer, e->side, deadline));
    } else {
      CHORUS_ASSIGN_OR_RETURN(c, awaitDialer(peer, deadline));
    }
    CHORUS_LOG(INFO, NET) << me() << " " << c->rails() << " queue pair(s) to rank " << peer
                          << " ready (" << (ethernet() ? "RoCE" : "InfiniBand") << ")";
    return std::unique_ptr<Connection>(std::move(c));
  }

  StatusOr<std::unique_ptr<Transport>> forSplit(const TransportContext& child) override {
    net::SockAddr addr = listenAddr_;
    addr.setPort(0);
    return std::unique_ptr<Transport>(new IbTransport(child, nics_, minStripe_, addr));
  }

 private:
  std::string me() const { return "ibverbs: rank " + std::to_string(ctx_.rank); }
  bool ethernet() const { return nics_.front().nic->port().ethernet; }

  StatusOr<std::unique_ptr<IbConnection>> makeConnection(int peer) const {
    return IbConnection::create(nics_, ctx_.commId, ctx_.rank, peer, minStripe_);
  }

  static Status sendRecords(int fd, const std::vector<QpInfo>& records, net::Deadline deadline,
                            const std::string& who) {
    std::vector<uint8_t> wire;
    for (const QpInfo& q : records) {
      const std::vector<uint8_t> one = q.encode();
      wire.insert(wire.end(), one.begin(), one.end());
    }
    return net::sendAll(fd, wire.data(), wire.size(), deadline, "queue-pair records to " + who);
  }

  static StatusOr<QpInfo> recvRecord(int fd, net::Deadline deadline, const std::string& who) {
    std::vector<uint8_t> wire(QpInfo::kWireBytes);
    CHORUS_RETURN_IF_ERROR(
        net::recvAll(fd, wire.data(), wire.size(), deadline, "queue-pair record from " + who));
    return QpInfo::decode(wire, who);
  }

  // The records after `first`, which says how many there are.
  static StatusOr<std::vector<QpInfo>> recvRest(int fd, const QpInfo& first,
                                                net::Deadline deadline, const std::string& who) {
    std::vector<QpInfo> all{first};
    while (all.size() < first.rails) {
      CHORUS_ASSIGN_OR_RETURN(QpInfo q, recvRecord(fd, deadline, who));
      all.push_back(q);
    }
    return all;
  }

  StatusOr<std::unique_ptr<IbConnection>> dial(int peer, const net::SockAddr& addr,
                                               net::Deadline deadline) {
    const std::string who = "rank " + std::to_string(peer);
    CHORUS_ASSIGN_OR_RETURN(auto conn, makeConnection(peer));
    CHORUS_ASSIGN_OR_RETURN(
        int raw, net::connectTo(addr, deadline, net::deadlineIn(kRefusedGraceSeconds)));
    net::Fd fd(raw);
    CHORUS_RETURN_IF_ERROR(sendRecords(fd.get(), conn->localInfo(), deadline, who));
    CHORUS_ASSIGN_OR_RETURN(QpInfo first, recvRecord(fd.get(), deadline, who));
    if (first.rails != conn->rails()) return conn->railMismatch(first.rails);
    CHORUS_ASSIGN_OR_RETURN(auto remote, recvRest(fd.get(), first, deadline, who));
    CHORUS_RETURN_IF_ERROR(conn->connectTo(remote));
    const uint8_t ready = 1;
    CHORUS_RETURN_IF_ERROR(net::sendAll(fd.get(), &ready, 1, deadline, "ready to " + who));
    return conn;
  }

  StatusOr<std::unique_ptr<IbConnection>> awaitDialer(int peer, net::Deadline deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      auto it = accepted_.find(peer);
      if (it != accepted_.end()) {
        Accepted a = std::move(it->second);
        accepted_.erase(it);
        if (!a.status.ok()) return a.status;
        return std::move(a.conn);
      }
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout &&
          accepted_.count(peer) == 0)
        return timeoutError(me() + ": rank " + std::to_string(peer) +
                            " did not complete the queue-pair handshake in time");
    }
  }

  // The listener thread: answers dialers one at a time until the transport goes.
  void serve() {
    while (!stop_) {
      pollfd p[2] = {{listenFd_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
      if (::poll(p, 2, 100) <= 0 || !(p[0].revents & POLLIN)) continue;
      net::SockAddr from;
      auto fd = net::acceptOne(listenFd_.get(), net::deadlineIn(1), &from);
      if (!fd.ok()) continue;
      net::Fd conn(*fd);
      int rank = -1;
      auto made = answer(conn.get(), &rank);
      std::lock_guard<std::mutex> lock(mu_);
      if (rank < 0) {
        CHORUS_LOG(WARN, NET) << me() << ": side channel from " << from.toString()
                              << " refused: " << made.status().message();
        continue;
      }
      Accepted& a = accepted_[rank];
      if (made.ok()) {
        a.conn = std::move(made).value();
      } else {
        a.status = made.status();
      }
      cv_.notify_all();
    }
  }

  // One dialer's handshake; *rank is the dialer's once its record was read and is a rank of
  // this communicator.
  StatusOr<std::unique_ptr<IbConnection>> answer(int fd, int* rank) {
    const net::Deadline deadline = net::deadlineIn(kHandshakeSeconds);
    CHORUS_ASSIGN_OR_RETURN(QpInfo remote, recvRecord(fd, deadline, "a dialer"));
    if (remote.commId != ctx_.commId || remote.rank < 0 || remote.rank >= ctx_.rank)
      return invalidArgument("a queue-pair record of rank " + std::to_string(remote.rank) +
                             " of another communicator, or not a lower rank");
    *rank = remote.rank;
    const std::string who = "rank " + std::to_string(remote.rank);
    CHORUS_ASSIGN_OR_RETURN(auto conn, makeConnection(remote.rank));
    if (remote.rails != conn->rails()) {
      // The dialer reads the count in this record and fails with the same words.
      CHORUS_RETURN_IF_ERROR(sendRecords(fd, {conn->localInfo().front()}, deadline, who));
      return conn->railMismatch(remote.rails);
    }
    CHORUS_ASSIGN_OR_RETURN(auto all, recvRest(fd, remote, deadline, who));
    CHORUS_RETURN_IF_ERROR(conn->connectTo(all));
    CHORUS_RETURN_IF_ERROR(sendRecords(fd, conn->localInfo(), deadline, who));
    uint8_t ready = 0;
    CHORUS_RETURN_IF_ERROR(net::recvAll(fd, &ready, 1, deadline, "ready from " + who));
    return conn;
  }

  const TransportContext ctx_;
  const std::vector<NicShare> nics_;  // one per rail
  const size_t minStripe_;
  const net::SockAddr listenAddr_;
  std::mutex mu_;
  std::condition_variable cv_;
  EndpointBlob blob_;
  net::Fd listenFd_;
  net::Fd wake_;  // written by the destructor: the listener stops at once
  std::thread listener_;
  std::atomic<bool> stop_{false};
  // Handshakes the listener thread finished (or failed), until connect() asks for them.
  struct Accepted {
    Status status;
    std::unique_ptr<IbConnection> conn;
  };
  std::map<int, Accepted> accepted_;
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
  // The ranks of a host share its ports out by local rank, settings.nicsPerRank each.
  int64_t localRank = 0;
  if (config::isSet("CHORUS_LOCAL_RANK")) {
    CHORUS_ASSIGN_OR_RETURN(localRank, config::getInt("CHORUS_LOCAL_RANK"));
  }
  CHORUS_ASSIGN_OR_RETURN(
      auto mine, portsForRank(ports, settings.nicsPerRank,
                              static_cast<int>(std::clamp<int64_t>(localRank, 0, 1 << 20))));
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<NicShare> nics;
  std::string used;
  for (const PortInfo& port : mine) {
    NicShare share;
    CHORUS_ASSIGN_OR_RETURN(share.nic, Nic::open(*api, port, settings));
    share.sendCache = std::make_shared<RegCache>(*api, share.nic->pd(), 0, page);
    share.recvCache = std::make_shared<RegCache>(
        *api, share.nic->pd(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, page);
    used += (used.empty() ? "" : ", ") + share.nic->name();
    nics.push_back(std::move(share));
  }
  CHORUS_ASSIGN_OR_RETURN(net::SockAddr addr, net::chooseLocalAddress(ctx.root));
  const bool roce = mine.front().ethernet;
  CHORUS_LOG(INFO, NET) << "ibverbs (experimental, not verified on hardware): rank " << ctx.rank
                        << " uses " << used << " through " << api->origin << " ("
                        << (roce ? "RoCE, GID index " + std::to_string(settings.gidIndex)
                                 : std::string("InfiniBand"))
                        << "), " << ports.size() << " port(s) accepted"
                        << (nics.size() > 1 ? ", messages from " +
                                                  std::to_string(settings.stripeMinBytes) +
                                                  " bytes striped"
                                            : std::string());
  return std::unique_ptr<Transport>(
      new IbTransport(ctx, std::move(nics), settings.stripeMinBytes, addr));
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
