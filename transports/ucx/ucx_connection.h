// One UCX connection: this rank's endpoint to a peer's worker, on this communicator's worker.
// Internal to transports/ucx/.
//
// Sends are ucp_tag_send_nbx on the endpoint. Receives are handed to UCX in the order they were
// posted, each once every earlier one has been, matching on communicator, sender and data bit
// (see ucx_worker.h), so the k-th receive takes the peer's k-th message. A mismatch of length or
// message tag must be caught before any byte lands in the caller's buffer, so:
//   - a receive of up to kBounceBytes is posted (ucp_tag_recv_nbx) as soon as its turn comes,
//     into the op's own bounce buffer: UCX delivers an arriving message straight into it,
//     without the unexpected queue; on completion its length and tag are compared with the
//     receive's, and only then is it copied to the caller's buffer;
//   - a larger one waits until ucp_tag_probe_nb finds the peer's next message, is compared with
//     it, and only then received (ucp_tag_msg_recv_nbx) into the caller's buffer: by rendezvous
//     straight into place, or from the unexpected queue.
//
// Control messages (tag bit 63) carry what a TCP stream says by its frames and its end:
//   ABORT (code, reason)   cancel(), or a mismatch seen here: the peer fails everything with
//                          the code (kInvalidUsage stays, everything else is kRemoteError)
//   CLOSE (messages sent)  the destructor: the peer still receives that many messages, then
//                          fails what waits beyond them
// Each connection keeps one receive posted for its peer's control message.
//
// Peer failure. Endpoints to other hosts use UCX's PEER error mode: a broken link fails the
// endpoint, and this connection with it. PEER mode makes UCX drop its shared-memory lanes, so
// same-host endpoints use mode NONE when shared memory may carry them (CHORUS_UCX_ERR_MODE
// overrides), and rely on the communicator's liveness check (peerGone()). Either way, what the
// peer delivered before it went is still received; every other op fails.
//
// One-sided reads (canRead(), when the transport's policy allows them: ucx_transport.cc).
// expose() maps the range with ucp_mem_map and hands the peer a MemHandle holding its address,
// length and packed remote key; read() unpacks the key (kept for the handle's next reads) and
// gets the bytes with ucp_get_nbx, progressing the worker until they landed, bounded by
// CHORUS_TIMEOUT. A mapping stays until kKeptMappings newer ones were made on the connection:
// the executor exposes at most three ranges per call, and a call that exposed memory ends only
// after every peer's reads of it, so by then nobody reads it any more.
//
// Once failed, the connection stays failed with one Status; its endpoint is closed by force,
// which completes every outstanding UCX request, so callers may free their buffers.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "transports/transport.h"
#include "transports/ucx/ucx_worker.h"

namespace chorus::ucx {

struct EndpointError;

class UcxConnection final : public Connection {
 public:
  /// `peerErrMode`: the endpoint uses UCP_ERR_HANDLING_MODE_PEER.
  static StatusOr<std::unique_ptr<UcxConnection>> create(std::shared_ptr<Worker> worker,
                                                         uint64_t commId, int myRank, int peer,
                                                         const std::vector<uint8_t>& address,
                                                         bool peerErrMode, bool readable);
  ~UcxConnection() override;

  int peer() const override { return peer_; }
  StatusOr<Op> postSend(const void* src, size_t bytes, Tag tag) override;
  StatusOr<Op> postRecv(void* dst, size_t bytes, Tag tag) override;
  Status test(Op& op, bool* done) override;
  Status progress() override;
  Status check(Op& op, bool* done) override;
  Status cancel(const Status& why) override;
  void peerGone(const Status& why) override;
  void pollInfo(int* fd, short* events) const override;
  /// The worker's fd does not always wake a sleeper when UCX has work (measured: poll() slept
  /// 16 ms on average in a 4 MiB ping-pong over UCX_TLS=tcp, where progress without sleeping
  /// keeps the transfer going; a socket that one progress call left undrained, which an
  /// edge-triggered wake-up does not report again, would explain it): sleeps are cut into
  /// slices of this length.
  int pollSliceMs() const override { return 1; }
  ConnStats stats() const override;
  bool canRead() const override { return readable_; }
  StatusOr<MemHandle> expose(const void* base, size_t bytes) override;
  Status read(void* dst, const MemHandle& remote, uint64_t offset, size_t bytes) override;

  /// Receives of up to this many bytes go through the op's bounce buffer (see above).
  static constexpr size_t kBounceBytes = 256;

