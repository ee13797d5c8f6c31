// The contract between chorus-perf's harness and its per-collective files (coll_*.cc).
//
// A collective contributes two things: how to start it (blocking or nonblocking), and where each
// element of its output must come from, which is all the harness needs to check a run. Sizes,
// in-place layouts and bandwidth formulas are shared arithmetic in perf_params.h.
#pragma once

#include <cstddef>
#include <vector>

#include "chorus/chorus.h"
#include "tools/chorus-perf/perf_params.h"

namespace chorus::perf {

// The arguments of one call, already laid out for out-of-place or in-place.
struct CollArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // the count argument (CollGeometry::count)
  chorusDataType_t type = chorusFloat32;
  chorusRedOp_t op = chorusSum;
  int root = 0;
  int rank = 0;
  int nranks = 1;
  chorusComm_t comm = nullptr;
  const chorusQuantConfig_t* quant = nullptr;  // --quant: the quantized form
};

// Where output element i of a rank must come from.
struct Expect {
  enum class Kind {
    kUnchecked,  // nothing is promised about this element (e.g. reduce on a non-root)
    kReduction,  // the reduction over all ranks of input element `index`
    kCopy,       // input element `index` of rank `rank`
  };
  Kind kind = Kind::kUnchecked;
  int rank = 0;
  size_t index = 0;
};

struct CollImpl {
  Coll coll;
  // Blocking form when reqs is null; otherwise the nonblocking form, whose requests are appended
  // to *reqs for the harness to wait on.
  chorusResult_t (*start)(const CollArgs& a, std::vector<chorusRequest_t>* reqs);
  // The source of output element i (0 <= i < CollGeometry::recvCount) on a.rank.
  Expect (*expect)(const CollArgs& a, size_t i);
  // Only the root's input matters (broadcast): other ranks leave their buffers poisoned so an
  // in-place broadcast that forgets to write them is caught.
  bool rootInputOnly;
};

extern const CollImpl kAllReduceImpl;
extern const CollImpl kAllGatherImpl;
extern const CollImpl kReduceScatterImpl;
extern const CollImpl kBroadcastImpl;
extern const CollImpl kReduceImpl;
extern const CollImpl kAllToAllImpl;
extern const CollImpl kSendRecvImpl;
extern const CollImpl kPingPongImpl;
extern const CollImpl kStreamImpl;

const CollImpl& collImpl(Coll c);

}  // namespace chorus::perf
