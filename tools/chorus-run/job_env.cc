#include "tools/chorus-run/job_env.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
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

// Binds `port` (0: the kernel's choice) on every address of `family` as the bootstrap store binds
// it (SO_REUSEADDR, so an earlier job's connection in TIME_WAIT does not stand in the way) and
// returns the bound port, or -1 with errno set.
int bindAny(int family, uint16_t port) {
  sockaddr_storage addr{};
  socklen_t len = 0;
  if (family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_any;
    a->sin6_port = htons(port);
    len = sizeof(sockaddr_in6);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_ANY);
    a->sin_port = htons(port);
    len = sizeof(sockaddr_in);
  }
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int bound = -1;
  sockaddr_storage got{};
  socklen_t gotLen = sizeof(got);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&got), &gotLen) == 0) {
    bound = ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&got)->sin6_port
                                     : reinterpret_cast<sockaddr_in*>(&got)->sin_port);
  }
  int saved = errno;
  close(fd);
  errno = saved;
  return bound;
}

}  // namespace

int pickUnusedPort(int family) {
  unsigned ephemeralStart = 32768;  // the kernel's default, when the setting cannot be read
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    unsigned lo = 0, hi = 0;
    if (std::fscanf(f, "%u %u", &lo, &hi) == 2 && lo > 0 && lo <= 65535) ephemeralStart = lo;
    std::fclose(f);
  }
  if (ephemeralStart >= 2048) {
    // [start/2, start): 16384 candidates with the default range, none of them the kernel's.
    const unsigned first = ephemeralStart / 2, count = ephemeralStart - first;
    unsigned start = 0;
    if (getrandom(&start, sizeof start, 0) != static_cast<ssize_t>(sizeof start))
      start = static_cast<unsigned>(getpid()) * 2654435761u;
    for (unsigned i = 0; i < count; ++i) {
      const auto port = static_cast<uint16_t>(first + (start + i) % count);
      if (bindAny(family, port) == port) return port;
    }
  }
  return bindAny(family, 0);
}

int pickFreePort(const std::string& host) {
  std::string h = host;
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int family = AF_INET;
  if (getaddrinfo(h.c_str(), nullptr, &hints, &res) == 0) {
    if (res != nullptr && res->ai_family == AF_INET6) family = AF_INET6;
    freeaddrinfo(res);
  }
  int port = pickUnusedPort(family);
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
