// The narrow float conversions against the format definitions: every bit pattern decoded and
// round-tripped, and float32 -> narrow rounding compared with a nearest-value search over the
// format's own table (ties to the even pattern), which shares no code with the bit tricks.
#include "algorithms/kernels/float_formats.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace chorus::kernels {
namespace {

struct Format {
  const char* name;
  int expBits;
  int manBits;
  bool hasInf;         // IEEE-style all-ones exponent (inf and NaN); false for e4m3 "fn"
  bool saturates;      // overflow gives max finite rather than inf
  uint32_t maxFinite;  // bit pattern of the largest finite value
  float (*decode)(uint32_t);
  uint32_t (*encode)(float);
};

// Value of a pattern straight from the definition (sign, biased exponent, mantissa). With
// asNormal an all-ones exponent is read as an ordinary binade, which gives the value just past
// the largest finite one: where overflow rounding starts.
double referenceDecode(const Format& f, uint32_t bits, bool asNormal = false) {
  const int bias = (1 << (f.expBits - 1)) - 1;
  const uint32_t man = bits & ((1u << f.manBits) - 1);
  const uint32_t exp = (bits >> f.manBits) & ((1u << f.expBits) - 1);
  const bool negative = (bits >> (f.expBits + f.manBits)) & 1;
  double v;
  const uint32_t allOnes = (1u << f.expBits) - 1;
  if (!asNormal && f.hasInf && exp == allOnes) {
    v = man == 0 ? INFINITY : NAN;
  } else if (!asNormal && !f.hasInf && exp == allOnes && man == (1u << f.manBits) - 1) {
    v = NAN;
  } else if (exp == 0) {
    v = std::ldexp(double(man), 1 - bias - f.manBits);
  } else {
    v = std::ldexp(1.0 + std::ldexp(double(man), -f.manBits), int(exp) - bias);
  }
  return negative ? -v : v;
}

const Format kFormats[] = {
    {"float16", 5, 10, true, false, 0x7bff, [](uint32_t b) { return halfBitsToFloat(uint16_t(b)); },
     [](float x) -> uint32_t { return floatToHalfBits(x); }},
    {"bfloat16", 8, 7, true, false, 0x7f7f,
     [](uint32_t b) { return bfloat16BitsToFloat(uint16_t(b)); },
     [](float x) -> uint32_t { return floatToBfloat16Bits(x); }},
    {"float8e4m3", 4, 3, false, true, kE4m3MaxFinite,
     [](uint32_t b) { return e4m3BitsToFloat(uint8_t(b)); },
     [](float x) -> uint32_t { return floatToE4m3Bits(x); }},
    {"float8e5m2", 5, 2, true, true, kE5m2MaxFinite,
     [](uint32_t b) { return e5m2BitsToFloat(uint8_t(b)); },
     [](float x) -> uint32_t { return floatToE5m2Bits(x); }},
};

void PrintTo(const Format& f, std::ostream* os) { *os << f.name; }

class FloatFormatTest : public ::testing::TestWithParam<Format> {
 protected:
  const Format& f() const { return GetParam(); }
  uint32_t signBit() const { return 1u << (f().expBits + f().manBits); }
  uint32_t patternCount() const { return 1u << (1 + f().expBits + f().manBits); }
  bool isNanPattern(uint32_t bits) const { return std::isnan(referenceDecode(f(), bits)); }
  bool isNanBits(uint32_t bits) const { return std::isnan(f().decode(bits)); }

  // Round-to-nearest-even by search over the finite non-negative patterns, which are ordered
  // by value. Pattern maxFinite + 1 stands for "overflowed".
  uint32_t referenceEncode(float x) const {
    if (std::isnan(x)) return ~0u;  // any NaN
    const uint32_t sign = std::signbit(x) ? signBit() : 0u;
    const double ax = std::fabs(double(x));
    const uint32_t over = f().maxFinite + 1;
    const auto value = [&](uint32_t p) { return referenceDecode(f(), p, /*asNormal=*/true); };
    uint32_t pick;
    if (ax >= value(over)) {
      pick = over;
    } else {
      uint32_t lo = 0, hi = over;  // value(lo) <= ax < value(hi)
      while (hi - lo > 1) {
        const uint32_t mid = (lo + hi) / 2;
        (value(mid) <= ax ? lo : hi) = mid;
      }
      const double below = ax - value(lo), above = value(hi) - ax;
      pick = below < above ? lo : above < below ? hi : (lo % 2 == 0 ? lo : hi);
    }
    if (pick == over) {
      pick = f().saturates ? f().maxFinite : (over);  // `over` is the inf pattern here
    }
    return sign | pick;
  }

  void expectEncodes(float x) const {
    const uint32_t want = referenceEncode(x);
    const uint32_t got = f().encode(x);
    if (want == ~0u) {
      EXPECT_TRUE(isNanBits(got)) << f().name << ": NaN 0x" << std::hex
                                  << std::bit_cast<uint32_t>(x) << " gave 0x" << got;
    } else {
      EXPECT_EQ(got, want) << f().name << ": " << x << " (0x" << std::hex
                           << std::bit_cast<uint32_t>(x) << ")";
    }
  }
};

TEST_P(FloatFormatTest, EveryPatternDecodesAsDefined) {
  for (uint32_t bits = 0; bits < patternCount(); ++bits) {
    const double want = referenceDecode(f(), bits);
    const float got = f().decode(bits);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << bits;
    } else {
      ASSERT_EQ(double(got), want) << std::hex << bits;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << std::hex << bits;  // -0
    }
  }
}

