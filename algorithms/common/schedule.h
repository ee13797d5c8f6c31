// A schedule: what one rank does during one collective, as data.
//
// An algorithm never touches a socket. Given the collective's description and (rank, nranks) it
// emits an ordered list of steps over byte ranges of named buffers. The program order is the
// meaning: running the steps one after another, with each recv waiting for the matching send of
// its peer (FIFO per ordered pair), gives the right result. finalize() derives from that order
// the dependencies that an executor must respect (read-after-write, write-after-read,
// write-after-write on overlapping ranges, plus FIFO order of sends to / recvs from one peer), so
// an executor can run independent steps concurrently — receive, reduce and send of different
// chunks overlap — and still mean the same thing. The symbolic checker runs the program order.
//
// Step semantics (⊕ is the collective's reduction operator applied element-wise):
//   kSend       peer, a          : send bytes of a to peer
//   kRecv       peer, dst        : receive into dst
//   kRecvReduce peer, a, dst     : dst = a ⊕ (message from peer); a may equal dst
//   kCopy       a, dst           : dst = a (ranges of equal size, non-overlapping or identical)
//   kReduce     a, b, dst        : dst = a ⊕ b; dst may equal a or b
//
// One-sided steps, for transports that can read a peer's memory (shared memory through
// cross-memory attach, CUDA IPC, RDMA). `a` names a range of the *peer's* buffers (its input,
// output or scratch, as laid out by the peer's own call), read at the moment the step runs:
//   kGet        peer, a, dst     : dst = peer's a
//   kGetReduce  peer, a, b, dst  : dst = b ⊕ peer's a; b may equal dst
//   kNotify     peer             : a zero-byte message to peer meaning "every step before this one
//                                  in program order is done" (a full fence)
//   kWait       peer             : receive that message; no later step starts before it completes
// A peer's buffers are readable from the moment its consistency header arrives (the header
// carries their addresses; the peer has entered the call, so its input is ready). Anything else
// — "my reduced slice is ready", "I have finished reading your buffers, you may return" — is
// said with kNotify / kWait pairs, and the checker proves that no get races with a write of the
// bytes it reads (on the owner's side) and that every rank finishes only after all reads of its
// buffers are done.
//
// The host window. When every rank of a communicator is on one host, a transport may offer a
// window: memory every rank maps, one region per rank (kWindow), which persists from call to
// call. A rank writes its own region with local steps; peers read it with kGet / kGetReduce
// whose `a` names kWindow. Window algorithms synchronize through the window too, not with
// messages:
//   kSignal               : "every step before this one is done" (a full fence), made once and
//                           seen by every rank of the window
//   kAwait  peer, target  : wait until peer has made `target` signals in this call (1-based);
//                           no later step starts before it (a full fence)
// A rank's first signal of a call publishes its consistency header with it, so no window
// algorithm awaits anything before it has signalled once. Why regions can be rewritten call
// after call without a rank overwriting what a slower peer still reads is the executor's
// protocol (src/exec/executor.h): the region alternates between two halves by the parity of
// the call number, and a rank enters call s only once every peer has entered call s-1.
//
// Quantization (ZeRO++-style collectives; algorithms/kernels/quantize.h is the format). A
// quantized block is the packed form of `count` elements: quantizedSize(count) bytes of group
// records, which only these steps read or write as such; sends, receives, copies and gets move
// its bytes like any others. The call's quantization config (CollDesc::quant) fixes the sizes;
// `quant` carries the rest:
//   kQuantize   a, dst     : dst = Q(a), a being quant.count elements of the call's type;
//                            quant.index is the stream index of a's first element (stochastic
//                            rounding: the same element gets the same random number whatever
//                            the algorithm or chunking)
//   kDequantize a, dst     : dst = D(a_0) + ... + D(a_{k-1}), k = quant.sources blocks of
//                            quant.count elements each, back to back in a (a.bytes = k times
//                            the block size), summed in float32 in that order and rounded once
//                            into the call's type (k = 1: a plain dequantize)
//   kRequantize a, dst     : dst = Q(D(a_0) + ... + D(a_{k-1})), the sum as kDequantize forms
//                            it; quant.index as for kQuantize
// None may overlap its destination with a source. The sum is the collective's (avg divides
// afterwards, as everywhere); the checker proves the data flow and precision is tested
// numerically.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/kernels/dtype.h"
#include "algorithms/kernels/quantize_ops.h"

