// allgather: block q of every rank's output is rank q's input.
#include "tools/chorus-perf/coll.h"

namespace chorus::perf {
namespace {

chorusResult_t start(const CollArgs& a, std::vector<chorusRequest_t>* reqs) {
  if (reqs == nullptr)
    return a.quant ? chorusAllGatherQuantized(a.send, a.recv, a.count, a.type, a.quant, a.comm,
                                              nullptr)
                   : chorusAllGather(a.send, a.recv, a.count, a.type, a.comm, nullptr);
  chorusRequest_t req = nullptr;
  chorusResult_t r =
      a.quant ? chorusIAllGatherQuantized(a.send, a.recv, a.count, a.type, a.quant, a.comm,
                                          nullptr, &req)
              : chorusIAllGather(a.send, a.recv, a.count, a.type, a.comm, nullptr, &req);
  if (r == chorusSuccess) reqs->push_back(req);
  return r;
}

Expect expect(const CollArgs& a, size_t i) {
  return {Expect::Kind::kCopy, static_cast<int>(i / a.count), i % a.count};
}

}  // namespace

const CollImpl kAllGatherImpl = {Coll::kAllGather, start, expect, false};

}  // namespace chorus::perf
