#include "transports/tcp/tcp_transport.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "src/base/config.h"
#include "src/base/logging.h"
#include "transports/tcp/tcp_connection.h"
#include "transports/tcp/wire.h"

namespace chorus {
namespace tcp {
namespace {

constexpr int kTcpScore = 10;
// Every rank of a large job may dial us at the same moment; a SYN dropped on a full backlog
// costs the dialer a one-second retransmit.
constexpr int kListenBacklog = 1024;
// Default autotuning tops out near 4 MiB on the send side; asking for it up front lets the first
// large message fill the pipe instead of waiting for the window to grow. Best effort: the kernel
// caps it at net.core.{w,r}mem_max.
constexpr int kSocketBufferBytes = 4 << 20;
// The longest a connect() sleeps in poll() before looking at its deadline again.
constexpr int kPumpSliceMs = 100;
// A peer's listener is up before its endpoint is published, so a refusal means the peer is gone;
// the grace only covers a refusal racing a transient condition.
constexpr double kRefusedGraceSeconds = 1.0;

std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

std::string secondsText(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", s);
  return buf;
}

void tuneSocket(int fd, const std::string& congestion) {
  int bytes = kSocketBufferBytes;
  // Failures only cost throughput, never correctness.
  if (::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes) != 0 ||
      ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes) != 0) {
    CHORUS_LOG(TRACE, NET) << "tcp: could not set " << bytes
                           << "-byte socket buffers: " << std::strerror(errno);
  }
  // net::congestionControl() has tried the name on a socket of its own.
  if (!net::setCongestion(fd, congestion)) {
    CHORUS_LOG(TRACE, NET) << "tcp: could not set congestion control " << congestion << ": "
                           << std::strerror(errno);
  }
}

const char* ackText(AckResult r) {
  switch (r) {
    case AckResult::kAccepted: return "accepted";
    case AckResult::kWrongCommunicator:
      return "it belongs to another communicator (a stale or foreign endpoint)";
    case AckResult::kWrongRank: return "it is not the rank we dialed, or we are not the lower rank";
    case AckResult::kWrongVersion: return "it speaks another chorus tcp protocol version";
  }
  return "unknown verdict";
}

class TcpTransport final : public Transport {
 public:
  TcpTransport(int myRank, uint64_t commId, const net::SockAddr& listenAddr,
               std::string congestion)
      : myRank_(myRank),
        commId_(commId),
        listenAddr_(listenAddr),
        congestion_(std::move(congestion)) {}

  std::string_view name() const override { return "tcp"; }
  TransportCaps caps() const override { return {}; }

  Reach canConnect(const PeerIdentity& self, const PeerIdentity& peer,
                   const EndpointBlob& peerBlob) const override {
    if (peerBlob.empty()) return {};
    return Reach{true, kTcpScore,
                 peer.hostId == self.hostId ? cost::LinkClass::kTcpLoopback
                                            : cost::LinkClass::kEthernet};
  }

  // Members of a split listen where the parent listens: the same interface reaches the same
  // peers.
  StatusOr<std::unique_ptr<Transport>> forSplit(const TransportContext& child) override {
    net::SockAddr addr = listenAddr_;
    addr.setPort(0);
    return makeTcpTransport(child.rank, child.commId, addr, congestion_);
  }