namespace chorus::sched {

// Buffer ids. Buffers >= kFirstUserBuf are extra user buffers (grouped point-to-point).
using BufId = uint16_t;
inline constexpr BufId kInput = 0;
inline constexpr BufId kOutput = 1;
inline constexpr BufId kScratch = 2;
inline constexpr BufId kWindow = 3;  // this rank's region of the host window (see above)
inline constexpr BufId kFirstUserBuf = 4;

struct Range {
  BufId buf = kInput;
  uint64_t offset = 0;  // bytes
  uint64_t bytes = 0;
};

enum class StepKind : uint8_t {
  kSend,
  kRecv,
  kRecvReduce,
  kCopy,
  kReduce,
  kGet,
  kGetReduce,
  kNotify,
  kWait,
  kSignal,
  kAwait,
  kQuantize,
  kDequantize,
  kRequantize,
};
// True for the steps that read a peer's memory (kGet, kGetReduce).
inline bool isOneSided(StepKind k) { return k == StepKind::kGet || k == StepKind::kGetReduce; }
// True for the steps that synchronize through the host window (kSignal, kAwait).
inline bool isWindowSync(StepKind k) { return k == StepKind::kSignal || k == StepKind::kAwait; }
// True for the steps that encode or decode quantized blocks.
inline bool isQuantStep(StepKind k) {
  return k == StepKind::kQuantize || k == StepKind::kDequantize || k == StepKind::kRequantize;
}
const char* stepKindName(StepKind k);

// What a quantization step needs beyond its ranges (see the top of this file).
struct QuantArgs {
  uint64_t count = 0;    // elements per block
  uint64_t index = 0;    // kQuantize, kRequantize: stream index of the first element
  uint32_t sources = 1;  // kDequantize, kRequantize: blocks summed
};

struct Step {
  StepKind kind = StepKind::kCopy;
  int32_t peer = -1;
  Range a;
  Range b;
  Range dst;
  uint32_t target = 0;  // kAwait: the peer's signal to wait for (1-based)
  QuantArgs quant;      // quantization steps only
  // Filled by finalize(): indices of earlier steps this one waits for.
  std::vector<uint32_t> deps;
};

// The collectives, as the header check and the cache key name them.
enum class Coll : uint8_t {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kAllToAllv,
  kGather,
  kScatter,
  kBarrier,
  kSendRecv,  // grouped point-to-point
};
const char* collName(Coll c);

// The host window as builders see it: each rank's region (kWindow) holds a slot for a whole
// small message followed by two areas for streaming larger ones in rounds. All zero when the
// communicator has no window.
struct WindowGeometry {
  uint64_t slotBytes = 0;
  uint64_t roundBytes = 0;
  bool present() const { return slotBytes > 0; }
  uint64_t bytes() const { return slotBytes + 2 * roundBytes; }
  auto operator<=>(const WindowGeometry&) const = default;
};

// Everything a builder needs. Counts are in elements; builders emit byte ranges.
struct CollDesc {
  Coll coll = Coll::kAllReduce;
  uint64_t count = 0;     // allreduce/bcast/reduce: count; allgather/gather: sendcount;
                          // reducescatter/scatter: recvcount; alltoall: per-peer count
  size_t elemSize = 4;
  int root = 0;
  bool inPlace = false;   // NCCL's in-place convention for this collective
  uint64_t chunkBytes = 1 << 20;  // pipelining granularity (rounded down to whole elements)
  // alltoallv only, this rank's view (nranks entries each, in elements):
  std::vector<uint64_t> sendCounts, sendDispls, recvCounts, recvDispls;
  // Host of every rank (nranks entries), hosts numbered in the order of their lowest rank, as
  // src/topology's Layout numbers them; equal on every rank. Empty (or of the wrong size) means
  // one host or unknown: host-aware builders (algorithms/hier, the double binary tree) then
  // treat every rank alike and build their flat form. Ranks of one host need not be contiguous.
  std::vector<int> hostOf;
  // The host window (window algorithms only; equal on every rank).
  WindowGeometry window;
  // Quantized collectives: the config, equal on every rank (its shape sets block sizes; the
  // seed and rounding matter only when the steps run). Empty for every other call.
  std::optional<kernels::QuantConfig> quant;
  // Every rank's input and output lie in chorusMemAlloc segments, which peers on the host read
  // as plain memory (learned from the headers of an earlier call, equal on every rank). Only
  // the tuner reads it: one-sided reads are then priced as memory, not cross-memory attach.
  bool segments = false;
};

class Schedule {
 public:
  std::string algo;          // "ring", "chain", "pairwise", ... (for stats and logs)
  std::vector<Step> steps;
  uint64_t scratchBytes = 0;
  // Peers this rank exchanges the consistency header with: every peer in a step, plus peers the
  // algorithm talks to even when there is no data (count 0), so mismatches still surface.
  std::vector<int> peers;
  // In-place aliasing, as byte offsets: when set, one buffer lives inside the other. At most one
  // is set. Builders set it from CollDesc::inPlace; finalize() uses it for dependencies and the
  // checker uses it to lay out memory exactly as the user's call does.
  int64_t inputInOutput = -1;  // input starts at this offset of output (allgather)
  int64_t outputInInput = -1;  // output starts at this offset of input (reducescatter, allreduce)

