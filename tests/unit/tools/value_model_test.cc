// The checker's promise: expected results are exact in every type, for any evaluation order an
// algorithm may choose, and a poisoned (unwritten) element never passes.
#include "tools/chorus-perf/value_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "tools/chorus-perf/element_codec.h"
#include "tools/chorus-perf/perf_params.h"

namespace chorus::perf {
namespace {

double roundTrip(chorusDataType_t t, double v) {
  unsigned char buf[8] = {};
  encodeElement(t, v, buf);
  return decodeElement(t, buf);
}

// Whether v can be stored in t without change (range-checked first: converting an out-of-range
// double to an integer type is undefined).
bool representable(chorusDataType_t t, double v) {
  TypeLimits l = typeLimits(t);
  if (!l.isFloat) {
    if (v != std::floor(v) || std::fabs(v) > l.exact) return false;
    if (!l.isSigned && v < 0) return false;
    return true;
  }
  return roundTrip(t, v) == v;
}

TEST(ElementCodec, SmallIntegersRoundTripInEveryType) {
  for (chorusDataType_t t : kAllTypes) {
    TypeLimits l = typeLimits(t);
    double top = std::min(l.exact, 4096.0);
    for (double v = l.isSigned ? -top : 0; v <= top; v += 1) {
      ASSERT_EQ(roundTrip(t, v), v) << typeName(t) << " " << v;
    }
    ASSERT_EQ(roundTrip(t, l.exact), l.exact) << typeName(t);
  }
}

TEST(ElementCodec, KnownEncodings) {
  // Bit patterns from the format definitions.
  EXPECT_EQ(encodeMinifloat(1.0, 5, 10, false), 0x3c00u);    // half
  EXPECT_EQ(encodeMinifloat(-2.0, 5, 10, false), 0xc000u);
  EXPECT_EQ(encodeMinifloat(65504.0, 5, 10, false), 0x7bffu);
  EXPECT_EQ(encodeMinifloat(1e6, 5, 10, false), 0x7c00u);    // overflow: inf
  EXPECT_EQ(encodeMinifloat(std::ldexp(1.0, -24), 5, 10, false), 0x0001u);  // smallest subnormal
  EXPECT_EQ(encodeMinifloat(1.0, 8, 7, false), 0x3f80u);     // bfloat16
  EXPECT_EQ(encodeMinifloat(3.0, 8, 7, false), 0x4040u);
  EXPECT_EQ(encodeMinifloat(1.0, 4, 3, true), 0x38u);        // e4m3
  EXPECT_EQ(encodeMinifloat(448.0, 4, 3, true), 0x7eu);      // e4m3 max
  EXPECT_EQ(encodeMinifloat(-448.0, 4, 3, true), 0xfeu);
  EXPECT_EQ(encodeMinifloat(1.0, 5, 2, false), 0x3cu);       // e5m2
  EXPECT_EQ(encodeMinifloat(57344.0, 5, 2, false), 0x7bu);   // e5m2 max
  // Round to nearest even: 1 + 2^-11 is halfway between 1 and the next half.
  EXPECT_EQ(encodeMinifloat(1.0 + std::ldexp(1.0, -11), 5, 10, false), 0x3c00u);
  EXPECT_EQ(encodeMinifloat(1.0 + 3 * std::ldexp(1.0, -11), 5, 10, false), 0x3c02u);
  EXPECT_TRUE(std::isnan(decodeMinifloat(0x7f, 4, 3, true)));
  EXPECT_EQ(decodeMinifloat(0x7e, 4, 3, true), 448.0);
  EXPECT_TRUE(std::isinf(decodeMinifloat(0x7c, 5, 2, false)));
  EXPECT_EQ(decodeMinifloat(0x0001, 5, 10, false), std::ldexp(1.0, -24));
}

TEST(ElementCodec, EveryMinifloatPatternRoundTrips) {
  struct Fmt { int e, m; bool fn; int bits; };
  for (Fmt f : {Fmt{4, 3, true, 8}, Fmt{5, 2, false, 8}, Fmt{5, 10, false, 16}, Fmt{8, 7, false, 16}}) {
    for (uint32_t b = 0; b < (1u << f.bits); ++b) {
      double v = decodeMinifloat(b, f.e, f.m, f.fn);
      if (std::isnan(v)) continue;
      ASSERT_EQ(encodeMinifloat(v, f.e, f.m, f.fn), b) << f.e << "/" << f.m << " " << b;
    }
  }
}

TEST(ElementCodec, PoisonIsOutsideTheGeneratedRange) {
  for (chorusDataType_t t : kAllTypes) {
    unsigned char buf[8] = {};
    writePoison(t, buf);
    double p = decodeElement(t, buf);
    TypeLimits l = typeLimits(t);
    EXPECT_TRUE(std::isnan(p) || std::fabs(p) > l.exact) << typeName(t);
  }
}

// Reduces the inputs of one element in the given order, storing every partial result in the
// type as a ring or tree algorithm would, and requires each partial to be exact.
void expectExactPartials(const ValueModel& m, chorusDataType_t t, Op op, int nranks, size_t index,
                         const std::vector<int>& order) {
  double acc = m.input(order[0], index) * m.scalar(order[0]);
  ASSERT_TRUE(representable(t, acc)) << typeName(t) << " " << opName(op) << " n=" << nranks;
  for (size_t k = 1; k < order.size(); ++k) {
    double v = m.input(order[k], index) * m.scalar(order[k]);
    ASSERT_TRUE(representable(t, v));
    switch (op) {
      case Op::kProd: acc *= v; break;
      case Op::kMax: acc = std::max(acc, v); break;
      case Op::kMin: acc = std::min(acc, v); break;
      default: acc += v; break;
    }
    ASSERT_TRUE(representable(t, acc))
        << typeName(t) << " " << opName(op) << " n=" << nranks << " partial " << acc;
  }
  if (op != Op::kAvg) {
    EXPECT_TRUE(m.reductionMatches(acc, index)) << typeName(t) << " " << opName(op);
  }
}

TEST(ValueModel, EveryPartialResultIsExact) {
  std::mt19937 rng(7);
  for (chorusDataType_t t : kAllTypes) {
    for (Op op : kAllReduceOps) {
      for (int nranks : {1, 2, 3, 5, 8, 13, 64, 300}) {
        ValueModel m(t, op, nranks, 1234 + nranks);
        std::vector<int> order(static_cast<size_t>(nranks));
        std::iota(order.begin(), order.end(), 0);
        for (size_t index = 0; index < 40; ++index) {
          expectExactPartials(m, t, op, nranks, index, order);
          std::shuffle(order.begin(), order.end(), rng);
          expectExactPartials(m, t, op, nranks, index, order);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(ValueModel, AverageAcceptsEitherEvaluationOrder) {
  for (chorusDataType_t t : kAllTypes) {
    TypeLimits l = typeLimits(t);
    for (int nranks : {1, 2, 3, 7, 64}) {
      ValueModel m(t, Op::kAvg, nranks, 99);
      for (size_t i = 0; i < 64; ++i) {
        // Sum, then divide once.
        double sum = 0;
        for (int r = 0; r < nranks; ++r) sum += m.input(r, i);
        double q = sum / nranks;
        if (l.isFloat) {
          EXPECT_TRUE(m.reductionMatches(roundTrip(t, q), i)) << typeName(t) << " n=" << nranks;
          // Scale each input by 1/n first (what a premulsum-based avg does), rounding each step.
          double acc = roundTrip(t, roundTrip(t, m.input(0, i) * (1.0 / nranks)));
          for (int r = 1; r < nranks; ++r) {
            acc = roundTrip(t, acc + roundTrip(t, m.input(r, i) * (1.0 / nranks)));
          }
          EXPECT_TRUE(m.reductionMatches(acc, i)) << typeName(t) << " n=" << nranks << " got " << acc
                                                  << " want " << q;
        } else {
          EXPECT_TRUE(m.reductionMatches(std::trunc(q), i)) << typeName(t);
          EXPECT_TRUE(m.reductionMatches(std::floor(q), i)) << typeName(t);
          EXPECT_FALSE(m.reductionMatches(std::trunc(q) + 2, i)) << typeName(t);
        }
      }
    }
  }
}

TEST(ValueModel, PoisonNeverMatches) {
  for (chorusDataType_t t : kAllTypes) {
    unsigned char buf[8] = {};
    writePoison(t, buf);
    double p = decodeElement(t, buf);
    for (Op op : {Op::kNone, Op::kSum, Op::kProd, Op::kMax, Op::kMin, Op::kAvg, Op::kPreMulSum}) {
      for (int nranks : {1, 2, 5}) {
        ValueModel m(t, op, nranks, 5);
        for (size_t i = 0; i < 200; ++i) {
          if (op != Op::kNone) {  // kNone only moves data: there is no reduction to compare
            EXPECT_FALSE(m.reductionMatches(p, i)) << typeName(t) << " " << opName(op);
          }
          EXPECT_FALSE(m.copyMatches(p, 0, i)) << typeName(t);
        }
      }
    }
  }
}

TEST(ValueModel, InputsAreVariedAndFreshPerSeed) {
  for (chorusDataType_t t : kAllTypes) {
    for (Op op : {Op::kNone, Op::kSum, Op::kProd, Op::kMax}) {
      ValueModel a(t, op, 4, 1);
      ValueModel b(t, op, 4, 2);
      int distinct = 0, differsFromOtherSeed = 0, nonZero = 0;
      for (size_t i = 0; i < 256; ++i) {
        distinct += a.input(1, i) != a.input(1, i + 1);
        differsFromOtherSeed += a.input(1, i) != b.input(1, i);
        nonZero += a.input(1, i) != 0;
      }
      EXPECT_GT(distinct, 64) << typeName(t) << " " << opName(op);
      EXPECT_GT(differsFromOtherSeed, 64) << typeName(t) << " " << opName(op);
      EXPECT_GT(nonZero, 64) << typeName(t) << " " << opName(op);
      // Ranks differ too, or a collective that mixes up blocks would pass.
      int rankDiffers = 0;
      for (size_t i = 0; i < 256; ++i) rankDiffers += a.input(0, i) != a.input(3, i);
      EXPECT_GT(rankDiffers, 64) << typeName(t) << " " << opName(op);
    }
  }
}

TEST(ValueModel, WrongResultsAreCaught) {
  for (chorusDataType_t t : kAllTypes) {
    ValueModel m(t, Op::kSum, 3, 11);
    for (size_t i = 0; i < 50; ++i) {
      double want = m.expectedReduction(i);
      EXPECT_TRUE(m.reductionMatches(want, i));
      EXPECT_FALSE(m.reductionMatches(want + 1, i)) << typeName(t);
      // Forgetting one rank's contribution is caught whenever that contribution is non-zero.
      double missing = 0;
      for (int r = 0; r < 2; ++r) missing += m.input(r, i);
      if (m.input(2, i) != 0) {
        EXPECT_FALSE(m.reductionMatches(missing, i)) << typeName(t);
      }
    }
  }
}

TEST(ValueModel, PremulsumScalarsAlternate) {
  ValueModel m(chorusFloat32, Op::kPreMulSum, 4, 3);
  EXPECT_EQ(m.scalar(0), 1);
  EXPECT_EQ(m.scalar(1), 2);
  EXPECT_EQ(m.scalar(2), 1);
  ValueModel s(chorusFloat32, Op::kSum, 4, 3);
  EXPECT_EQ(s.scalar(1), 1);
  double want = 0;
  for (int r = 0; r < 4; ++r) want += m.input(r, 5) * (1 + r % 2);
  EXPECT_EQ(m.expectedReduction(5), want);
}

}  // namespace
}  // namespace chorus::perf
