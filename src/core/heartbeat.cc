#include "src/core/heartbeat.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "src/base/config.h"
#include "src/base/logging.h"
#include "src/base/thread_name.h"

namespace chorus {
namespace {

constexpr uint32_t kMagic = 0x42484843;  // "CHHB" little-endian
constexpr uint16_t kVersion = 1;
constexpr size_t kBeatBytes = 32;  // the header; a failed rank appends its reason
constexpr size_t kMaxReason = 400;
constexpr uint8_t kFlagFailed = 1;
constexpr uint8_t kFlagUsage = 2;  // the failure was kInvalidUsage

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void put(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

bool sameAddress(const net::SockAddr& a, const sockaddr_storage& b, socklen_t blen) {
  if (a.family() != b.ss_family) return false;
  if (a.family() == AF_INET) {
    if (blen < static_cast<socklen_t>(sizeof(sockaddr_in))) return false;
    const auto* x = reinterpret_cast<const sockaddr_in*>(&a.storage);
    const auto* y = reinterpret_cast<const sockaddr_in*>(&b);
    return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
  }
  if (a.family() == AF_INET6) {
    if (blen < static_cast<socklen_t>(sizeof(sockaddr_in6))) return false;
    const auto* x = reinterpret_cast<const sockaddr_in6*>(&a.storage);
    const auto* y = reinterpret_cast<const sockaddr_in6*>(&b);
    return x->sin6_port == y->sin6_port &&
           std::memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(in6_addr)) == 0;
  }
  return false;
}

}  // namespace

StatusOr<std::unique_ptr<Heartbeat>> Heartbeat::create(int rank, uint64_t commId,
                                                       const net::SockAddr& addr) {
  CHORUS_ASSIGN_OR_RETURN(double timeout, config::getDouble("CHORUS_HEARTBEAT_TIMEOUT"));
  if (timeout < 0)
    return invalidArgument("CHORUS_HEARTBEAT_TIMEOUT=" +
                           config::getString("CHORUS_HEARTBEAT_TIMEOUT") +
                           " is negative (seconds; 0 turns heartbeats off)");
  if (timeout == 0) return std::unique_ptr<Heartbeat>();
  std::unique_ptr<Heartbeat> h(new Heartbeat());
  h->rank_ = rank;
  h->commId_ = commId;
  h->timeoutSeconds_ = timeout;
  // Eight beats per timeout: a peer is judged silent only after missing all of them.
  h->intervalMs_ = std::clamp(static_cast<int>(timeout * 1000 / 8), 20, 1000);

  int fd = ::socket(addr.family(), SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errnoStatus("socket", "heartbeat of rank " + std::to_string(rank));
  h->fd_.reset(fd);
  net::SockAddr bind = addr;
  bind.setPort(0);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&bind.storage), bind.len) != 0)
    return errnoStatus("bind",
                       "heartbeat of rank " + std::to_string(rank) + " on " + bind.toString());
  h->bound_.len = sizeof(h->bound_.storage);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&h->bound_.storage), &h->bound_.len) != 0)
    return errnoStatus("getsockname", "heartbeat of rank " + std::to_string(rank));
  int wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) return errnoStatus("eventfd", "heartbeat of rank " + std::to_string(rank));
  h->wake_.reset(wake);
  return h;
}

Heartbeat::~Heartbeat() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  const uint64_t one = 1;
  ssize_t ignored = ::write(wake_.get(), &one, sizeof(one));
  (void)ignored;
  thread_.join();
}

Status Heartbeat::start(const std::vector<std::vector<uint8_t>>& endpoints) {
  if (thread_.joinable()) return internalError("heartbeat started twice");
  const size_t n = endpoints.size();
  watched_.assign(n, false);
  peers_.assign(n, net::SockAddr());
  lastSeen_.reset(new std::atomic<int64_t>[n]);
  peerFailed_.reset(new std::atomic<bool>[n]);
  heard_.reset(new std::atomic<bool>[n]);
  warned_.reset(new std::atomic<bool>[n]);
  peerReason_.assign(n, std::string());
  peerUsage_.assign(n, false);
  const int64_t now = nowNs();
  for (size_t r = 0; r < n; ++r) {
    lastSeen_[r].store(now);
    peerFailed_[r].store(false);
    heard_[r].store(false);
    warned_[r].store(false);
    if (static_cast<int>(r) == rank_ || endpoints[r].empty()) continue;
    auto a = net::decodeAddress(endpoints[r].data(), endpoints[r].size());
    if (!a.ok())
      return a.status().withContext("heartbeat endpoint of rank " + std::to_string(r));
    peers_[r] = *a;
    watched_[r] = true;
  }
  startNs_ = now;
  // The first beat leaves now, before the creation's last all-gather (see the header).
  send(0);
  thread_ = std::thread([this] {
    nameThisThread("chorus-beat");
    run();
  });
  return Status();
}

