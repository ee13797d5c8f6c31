// The failure half of the transport contract, on every registered kind: cancel() and the code
// the peer sees, a peer that closes its connection, a peer whose process ends (told through
// peerGone(), as the communicator's liveness check does), and a real peer process killed with
// SIGKILL. Each failure must reach the ops it concerns within kPromptSeconds, and what the peer
// delivered before it went must still be received. See conformance.h for how ranks are made.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/unit/transport/conformance.h"

namespace chorus::conformance {
namespace {

class ConformanceFailures : public ConformanceTest {};

TEST_P(ConformanceFailures, CancelFailsBothSidesWithTheMappedCode) {
  struct Case {
    Status why;
    Code remote;  // what the peer's ops fail with
  };
  const Case cases[] = {
      {systemError("disk on fire"), Code::kRemoteError},
      {timeoutError("rank 4 timed out"), Code::kRemoteError},
      {invalidUsage("allreduce: count 3 vs 4"), Code::kInvalidUsage},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.why.toString());
    Group g = connectedGroup();
    ASSERT_TRUE(g.connected());
    Connection& peer = *g.c[0][1];
    Connection& canceller = *g.c[1][0];
    uint64_t a = 0, b = 0, x = 0;
    auto peerOp = peer.postRecv(&a, 8, 1);
    auto ownOp = canceller.postRecv(&b, 8, 1);
    ASSERT_TRUE(peerOp.ok() && ownOp.ok());
    ASSERT_TRUE(canceller.cancel(c.why).ok());
    ASSERT_TRUE(canceller.cancel(c.why).ok()) << "cancel() must be idempotent";
    // Locally: every outstanding op fails with `why` itself, and so does progress().
    Status own = outcome(canceller, ownOp, kPromptSeconds);
    EXPECT_EQ(own.code(), c.why.code()) << own.toString();
    EXPECT_TRUE(contains(own.message(), c.why.message())) << own.message();
    Status progressed = canceller.progress();
    EXPECT_EQ(progressed.code(), c.why.code()) << progressed.toString();
    // The peer: its outstanding op, and ops it posts later, fail with the mapped code and the
    // reason's text; from then on progress() returns that failure.
    Status outstanding = outcome(peer, peerOp, kPromptSeconds, {&canceller});
    EXPECT_EQ(outstanding.code(), c.remote) << outstanding.toString();
    EXPECT_TRUE(contains(outstanding.message(), c.why.message())) << outstanding.message();
    Status peerProgress = peer.progress();
    EXPECT_EQ(peerProgress.code(), c.remote) << peerProgress.toString();
    Status laterRecv = outcome(peer, peer.postRecv(&x, 8, 2), kPromptSeconds);
    EXPECT_EQ(laterRecv.code(), c.remote) << laterRecv.toString();
    EXPECT_TRUE(contains(laterRecv.message(), c.why.message())) << laterRecv.message();
    Status laterSend = outcome(peer, peer.postSend(&x, 8, 3), kPromptSeconds);
    EXPECT_EQ(laterSend.code(), c.remote) << laterSend.toString();
    EXPECT_TRUE(contains(laterSend.message(), c.why.message())) << laterSend.message();
  }
}

TEST_P(ConformanceFailures, ClosedPeerDeliversWhatItSentThenFails) {
  Group g = connectedGroup();
  ASSERT_TRUE(g.connected());
  if (!g.t[0]->caps().senderAloneCompletes)
    GTEST_SKIP() << "caps().senderAloneCompletes is false: this case drives only the sender";
  // Sent and completed before the close: a small message and one of several buffers' worth.
  const std::vector<uint8_t> small = randomBytes(100), medium = randomBytes(40000);
  auto s1 = g.c[0][1]->postSend(small.data(), small.size(), 1);
  auto s2 = g.c[0][1]->postSend(medium.data(), medium.size(), 2);
  ASSERT_TRUE(s1.ok() && s2.ok());
  ASSERT_TRUE(driveAll({{g.c[0][1].get(), *s1}, {g.c[0][1].get(), *s2}}).ok());
  g.c[0][1].reset();

  Connection& c = *g.c[1][0];
  std::vector<uint8_t> got1(small.size(), kPoison), got2(medium.size(), kPoison);
  auto r1 = c.postRecv(got1.data(), got1.size(), 1);
  auto r2 = c.postRecv(got2.data(), got2.size(), 2);
  ASSERT_TRUE(r1.ok() && r2.ok());
  Status st = driveAll({{&c, *r1}, {&c, *r2}});
  ASSERT_TRUE(st.ok()) << "what the peer sent before it closed must arrive: " << st.toString();
  EXPECT_TRUE(got1 == small);
  EXPECT_TRUE(got2 == medium);

  uint64_t x = 0;
  Status more = outcome(c, c.postRecv(&x, 8, 3), kPromptSeconds);
  EXPECT_EQ(more.code(), Code::kRemoteError) << more.toString();
  EXPECT_TRUE(contains(more.message(), "rank 0")) << "must name the peer: " << more.message();
  Status send = outcome(c, c.postSend(&x, 8, 4), kPromptSeconds);
  EXPECT_EQ(send.code(), Code::kRemoteError) << send.toString();
}

// Ops already waiting when the peer closes: a receive nothing will match, and a send far larger
// than any buffer between the two (it cannot complete without the peer's receive).
TEST_P(ConformanceFailures, PeerCloseFailsPendingOps) {
  Group g = connectedGroup();
  ASSERT_TRUE(g.connected());
  Connection& c = *g.c[1][0];
  uint64_t x = 0;
  const std::vector<uint8_t> big(64u << 20, 0x5a);
  auto r = c.postRecv(&x, 8, 1);
  auto s = c.postSend(big.data(), big.size(), 2);
  ASSERT_TRUE(r.ok() && s.ok());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(c.progress().ok());
  g.c[0][1].reset();
  const std::vector<Status> st = settle({{&c, *r}, {&c, *s}}, kPromptSeconds);
  for (size_t i = 0; i < st.size(); ++i) {
    SCOPED_TRACE(i == 0 ? "pending receive" : "pending send");
    EXPECT_EQ(st[i].code(), Code::kRemoteError) << st[i].toString();
    EXPECT_TRUE(contains(st[i].message(), "rank 0")) << "must name the peer: " << st[i].message();
  }
}

// What the communicator sees when a peer's process ends: its connection is gone (the kernel
// closes its sockets, its destructors may or may not have run), and the liveness check calls
// peerGone(). What it delivered is still received; nothing more is.
TEST_P(ConformanceFailures, PeerGoneAfterCloseDeliversWhatItSentThenFails) {
  Group g = connectedGroup();
  ASSERT_TRUE(g.connected());
  if (!g.t[0]->caps().senderAloneCompletes)
    GTEST_SKIP() << "caps().senderAloneCompletes is false: this case drives only the sender";
  const std::vector<uint8_t> v = randomBytes(3000);
  auto s = g.c[0][1]->postSend(v.data(), v.size(), 1);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(driveAll({{g.c[0][1].get(), *s}}).ok());
  g.c[0][1].reset();
  Connection& c = *g.c[1][0];
  const Status why = remoteError("rank 0 (pid 4242) is gone: killed by signal 9");
  c.peerGone(why);

  std::vector<uint8_t> got(v.size(), kPoison);
  Status st = outcome(c, c.postRecv(got.data(), got.size(), 1));
  ASSERT_TRUE(st.ok()) << "what the peer delivered before it ended must arrive: " << st.toString();
  EXPECT_TRUE(got == v);

  uint64_t x = 0;
  Status more = outcome(c, c.postRecv(&x, 8, 2), kPromptSeconds);
  EXPECT_EQ(more.code(), Code::kRemoteError) << more.toString();
  // Either rule may say it first: the closed connection (naming the peer) or peerGone (`why`).
  EXPECT_TRUE(contains(more.message(), "rank 0")) << more.message();
  Status send = outcome(c, c.postSend(&x, 8, 3), kPromptSeconds);
  EXPECT_EQ(send.code(), Code::kRemoteError) << send.toString();
}

// peerGone() on its own: the peer's end shows nowhere on the connection (a peer killed before
// its destructors ran, on a connection without a kernel object to report it). Here the peer's
// connection stays alive, as the killed process's memory would. A connection with an fd learns
// of a peer's end from the kernel (EOF, reset), which a peer alive in this process cannot fake,
// and may ignore peerGone(): skipped (the killed-process test below covers it).
class ConformanceFailuresPeerGone : public ConformanceTest {
 protected:
  // Rank 0 has sent v_ (completed) and rank 1 has been told the peer is gone (why_). A set-up
  // step that fails fails the test; the test body then does not run.
  void SetUp() override {
    ConformanceTest::SetUp();
    if (IsSkipped()) return;
    g_ = connectedGroup();
    ASSERT_TRUE(g_.connected());
    if (!g_.t[0]->caps().senderAloneCompletes)
      GTEST_SKIP() << "caps().senderAloneCompletes is false: the set-up drives only the sender";
    int fd = -1;
    short events = 0;
    g_.c[1][0]->pollInfo(&fd, &events);
    if (fd >= 0) {
      GTEST_SKIP() << "the connection has an fd: its peer's end is the kernel's to report";
    }
    auto s = g_.c[0][1]->postSend(v_.data(), v_.size(), 1);
    ASSERT_TRUE(s.ok());
    Status sent = driveAll({{g_.c[0][1].get(), *s}});
    ASSERT_TRUE(sent.ok()) << sent.toString();
    g_.c[1][0]->peerGone(why_);
  }
  const std::vector<uint8_t> v_ = randomBytes(3000);
  const Status why_ = remoteError("rank 0 (pid 4242) is gone: killed by signal 9");
  Group g_;
};

TEST_P(ConformanceFailuresPeerGone, DeliveredMessageArrivesThenReceivesFail) {
  Connection& c = *g_.c[1][0];
  std::vector<uint8_t> got(v_.size(), kPoison);
  Status st = outcome(c, c.postRecv(got.data(), got.size(), 1));
  ASSERT_TRUE(st.ok()) << "what the peer delivered before it ended must arrive: " << st.toString();
  EXPECT_TRUE(got == v_);
  uint64_t x = 0;
  Status more = outcome(c, c.postRecv(&x, 8, 2), kPromptSeconds);
  EXPECT_EQ(more.code(), why_.code()) << more.toString();
  EXPECT_EQ(more.message(), why_.message());
  Status send = outcome(c, c.postSend(&x, 8, 3), kPromptSeconds);
  EXPECT_EQ(send.code(), why_.code()) << send.toString();
  EXPECT_EQ(send.message(), why_.message());
}

// "Every other op, now or later, fails with `why`": a send posted after peerGone() has nobody
// to go to, even when it would fit in a buffer the transport could complete it into; and the
// message the peer delivered before is still received afterwards.
TEST_P(ConformanceFailuresPeerGone, SendPostedAfterwardsFailsDeliveredMessageStillArrives) {
  Connection& c = *g_.c[1][0];
  uint64_t x = 0;
  Status send = outcome(c, c.postSend(&x, 8, 3), kPromptSeconds);
  EXPECT_EQ(send.code(), why_.code()) << send.toString();
  EXPECT_EQ(send.message(), why_.message());
  std::vector<uint8_t> got(v_.size(), kPoison);
  Status st = outcome(c, c.postRecv(got.data(), got.size(), 1));
  EXPECT_TRUE(st.ok()) << st.toString();
  EXPECT_TRUE(got == v_);
}

// ---- A real peer process, killed ------------------------------------------------------------

constexpr size_t kPayloadBytes = 3000;
constexpr size_t kExposedBytes = (1u << 20) + 3;

std::vector<uint8_t> seededBytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 gen(seed);
  for (uint8_t& b : v) b = static_cast<uint8_t>(gen());
  return v;
}

