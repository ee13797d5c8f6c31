// One established TCP connection to a peer. Internal to transports/tcp/.
//
// Sends leave in FIFO order; postSend() only queues, and progress() sends everything queued in
// one sendmsg(), so a consistency header and the small message behind it cost one system call.
// Receives read the socket into a 64 KiB buffer and take frames from it, several small frames
// per read; a DATA frame is matched to the oldest posted receive, and a payload larger than the
// buffer is read straight into that receive's memory (no copy). When a frame waits and no
// receive is posted, reading stops there: the kernel buffers, then the sender, absorb the
// excess, and pollInfo() stops asking for POLLIN so a blocked waiter does not spin.
//
// Once anything fails — a size/tag mismatch, an ABORT from the peer, EOF or reset, a local
// cancel() — the connection is dead: outstanding and later ops all fail with one Status, so
// every caller sees the first cause rather than a consequence of it.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "src/base/socket_util.h"
#include "transports/tcp/wire.h"
#include "transports/transport.h"

namespace chorus::tcp {

class TcpConnection final : public Connection {
 public:
  // `fd` is connected, handshaken and nonblocking.
  TcpConnection(net::Fd fd, int myRank, int peer, std::string peerAddr);
  ~TcpConnection() override = default;

  int peer() const override { return peer_; }
  StatusOr<Op> postSend(const void* src, size_t bytes, Tag tag) override;
  StatusOr<Op> postRecv(void* dst, size_t bytes, Tag tag) override;
  Status test(Op& op, bool* done) override;
  Status progress() override;
  Status check(Op& op, bool* done) override;
  Status cancel(const Status& why) override;
  void peerGone(const Status& why) override;
  void pollInfo(int* fd, short* events) const override;
  ConnStats stats() const override { return stats_; }

 private:
  enum Direction : uint64_t { kSend = 0, kRecv = 1 };

  struct SendOp {
    const uint8_t* data;
    size_t bytes;
    uint8_t header[kFrameHeaderBytes];
    size_t sent;  // of header + payload
  };
  struct RecvOp {
    uint8_t* data;
    size_t bytes;
    Tag tag;
  };
  enum class RecvState { kHeader, kData, kAbort };

  void progressSends();
  void progressRecvs();
  bool fillBuffer();
  // Reads what the current ABORT frame still lacks; fails the connection once it is all in.
  void readAbortMessage();
  void onHeader();
  // The peer's side of a closed stream: EOF, reset, broken pipe.
  void onPeerGone(int err);
  void fail(Status why);
  // Tells the peer `why` with an ABORT frame if that can be done by `deadline`, closes the
  // socket and fails every op.
  void abortStream(const Status& why, net::Deadline deadline);
  // Sends the unsent part of one frame, waiting for socket space no later than `deadline`.
  // False when the frame could not be finished.
  bool pushBounded(const uint8_t* header, const uint8_t* data, size_t dataLen, size_t sent,
                   net::Deadline deadline);
  std::string peerName() const;

  static Op makeOp(Direction d, uint64_t seq) { return Op{((seq + 1) << 1) | d}; }

  net::Fd fd_;
  const int myRank_;
  const int peer_;
  const std::string peerAddr_;

  std::deque<SendOp> sends_;
  std::deque<RecvOp> recvs_;
  // Ops are numbered per direction and complete in order, so "done" is just "seq < completed".
  uint64_t posted_[2] = {0, 0};
  uint64_t completed_[2] = {0, 0};

  RecvState recvState_ = RecvState::kHeader;
  uint8_t header_[kFrameHeaderBytes];
  size_t headerFilled_ = 0;
  FrameHeader frame_;
  bool matched_ = false;  // the current DATA frame owns recvs_.front()
  size_t payloadFilled_ = 0;
  std::string abortMessage_;
  // Bytes read from the socket and not yet taken: rbuf_[rbegin_, rend_).
  static constexpr size_t kRecvBufferBytes = 64 << 10;
  std::vector<uint8_t> rbuf_ = std::vector<uint8_t>(kRecvBufferBytes);
  size_t rbegin_ = 0, rend_ = 0;

  bool failed_ = false;
  Status failure_;
  bool gone_ = false;  // peerGone(): read what is buffered, then fail what waits
  Status goneWhy_;
  ConnStats stats_;
};

}  // namespace chorus::tcp
