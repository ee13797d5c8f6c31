// The UCX objects a transport instance stands on, and the tag layout. Internal to
// transports/ucx/.
//
// One ucp_context per process (features TAG, RMA and WAKEUP), shared by every UCX transport
// instance and released with the last of them; a process forked from one that had a context
// makes its own (a UCX context does not survive fork). One ucp_worker per transport instance,
// that is per communicator: its connections share it, and its mutex serialises every call into
// it, so a connection may be driven from one thread while another cancels it (chorusCommAbort).
//
// The 64-bit UCX tag of a chorus message:
//
//   bit 63      control: 1 for the transport's own ABORT and CLOSE messages, 0 for data
//   bits 62-48  15 bits of the communicator id (a fold of all 64 bits): a message of another
//               communicator that reached this worker by mistake never matches
//   bits 47-28  the sender's rank (20 bits: up to 1,048,576 ranks)
//   bits 27-0   the low 28 bits of chorus's own message tag
//
// Receives match on everything but the message-tag bits, so a connection takes its peer's
// messages in the order they were sent (UCX keeps the order of one sender's messages); the
// message-tag bits and the length are then compared with the receive's before any data reaches
// the caller's buffer (see ucx_connection.h). Chorus's collective tags are twice the call number
// (plus one for the header), so two calls confused with each other must be 2^27 calls apart to
// escape the check.
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "src/base/futex_mutex.h"
#include "src/base/status.h"

namespace chorus::ucx {

inline constexpr int kMessageTagBits = 28;
inline constexpr int kRankBits = 20;
inline constexpr int kCommBits = 15;
inline constexpr int kMaxRanks = 1 << kRankBits;
inline constexpr uint64_t kMessageTagMask = (uint64_t{1} << kMessageTagBits) - 1;
inline constexpr uint64_t kControlBit = uint64_t{1} << 63;
/// The bits a receive matches on: control, communicator and sender.
inline constexpr ucp_tag_t kMatchMask = ~kMessageTagMask;

/// The communicator bits of `commId`, in place (bits 62-48).
uint64_t commBits(uint64_t commId);
/// The tag of a data message from `sender` carrying chorus tag `tag`.
inline ucp_tag_t dataTag(uint64_t comm, int sender, uint64_t tag) {
  return comm | (static_cast<uint64_t>(sender) << kMessageTagBits) | (tag & kMessageTagMask);
}
/// The tag of the control messages from `sender`.
inline ucp_tag_t controlTag(uint64_t comm, int sender) {
  return kControlBit | dataTag(comm, sender, 0);
}

/// `status` as text, for messages: "Connection reset by remote peer (UCS_ERR_...)".
std::string statusText(ucs_status_t status);

/// The process's UCP context.
class Context {
 public:
  static StatusOr<std::shared_ptr<Context>> get();
  ~Context();
  ucp_context_h handle() const { return ctx_; }

 private:
  explicit Context(ucp_context_h c) : ctx_(c) {}
  ucp_context_h ctx_;
};

/// One UCP worker and the mutex that serialises its use.
class Worker {
 public:
  static StatusOr<std::shared_ptr<Worker>> create(int rank);
  ~Worker();
  ucp_worker_h handle() const { return worker_; }
  ucp_context_h context() const { return ctx_->handle(); }
  /// The fd that becomes readable after ucp_worker_arm() once there is work.
  int eventFd() const { return efd_; }
  /// Taken by every call into the worker (twice on an 8-byte blocking send: post, then test), so
  /// a one-word lock: a pthread mutex's lock and unlock cost about 80 instructions a pair there.
  FutexMutex& mutex() { return mu_; }
  /// Under mutex(): progress calls of this worker that found something to do (counted on the
  /// hot path, which reads no clock), the count pollInfo() last saw, and when it saw it change
  /// (or found work itself).
  uint64_t progressed = 0;
  uint64_t progressedSeen = 0;
  std::chrono::steady_clock::time_point lastEvent;

 private:
  Worker(std::shared_ptr<Context> ctx, ucp_worker_h w, int efd)
      : ctx_(std::move(ctx)), worker_(w), efd_(efd) {}
  std::shared_ptr<Context> ctx_;
  ucp_worker_h worker_;
  int efd_;
  FutexMutex mu_;
};

/// Live UCX objects of this process, for leak checks: contexts, workers and endpoints made by
/// chorus and not yet destroyed.
struct LiveCounts {
  int contexts = 0;
  int workers = 0;
  int endpoints = 0;
};
LiveCounts liveCounts();
void countEndpoint(int delta);

/// The items of UCX_TLS's comma-separated list `tls` (empty for null or "").
std::vector<std::string> tlsItems(const char* tls);

/// Whether UCX sees an RDMA-class device (InfiniBand, RoCE: an rc, dc or ud transport) in this
/// process; cached after the first call.
bool hasRdmaDevice();

}  // namespace chorus::ucx
