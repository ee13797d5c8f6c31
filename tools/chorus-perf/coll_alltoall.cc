// alltoall: block q of rank r's output is block r of rank q's input.
#include "tools/chorus-perf/coll.h"

namespace chorus::perf {
namespace {

chorusResult_t start(const CollArgs& a, std::vector<chorusRequest_t>* reqs) {
  if (reqs == nullptr) return chorusAllToAll(a.send, a.recv, a.count, a.type, a.comm, nullptr);
  chorusRequest_t req = nullptr;
  chorusResult_t r = chorusIAllToAll(a.send, a.recv, a.count, a.type, a.comm, nullptr, &req);
  if (r == chorusSuccess) reqs->push_back(req);
  return r;
}

Expect expect(const CollArgs& a, size_t i) {
  size_t from = i / a.count;
  return {Expect::Kind::kCopy, static_cast<int>(from),
          static_cast<size_t>(a.rank) * a.count + i % a.count};
}

}  // namespace

const CollImpl kAllToAllImpl = {Coll::kAllToAll, start, expect, false};

}  // namespace chorus::perf
