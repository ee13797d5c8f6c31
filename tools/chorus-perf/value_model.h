// The data chorus-perf feeds a checked run, and the test of what comes out.
//
// Inputs are a pure function of (seed, rank, element index), so every rank can compute any
// other rank's inputs and therefore the exact expected output of a collective without
// communicating. Values are chosen so that the expected result is exact in every type and for
// every order of evaluation an algorithm may pick (ring, tree, pairwise...):
//   sum/premulsum: integers whose partial sums stay within the type's exact range; when there
//                  are more ranks than that range allows, only some ranks contribute a non-zero
//                  value to each element (which ones rotates with the element index);
//   prod:          +-1, with a value of 2 allowed on a few ranks per element, so |product| is a
//                  small power of two;
//   max/min/none:  integers spread over the exact range;
//   avg:           the sum inputs; the expected quotient is compared with a tolerance, since
//                  an implementation may divide before or after summing and rounds either way.
// The premulsum scalar of rank r is 1 + r % 2, exact in every type.
#pragma once

#include <cstddef>
#include <cstdint>

#include "chorus/chorus.h"
#include "tools/chorus-perf/element_codec.h"
#include "tools/chorus-perf/perf_params.h"

namespace chorus::perf {

class ValueModel {
 public:
  ValueModel(chorusDataType_t type, Op op, int nranks, uint64_t seed);

  // Input element `index` of `rank`.
  double input(int rank, size_t index) const;
  // The premulsum scalar of `rank` (1 for other operators).
  double scalar(int rank) const;
  // Whether `got` is a correct result of reducing element `index` over all ranks.
  bool reductionMatches(double got, size_t index) const;
  // Whether `got` equals element `index` of `rank`'s input (data movement).
  bool copyMatches(double got, int rank, size_t index) const { return got == input(rank, index); }

  // Exposed for the unit tests.
  double expectedReduction(size_t index) const;

 private:
  enum class Shape { kSpread, kSumLike, kProd };
  uint64_t hash(int rank, size_t index) const;
  double uniform(uint64_t h, double k) const;  // integer in [-k, k], or [0, k] unsigned

  Op op_;
  int nranks_;
  uint64_t seed_;
  TypeLimits limits_;
  Shape shape_ = Shape::kSpread;
  double k_ = 1;       // magnitude of generated values
  int group_ = 1;      // sum-like: rank r contributes to element i iff (r + i) % group_ == 0
  int twos_ = 0;       // prod: ranks per element that may hold a 2
};

}  // namespace chorus::perf