bool writeAll(int fd, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    b += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Bounded: false when the writer is gone or `limitSeconds` pass first.
bool readAll(int fd, void* p, size_t n, double limitSeconds) {
  auto* b = static_cast<uint8_t*>(p);
  const auto deadline = Clock::now() + seconds(limitSeconds);
  while (n > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
    ssize_t r = ::read(fd, b, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    b += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool sendBlob(int fd, const EndpointBlob& blob) {
  const uint32_t n = static_cast<uint32_t>(blob.size());
  return writeAll(fd, &n, sizeof n) && writeAll(fd, blob.data(), blob.size());
}

bool recvBlob(int fd, EndpointBlob* blob, double limitSeconds) {
  uint32_t n = 0;
  if (!readAll(fd, &n, sizeof n, limitSeconds) || n > (1u << 20)) return false;
  blob->resize(n);
  return readAll(fd, blob->data(), n, limitSeconds);
}

// Rank 1 in a forked process. It sends rank 0 a payload, the handle of memory it exposes (when
// the kind can) and that memory's bytes as a message, then waits to be killed. Never returns;
// its exit code says where it failed.
[[noreturn]] void peerProcess(const TransportFactory& kind, uint64_t commId, int out, int in,
                              bool expose) {
  ::alarm(120);  // a peer its parent lost track of ends on its own
  TransportContext ctx;
  ctx.rank = 1;
  ctx.nranks = 2;
  ctx.commId = commId;
  ctx.self = identity(1);
  auto t = kind.create(ctx);
  if (!t.ok()) ::_exit(10);
  EndpointBlob mine, theirs;
  uint64_t seed = 0;
  if (!(*t)->listen(&mine).ok() || !sendBlob(out, mine)) ::_exit(11);
  if (!recvBlob(in, &theirs, 60) || !readAll(in, &seed, sizeof seed, 60)) ::_exit(12);
  auto c = (*t)->connect(0, theirs, kConnectSeconds);
  if (!c.ok()) ::_exit(13);
  Connection& conn = **c;
  const std::vector<uint8_t> payload = seededBytes(kPayloadBytes, seed);
  const std::vector<uint8_t> memory = seededBytes(kExposedBytes, seed + 1);
  MemHandle handle;
  if (expose) {
    auto h = conn.expose(memory.data(), memory.size());
    if (!h.ok()) ::_exit(14);
    handle = *h;
  }
  auto s1 = conn.postSend(payload.data(), payload.size(), 1);
  auto s2 = conn.postSend(&handle, sizeof handle, 2);
  auto s3 = conn.postSend(memory.data(), memory.size(), 3);
  if (!s1.ok() || !s2.ok() || !s3.ok()) ::_exit(15);
  if (!driveAll({{&conn, *s1}, {&conn, *s2}, {&conn, *s3}}).ok()) ::_exit(16);
  // Alive, memory exposed, until killed (or until the parent is gone: end of file).
  char x;
  while (::read(in, &x, 1) != 0) {
  }
  ::_exit(0);
}

// Kills and reaps the peer process unless the test already has.
struct PeerProcess {
  pid_t pid = -1;
  ~PeerProcess() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
  }
};

TEST_P(ConformanceFailures, KilledPeerProcessFailsPendingOpsOnceGone) {
  const uint64_t commId = randomU64(), seed = randomU64();
  auto made = kind().create(context(0, 2, commId));
  ASSERT_TRUE(made.ok()) << made.status().toString();
  std::shared_ptr<Transport> t = std::move(made).value();
  if (!t->caps().forkedPeers)
    GTEST_SKIP() << "caps().forkedPeers is false: the peer would be forked after listen()";
  EndpointBlob mine, theirs;
  ASSERT_TRUE(t->listen(&mine).ok());
  const bool expose = t->caps().oneSidedRead;

  int toPeer[2], fromPeer[2];
  ASSERT_EQ(::pipe2(toPeer, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(fromPeer, O_CLOEXEC), 0);
  PeerProcess peer;
  peer.pid = ::fork();
  ASSERT_GE(peer.pid, 0) << std::strerror(errno);
  if (peer.pid == 0) {
    ::close(toPeer[1]);
    ::close(fromPeer[0]);
    peerProcess(kind(), commId, fromPeer[1], toPeer[0], expose);
  }
  ::close(toPeer[0]);
  ::close(fromPeer[1]);
  struct Fds {
    int a, b;
    ~Fds() { ::close(a), ::close(b); }
  } fds{toPeer[1], fromPeer[0]};

  ASSERT_TRUE(recvBlob(fromPeer[0], &theirs, kConnectSeconds)) << "the peer sent no endpoint";
  ASSERT_TRUE(sendBlob(toPeer[1], mine) && writeAll(toPeer[1], &seed, sizeof seed));
  auto connecting = onThread([t, theirs] { return t->connect(1, theirs, kConnectSeconds); });
  auto made1 = joinWithin(connecting, seconds(kConnectSeconds) + kHangMargin, "connect()");
  ASSERT_TRUE(made1);
  ASSERT_TRUE(made1->ok()) << made1->status().toString();
  ConnPtr conn = std::move(*made1).value();

  // Everything the peer sends arrives intact; a fourth receive stays pending.
  std::vector<uint8_t> payload(kPayloadBytes, kPoison), memory(kExposedBytes, kPoison);
  MemHandle handle;
  uint64_t never = 0;
  auto r1 = conn->postRecv(payload.data(), payload.size(), 1);
  auto r2 = conn->postRecv(&handle, sizeof handle, 2);
  auto r3 = conn->postRecv(memory.data(), memory.size(), 3);
  auto r4 = conn->postRecv(&never, sizeof never, 4);
  ASSERT_TRUE(r1.ok() && r2.ok() && r3.ok() && r4.ok());
  Status st = driveAll({{conn.get(), *r1}, {conn.get(), *r2}, {conn.get(), *r3}});
  ASSERT_TRUE(st.ok()) << st.toString();
  EXPECT_TRUE(payload == seededBytes(kPayloadBytes, seed));
  const std::vector<uint8_t> want = seededBytes(kExposedBytes, seed + 1);
  EXPECT_TRUE(memory == want);

  // One-sided: the peer's exposed memory, read from another process.
  const bool reads = expose && conn->canRead();
  if (reads) {
    std::vector<uint8_t> got(kExposedBytes, kPoison);
    Status rd = conn->read(got.data(), handle, 0, got.size());
    ASSERT_TRUE(rd.ok()) << rd.toString();
    EXPECT_TRUE(got == want) << "a one-sided read of the peer process returned wrong bytes";
  }

  ASSERT_EQ(::kill(peer.pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(peer.pid, &status, 0), peer.pid);
  const pid_t gone = peer.pid;
  peer.pid = -1;
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the peer ended before it was killed (exit status " << WEXITSTATUS(status) << ")";
  // What the communicator's liveness check does once it sees the process gone.
  conn->peerGone(remoteError("rank 1 (pid " + std::to_string(gone) + ") is gone: killed"));

  Status pending = outcome(*conn, *r4, kPromptSeconds);
  EXPECT_EQ(pending.code(), Code::kRemoteError) << pending.toString();
  EXPECT_TRUE(contains(pending.message(), "rank 1")) << pending.message();
  uint64_t x = 0;
  Status later = outcome(*conn, conn->postSend(&x, sizeof x, 5), kPromptSeconds);
  EXPECT_EQ(later.code(), Code::kRemoteError) << later.toString();
  if (reads) {
    std::vector<uint8_t> got(64, kPoison);
    Status rd = conn->read(got.data(), handle, 0, got.size());
    EXPECT_EQ(rd.code(), Code::kRemoteError) << "reading a dead peer's memory: " << rd.toString();
    EXPECT_TRUE(contains(rd.message(), "rank 1")) << rd.message();
  }
}

CHORUS_INSTANTIATE_FOR_EVERY_KIND(ConformanceFailures);
CHORUS_INSTANTIATE_FOR_EVERY_KIND(ConformanceFailuresPeerGone);

}  // namespace
}  // namespace chorus::conformance
