#include "src/base/socket_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "src/base/config.h"
#include "src/base/logging.h"
#include "src/base/strings.h"

namespace chorus::net {
namespace {

// Milliseconds left before `deadline`, rounded up so a poll never wakes just short of it.
int msUntil(Deadline deadline) {
  auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

// Waits for `events` on fd until the deadline. 1: ready, 0: deadline passed, -1: errno set.
int pollUntil(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, msUntil(deadline));
    if (rc > 0) return 1;
    if (rc == 0) {
      if (Clock::now() >= deadline) return 0;
      continue;  // woke early through rounding; wait out the remainder
    }
    if (errno != EINTR) return -1;
  }
}

std::string secondsText(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", s);
  return buf;
}

std::string fdText(int fd) { return "fd " + std::to_string(fd); }

// The address a socket is bound to, for error messages about listening sockets.
std::string localName(int fd) {
  SockAddr a;
  a.len = sizeof a.storage;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.len) != 0) return fdText(fd);
  return a.toString();
}

bool startsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// CHORUS_SOCKET_FAMILY as an AF_* constant; AF_UNSPEC when unset.
StatusOr<int> familyFromEnv() {
  std::string v = config::getString("CHORUS_SOCKET_FAMILY");
  std::string lower;
  for (char c : v) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.empty()) return AF_UNSPEC;
  if (lower == "af_inet" || lower == "inet" || lower == "ipv4" || lower == "4") return AF_INET;
  if (lower == "af_inet6" || lower == "inet6" || lower == "ipv6" || lower == "6") return AF_INET6;
  return invalidArgument("CHORUS_SOCKET_FAMILY='" + v + "' is not AF_INET or AF_INET6");
}

bool isLinkLocalV6(const SockAddr& a) {
  if (a.family() != AF_INET6) return false;
  const auto* s6 = reinterpret_cast<const sockaddr_in6*>(&a.storage);
  return IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr);
}

// Connect errors that mean "not there yet" rather than "never": the listener may still be
// starting, or a SYN was lost while its backlog was full.
bool retryableConnectError(int err) {
  return err == ECONNREFUSED || err == ETIMEDOUT || err == ECONNRESET || err == EAGAIN ||
         err == ECONNABORTED;
}

}  // namespace

bool peerGoneError(int err) { return err == EPIPE || err == ECONNRESET || err == ENOTCONN; }

uint16_t SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void SockAddr::setPort(uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
}

StatusOr<SockAddr> chooseLocalAddress(const SockAddr* root) {
  if (!config::isSet("CHORUS_SOCKET_IFNAME") && root) {
    auto toward = localAddressToward(*root);
    if (toward.ok()) return toward;
  }
  CHORUS_ASSIGN_OR_RETURN(auto ifs, listInterfaces());
  if (ifs.empty())
    return invalidArgument("no network interface matches CHORUS_SOCKET_IFNAME='" +
                           config::getString("CHORUS_SOCKET_IFNAME") + "'");
  return ifs.front().addr;
}

