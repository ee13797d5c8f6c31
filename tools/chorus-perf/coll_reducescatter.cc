// reducescatter: rank r ends with the reduction of block r of all inputs.
#include "tools/chorus-perf/coll.h"

namespace chorus::perf {
namespace {

chorusResult_t start(const CollArgs& a, std::vector<chorusRequest_t>* reqs) {
  if (reqs == nullptr) {
    return a.quant ? chorusReduceScatterQuantized(a.send, a.recv, a.count, a.type, a.op, a.quant,
                                                  a.comm, nullptr)
                   : chorusReduceScatter(a.send, a.recv, a.count, a.type, a.op, a.comm, nullptr);
  }
  chorusRequest_t req = nullptr;
  chorusResult_t r =
      a.quant ? chorusIReduceScatterQuantized(a.send, a.recv, a.count, a.type, a.op, a.quant,
                                              a.comm, nullptr, &req)
              : chorusIReduceScatter(a.send, a.recv, a.count, a.type, a.op, a.comm, nullptr, &req);
  if (r == chorusSuccess) reqs->push_back(req);
  return r;
}

Expect expect(const CollArgs& a, size_t i) {
  return {Expect::Kind::kReduction, 0, static_cast<size_t>(a.rank) * a.count + i};
}

}  // namespace

const CollImpl kReduceScatterImpl = {Coll::kReduceScatter, start, expect, false};

}  // namespace chorus::perf
