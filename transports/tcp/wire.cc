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
  EndpointBlob b{kBlobVersion};
  const std::vector<uint8_t> a = net::encodeAddress(addr);
  b.insert(b.end(), a.begin(), a.end());
  return b;
}

StatusOr<net::SockAddr> decodeEndpoint(const EndpointBlob& blob) {
  if (blob.empty() || blob[0] != kBlobVersion)
    return invalidArgument("malformed tcp endpoint (" + std::to_string(blob.size()) +
                           " bytes): " + (blob.empty() ? "empty" : "unknown version"));
  auto addr = net::decodeAddress(blob.data() + 1, blob.size() - 1);
  if (!addr.ok())
    return invalidArgument("malformed tcp endpoint (" + std::to_string(blob.size()) +
                           " bytes): " + addr.status().message());
  return addr;
}

}  // namespace chorus::tcp