  Status listen(EndpointBlob* out) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!listenFd_) {
      auto fd = net::listenOn(listenAddr_, kListenBacklog, &bound_);
      if (!fd.ok())
        return fd.status().withContext("tcp transport of rank " + std::to_string(myRank_));
      listenFd_.reset(*fd);
      // Accepted sockets inherit the buffer sizes of the listener.
      tuneSocket(listenFd_.get(), congestion_);
      CHORUS_LOG(INFO, NET) << "tcp: rank " << myRank_ << " listening on " << bound_.toString();
    }
    *out = encodeEndpoint(bound_);
    return Status();
  }

  StatusOr<std::unique_ptr<Connection>> connect(int peer, const EndpointBlob& peerBlob,
                                                double timeoutSeconds) override {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string me = "tcp: rank " + std::to_string(myRank_);
    if (!listenFd_) return invalidUsage(me + ": connect() called before listen()");
    if (peer < 0 || peer == myRank_)
      return invalidArgument(me + ": cannot connect to rank " + std::to_string(peer));
    auto addr = decodeEndpoint(peerBlob);
    if (!addr.ok())
      return addr.status().withContext(me + ", endpoint of rank " + std::to_string(peer));

    const net::Deadline deadline = net::deadlineIn(timeoutSeconds);
    const auto start = net::Clock::now();
    net::Fd fd;
    std::string peerAddr;
    const bool dialer = myRank_ < peer;
    if (dialer) {
      peerAddr = addr->toString();
      auto dialed = dial(peer, *addr, deadline, timeoutSeconds);
      if (!dialed.ok()) return dialed.status();
      fd = std::move(dialed).value();
    } else {
      auto accepted = awaitDialer(peer, deadline, timeoutSeconds, &peerAddr);
      if (!accepted.ok()) return accepted.status();
      fd = std::move(accepted).value();
    }
    CHORUS_LOG(INFO, NET) << me << " connected to rank " << peer << " at " << peerAddr << " ("
                          << (dialer ? "dialed" : "accepted") << ", "
                          << std::chrono::duration<double, std::milli>(net::Clock::now() - start)
                                 .count()
                          << " ms)";
    return std::unique_ptr<Connection>(
        new TcpConnection(std::move(fd), myRank_, peer, std::move(peerAddr)));
  }

 private:
  // An accepted socket whose hello has not fully arrived.
  struct Pending {
    net::Fd fd;
    net::SockAddr from;
    uint8_t hello[kHelloBytes] = {};
    size_t filled = 0;
  };
  // A hello we accepted and acked, kept until connect() asks for its rank.
  struct Ready {
    net::Fd fd;
    std::string addr;
  };

  std::string peerText(int peer, const std::string& addr) const {
    return "rank " + std::to_string(peer) + " (" + addr + ")";
  }

  StatusOr<net::Fd> dial(int peer, const net::SockAddr& addr, net::Deadline deadline,
                         double timeoutSeconds) {
    const std::string what = peerText(peer, addr.toString());
    const std::string context = "tcp: rank " + std::to_string(myRank_) + " dialing " + what;
    auto raw = net::connectTo(addr, deadline, net::deadlineIn(kRefusedGraceSeconds));
    if (!raw.ok()) return raw.status().withContext(context);
    net::Fd fd(*raw);
    CHORUS_RETURN_IF_ERROR(net::setNonBlocking(fd.get(), true));
    tuneSocket(fd.get(), congestion_);

    uint8_t hello[kHelloBytes];
    wire::encodeHello(Hello{kProtocolVersion, commId_, myRank_, peer}, hello);
    Status sent = net::sendAll(fd.get(), hello, sizeof hello, deadline, what);
    if (!sent.ok()) return sent.withContext(context);

    // While we wait for the answer, answer others: the peer may itself be stuck dialing a rank
    // that is waiting for us.
    uint8_t ack[kAckBytes];
    size_t got = 0;
    while (got < kAckBytes) {
      bool ready = false;
      CHORUS_RETURN_IF_ERROR(pump(deadline, fd.get(), &ready));
      if (ready) {
        ssize_t r = ::recv(fd.get(), ack + got, kAckBytes - got, MSG_DONTWAIT);
        if (r == 0)
          return remoteError(context + ": " + what +
                             " closed the connection during the handshake");
        // A peer that dies while we dial resets the connection: that is the peer's failure,
        // as a close is, not one of this rank's system calls.
        if (r < 0 && net::peerGoneError(errno))
          return remoteError(context + ": " + what +
                             " reset the connection during the handshake (" +
                             std::strerror(errno) + ")");
        if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
          return errnoStatus("recv", context + ", handshake");
        if (r > 0) got += static_cast<size_t>(r);
        continue;
      }
      if (net::Clock::now() >= deadline)
        return timeoutError(context + ": no answer to our hello within " +
                            secondsText(timeoutSeconds) + " (has rank " + std::to_string(peer) +
                            " called connect?)");
    }
    if (wire::get32(ack) != kAckMagic)
      return remoteError(context + ": the answer is not a chorus tcp ack (another service?)");
    auto verdict = static_cast<AckResult>(wire::get32(ack + 4));
    if (verdict != AckResult::kAccepted)
      return remoteError(context + ": refused by the peer: " + ackText(verdict) +
                         "; our communicator id is " + hex64(commId_));
    uint8_t confirm[kConfirmBytes];
    wire::put32(confirm, kConfirmMagic);
    Status confirmed = net::sendAll(fd.get(), confirm, sizeof confirm, deadline, what);
    if (!confirmed.ok()) return confirmed.withContext(context + ", handshake");
    return fd;
  }

  StatusOr<net::Fd> awaitDialer(int peer, net::Deadline deadline, double timeoutSeconds,
                                std::string* peerAddr) {
    for (;;) {
      auto it = ready_.find(peer);
      if (it != ready_.end() && !it->second.empty()) {
        Ready r = std::move(it->second.front());
        it->second.pop_front();
        // The dialer's confirm says it read our ack. A dialer that gave up before that (its
        // connect() timed out) closed without confirming: discard the connection and wait for
        // its next dial. A confirmed connection is kept even if the peer has exited since.
        uint8_t confirm[kConfirmBytes];
        Status got = net::recvAll(r.fd.get(), confirm, sizeof confirm, deadline,
                                  peerText(peer, r.addr));
        if (!got.ok() && got.code() == Code::kTimeout) return got;
        if (!got.ok() || wire::get32(confirm) != kConfirmMagic) {
          CHORUS_LOG(INFO, NET) << "tcp: rank " << myRank_ << " discarding an unconfirmed "
                                << "connection from rank " << peer << " at " << r.addr;
          continue;
        }
        *peerAddr = r.addr;
        tuneSocket(r.fd.get(), congestion_);
        return std::move(r.fd);
      }
      if (net::Clock::now() >= deadline)
        return timeoutError("tcp: rank " + std::to_string(myRank_) + " listening on " +
                            bound_.toString() + ": rank " + std::to_string(peer) +
                            " did not connect within " + secondsText(timeoutSeconds));
      CHORUS_RETURN_IF_ERROR(pump(deadline, -1, nullptr));
    }
  }

  // One poll over the listener, the half-read hellos and `extraFd`; handles what is ready.
  Status pump(net::Deadline deadline, int extraFd, bool* extraReady) {
    std::vector<pollfd> fds;
    fds.reserve(pending_.size() + 2);
    fds.push_back(pollfd{listenFd_.get(), POLLIN, 0});
    if (extraFd >= 0) fds.push_back(pollfd{extraFd, POLLIN, 0});
    const size_t firstPending = fds.size();
    for (const Pending& p : pending_) fds.push_back(pollfd{p.fd.get(), POLLIN, 0});

    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - net::Clock::now()).count();
    int timeoutMs = static_cast<int>(std::clamp<int64_t>(left, 0, kPumpSliceMs));
    int rc = ::poll(fds.data(), fds.size(), timeoutMs);
    if (rc < 0) {
      if (errno == EINTR) return Status();
      return errnoStatus("poll", "tcp listener " + bound_.toString());
    }
    if (rc == 0) return Status();
    if (extraFd >= 0 && fds[1].revents) *extraReady = true;

    std::vector<Pending> unfinished;
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (fds[firstPending + i].revents == 0 || !readHello(pending_[i]))
        unfinished.push_back(std::move(pending_[i]));
    }
    pending_ = std::move(unfinished);
    if (fds[0].revents) return acceptAll();
    return Status();
  }

  Status acceptAll() {
    for (;;) {
      Pending p;
      p.from.len = sizeof p.from.storage;
      int fd = ::accept4(listenFd_.get(), reinterpret_cast<sockaddr*>(&p.from.storage),
                         &p.from.len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        int err = errno;
        if (err == EAGAIN || err == EWOULDBLOCK) return Status();
        if (err == EINTR || err == ECONNABORTED || err == EPROTO) continue;
        return errnoStatus("accept", "tcp listener " + bound_.toString(), err);
      }
      p.fd.reset(fd);
      Status s = net::setNoDelay(fd);
      if (!s.ok()) {
        CHORUS_LOG(WARN, NET) << "tcp: dropping connection from " << p.from.toString() << ": "
                              << s.toString();
        continue;
      }
      pending_.push_back(std::move(p));
    }
  }

  // Reads more of `p`'s hello; answers it once complete. True when `p` is finished with
  // (accepted into ready_, refused or dropped).
  bool readHello(Pending& p) {
    const std::string from = p.from.toString();
    ssize_t r = ::recv(p.fd.get(), p.hello + p.filled, kHelloBytes - p.filled, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
    if (r <= 0) {
      CHORUS_LOG(INFO, NET) << "tcp: connection from " << from << " closed before its hello";
      return true;
    }
    p.filled += static_cast<size_t>(r);
    if (p.filled < kHelloBytes) return false;

    Hello h;
    const std::optional<AckResult> judged = wire::judgeHello(p.hello, commId_, myRank_, &h);
    if (!judged) {
      CHORUS_LOG(WARN, NET) << "tcp: rank " << myRank_ << " dropping a connection from " << from
                            << ": not a chorus tcp hello";
      return true;
    }
    const AckResult verdict = *judged;

    uint8_t ack[kAckBytes];
    wire::encodeAck(verdict, ack);
    // A fresh socket's send buffer is empty: eight bytes either go at once or the peer is gone.
    ssize_t w = ::send(p.fd.get(), ack, sizeof ack, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (verdict != AckResult::kAccepted) {
      CHORUS_LOG(WARN, NET) << "tcp: rank " << myRank_ << " (communicator " << hex64(commId_)
                            << ") refused a connection from " << from << " claiming rank "
                            << h.fromRank << " of communicator " << hex64(h.commId) << " for rank "
                            << h.toRank << ": " << ackText(verdict);
      return true;
    }
    if (w != static_cast<ssize_t>(sizeof ack)) {
      CHORUS_LOG(WARN, NET) << "tcp: rank " << myRank_ << " could not answer rank " << h.fromRank
                            << " at " << from << ": "
                            << (w < 0 ? std::strerror(errno) : "short write");
      return true;
    }
    ready_[h.fromRank].push_back(Ready{std::move(p.fd), from});
    return true;
  }

  const int myRank_;
  const uint64_t commId_;
  const net::SockAddr listenAddr_;
  const std::string congestion_;  // "" : the system's

  std::mutex mu_;  // serialises listen() and connect()
  net::Fd listenFd_;
  net::SockAddr bound_;
  std::vector<Pending> pending_;
  std::map<int, std::deque<Ready>> ready_;
};

}  // namespace


StatusOr<std::unique_ptr<Transport>> createTcp(const TransportContext& ctx) {
  CHORUS_ASSIGN_OR_RETURN(std::string congestion, net::congestionControl());
  CHORUS_ASSIGN_OR_RETURN(net::SockAddr addr, net::chooseLocalAddress(ctx.root));
  return makeTcpTransport(ctx.rank, ctx.commId, addr, std::move(congestion));
}

CHORUS_REGISTER_TRANSPORT({
    .name = "tcp",
    .description = "TCP sockets, one per pair of ranks: any peer with an IP route",
    .create = &createTcp,
});

}  // namespace tcp

std::unique_ptr<Transport> makeTcpTransport(int myRank, uint64_t commId,
                                            const net::SockAddr& listenAddr,
                                            std::string congestion) {
  return std::make_unique<tcp::TcpTransport>(myRank, commId, listenAddr, std::move(congestion));
}

}  // namespace chorus