  // Step builders. Data steps with zero bytes are dropped (their peer is still recorded).
  void send(int peer, Range a);
  void recv(int peer, Range dst);
  void recvReduce(int peer, Range a, Range dst);
  void copy(Range a, Range dst);
  void reduce(Range a, Range b, Range dst);
  // One-sided steps (see the top of this file); `remote` is a range of the peer's buffers.
  void get(int peer, Range remote, Range dst);
  void getReduce(int peer, Range remote, Range b, Range dst);
  void notify(int peer);
  void wait(int peer);
  // Window synchronization (see the top of this file). Peers awaited are not added to `peers`:
  // those are the message peers.
  void signal();
  void await(int peer, uint32_t target);
  // Quantization steps (see the top of this file). `quantized` ranges hold blocks of `count`
  // elements; `elements` ranges hold the call's type.
  void quantize(Range elements, Range quantized, uint64_t count, uint64_t index);
  void dequantize(Range quantized, uint32_t sources, Range elements, uint64_t count);
  void requantize(Range quantized, uint32_t sources, Range dst, uint64_t count, uint64_t index);
  void addPeer(int peer);
  // True when a step reads a peer's user buffers (input, output, scratch): only connections
  // that can read peer memory run it.
  bool needsOneSided() const;
  // True when a step touches the host window (kWindow ranges, kSignal, kAwait).
  bool usesWindow() const;
  // Number of kSignal steps.
  uint32_t signals() const;

  // Computes deps. Call once, after the last step.
  void finalize();

  // Bytes this schedule sends to / receives from `peer`, and the number of messages (a
  // kNotify / kWait is a message of zero bytes).
  uint64_t bytesTo(int peer) const;
  uint64_t bytesFrom(int peer) const;
  uint32_t messagesTo(int peer) const;
  uint32_t messagesFrom(int peer) const;

  // Maps a range to the buffer it really lives in under in-place aliasing.
  Range canonical(Range r) const;
};

// Quantized calls: bytes on the wire per byte of the call's type, at the call's count (one
// group when there is none); 0 for other calls. The tuner's CostInput::packedRatio.
double packedRatio(const CollDesc& d);

}  // namespace chorus::sched
