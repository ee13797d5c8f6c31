#include "tools/chorus-run/job_env.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace chorus::run {

std::string formatRoot(const std::string& host, int port) {
  bool bareIpv6 = host.find(':') != std::string::npos && host.front() != '[';
  std::string h = bareIpv6 ? "[" + host + "]" : host;
  return h + ":" + std::to_string(port);
}

std::string makeJobSecret() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    }
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * sizeof(bytes));
  for (unsigned char b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 0xf]);
  }
  return out;
}

namespace {

// Binds an ephemeral port on `addr` and returns it, or -1 with errno set.
int bindEphemeral(const sockaddr* addr, socklen_t len) {
  int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int port = -1;
  sockaddr_storage bound{};
  socklen_t boundLen = sizeof(bound);
  if (bind(fd, addr, len) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &boundLen) == 0) {
    if (bound.ss_family == AF_INET6) {
      port = ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
    } else {
      port = ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    }
  }
  int saved = errno;
  close(fd);
  errno = saved;
  return port;
}

}  // namespace

int pickFreePort(const std::string& host) {
  std::string h = host;
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(h.c_str(), nullptr, &hints, &res) == 0) {
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      int port = bindEphemeral(ai->ai_addr, ai->ai_addrlen);
      if (port > 0) {
        freeaddrinfo(res);
        return port;
      }
    }
    freeaddrinfo(res);
  }
  // The host is not one of ours (or does not resolve): a port free on every IPv4 interface.
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  int port = bindEphemeral(reinterpret_cast<sockaddr*>(&any), sizeof(any));
  if (port <= 0) {
    throw std::runtime_error(std::string("cannot bind a TCP port to pick a free one: bind: ") +
                             std::strerror(errno));
  }
  return port;
}

std::vector<std::pair<std::string, std::string>> rankEnvironment(const std::string& root,
                                                                 const std::string& secret,
                                                                 int localRank, int localRanks,
                                                                 int rankOffset, int worldSize) {
  if (worldSize < 0) worldSize = localRanks;
  return {
      {kEnvRoot, root},
      {kEnvRank, std::to_string(rankOffset + localRank)},
      {kEnvNranks, std::to_string(worldSize)},
      {kEnvLocalRank, std::to_string(localRank)},
      {kEnvLocalNranks, std::to_string(localRanks)},
      {kEnvJobSecret, secret},
  };
}

}  // namespace chorus::run
