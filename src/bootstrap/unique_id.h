// What identifies a job: the address of its rendezvous store and a 128-bit secret.
//
// chorusGetUniqueId packs a JobId into the public 128-byte chorusUniqueId; the application moves
// those bytes to every rank (MPI broadcast, a file, ...). Because they travel through user code,
// the encoding carries a magic, a version and a checksum: bytes that are not a chorus id, come
// from an incompatible chorus version, or were damaged on the way are rejected with a message
// saying which, instead of sending ranks to connect to a random address.
//
// Layout of the 128 bytes (little-endian):
//   [0,4)   magic "CHRS"          [4,6)   version (1)
//   [6,8)   family: 4 or 6        [8,10)  port
//   [10,12) zero                  [12,16) IPv6 scope id
//   [16,32) address (IPv4 uses the first 4 bytes)
//   [32,48) secret                [48,56) hash64 of bytes [0,48)
//   [56,128) zero
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <chorus/chorus.h>

#include "src/base/socket_util.h"
#include "src/base/host_id.h"
#include "src/base/status.h"

namespace chorus::bootstrap {

using Secret = std::array<uint8_t, 16>;

struct JobId {
  net::SockAddr root;  // where the job's store listens
  Secret secret{};     // clients must present it before the store answers anything
};

// 16 bytes from getrandom(); fails only if the kernel cannot provide randomness.
StatusOr<Secret> randomSecret();

void encodeUniqueId(const JobId& job, chorusUniqueId* out);
// kInvalidUsage for bytes that are not a valid id of this version (the message says why).
StatusOr<JobId> decodeUniqueId(const chorusUniqueId& id);

// A secret derived deterministically from `material` (two hash64 with different seeds).
// Anyone who knows the material can compute it: see env.h for when that is acceptable.
Secret deriveSecret(std::string_view material);

// 32 lowercase hex digits, and back (kInvalidArgument naming `what` on anything else).
std::string secretToHex(const Secret& secret);
StatusOr<Secret> secretFromHex(std::string_view hex, std::string_view what);

}  // namespace chorus::bootstrap
