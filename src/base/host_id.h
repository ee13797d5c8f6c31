// This host's identity, and the hash it is made with. Leaf utilities: the bootstrap (which
// tells ranks apart by host), the topology detectors and the communicator use them.
//
// Host identity decides which ranks share memory (shm transport, node-aware algorithms). It is a
// hash of the kernel's boot id and the hostname: the boot id tells apart containers that share a
// hostname on different machines, the hostname tells apart machines cloned from one image.
// CHORUS_HOST_ID overrides it (any string, hashed) for the cases where that is wrong, e.g.
// network namespaces on one machine that must pretend to be separate hosts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace chorus {

// A 64-bit non-cryptographic hash (FNV-1a over the bytes, then a 64-bit finalizer so that
// short inputs still spread over all bits). Stable across builds and hosts: it is used for
// values that ranks compare with each other (host ids, derived secrets, id checksums).
uint64_t hash64(const void* data, size_t len, uint64_t seed = 0);
inline uint64_t hash64(std::string_view s, uint64_t seed = 0) {
  return hash64(s.data(), s.size(), seed);
}

// gethostname(), or "unknown-host" when it fails.
std::string localHostname();
// hash64(CHORUS_HOST_ID) when set, else hash64(boot id + "/" + hostname).
uint64_t localHostId();

}  // namespace chorus
