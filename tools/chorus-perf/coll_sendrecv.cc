// sendrecv: a ring shift. Rank r sends its input to r+1 and receives from r-1 (mod nranks).
//
// Always a blocking chorusGroupStart/Send/Recv/GroupEnd, also with -z 0: chorus sequences every
// nonblocking call as an operation of its own that the peer must match with the same operation,
// and does not allow nonblocking calls inside a group, so a ring of ISend+IRecv cannot pair up.
// The group is what posts the send and the receive together (as in nccl-tests).
#include "tools/chorus-perf/coll.h"

namespace chorus::perf {
namespace {

int sendPeer(const CollArgs& a) { return (a.rank + 1) % a.nranks; }
int recvPeer(const CollArgs& a) { return (a.rank - 1 + a.nranks) % a.nranks; }

chorusResult_t start(const CollArgs& a, std::vector<chorusRequest_t>*) {
  chorusResult_t r = chorusGroupStart();
  if (r != chorusSuccess) return r;
  chorusResult_t s = chorusSend(a.send, a.count, a.type, sendPeer(a), a.comm, nullptr);
  chorusResult_t v =
      s == chorusSuccess ? chorusRecv(a.recv, a.count, a.type, recvPeer(a), a.comm, nullptr) : s;
  // The group is always closed, even after a failed call, so the thread's group state is sane.
  chorusResult_t e = chorusGroupEnd();
  return v != chorusSuccess ? v : e;
}

Expect expect(const CollArgs& a, size_t i) { return {Expect::Kind::kCopy, recvPeer(a), i}; }

}  // namespace

const CollImpl kSendRecvImpl = {Coll::kSendRecv, start, expect, false};

}  // namespace chorus::perf
