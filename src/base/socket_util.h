// Socket helpers shared by the bootstrap store and the TCP transport.
//
// Addresses are IPv4 or IPv6 (sockaddr_storage). Interface choice follows CHORUS_SOCKET_IFNAME
// with NCCL's syntax: a comma-separated list of name prefixes; a leading '^' excludes the
// listed prefixes; a leading '=' makes the names exact. Every blocking helper takes a deadline.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "src/base/status.h"

namespace chorus::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
inline Deadline deadlineIn(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(seconds));
}

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;

  int family() const { return storage.ss_family; }
  uint16_t port() const;
  void setPort(uint16_t port);
  std::string toString() const;  // "1.2.3.4:5678" or "[::1]:5678"
  bool isLoopback() const;
};

// Where a rank's sockets listen: CHORUS_SOCKET_IFNAME's first interface when it is set;
// otherwise the local address of the route to the bootstrap root `root` (the interface peers
// reach us through), else the first interface listInterfaces() offers. Port 0.
StatusOr<SockAddr> chooseLocalAddress(const SockAddr* root);

// A compact, byte-order-independent encoding of an address and port (family byte, port
// big-endian, address bytes; IPv6 adds its scope id), for records that travel between ranks.
std::vector<uint8_t> encodeAddress(const SockAddr& addr);
// Refuses anything but a whole encoding of an IPv4 or IPv6 address with a nonzero port.
StatusOr<SockAddr> decodeAddress(const uint8_t* data, size_t len);

// Parses "host:port", "[v6]:port", "v6addr" is not accepted without brackets when a port is
// given. host may be a name (resolved with getaddrinfo) or a literal.
StatusOr<SockAddr> parseHostPort(const std::string& hostPort);
// Parses host and port separately (MASTER_ADDR / MASTER_PORT).
StatusOr<SockAddr> resolve(const std::string& host, uint16_t port);

struct Interface {
  std::string name;
  SockAddr addr;  // port 0
};
// Up interfaces with an address, filtered by CHORUS_SOCKET_IFNAME (or `spec` when non-empty) and
// CHORUS_SOCKET_FAMILY. Without a spec: non-loopback, non-docker ("docker", "lo", "virbr"
// excluded); if that leaves nothing, loopback.
StatusOr<std::vector<Interface>> listInterfaces(const std::string& spec = "");
bool matchesIfSpec(const std::string& ifname, const std::string& spec);

/// errno values that mean the peer went away (reset, closed, not connected), not a local fault.
bool peerGoneError(int err);
// The local address the kernel would use to reach `remote` (UDP connect + getsockname): the
// right interface to listen on for a job whose root is `remote`. Port 0.
StatusOr<SockAddr> localAddressToward(const SockAddr& remote);

// Sockets. All returned fds are CLOEXEC. Nonblocking where the name says so.
StatusOr<int> listenOn(const SockAddr& addr, int backlog, SockAddr* bound);  // nonblocking fd
// Connects with retries until the deadline (the listener may not be up yet: ECONNREFUSED is
// retried). Returns a blocking fd with TCP_NODELAY set.
StatusOr<int> connectTo(const SockAddr& addr, Deadline deadline);
// The same, for a peer whose listener is known to be up already (its address came from it): a
// refusal still seen at `refusedDeadline` means the peer is gone, and ends the wait early with a
// kRemoteError instead of retrying until `deadline`.
StatusOr<int> connectTo(const SockAddr& addr, Deadline deadline, Deadline refusedDeadline);
// Accepts one connection before the deadline; returns a blocking fd with TCP_NODELAY.
StatusOr<int> acceptOne(int listenFd, Deadline deadline, SockAddr* peer);
Status setNonBlocking(int fd, bool on);
Status setNoDelay(int fd);
/// The congestion control CHORUS_TCP_CONGESTION asks for chorus's TCP sockets: its name, or ""
/// for "system" (net.ipv4.tcp_congestion_control stays). The default, cubic, falls back to the
/// system's when the kernel does not offer it (logged at INFO); a name set in the environment
/// that the kernel refuses is an InvalidArgument naming the variable and the names it offers.
StatusOr<std::string> congestionControl();
/// TCP_CONGESTION on `fd` ("" : nothing to do); false with errno set when the kernel refuses.
bool setCongestion(int fd, const std::string& name);

// Blocking, deadline-bounded full transfers (poll + send/recv, EINTR-safe, MSG_NOSIGNAL).
// `what` names the peer in error messages ("store at 1.2.3.4:5", "rank 3").
// EOF before `len` bytes is a kRemoteError "<what> closed the connection".
Status sendAll(int fd, const void* buf, size_t len, Deadline deadline, const std::string& what);
Status recvAll(int fd, void* buf, size_t len, Deadline deadline, const std::string& what);

// Closes on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd();
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace chorus::net