std::vector<uint8_t> encodeAddress(const SockAddr& addr) {
  std::vector<uint8_t> b;
  const uint16_t port = addr.port();
  auto put32 = [&b](uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  if (addr.family() == AF_INET6) {
    const auto* s6 = reinterpret_cast<const sockaddr_in6*>(&addr.storage);
    b.push_back(6);
    b.push_back(static_cast<uint8_t>(port >> 8));
    b.push_back(static_cast<uint8_t>(port));
    b.insert(b.end(), s6->sin6_addr.s6_addr, s6->sin6_addr.s6_addr + 16);
    put32(s6->sin6_scope_id);
  } else {
    const auto* s4 = reinterpret_cast<const sockaddr_in*>(&addr.storage);
    const auto* a = reinterpret_cast<const uint8_t*>(&s4->sin_addr.s_addr);
    b.push_back(4);
    b.push_back(static_cast<uint8_t>(port >> 8));
    b.push_back(static_cast<uint8_t>(port));
    b.insert(b.end(), a, a + 4);
  }
  return b;
}

StatusOr<SockAddr> decodeAddress(const uint8_t* data, size_t len) {
  auto bad = [&](const char* why) {
    return invalidArgument("malformed address (" + std::to_string(len) + " bytes): " + why);
  };
  if (len < 3) return bad("too short");
  const uint16_t port = static_cast<uint16_t>((data[1] << 8) | data[2]);
  SockAddr a;
  if (data[0] == 4) {
    if (len != 7) return bad("wrong length for IPv4");
    auto* s4 = reinterpret_cast<sockaddr_in*>(&a.storage);
    s4->sin_family = AF_INET;
    std::memcpy(&s4->sin_addr.s_addr, data + 3, 4);
    a.len = sizeof(sockaddr_in);
  } else if (data[0] == 6) {
    if (len != 23) return bad("wrong length for IPv6");
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
    s6->sin6_family = AF_INET6;
    std::memcpy(s6->sin6_addr.s6_addr, data + 3, 16);
    uint32_t scope = 0;
    for (int i = 0; i < 4; ++i) scope |= static_cast<uint32_t>(data[19 + i]) << (8 * i);
    s6->sin6_scope_id = scope;
    a.len = sizeof(sockaddr_in6);
  } else {
    return bad("unknown address family");
  }
  if (port == 0) return bad("port 0");
  a.setPort(port);
  return a;
}

std::string SockAddr::toString() const {
  char host[INET6_ADDRSTRLEN] = {};
  if (family() == AF_INET) {
    const auto* s4 = reinterpret_cast<const sockaddr_in*>(&storage);
    ::inet_ntop(AF_INET, &s4->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(port());
  }
  if (family() == AF_INET6) {
    const auto* s6 = reinterpret_cast<const sockaddr_in6*>(&storage);
    ::inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof host);
    std::string h = host;
    if (s6->sin6_scope_id != 0) {
      char ifname[IF_NAMESIZE] = {};
      h += "%";
      h += ::if_indextoname(s6->sin6_scope_id, ifname) ? std::string(ifname)
                                                        : std::to_string(s6->sin6_scope_id);
    }
    return "[" + h + "]:" + std::to_string(port());
  }
  return "<no address>";
}

bool SockAddr::isLoopback() const {
  if (family() == AF_INET) {
    uint32_t a = ntohl(reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr);
    return (a >> 24) == 127;
  }
  if (family() == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127;
  }
  return false;
}

StatusOr<SockAddr> parseHostPort(const std::string& hostPort) {
  std::string host, portText;
  if (!hostPort.empty() && hostPort[0] == '[') {
    size_t close = hostPort.find(']');
    if (close == std::string::npos || close + 1 >= hostPort.size() || hostPort[close + 1] != ':')
      return invalidArgument("'" + hostPort + "' is not [IPv6]:port");
    host = hostPort.substr(1, close - 1);
    portText = hostPort.substr(close + 2);
  } else {
    size_t colon = hostPort.rfind(':');
    if (colon == std::string::npos)
      return invalidArgument("'" + hostPort + "' is not host:port (the port is missing)");
    host = hostPort.substr(0, colon);
    portText = hostPort.substr(colon + 1);
    if (host.find(':') != std::string::npos)
      return invalidArgument("'" + hostPort +
                             "' is ambiguous: write an IPv6 address with a port as [addr]:port");
  }
  if (host.empty()) return invalidArgument("'" + hostPort + "' has no host");
  if (portText.empty() || portText.size() > 5 ||
      !std::all_of(portText.begin(), portText.end(),
                   [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
    return invalidArgument("'" + hostPort + "' has an invalid port '" + portText + "'");
  unsigned long port = std::strtoul(portText.c_str(), nullptr, 10);
  if (port > 65535) return invalidArgument("'" + hostPort + "': port " + portText + " > 65535");
  return resolve(host, static_cast<uint16_t>(port));
}

StatusOr<SockAddr> resolve(const std::string& host, uint16_t port) {
  std::string h = host;
  // MASTER_ADDR may come bracketed when copied from a host:port string.
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h.empty()) return invalidArgument("empty host name");
  CHORUS_ASSIGN_OR_RETURN(int family, familyFromEnv());

  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(h.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    std::string why = rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc);
    return systemError("getaddrinfo(" + h + "): " + why);
  }
  SockAddr out;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    if ((ai->ai_family == AF_INET || ai->ai_family == AF_INET6) &&
        ai->ai_addrlen <= sizeof out.storage) {
      std::memcpy(&out.storage, ai->ai_addr, ai->ai_addrlen);
      out.len = ai->ai_addrlen;
      break;
    }
  }
  ::freeaddrinfo(res);
  if (out.len == 0) return systemError("getaddrinfo(" + h + "): no IPv4 or IPv6 address");
  out.setPort(port);
  return out;
}

bool matchesIfSpec(const std::string& ifname, const std::string& spec) {
  if (spec.empty()) return true;
  size_t pos = 0;
  bool exclude = false, exact = false;
  if (pos < spec.size() && spec[pos] == '^') {
    exclude = true;
    ++pos;
  }
  if (pos < spec.size() && spec[pos] == '=') {
    exact = true;
    ++pos;
  }
  bool hit = false;
  while (pos <= spec.size() && !hit) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    std::string item(trim(std::string_view(spec).substr(pos, comma - pos)));
    pos = comma + 1;
    if (item.empty()) continue;
    hit = exact ? ifname == item : startsWith(ifname, item);
  }
  return exclude ? !hit : hit;
}

