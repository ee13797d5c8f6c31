#include "src/bootstrap/unique_id.h"

#include "src/base/host_id.h"

#include <arpa/inet.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "src/bootstrap/wire.h"

namespace chorus::bootstrap {
namespace {

constexpr uint8_t kMagic[4] = {'C', 'H', 'R', 'S'};
constexpr uint16_t kIdVersion = 1;
constexpr size_t kChecksummed = 48;  // bytes covered by the checksum
constexpr size_t kUsed = 56;         // bytes after this must be zero
static_assert(kUsed <= CHORUS_UNIQUE_ID_BYTES);



}  // namespace

Secret deriveSecret(std::string_view material) {
  Secret s{};
  wire::storeLe(s.data(), hash64(material, 0x6368'6f72'7573'0001ull), 8);
  wire::storeLe(s.data() + 8, hash64(material, 0x6368'6f72'7573'0002ull), 8);
  return s;
}

StatusOr<Secret> randomSecret() {
  Secret s{};
  size_t got = 0;
  while (got < s.size()) {
    ssize_t n = getrandom(s.data() + got, s.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errnoStatus("getrandom", "job secret");
    }
    got += static_cast<size_t>(n);
  }
  return s;
}

void encodeUniqueId(const JobId& job, chorusUniqueId* out) {
  uint8_t* b = reinterpret_cast<uint8_t*>(out->internal);
  std::memset(b, 0, CHORUS_UNIQUE_ID_BYTES);
  std::memcpy(b, kMagic, 4);
  wire::storeLe(b + 4, kIdVersion, 2);
  if (job.root.family() == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&job.root.storage);
    wire::storeLe(b + 6, 6, 2);
    wire::storeLe(b + 8, ntohs(a->sin6_port), 2);
    wire::storeLe(b + 12, a->sin6_scope_id, 4);
    std::memcpy(b + 16, &a->sin6_addr, 16);
  } else {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&job.root.storage);
    wire::storeLe(b + 6, 4, 2);
    wire::storeLe(b + 8, ntohs(a->sin_port), 2);
    std::memcpy(b + 16, &a->sin_addr, 4);
  }
  std::memcpy(b + 32, job.secret.data(), 16);
  wire::storeLe(b + kChecksummed, hash64(b, kChecksummed), 8);
}

StatusOr<JobId> decodeUniqueId(const chorusUniqueId& id) {
  const uint8_t* b = reinterpret_cast<const uint8_t*>(id.internal);
  bool allZero = true;
  for (size_t i = 0; i < CHORUS_UNIQUE_ID_BYTES; ++i) allZero = allZero && b[i] == 0;
  if (allZero)
    return invalidUsage(
        "the unique id is all zeros: it was not filled by chorusGetUniqueId, or was not "
        "broadcast to this rank");
  if (std::memcmp(b, kMagic, 4) != 0)
    return invalidUsage(
        "not a chorus unique id (bad magic): the bytes were not produced by chorusGetUniqueId "
        "or were damaged on the way to this rank");
  uint16_t version = static_cast<uint16_t>(wire::loadLe(b + 4, 2));
  if (version != kIdVersion)
    return invalidUsage("unique id has format version " + std::to_string(version) +
                        ", this chorus understands version " + std::to_string(kIdVersion) +
                        ": all ranks must run the same chorus version");
  if (wire::loadLe(b + kChecksummed, 8) != hash64(b, kChecksummed))
    return invalidUsage("unique id is corrupted (checksum mismatch)");
  // Bytes the layout leaves unused must be zero, so an id has one spelling and nothing in it
  // goes unchecked: the padding after the port, and for IPv4 the scope id and the 12 bytes
  // after the address.
  auto zero = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i)
      if (b[i] != 0) return false;
    return true;
  };
  if (!zero(kUsed, CHORUS_UNIQUE_ID_BYTES) || !zero(10, 12))
    return invalidUsage("unique id is corrupted (reserved bytes are not zero)");

  JobId job;
  uint16_t family = static_cast<uint16_t>(wire::loadLe(b + 6, 2));
  uint16_t port = static_cast<uint16_t>(wire::loadLe(b + 8, 2));
  if (port == 0) return invalidUsage("unique id is corrupted (port 0)");
  if (family == 4) {
    if (!zero(12, 16) || !zero(20, 32))
      return invalidUsage("unique id is corrupted (an IPv4 id with bytes set beyond its address)");
    auto* a = reinterpret_cast<sockaddr_in*>(&job.root.storage);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    std::memcpy(&a->sin_addr, b + 16, 4);
    job.root.len = sizeof(sockaddr_in);
  } else if (family == 6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&job.root.storage);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    a->sin6_scope_id = static_cast<uint32_t>(wire::loadLe(b + 12, 4));
    std::memcpy(&a->sin6_addr, b + 16, 16);
    job.root.len = sizeof(sockaddr_in6);
  } else {
    return invalidUsage("unique id is corrupted (address family " + std::to_string(family) + ")");
  }
  std::memcpy(job.secret.data(), b + 32, 16);
  return job;
}

std::string secretToHex(const Secret& secret) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(32);
  for (uint8_t v : secret) {
    s.push_back(kDigits[v >> 4]);
    s.push_back(kDigits[v & 15]);
  }
  return s;
}

StatusOr<Secret> secretFromHex(std::string_view hex, std::string_view what) {
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() != 32)
    return invalidArgument(std::string(what) + " must be 32 hex digits (128 bits), got " +
                           std::to_string(hex.size()) + " characters");
  Secret s{};
  for (size_t i = 0; i < 16; ++i) {
    int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return invalidArgument(std::string(what) + " must be 32 hex digits (128 bits), found '" +
                             std::string(1, hex[hi < 0 ? 2 * i : 2 * i + 1]) + "'");
    s[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return s;
}

}  // namespace chorus::bootstrap
