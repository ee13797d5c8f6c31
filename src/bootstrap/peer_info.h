// PeerInfo: what every rank tells every other at init, on the wire; and this host's identity.
//
// Every rank serializes its PeerInfo and the bootstrap all-gathers the bytes. The encoding is versioned and every length is checked against fixed limits, so bytes
// from a rank running another chorus version, or damaged bytes, are refused with kInvalidUsage
// rather than read out of bounds or turned into a huge allocation.
//
// Host identity (the hostId field) is src/base/host_id.h's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "src/base/status.h"

namespace chorus {

// What every rank tells every other at init (serialized by the bootstrap).
struct PeerInfo {
  int rank = -1;
  uint64_t hostId = 0;     // equal for ranks on the same host (boot id + hostname, or CHORUS_HOST_ID)
  int32_t pid = 0;
  uint64_t pidNamespace = 0;  // inode of /proc/self/ns/pid: pid liveness checks need the same one
  std::string hostname;
  // Where the rank runs on its host (src/topology/layout.h): NUMA node of its CPU affinity,
  // CUDA device, nearest NIC (index among the host's NICs); -1 when unknown or none.
  int32_t numa = -1;
  int32_t gpu = -1;
  int32_t nic = -1;
  // Where this rank's heartbeats come from (net::encodeAddress; src/core/heartbeat.h), empty
  // when heartbeats are off.
  std::vector<uint8_t> heartbeat;
  // Transport name -> what its listen() published (transports/transport.h).
  std::map<std::string, std::vector<uint8_t>> endpoints;
};

}  // namespace chorus

namespace chorus::bootstrap {

std::vector<uint8_t> serializePeerInfo(const PeerInfo& info);
StatusOr<PeerInfo> deserializePeerInfo(const uint8_t* data, size_t len);
inline StatusOr<PeerInfo> deserializePeerInfo(const std::vector<uint8_t>& bytes) {
  return deserializePeerInfo(bytes.data(), bytes.size());
}

}  // namespace chorus::bootstrap