Status Heartbeat::check(int peer) const {
  if (!lastSeen_ || peer < 0 || static_cast<size_t>(peer) >= watched_.size() ||
      !watched_[static_cast<size_t>(peer)])
    return Status();
  if (peerFailed_[static_cast<size_t>(peer)].load()) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string msg = "rank " + std::to_string(peer) + " failed: " +
                      peerReason_[static_cast<size_t>(peer)];
    return peerUsage_[static_cast<size_t>(peer)] ? invalidUsage(std::move(msg))
                                                 : remoteError(std::move(msg));
  }
  const int64_t now = nowNs();
  if (!heard_[static_cast<size_t>(peer)].load()) {
    if (static_cast<double>(now - startNs_) * 1e-9 > timeoutSeconds_ &&
        !warned_[static_cast<size_t>(peer)].exchange(true)) {
      CHORUS_LOG(WARN, NET) << "rank " << rank_ << ": no heartbeat has arrived from rank " << peer
                            << " (" << peers_[static_cast<size_t>(peer)].toString()
                            << ") since the communicator was created: is UDP to it blocked? "
                               "Its silence (a stopped process, a cut link) will be found only "
                               "at CHORUS_TIMEOUT";
    }
    return Status();
  }
  const double silent =
      static_cast<double>(now - lastSeen_[static_cast<size_t>(peer)].load()) * 1e-9;
  if (silent <= timeoutSeconds_) return Status();
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%.1f", silent);
  return remoteError("rank " + std::to_string(peer) + " (heartbeats from " +
                     peers_[static_cast<size_t>(peer)].toString() + ") has been silent for " +
                     secs + " s (CHORUS_HEARTBEAT_TIMEOUT=" +
                     config::getString("CHORUS_HEARTBEAT_TIMEOUT") +
                     "): its process is stopped or hung, its host is down, or the network "
                     "between us is");
}

void Heartbeat::announceFailure(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.load()) return;
    failure_ = why.toString().substr(0, kMaxReason);
    failureIsUsage_ = why.code() == Code::kInvalidUsage;
    failed_.store(true);
  }
  const uint64_t one = 1;
  ssize_t ignored = ::write(wake_.get(), &one, sizeof(one));  // send one now
  (void)ignored;
}

void Heartbeat::send(uint64_t seq) {
  uint8_t beat[kBeatBytes + kMaxReason] = {};
  size_t bytes = kBeatBytes;
  put(beat, kMagic, 4);
  put(beat + 4, kVersion, 2);
  if (failed_.load()) {
    std::lock_guard<std::mutex> lock(mu_);
    beat[6] = kFlagFailed | (failureIsUsage_ ? kFlagUsage : 0);
    std::memcpy(beat + kBeatBytes, failure_.data(), failure_.size());
    bytes += failure_.size();
  }
  put(beat + 8, commId_, 8);
  put(beat + 16, static_cast<uint32_t>(rank_), 4);
  put(beat + 24, seq, 8);
  for (size_t r = 0; r < peers_.size(); ++r) {
    if (!watched_[r]) continue;
    put(beat + 20, static_cast<uint32_t>(r), 4);
    // Best effort: a full socket buffer or an unreachable peer just means no beat this time.
    (void)::sendto(fd_.get(), beat, bytes, MSG_DONTWAIT,
                   reinterpret_cast<const sockaddr*>(&peers_[r].storage), peers_[r].len);
  }
}

void Heartbeat::receive() {
  uint8_t buf[kBeatBytes + kMaxReason + 1];
  for (int i = 0; i < 1024; ++i) {  // bounded: a flood cannot keep this thread from sending
    sockaddr_storage from{};
    socklen_t fromLen = sizeof(from);
    const ssize_t got = ::recvfrom(fd_.get(), buf, sizeof(buf), MSG_DONTWAIT,
                                   reinterpret_cast<sockaddr*>(&from), &fromLen);
    if (got < 0) {
      if (errno == EINTR) continue;
      return;  // EAGAIN, or an ICMP error reported on the socket: nothing more to read now
    }
    if (got < static_cast<ssize_t>(kBeatBytes) ||
        got > static_cast<ssize_t>(kBeatBytes + kMaxReason))
      continue;
    if (get(buf, 4) != kMagic || get(buf + 4, 2) != kVersion || get(buf + 8, 8) != commId_)
      continue;
    const uint64_t sender = get(buf + 16, 4), to = get(buf + 20, 4);
    if (to != static_cast<uint64_t>(rank_) || sender >= peers_.size() || !watched_[sender] ||
        !sameAddress(peers_[sender], from, fromLen))
      continue;
    lastSeen_[sender].store(nowNs());
    heard_[sender].store(true);
    if ((buf[6] & kFlagFailed) && !peerFailed_[sender].load()) {
      std::string reason(reinterpret_cast<const char*>(buf + kBeatBytes),
                         static_cast<size_t>(got) - kBeatBytes);
      for (char& ch : reason)
        if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) > 0x7e)
          ch = '?';
      if (reason.empty()) reason = "(no reason given)";
      std::lock_guard<std::mutex> lock(mu_);
      peerReason_[sender] = std::move(reason);
      peerUsage_[sender] = (buf[6] & kFlagUsage) != 0;
      peerFailed_[sender].store(true);
    }
  }
}

void Heartbeat::run() {
  uint64_t seq = 1;  // beat 0 left in start()
  auto next = std::chrono::steady_clock::now() + std::chrono::milliseconds(intervalMs_);
  while (!stop_.load()) {
    auto now = std::chrono::steady_clock::now();
    if (now >= next) {
      send(seq++);
      next = now + std::chrono::milliseconds(intervalMs_);
    }
    pollfd fds[2] = {{fd_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    const auto waitMs =
        std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1;
    if (::poll(fds, 2, static_cast<int>(waitMs)) <= 0) continue;
    if (fds[0].revents & (POLLIN | POLLERR)) receive();
    if (fds[1].revents & POLLIN) {  // stop, or a failure to announce now
      uint64_t count = 0;
      ssize_t ignored = ::read(wake_.get(), &count, sizeof(count));
      (void)ignored;
      next = std::chrono::steady_clock::now();
    }
  }
}

}  // namespace chorus
