#include "transports/tcp/wire.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>

namespace chorus::tcp {
namespace {

constexpr uint8_t kBlobVersion = 1;

}  // namespace

namespace wire {

std::optional<AckResult> judgeHello(const uint8_t in[kHelloBytes], uint64_t commId, int myRank,
                                    Hello* h) {
  if (!decodeHello(in, h)) return std::nullopt;
  if (h->version != kProtocolVersion) return AckResult::kWrongVersion;
  if (h->commId != commId) return AckResult::kWrongCommunicator;
  // Only a lower rank dials: a hello from ourselves or above is not one we can be waiting for.
  if (h->toRank != myRank || h->fromRank < 0 || h->fromRank >= myRank) return AckResult::kWrongRank;
  return AckResult::kAccepted;
}

}  // namespace wire

EndpointBlob encodeEndpoint(const net::SockAddr& addr) {
  EndpointBlob b;
  b.push_back(kBlobVersion);
  const uint16_t port = addr.port();
  if (addr.family() == AF_INET6) {
    const auto* s6 = reinterpret_cast<const sockaddr_in6*>(&addr.storage);
    b.push_back(6);
    b.push_back(static_cast<uint8_t>(port >> 8));
    b.push_back(static_cast<uint8_t>(port));
    b.insert(b.end(), s6->sin6_addr.s6_addr, s6->sin6_addr.s6_addr + 16);
    uint8_t scope[4];
    wire::put32(scope, s6->sin6_scope_id);
    b.insert(b.end(), scope, scope + 4);
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

StatusOr<net::SockAddr> decodeEndpoint(const EndpointBlob& blob) {
  auto bad = [&](const char* why) {
    return invalidArgument("malformed tcp endpoint (" + std::to_string(blob.size()) +
                           " bytes): " + why);
  };
  if (blob.size() < 4) return bad("too short");
  if (blob[0] != kBlobVersion) return bad("unknown version");
  const uint16_t port = static_cast<uint16_t>((blob[2] << 8) | blob[3]);
  net::SockAddr a;
  if (blob[1] == 4) {
    if (blob.size() != 8) return bad("wrong length for IPv4");
    auto* s4 = reinterpret_cast<sockaddr_in*>(&a.storage);
    s4->sin_family = AF_INET;
    std::memcpy(&s4->sin_addr.s_addr, blob.data() + 4, 4);
    a.len = sizeof(sockaddr_in);
  } else if (blob[1] == 6) {
    if (blob.size() != 24) return bad("wrong length for IPv6");
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
    s6->sin6_family = AF_INET6;
    std::memcpy(s6->sin6_addr.s6_addr, blob.data() + 4, 16);
    s6->sin6_scope_id = wire::get32(blob.data() + 20);
    a.len = sizeof(sockaddr_in6);
  } else {
    return bad("unknown address family");
  }
  if (port == 0) return bad("port 0");
  a.setPort(port);
  return a;
}

}  // namespace chorus::tcp