StatusOr<std::vector<Interface>> listInterfaces(const std::string& spec) {
  const std::string envSpec = config::getString("CHORUS_SOCKET_IFNAME");
  const std::string& want = spec.empty() ? envSpec : spec;
  CHORUS_ASSIGN_OR_RETURN(int family, familyFromEnv());

  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return errnoStatus("getifaddrs", "network interfaces");
  std::vector<Interface> all;
  std::vector<bool> loopback;
  std::string seen;
  for (ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
    if (!ifa->ifa_addr) continue;
    int f = ifa->ifa_addr->sa_family;
    if (f != AF_INET && f != AF_INET6) continue;
    if (!(ifa->ifa_flags & IFF_UP) || !(ifa->ifa_flags & IFF_RUNNING)) continue;
    Interface i;
    i.name = ifa->ifa_name;
    i.addr.len = f == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    std::memcpy(&i.addr.storage, ifa->ifa_addr, i.addr.len);
    i.addr.setPort(0);
    if (seen.find(" " + i.name + ",") == std::string::npos) seen += " " + i.name + ",";
    if (family != AF_UNSPEC && f != family) continue;
    // Link-local IPv6 needs a scope id on every peer; peers on other hosts cannot use ours.
    if (isLinkLocalV6(i.addr)) continue;
    loopback.push_back((ifa->ifa_flags & IFF_LOOPBACK) != 0);
    all.push_back(std::move(i));
  }
  ::freeifaddrs(list);

  std::vector<Interface> out;
  if (!want.empty()) {
    for (auto& i : all)
      if (matchesIfSpec(i.name, want)) out.push_back(i);
  } else {
    for (auto& i : all)
      if (matchesIfSpec(i.name, "^docker,lo,virbr")) out.push_back(i);
    if (out.empty())
      for (size_t k = 0; k < all.size(); ++k)
        if (loopback[k]) out.push_back(all[k]);
  }
  // IPv4 first: the common case, and what peers configured without IPv6 can reach.
  std::stable_partition(out.begin(), out.end(),
                        [](const Interface& i) { return i.addr.family() == AF_INET; });
  if (out.empty()) {
    if (!seen.empty()) seen.pop_back();
    std::string what = want.empty() ? std::string("any interface")
                                    : "CHORUS_SOCKET_IFNAME='" + want + "'";
    return invalidArgument("no usable network interface matches " + what +
                           (family == AF_UNSPEC ? "" : family == AF_INET ? " (AF_INET)"
                                                                        : " (AF_INET6)") +
                           "; interfaces up:" + (seen.empty() ? " none" : seen));
  }
  return out;
}