TEST_P(FloatFormatTest, EveryFinitePatternRoundTripsAndNanStaysNan) {
  int finite = 0, nans = 0;
  for (uint32_t bits = 0; bits < patternCount(); ++bits) {
    const float x = f().decode(bits);
    const uint32_t back = f().encode(x);
    if (isNanPattern(bits)) {
      ASSERT_TRUE(isNanBits(back)) << std::hex << bits << " -> " << back;
      ++nans;
    } else if (std::isinf(x)) {
      // float16/bfloat16 keep infinities; float8 saturates them (CUDA satfinite).
      const uint32_t sign = bits & signBit();
      ASSERT_EQ(back, f().saturates ? (sign | f().maxFinite) : bits) << std::hex << bits;
    } else {
      ASSERT_EQ(back, bits) << std::hex << bits;
      ++finite;
    }
  }
  EXPECT_GT(finite, 0);
  EXPECT_GT(nans, 0);
}

TEST_P(FloatFormatTest, TiesRoundToEvenEverywhere) {
  // The exact midpoint between every pair of neighbours (subnormals, the normal/subnormal
  // boundary, and max finite vs. overflow included), plus the floats just either side of it.
  const uint32_t over = f().maxFinite + 1;
  for (uint32_t p = 0; p < over; ++p) {
    const double lo = referenceDecode(f(), p, true), hi = referenceDecode(f(), p + 1, true);
    const float mid = float((lo + hi) / 2);
    ASSERT_EQ(double(mid), (lo + hi) / 2) << "midpoint not a float";
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY), float(lo)}) {
      expectEncodes(x);
      expectEncodes(-x);
    }
    if (::testing::Test::HasFailure()) return;
  }
}

TEST_P(FloatFormatTest, RandomFloatsRoundToNearest) {
  std::mt19937 rng(12345);
  const int bias = (1 << (f().expBits - 1)) - 1;
  // Exponents from below the smallest subnormal to above the largest finite value.
  std::uniform_int_distribution<int> exp(-bias - f().manBits - 3, bias + 3);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  for (int i = 0; i < 100000; ++i) {
    expectEncodes(std::ldexp(mant(rng), exp(rng)) * ((i & 1) ? -1.0f : 1.0f));
    expectEncodes(std::bit_cast<float>(uint32_t(rng())));  // anything, NaN and inf included
    if (::testing::Test::HasFailure()) return;
  }
}

TEST_P(FloatFormatTest, OverflowAndSpecials) {
  const float big = std::numeric_limits<float>::max();
  const uint32_t overflowed = f().saturates ? f().maxFinite : f().maxFinite + 1;
  EXPECT_EQ(f().encode(big), overflowed);
  EXPECT_EQ(f().encode(-big), signBit() | overflowed);
  EXPECT_EQ(f().encode(INFINITY), overflowed);
  EXPECT_EQ(f().encode(-INFINITY), signBit() | overflowed);
  EXPECT_TRUE(isNanBits(f().encode(NAN)));
  EXPECT_TRUE(isNanBits(f().encode(-NAN)));
  EXPECT_TRUE(isNanBits(f().encode(std::numeric_limits<float>::signaling_NaN())));
  EXPECT_EQ(f().encode(0.0f), 0u);
  EXPECT_EQ(f().encode(-0.0f), signBit());
  // Below half the smallest subnormal of every format (bfloat16's is 2^-133).
  EXPECT_EQ(f().encode(std::numeric_limits<float>::denorm_min()), 0u);
}

INSTANTIATE_TEST_SUITE_P(AllFormats, FloatFormatTest, ::testing::ValuesIn(kFormats),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(FloatFormatLimitsTest, KnownValues) {
  EXPECT_EQ(halfBitsToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(halfBitsToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(e4m3BitsToFloat(kE4m3MaxFinite), 448.0f);
  EXPECT_EQ(e4m3BitsToFloat(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e5m2BitsToFloat(kE5m2MaxFinite), 57344.0f);
  EXPECT_EQ(e5m2BitsToFloat(0x01), std::ldexp(1.0f, -16));
  EXPECT_TRUE(std::isinf(e5m2BitsToFloat(kE5m2Inf)));
  EXPECT_EQ(floatToE4m3Bits(464.0f), kE4m3MaxFinite);    // tie with the NaN slot: even wins
  EXPECT_EQ(floatToE4m3Bits(465.0f), kE4m3MaxFinite);    // saturates
  EXPECT_EQ(floatToE5m2Bits(61440.0f), kE5m2MaxFinite);  // tie rounds to "inf", saturated
  EXPECT_EQ(floatToHalfBits(65519.0f), 0x7bff);
  EXPECT_EQ(floatToHalfBits(65520.0f), 0x7c00);  // tie rounds up to the even pattern: inf
  EXPECT_EQ(floatToBfloat16Bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie, even
  EXPECT_EQ(floatToBfloat16Bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
}

TEST(FloatFormatLimitsTest, StorageTypesAreTriviallyCopyable) {
  static_assert(std::is_trivially_copyable_v<Float16>);
  static_assert(std::is_trivially_copyable_v<Bfloat16>);
  static_assert(std::is_trivially_copyable_v<Float8e4m3>);
  static_assert(std::is_trivially_copyable_v<Float8e5m2>);
  EXPECT_EQ(toFloat(fromFloat<Float16>(1.5f)), 1.5f);
  EXPECT_EQ(toFloat(fromFloat<Bfloat16>(1.5f)), 1.5f);
  EXPECT_EQ(toFloat(fromFloat<Float8e4m3>(1.5f)), 1.5f);
  EXPECT_EQ(toFloat(fromFloat<Float8e5m2>(1.5f)), 1.5f);
}

}  // namespace
}  // namespace chorus::kernels
