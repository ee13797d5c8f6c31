// pingpong: rank 0 sends its input to rank 1 and then receives rank 1's input; rank 1 receives
// first and only then sends. One call is one round trip, and the harness reports half of it
// (legsPerCall), the one-way latency of the link between the two ranks. The job has exactly two
// ranks (rankCountError).
//
// Each leg completes before the next starts, in both modes, so the reply can never overtake the
// message it answers and the time stays a true round trip:
//   -z 1  chorusSend / chorusRecv;
//   -z 0  chorusISend / chorusIRecv, each followed at once by chorusWait. The messages are the
//         same, so the difference between the two modes is the cost of the request path.
// Both directions are checked: each rank must end with the other's input (separate send and
// receive buffers, so rank 1 replies with its own data rather than echoing rank 0's).
#include "tools/chorus-perf/coll.h"

namespace chorus::perf {
namespace {

int peerOf(const CollArgs& a) { return 1 - a.rank; }

chorusResult_t sendLeg(const CollArgs& a, bool blocking) {
  if (blocking) return chorusSend(a.send, a.count, a.type, peerOf(a), a.comm, nullptr);
  chorusRequest_t req = nullptr;
  chorusResult_t r = chorusISend(a.send, a.count, a.type, peerOf(a), a.comm, nullptr, &req);
  return r == chorusSuccess ? chorusWait(&req) : r;
}

chorusResult_t recvLeg(const CollArgs& a, bool blocking) {
  if (blocking) return chorusRecv(a.recv, a.count, a.type, peerOf(a), a.comm, nullptr);
  chorusRequest_t req = nullptr;
  chorusResult_t r = chorusIRecv(a.recv, a.count, a.type, peerOf(a), a.comm, nullptr, &req);
  return r == chorusSuccess ? chorusWait(&req) : r;
}

// Completes its own requests: nothing is left in *reqs for the harness, whose nonblocking mode
// would otherwise post every iteration's messages before completing any, which is a stream of
// messages, not a ping-pong.
chorusResult_t start(const CollArgs& a, std::vector<chorusRequest_t>* reqs) {
  bool blocking = reqs == nullptr;
  if (a.rank == 0) {
    chorusResult_t r = sendLeg(a, blocking);
    return r == chorusSuccess ? recvLeg(a, blocking) : r;
  }
  chorusResult_t r = recvLeg(a, blocking);
  return r == chorusSuccess ? sendLeg(a, blocking) : r;
}

Expect expect(const CollArgs& a, size_t i) { return {Expect::Kind::kCopy, peerOf(a), i}; }

}  // namespace

const CollImpl kPingPongImpl = {Coll::kPingPong, start, expect, false};

}  // namespace chorus::perf