StatusOr<SockAddr> localAddressToward(const SockAddr& remote) {
  SockAddr target = remote;
  // Connecting a UDP socket to port 0 is refused; the port plays no part in routing.
  if (target.port() == 0) target.setPort(9);
  Fd fd(::socket(target.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd) return errnoStatus("socket", "UDP toward " + remote.toString());
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&target.storage), target.len) != 0)
    return errnoStatus("connect", "UDP route toward " + remote.toString());
  SockAddr local;
  local.len = sizeof local.storage;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local.storage), &local.len) != 0)
    return errnoStatus("getsockname", "UDP route toward " + remote.toString());
  local.setPort(0);
  return local;
}

StatusOr<int> listenOn(const SockAddr& addr, int backlog, SockAddr* bound) {
  const std::string where = addr.toString();
  Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return errnoStatus("socket", where);
  int one = 1;
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0)
    return errnoStatus("setsockopt(SO_REUSEADDR)", where);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.len) != 0)
    return errnoStatus("bind", where);
  if (::listen(fd.get(), backlog) != 0) return errnoStatus("listen", where);
  if (bound) {
    bound->len = sizeof bound->storage;
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound->storage), &bound->len) != 0)
      return errnoStatus("getsockname", where);
  }
  return fd.release();
}

StatusOr<int> connectTo(const SockAddr& addr, Deadline deadline) {
  return connectTo(addr, deadline, deadline);
}

StatusOr<int> connectTo(const SockAddr& addr, Deadline deadline, Deadline refusedDeadline) {
  const std::string where = addr.toString();
  const auto start = Clock::now();
  auto backoff = std::chrono::milliseconds(1);
  int lastErr = 0;
  for (;;) {
    Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) return errnoStatus("socket", where);
    int err = 0;
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.len) != 0) {
      err = errno;
      if (err == EINPROGRESS || err == EINTR) {
        int rc = pollUntil(fd.get(), POLLOUT, deadline);
        if (rc < 0) return errnoStatus("poll", "connect to " + where);
        if (rc == 0) {
          lastErr = ETIMEDOUT;
          break;
        }
        socklen_t len = sizeof err;
        if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0)
          return errnoStatus("getsockopt(SO_ERROR)", where);
      }
    }
    if (err == 0) {
      CHORUS_RETURN_IF_ERROR(setNonBlocking(fd.get(), false));
      CHORUS_RETURN_IF_ERROR(setNoDelay(fd.get()));
      return fd.release();
    }
    if (!retryableConnectError(err)) return errnoStatus("connect", where, err);
    lastErr = err;
    fd.reset();
    const auto now = Clock::now();
    if (now >= deadline) break;
    if (err == ECONNREFUSED && now >= refusedDeadline) {
      double waited = std::chrono::duration<double>(now - start).count();
      return remoteError("connect(" + where + "): " + std::strerror(err) + " for " +
                         secondsText(waited) + ": nothing listens there any more");
    }
    // The last attempt lands on the deadline, so a listener that is late but in time is found.
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
  double waited = std::chrono::duration<double>(Clock::now() - start).count();
  return timeoutError("connect(" + where + "): no connection after " + secondsText(waited) +
                      " (last error: " + std::strerror(lastErr) + ")");
}

StatusOr<int> acceptOne(int listenFd, Deadline deadline, SockAddr* peer) {
  SockAddr from;
  for (;;) {
    from.len = sizeof from.storage;
    int fd = ::accept4(listenFd, reinterpret_cast<sockaddr*>(&from.storage), &from.len,
                       SOCK_CLOEXEC);
    if (fd >= 0) {
      Fd owned(fd);
      CHORUS_RETURN_IF_ERROR(setNoDelay(fd));
      if (peer) *peer = from;
      return owned.release();
    }
    int err = errno;
    // A client that gave up between SYN and accept is not our failure; keep waiting.
    if (err != EAGAIN && err != EWOULDBLOCK && err != EINTR && err != ECONNABORTED &&
        err != EPROTO)
      return errnoStatus("accept", localName(listenFd), err);
    int rc = pollUntil(listenFd, POLLIN, deadline);
    if (rc < 0) return errnoStatus("poll", "accept on " + localName(listenFd));
    if (rc == 0) return timeoutError("accept(" + localName(listenFd) + "): no connection in time");
  }
}

