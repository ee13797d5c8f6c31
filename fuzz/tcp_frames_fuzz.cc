// libFuzzer target: the TCP transport's input side (transports/tcp/): the acceptor's verdict on
// a hello (wire::judgeHello), the endpoint blob a peer publishes (decodeEndpoint), and the frame
// stream of an established connection, read by the real TcpConnection from a socket.
//
// Input: byte 0 chooses up to four receives, each then described by 3 bytes: a big-endian u16
// size, and a byte whose top bit multiplies the size by 4 (so receives larger than the
// connection's 64 KiB buffer, read straight into place, are reached) and whose low 7 bits are
// the tag. Everything after is the peer's byte stream. The
// stream is written into one end of a socket pair whose writing end is then closed, so the whole
// stream and its end are in the kernel before the connection reads: the run is deterministic.
// Properties:
//   - judgeHello accepts only a hello of our version, communicator and rank, from a lower rank;
//   - decodeEndpoint refuses with kInvalidArgument, or gives an address whose blob
//     (encodeEndpoint) is the input;
//   - the connection completes each posted receive or fails every one with a message naming the
//     peer, within a bounded number of progress() calls (a loop that neither moves nor fails
//     is a hang); a frame cannot make it write past a receive's buffer (ASan) or allocate what
//     a length field announces (the malloc limit).
// Run with fuzz/run.sh; the corpus is replayed in ctest (fuzz_replay.tcp_frames).
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "fuzz/fuzz_target.h"
#include "transports/tcp/tcp_connection.h"
#include "transports/tcp/wire.h"

namespace chorus::fuzz {
namespace {

constexpr uint64_t kCommId = 0x1234'5678'9abc'def0ull;
constexpr int kMyRank = 2;
constexpr int kPeer = 1;

[[noreturn]] void tcpFail(const char* what, const std::string& detail = "") {
  fail("tcp_frames_fuzz", what, detail);
}

void checkHello(const uint8_t* stream, size_t n) {
  if (n < tcp::kHelloBytes) return;
  tcp::Hello h;
  std::optional<tcp::AckResult> v = tcp::wire::judgeHello(stream, kCommId, kMyRank, &h);
  if (!v) {
    if (tcp::wire::get32(stream) == tcp::kHelloMagic) tcpFail("a hello's magic was refused");
    return;
  }
  const bool good = h.version == tcp::kProtocolVersion && h.commId == kCommId &&
                    h.toRank == kMyRank && h.fromRank >= 0 && h.fromRank < kMyRank;
  if ((*v == tcp::AckResult::kAccepted) != good)
    tcpFail("judgeHello's verdict does not match the hello",
            "verdict " + std::to_string(static_cast<int>(*v)) + ", from " +
                std::to_string(h.fromRank) + " to " + std::to_string(h.toRank));
}

void checkEndpoint(const uint8_t* stream, size_t n) {
  EndpointBlob blob(stream, stream + std::min<size_t>(n, 24));
  auto addr = tcp::decodeEndpoint(blob);
  if (!addr.ok()) {
    if (addr.status().code() != Code::kInvalidArgument ||
        addr.status().message().find("malformed tcp endpoint") == std::string::npos)
      tcpFail("a refused endpoint is not named", addr.status().toString());
    return;
  }
  if (tcp::encodeEndpoint(*addr) != blob) tcpFail("an accepted endpoint does not re-encode");
}

void runConnection(const uint8_t* data, size_t size) {
  if (size < 1) return;
  const size_t nrecv = data[0] % 5;
  size_t pos = 1;
  struct Want {
    std::vector<uint8_t> buf;
    Tag tag;
  };
  std::vector<Want> wants;
  for (size_t i = 0; i < nrecv && pos + 3 <= size; ++i, pos += 3) {
    // Small tags only, so matching tags are easy to find.
    const size_t bytes = ((size_t{data[pos]} << 8) | data[pos + 1]) << ((data[pos + 2] >> 7) * 2);
    wants.push_back(Want{std::vector<uint8_t>(bytes), Tag{data[pos + 2] & 0x7fu}});
  }
  const uint8_t* stream = data + pos;
  const size_t streamLen = size - pos;

  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) tcpFail("socketpair failed");
  int big = 1 << 20;
  ::setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  ::setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  size_t written = 0;
  while (written < streamLen) {
    ssize_t w = ::send(sv[1], stream + written, streamLen - written, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w <= 0) tcpFail("the socket pair did not take the whole stream");
    written += static_cast<size_t>(w);
  }
  ::close(sv[1]);
  ::fcntl(sv[0], F_SETFL, ::fcntl(sv[0], F_GETFL) | O_NONBLOCK);

  tcp::TcpConnection conn(net::Fd(sv[0]), kMyRank, kPeer, "fuzz");
  std::vector<Op> ops;
  for (Want& w : wants) {
    auto op = conn.postRecv(w.buf.data(), w.buf.size(), w.tag);
    if (!op.ok()) break;  // the connection failed on an earlier frame
    ops.push_back(*op);
  }
  // Every step of the stream either completes something, reads more, or fails; the stream is
  // at most 256 KiB (fuzz/run.sh), so this bound is far above any honest run.
  constexpr int kMaxRounds = 100000;
  for (int round = 0;; ++round) {
    if (round == kMaxRounds) tcpFail("the connection neither completes nor fails (a hang)");
    Status st = conn.progress();
    size_t done = 0;
    for (Op& op : ops) {
      bool d = false;
      Status c = conn.check(op, &d);
      if (d) ++done;
      if (!c.ok() && c.message().find("rank " + std::to_string(kPeer)) == std::string::npos)
        tcpFail("a failed receive does not name the peer", c.toString());
    }
    if (!st.ok() || done == ops.size()) break;
  }
  // Cancel on some inputs: it writes an ABORT to a peer that has closed (EPIPE must be handled).
  if (size % 2) conn.cancel(invalidUsage("fuzz cancel")).ignore();
}

}  // namespace

int tcpFramesOne(const uint8_t* data, size_t size) {
  checkHello(data, size);
  checkEndpoint(data, size);
  runConnection(data, size);
  return 0;
}

}  // namespace chorus::fuzz

CHORUS_FUZZ_TARGET(tcpFramesOne)
