// reduce: the root ends with the element-wise reduction of all inputs; other ranks' receive
// buffers are not part of the contract.
#include "tools/chorus-perf/coll.h"

namespace chorus::perf {
namespace {

chorusResult_t start(const CollArgs& a, std::vector<chorusRequest_t>* reqs) {
  if (reqs == nullptr) {
    return chorusReduce(a.send, a.recv, a.count, a.type, a.op, a.root, a.comm, nullptr);
  }
  chorusRequest_t req = nullptr;
  chorusResult_t r = chorusIReduce(a.send, a.recv, a.count, a.type, a.op, a.root, a.comm, nullptr, &req);
  if (r == chorusSuccess) reqs->push_back(req);
  return r;
}

Expect expect(const CollArgs& a, size_t i) {
  if (a.rank != a.root) return {};
  return {Expect::Kind::kReduction, 0, i};
}

}  // namespace

const CollImpl kReduceImpl = {Coll::kReduce, start, expect, false};

}  // namespace chorus::perf