Status setNonBlocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return errnoStatus("fcntl(F_GETFL)", fdText(fd));
  int want = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (want != flags && ::fcntl(fd, F_SETFL, want) != 0)
    return errnoStatus("fcntl(F_SETFL)", fdText(fd));
  return Status();
}

bool setCongestion(int fd, const std::string& name) {
  return name.empty() || ::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(),
                                      static_cast<socklen_t>(name.size())) == 0;
}

namespace {

// What /proc says the kernel offers, for errors.
std::string availableCongestion() {
  std::ifstream in("/proc/sys/net/ipv4/tcp_available_congestion_control");
  std::string names;
  std::getline(in, names);
  return names.empty() ? "unknown" : names;
}

}  // namespace

StatusOr<std::string> congestionControl() {
  constexpr const char* kVar = "CHORUS_TCP_CONGESTION";
  const std::string name = config::getString(kVar);
  if (name.empty() || name == "system") return std::string();
  // TCP_CA_NAME_MAX is 16 with the terminator; the kernel's names are lower case.
  const bool wellFormed =
      name.size() < 16 && std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
      });
  int err = EINVAL;
  if (wellFormed) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return errnoStatus("socket() to try " + std::string(kVar), name);
    err = setCongestion(fd, name) ? 0 : errno;
    ::close(fd);
  }
  if (err == 0) return name;
  if (!config::isSet(kVar)) {
    CHORUS_LOG(INFO, NET) << "tcp: congestion control " << name << " not available ("
                          << std::strerror(err) << "); the sockets keep the system's";
    return std::string();
  }
  return invalidArgument(std::string(kVar) + "=" + name + ": the kernel refuses it (" +
                         std::strerror(err) + "); it offers: " + availableCongestion() +
                         ", or 'system' keeps its default");
}

Status setNoDelay(int fd) {
  int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
    return errnoStatus("setsockopt(TCP_NODELAY)", fdText(fd));
  return Status();
}

Status sendAll(int fd, const void* buf, size_t len, Deadline deadline, const std::string& what) {
  const char* p = static_cast<const char*>(buf);
  size_t done = 0;
  while (done < len) {
    // MSG_DONTWAIT keeps a blocking fd from sleeping past the deadline inside send().
    ssize_t n = ::send(fd, p + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    int err = errno;
    if (n < 0 && err == EINTR) continue;
    if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK)) {
      int rc = pollUntil(fd, POLLOUT, deadline);
      if (rc < 0) return errnoStatus("poll", what);
      if (rc == 0)
        return timeoutError(what + ": timed out after sending " + std::to_string(done) + " of " +
                            std::to_string(len) + " bytes");
      continue;
    }
    if (n < 0 && peerGoneError(err))
      return remoteError(what + " closed the connection (" + std::strerror(err) + ")");
    return errnoStatus("send", what, err);
  }
  return Status();
}

Status recvAll(int fd, void* buf, size_t len, Deadline deadline, const std::string& what) {
  char* p = static_cast<char*>(buf);
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::recv(fd, p + done, len - done, MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return remoteError(what + " closed the connection");
    int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      int rc = pollUntil(fd, POLLIN, deadline);
      if (rc < 0) return errnoStatus("poll", what);
      if (rc == 0)
        return timeoutError(what + ": timed out after receiving " + std::to_string(done) +
                            " of " + std::to_string(len) + " bytes");
      continue;
    }
    if (peerGoneError(err))
      return remoteError(what + " closed the connection (" + std::strerror(err) + ")");
    return errnoStatus("recv", what, err);
  }
  return Status();
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

Fd::~Fd() { reset(); }

void Fd::reset(int fd) {
  // close() is not retried on EINTR: on Linux the descriptor is released regardless.
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

}  // namespace chorus::net
