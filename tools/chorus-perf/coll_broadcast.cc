// broadcast: every rank ends with the root's input.
#include "tools/chorus-perf/coll.h"

namespace chorus::perf {
namespace {

chorusResult_t start(const CollArgs& a, std::vector<chorusRequest_t>* reqs) {
  if (reqs == nullptr) return chorusBroadcast(a.send, a.recv, a.count, a.type, a.root, a.comm, nullptr);
  chorusRequest_t req = nullptr;
  chorusResult_t r = chorusIBroadcast(a.send, a.recv, a.count, a.type, a.root, a.comm, nullptr, &req);
  if (r == chorusSuccess) reqs->push_back(req);
  return r;
}

Expect expect(const CollArgs& a, size_t i) { return {Expect::Kind::kCopy, a.root, i}; }

}  // namespace

const CollImpl kBroadcastImpl = {Coll::kBroadcast, start, expect, true};

}  // namespace chorus::perf
