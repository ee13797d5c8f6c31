#include "src/base/host_id.h"

#include <unistd.h>

#include <climits>
#include <fstream>

#include "src/base/config.h"

namespace chorus {
namespace {

uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

}  // namespace

uint64_t hash64(const void* data, size_t len, uint64_t seed) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = 0xcbf29ce484222325ull ^ mix64(seed);
  for (size_t i = 0; i < len; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  // Length folded in so that inputs differing only by trailing zero bytes differ.
  return mix64(h ^ len);
}

std::string localHostname() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "unknown-host";
  return buf;
}

uint64_t localHostId() {
  if (config::isSet("CHORUS_HOST_ID")) return hash64(config::getString("CHORUS_HOST_ID"));
  std::string bootId;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  if (f) std::getline(f, bootId);  // missing (non-Linux, masked /proc): the hostname decides
  return hash64(bootId + "/" + localHostname());
}

}  // namespace chorus
