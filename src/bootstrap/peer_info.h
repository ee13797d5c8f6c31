// PeerInfo on the wire, and this host's identity.
//
// Every rank serializes its PeerInfo (transports/transport.h) and the bootstrap all-gathers the
// bytes. The encoding is versioned and every length is checked against fixed limits, so bytes
// from a rank running another chorus version, or damaged bytes, are refused with kInvalidUsage
// rather than read out of bounds or turned into a huge allocation.
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
#include <vector>

#include "src/base/status.h"
#include "transports/transport.h"

namespace chorus::bootstrap {

std::vector<uint8_t> serializePeerInfo(const PeerInfo& info);
StatusOr<PeerInfo> deserializePeerInfo(const uint8_t* data, size_t len);
inline StatusOr<PeerInfo> deserializePeerInfo(const std::vector<uint8_t>& bytes) {
  return deserializePeerInfo(bytes.data(), bytes.size());
}

// gethostname(), or "unknown-host" when it fails.
std::string localHostname();
// hash64(CHORUS_HOST_ID) when set, else hash64(boot id + "/" + hostname).
uint64_t localHostId();

}  // namespace chorus::bootstrap
