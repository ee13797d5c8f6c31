// Where the hierarchical builders apply (AlgoInfo::applies of every hier algorithm).
#include "algorithms/common/traffic.h"
#include "algorithms/hier/hier.h"
#include "algorithms/registry.h"

namespace chorus::algo {

const char* hierApplies(const sched::CollDesc&, const Platform& p) {
  return traffic::hierarchical(p.cost) ? nullptr
                                       : "needs several hosts of several ranks, all of one size";
}

}  // namespace chorus::algo
