// allreduce: every rank ends with the element-wise reduction of all inputs.
#include "tools/chorus-perf/coll.h"

namespace chorus::perf {
namespace {

chorusResult_t start(const CollArgs& a, std::vector<chorusRequest_t>* reqs) {
  if (reqs == nullptr)
    return a.quant ? chorusAllReduceQuantized(a.send, a.recv, a.count, a.type, a.op, a.quant,
                                              a.comm, nullptr)
                   : chorusAllReduce(a.send, a.recv, a.count, a.type, a.op, a.comm, nullptr);
  chorusRequest_t req = nullptr;
  chorusResult_t r =
      a.quant ? chorusIAllReduceQuantized(a.send, a.recv, a.count, a.type, a.op, a.quant, a.comm,
                                          nullptr, &req)
              : chorusIAllReduce(a.send, a.recv, a.count, a.type, a.op, a.comm, nullptr, &req);
  if (r == chorusSuccess) reqs->push_back(req);
  return r;
}

Expect expect(const CollArgs&, size_t i) { return {Expect::Kind::kReduction, 0, i}; }

}  // namespace

const CollImpl kAllReduceImpl = {Coll::kAllReduce, start, expect, false};

}  // namespace chorus::perf
