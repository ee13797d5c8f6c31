#include "tools/chorus-perf/value_model.h"

#include <algorithm>
#include <cmath>

namespace chorus::perf {
namespace {

// Caps the spread of wide types: larger values test nothing more and keep sums readable.
constexpr double kMaxSpread = 1 << 20;
constexpr int kMaxTwos = 20;

uint64_t splitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

ValueModel::ValueModel(chorusDataType_t type, Op op, int nranks, uint64_t seed)
    : op_(op), nranks_(std::max(nranks, 1)), seed_(seed), limits_(typeLimits(type)) {
  double exact = limits_.exact;
  switch (op_) {
    case Op::kSum:
    case Op::kAvg:
    case Op::kPreMulSum: {
      shape_ = Shape::kSumLike;
      double budget = std::floor(exact / (op_ == Op::kPreMulSum && nranks_ > 1 ? 2 : 1));
      int maxContributors = static_cast<int>(std::min<double>(budget, nranks_));
      group_ = (nranks_ + maxContributors - 1) / maxContributors;
      int contributors = (nranks_ + group_ - 1) / group_;
      k_ = std::clamp(std::floor(budget / contributors), 1.0, kMaxSpread);
      break;
    }
    case Op::kProd:
      shape_ = Shape::kProd;
      twos_ = std::min({static_cast<int>(std::floor(std::log2(exact))), kMaxTwos, nranks_});
      break;
    case Op::kNone:
    case Op::kMax:
    case Op::kMin:
      shape_ = Shape::kSpread;
      k_ = std::min(exact, kMaxSpread);
      break;
  }
}

uint64_t ValueModel::hash(int rank, size_t index) const {
  return splitMix(splitMix(seed_ ^ (static_cast<uint64_t>(rank) << 40)) ^ index);
}

double ValueModel::uniform(uint64_t h, double k) const {
  uint64_t kk = static_cast<uint64_t>(k);
  if (!limits_.isSigned) return static_cast<double>(h % (kk + 1));
  return static_cast<double>(h % (2 * kk + 1)) - k;
}

double ValueModel::input(int rank, size_t index) const {
  uint64_t h = hash(rank, index);
  switch (shape_) {
    case Shape::kSpread: return uniform(h, k_);
    case Shape::kSumLike:
      if ((static_cast<uint64_t>(rank) + index) % static_cast<uint64_t>(group_) != 0) return 0;
      return uniform(h, k_);
    case Shape::kProd: {
      // Ranks index, index+1, ..., index+twos_-1 (mod nranks) may hold a 2.
      uint64_t n = static_cast<uint64_t>(nranks_);
      uint64_t distance = (static_cast<uint64_t>(rank) + n - index % n) % n;
      double mag = distance < static_cast<uint64_t>(twos_) && (h & 1) ? 2 : 1;
      bool negative = limits_.isSigned && ((h >> 1) & 1);
      return negative ? -mag : mag;
    }
  }
  return 0;
}

double ValueModel::scalar(int rank) const { return op_ == Op::kPreMulSum ? 1 + rank % 2 : 1; }

double ValueModel::expectedReduction(size_t index) const {
  double acc = input(0, index) * scalar(0);
  for (int r = 1; r < nranks_; ++r) {
    double v = input(r, index) * scalar(r);
    switch (op_) {
      case Op::kProd: acc *= v; break;
      case Op::kMax: acc = std::max(acc, v); break;
      case Op::kMin: acc = std::min(acc, v); break;
      default: acc += v; break;
    }
  }
  return op_ == Op::kAvg ? acc / nranks_ : acc;
}

bool ValueModel::reductionMatches(double got, size_t index) const {
  double want = expectedReduction(index);
  if (op_ != Op::kAvg) return got == want;
  if (std::isnan(got)) return false;
  if (!limits_.isFloat) return std::fabs(got - want) < 1;  // truncated, floored or rounded
  // Each of the <= 2n roundings (scaling each input, each partial sum, the result) is at most
  // half an ulp of a value bounded by the sum of magnitudes.
  double sumAbs = 0;
  for (int r = 0; r < nranks_; ++r) sumAbs += std::fabs(input(r, index));
  double tol = limits_.epsilon * (sumAbs + std::fabs(want)) + limits_.minNormal;
  return std::fabs(got - want) <= tol;
}

}  // namespace chorus::perf
