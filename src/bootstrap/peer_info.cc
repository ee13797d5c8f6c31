#include "src/bootstrap/peer_info.h"

#include <unistd.h>

#include <climits>
#include <fstream>

#include "src/bootstrap/unique_id.h"
#include "src/bootstrap/wire.h"
#include "src/base/config.h"

namespace chorus::bootstrap {
namespace {

constexpr uint32_t kMagic = 0x49504843;  // "CHPI" little-endian
constexpr uint16_t kVersion = 3;
// Limits far above real values (hostnames are at most 64 bytes on Linux, a transport blob is an
// address or a few handles) and far below what would hurt if a damaged length were believed.
constexpr size_t kMaxHostname = 1024;
constexpr uint32_t kMaxEndpoints = 256;
constexpr size_t kMaxTransportName = 64;
constexpr size_t kMaxBlob = 64 << 20;
constexpr size_t kMaxAddress = 64;

Status truncated(const wire::Reader& r, const char* field) {
  return invalidUsage("PeerInfo is truncated or malformed at byte " + std::to_string(r.offset()) +
                      " (reading " + field + ")");
}

}  // namespace

std::vector<uint8_t> serializePeerInfo(const PeerInfo& info) {
  std::vector<uint8_t> out;
  wire::Writer w(&out);
  w.u32(kMagic);
  w.u16(kVersion);
  w.i32(info.rank);
  w.u64(info.hostId);
  w.i32(info.pid);
  w.u64(info.pidNamespace);
  w.str(info.hostname);
  w.i32(info.numa);
  w.i32(info.gpu);
  w.i32(info.nic);
  w.blob(info.heartbeat);
  w.u32(static_cast<uint32_t>(info.endpoints.size()));
  for (const auto& [name, blob] : info.endpoints) {
    w.str(name);
    w.blob(blob);
  }
  return out;
}

StatusOr<PeerInfo> deserializePeerInfo(const uint8_t* data, size_t len) {
  wire::Reader r(data, len);
  uint32_t magic;
  uint16_t version;
  if (!r.u32(&magic) || magic != kMagic)
    return invalidUsage("not a serialized PeerInfo (bad magic; " + std::to_string(len) +
                        " bytes)");
  if (!r.u16(&version)) return truncated(r, "version");
  if (version != kVersion)
    return invalidUsage("PeerInfo has format version " + std::to_string(version) +
                        ", this chorus understands version " + std::to_string(kVersion) +
                        ": all ranks must run the same chorus version");
  PeerInfo info;
  if (!r.i32(&info.rank)) return truncated(r, "rank");
  if (!r.u64(&info.hostId)) return truncated(r, "host id");
  if (!r.i32(&info.pid)) return truncated(r, "pid");
  if (!r.u64(&info.pidNamespace)) return truncated(r, "pid namespace");
  if (!r.str(&info.hostname, kMaxHostname)) return truncated(r, "hostname");
  if (!r.i32(&info.numa)) return truncated(r, "numa node");
  if (!r.i32(&info.gpu)) return truncated(r, "gpu");
  if (!r.i32(&info.nic)) return truncated(r, "nic");
  if (info.numa < -1 || info.gpu < -1 || info.nic < -1)
    return invalidUsage("PeerInfo of rank " + std::to_string(info.rank) + " has a negative place (numa " +
                        std::to_string(info.numa) + ", gpu " + std::to_string(info.gpu) + ", nic " +
                        std::to_string(info.nic) + ")");
  if (!r.blob(&info.heartbeat, kMaxAddress)) return truncated(r, "heartbeat address");
  uint32_t count;
  if (!r.u32(&count)) return truncated(r, "endpoint count");
  if (count > kMaxEndpoints)
    return invalidUsage("PeerInfo lists " + std::to_string(count) + " transport endpoints (at most " +
                        std::to_string(kMaxEndpoints) + ")");
  for (uint32_t i = 0; i < count; ++i) {
    std::string name;
    std::vector<uint8_t> blob;
    if (!r.str(&name, kMaxTransportName)) return truncated(r, "transport name");
    if (!r.blob(&blob, kMaxBlob)) return truncated(r, "endpoint blob");
    if (info.endpoints.count(name))
      return invalidUsage("PeerInfo lists transport endpoint '" + name + "' twice");
    info.endpoints.emplace(std::move(name), std::move(blob));
  }
  if (!r.done())
    return invalidUsage("PeerInfo has " + std::to_string(r.remaining()) +
                        " unexpected bytes after its end");
  return info;
}

}  // namespace chorus::bootstrap