  // One send or receive, owned by the connection until UCX is done with it (its address is the
  // user_data of the request's callback). Records are reused: a connection keeps the ones its
  // finished ops leave.
  struct OpRec {
    void* request = nullptr;  // UCX's, until freed
    bool started = false;     // a receive: handed to UCX
    bool done = false;        // UCX finished it (status says how)
    bool counted = false;     // its bytes are in the connection's statistics
    bool bounced = false;     // a receive into `bounce` (see above)
    bool mismatch = false;    // bounced, and the message's length or tag differed
    ucs_status_t status = UCS_OK;
    size_t length = 0;       // a receive: the message's length as sent
    uint64_t senderTag = 0;  // a bounced receive: the message's UCX tag
    void* data = nullptr;
    size_t bytes = 0;
    Tag tag = 0;
    // Bumped when UCX finishes the op: the connection settles its ops only after it moved.
    // A record left to UCX at close counts into ownEvents instead.
    uint64_t* events = nullptr;
    uint64_t ownEvents = 0;
    alignas(16) uint8_t bounce[kBounceBytes];
  };

 private:
  enum Direction : uint64_t { kSend = 0, kRecv = 1 };
  enum class ControlKind : uint32_t { kAbort = 1, kClose = 2 };

  UcxConnection(std::shared_ptr<Worker> worker, uint64_t commId, int myRank, int peer,
                bool peerErrMode, bool readable, double readSeconds);

  // All of these run with the worker's mutex held.
  Status progressLocked();
  Status checkLocked(const Op& op, bool* done);
  void start(OpRec& r, ucs_status_ptr_t p);
  std::unique_ptr<OpRec> newRec();
  void matchReceives();
  void postBounced(OpRec& r);
  // The kInvalidUsage of a message of `sentBytes` with tag bits `sentTag` meeting receive `r`.
  Status mismatch(size_t sentBytes, uint64_t sentTag, const OpRec& r) const;
  // Tells the peer of the mismatch `why` (ABORT), then fails.
  void failMismatch(Status why);
  void settle();
  void countBytes(uint64_t dir, OpRec& r);
  void handleControl();
  bool readyLocked() const;
  void fail(Status why);
  // Sends a control message and progresses, within `budgetMs`, until it has left.
  void sendControl(ControlKind kind, uint32_t code, uint64_t count, const std::string& text,
                   int budgetMs);
  void closeEndpoint(bool force);
  // Cancels the receives UCX holds that no message has reached yet (and the control receive).
  void cancelReceives();
  // Progresses the worker until nothing in `recs` waits for UCX any more, or `budgetMs` pass.
  bool drainRequests(int budgetMs);
  void postControlReceive();
  std::string peerName() const;
  // The unpacked remote key of a peer's handle (made on first use), or an error.
  StatusOr<ucp_rkey_h> remoteKey(const MemHandle& remote);
  // Destroys the unpacked keys and unmaps the exposed ranges (before the endpoint closes).
  void releaseMemory();

  static Op makeOp(Direction d, uint64_t seq) { return Op{((seq + 1) << 1) | d}; }

  std::shared_ptr<Worker> worker_;
  ucp_worker_h w_;
  ucp_ep_h ep_ = nullptr;
  const uint64_t comm_;
  const int myRank_;
  const int peer_;
  const bool peerErrMode_;
  const bool readable_;
  const double readSeconds_;  // CHORUS_TIMEOUT: the bound of one read()

  // Ops per direction, by sequence number: ops_[d][i] is op base_[d] + i. Completed ops leave
  // from the front.
  std::deque<std::unique_ptr<OpRec>> ops_[2];
  uint64_t base_[2] = {0, 0};
  uint64_t posted_[2] = {0, 0};
  uint64_t matched_ = 0;  // receives handed to UCX (started)
  // Ops UCX finished (callbacks and immediate completions) and the count settle() last saw.
  uint64_t events_ = 0;
  uint64_t settled_ = 0;
  std::vector<std::unique_ptr<OpRec>> spare_;  // records of retired ops, for reuse

  // The peer's control message, received into ctrlIn_.
  std::unique_ptr<OpRec> ctrlRecv_;
  std::vector<uint8_t> ctrlIn_;
  std::unique_ptr<OpRec> ctrlSend_;
  std::vector<uint8_t> ctrlOut_;

  // A mismatched message, received into scratch memory to release UCX's hold on it.
  std::unique_ptr<OpRec> discard_;
  std::vector<uint8_t> discardBuf_;

  // Ranges this rank exposed (oldest first) and the keys of the peer's ranges it read.
  std::deque<ucp_mem_h> exposed_;
  struct RemoteKey {
    MemHandle handle;
    ucp_rkey_h key;
  };
  std::deque<RemoteKey> keys_;

  std::unique_ptr<EndpointError> epErr_;  // UCX failed the endpoint (PEER mode)
  bool closeUnfinished_ = false;
  bool closeAfterControl_ = false;  // failed; the endpoint closes once the ABORT has left
  bool closedByPeer_ = false;  // CLOSE received: peerSent_ messages are all there will be
  uint64_t peerSent_ = 0;
  bool gone_ = false;  // peerGone() or a failed endpoint: deliver what arrived, fail the rest
  Status goneWhy_;
  bool failed_ = false;
  Status failure_;
  ConnStats stats_;

  static void onEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
};

}  // namespace chorus::ucx
