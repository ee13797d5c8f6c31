// The consistency header: what each rank tells each message peer about a collective call before
// any data (collective, sequence number, count, type, op, root, algorithm, quantization, and the
// bytes and messages each side will send the other), and the check of a peer's header against
// ours. A header arrives from the network as 112 raw bytes, so checkConsistencyHeader must make
// sense of any bytes at all: the libFuzzer target fuzz/consistency_fuzz.cc feeds it arbitrary
// headers. Host-window headers (shared memory, WindowHeader in transports/transport.h) are
// checked in the executor.
#pragma once

#include <cstdint>
#include <string>

#include "algorithms/common/schedule.h"
#include "algorithms/kernels/dtype.h"
#include "algorithms/kernels/quantize_ops.h"
#include "src/base/status.h"

namespace chorus::exec {

/// The header each rank sends each message peer before a plan's data (fixed layout, 112 bytes).
struct WireHeader {
  uint32_t magic = 0;
  uint16_t version = 0;
  uint8_t coll = 0;
  uint8_t dtype = 0;
  uint8_t op = 0;  // the user's op (chorusRedOp_t value, 0xff when none)
  uint8_t flags = 0;  // not checked: kHeaderInSegments (transports/transport.h)
  uint8_t pad[2] = {};
  int32_t root = -1;
  uint64_t seq = 0;
  uint64_t count = 0;
  uint64_t bytesToPeer = 0;
  uint64_t bytesFromPeer = 0;
  uint32_t msgsToPeer = 0;
  uint32_t msgsFromPeer = 0;
  char algo[32] = {};
  uint64_t quantShape = 0;  // quantized calls: kernels::quantWords(config), else 0
  uint64_t quantSeed = 0;
  uint64_t reserved = 0;
};
static_assert(sizeof(WireHeader) == 112);

inline constexpr uint32_t kHeaderMagic = 0x53524843;  // "CHRS"
inline constexpr uint16_t kHeaderVersion = 3;

/// What the caller says about the operation, for the headers and for messages.
struct OpIdentity {
  sched::Coll coll = sched::Coll::kAllReduce;
  uint64_t seq = 0;  ///< communicator-wide collective number; 0 for point-to-point
  uint64_t count = 0;
  DataType dtype = DataType::kFloat32;
  int userOp = -1;   ///< chorusRedOp_t, -1 when the collective has no reduction
  int root = -1;
  /// Quantized collectives: the call's config (its shape must be the one the plan was built
  /// for; the seed and rounding apply to this run). Null otherwise.
  const kernels::QuantConfig* quant = nullptr;
  /// Whether this rank's input and output lie in chorusMemAlloc segments, for its headers
  /// (kHeaderInSegments), or -1 when the call does not ask: the executor then learns nothing
  /// of its peers' buffers (Executor::segmentsSeen()).
  int8_t segments = -1;
};

/// "allreduce(count=100, float32, sum) #7 [ring]"
std::string describeCall(const OpIdentity& id, const char* algo);

/// The user's op as the headers carry it: 0xff for none, larger ops clamped to 0xfe.
uint8_t wireOp(int userOp);

/// This rank's header for `peer` of the call `id` on algorithm `algo` (cut to 31 characters),
/// which sends `bytesTo` bytes in `msgsTo` messages to the peer and receives `bytesFrom` in
/// `msgsFrom`.
WireHeader makeConsistencyHeader(const OpIdentity& id, const char* algo, uint64_t bytesTo,
                                 uint64_t bytesFrom, uint32_t msgsTo, uint32_t msgsFrom);

/// `theirs` (as received from rank `peer`) against `mine` (this rank `rank`'s header for that
/// peer, describing the call `id` on `algo`). kInvalidUsage naming both ranks' calls when they
/// differ, naming the traffic when the byte or message counts disagree, or saying the header is
/// malformed (wrong magic or version). Any bytes in `theirs` are safe.
Status checkConsistencyHeader(const WireHeader& mine, const WireHeader& theirs, int rank, int peer,
                              const OpIdentity& id, const char* algo);

}  // namespace chorus::exec
