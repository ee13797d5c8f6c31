// stream: rank 0 streams kStreamWindow messages to rank 1 back to back, then rank 1 answers with
// one empty message; a call is the window and its answer, and the harness reports the call's
// time divided by the window (legsPerCall): the time per message with many in flight, so
// algbw = size / that time is the one-way streaming bandwidth of the link. This is the pattern of
// osu_bw and of `ucx_perftest -t tag_bw` (pingpong measures one message at a time instead).
//
// The window is one blocking group of sends on rank 0 and one of receives on rank 1, also with
// -z 0 (as sendrecv: chorus has no nonblocking grouped form), so every message of the window is
// posted before the first completes. All of them come from and land in the same buffers, so
// rank 1 must end with rank 0's input; rank 0's output is not written (its answer is empty).
// The job has exactly two ranks (rankCountError).
#include "tools/chorus-perf/coll.h"

namespace chorus::perf {
namespace {

chorusResult_t window(const CollArgs& a) {
  chorusResult_t r = chorusGroupStart();
  if (r != chorusSuccess) return r;
  for (int i = 0; i < kStreamWindow && r == chorusSuccess; ++i)
    r = a.rank == 0 ? chorusSend(a.send, a.count, a.type, 1, a.comm, nullptr)
                    : chorusRecv(a.recv, a.count, a.type, 0, a.comm, nullptr);
  // The group is always closed, even after a failed call, so the thread's group state is sane.
  chorusResult_t e = chorusGroupEnd();
  return r != chorusSuccess ? r : e;
}

chorusResult_t start(const CollArgs& a, std::vector<chorusRequest_t>*) {
  chorusResult_t r = window(a);
  if (r != chorusSuccess) return r;
  // The answer: the window has been received (the time includes the last message's arrival).
  return a.rank == 0 ? chorusRecv(a.recv, 0, a.type, 1, a.comm, nullptr)
                     : chorusSend(a.send, 0, a.type, 0, a.comm, nullptr);
}

Expect expect(const CollArgs& a, size_t i) {
  if (a.rank == 0) return {};  // nothing is received there
  return {Expect::Kind::kCopy, 0, i};
}

}  // namespace

const CollImpl kStreamImpl = {Coll::kStream, start, expect, false};

}  // namespace chorus::perf
