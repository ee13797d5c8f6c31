// Narrow floating-point formats and their conversions to and from float32.
//
// Reductions on 16- and 8-bit floats widen to float32, compute, and round once on the way back,
// so these conversions decide the bits a collective produces. They are written once, as
// branch-free integer and float arithmetic, and compiled both by the host compiler (where the
// loops that call them vectorize) and by nvcc (CHORUS_HD), so a CPU and a GPU reduction of the
// same inputs give the same bits.
//
// Rules, all round-to-nearest-even:
//   float16   IEEE binary16 (1.5.10). Overflow -> inf. NaN -> quiet NaN, payload top bits kept
//             (what x86 F16C does, so the F16C fast path is bit-identical).
//   bfloat16  top half of a float32 (1.8.7). Overflow -> inf. NaN -> quiet NaN.
//   e4m3      "fn" float8 (1.4.3, bias 7): no infinities, S.1111.111 is NaN, max 448.
//   e5m2      float8 (1.5.2, bias 15), IEEE-like with infinities, max 57344.
// For both float8 formats a result beyond the largest finite value, infinities included,
// saturates to +-max finite: CUDA's __NV_SATFINITE and PTX cvt.rn.satfinite. A reduction on
// float8 data must not turn a large partial sum into inf or NaN. e5m2 infinities are still
// read as infinities.
#pragma once

#include <cstdint>
#include <type_traits>

#if !defined(__CUDA_ARCH__)
#include <bit>
#endif

#if defined(__CUDACC__)
#define CHORUS_HD __host__ __device__
#else
#define CHORUS_HD
#endif

namespace chorus::kernels {

// Storage types: distinct so templates can dispatch on them, trivially copyable so buffers of
// them are plain bytes.
struct Float16 {
  uint16_t bits;
};
struct Bfloat16 {
  uint16_t bits;
};
struct Float8e4m3 {
  uint8_t bits;
};
struct Float8e5m2 {
  uint8_t bits;
};

static_assert(sizeof(Float16) == 2 && std::is_trivially_copyable_v<Float16>);
static_assert(sizeof(Bfloat16) == 2 && std::is_trivially_copyable_v<Bfloat16>);
static_assert(sizeof(Float8e4m3) == 1 && std::is_trivially_copyable_v<Float8e4m3>);
static_assert(sizeof(Float8e5m2) == 1 && std::is_trivially_copyable_v<Float8e5m2>);

namespace detail {

CHORUS_HD inline uint32_t floatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return std::bit_cast<uint32_t>(f);
#endif
}

CHORUS_HD inline float bitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return std::bit_cast<float>(u);
#endif
}

// c ? t : f, as masks. The conversions compute the normal and the subnormal result (one of them
// with float arithmetic) and keep one. Under the default -ftrapping-math a plain ?: lets GCC move
// the float operation into a branch, which it then will not if-convert, and the loop stops
// vectorizing; an and/or select keeps both sides unconditional.
CHORUS_HD inline uint32_t selectBits(bool c, uint32_t t, uint32_t f) {
  const uint32_t m = 0u - uint32_t(c);
  return (t & m) | (f & ~m);
}

inline constexpr uint32_t kF32SignMask = 0x80000000u;
inline constexpr uint32_t kF32AbsMask = 0x7fffffffu;
inline constexpr uint32_t kF32Inf = 0x7f800000u;
inline constexpr uint32_t kF32QuietBit = 0x00400000u;
inline constexpr int kF32ManBits = 23;
inline constexpr int kF32Bias = 127;

// Whether |x|, given as float32 bits, is a NaN.
CHORUS_HD inline bool absBitsIsNan(uint32_t absBits) { return absBits > kF32Inf; }

// A binary float format narrower than float32 with kExpBits exponent and kManBits mantissa bits.
template <int kExpBitsV, int kManBitsV>
struct NarrowLayout {
  static constexpr int kExpBits = kExpBitsV;
  static constexpr int kManBits = kManBitsV;
  static constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  static constexpr int kMinExp = 1 - kBias;  // exponent of the smallest normal
  static constexpr int kDropBits = kF32ManBits - kManBits;
  static constexpr uint32_t kManMask = (1u << kManBits) - 1;
  static constexpr uint32_t kSignBit = 1u << (kExpBits + kManBits);
  static constexpr uint32_t kAbsMask = kSignBit - 1;
  static constexpr uint32_t kExpAllOnes = ((1u << kExpBits) - 1) << kManBits;
  // float32 bits of the smallest normal of the narrow format.
  static constexpr uint32_t kMinNormalF32 = uint32_t(kMinExp + kF32Bias) << kF32ManBits;
  // Added to a value below the smallest normal, this float has exactly the narrow format's
  // subnormal spacing as its ulp, so the FPU's own round-to-nearest-even does the rounding and
  // the low bits of the sum are the subnormal's mantissa.
  static constexpr uint32_t kSubnormalMagicF32 =
      uint32_t(kMinExp - kManBits + kF32ManBits + kF32Bias) << kF32ManBits;
  // Scale that turns a subnormal's integer mantissa into its value (a power of two, exact).
  static constexpr uint32_t kSubnormalUlpF32 = uint32_t(kMinExp - kManBits + kF32Bias)
                                               << kF32ManBits;
};

// |x| (as float32 bits, not NaN) rounded to nearest-even in the narrow layout, returned as
// narrow magnitude bits. The exponent is not clamped: the caller decides what overflow means.
template <class L>
CHORUS_HD inline uint32_t roundMagnitude(uint32_t absBits) {
  // Normal range: re-bias the exponent in place, then round off kDropBits with the carry
  // allowed to ripple into the exponent (that is how 1.111..1 rounds up to the next binade).
  const uint32_t rebiased = absBits - (uint32_t(kF32Bias - L::kBias) << kF32ManBits);
  const uint32_t lsb = (absBits >> L::kDropBits) & 1u;
  const uint32_t normal = (rebiased + ((1u << (L::kDropBits - 1)) - 1u) + lsb) >> L::kDropBits;
  // Subnormal range: see kSubnormalMagicF32.
  const float magic = bitsFloat(L::kSubnormalMagicF32);
  const uint32_t subnormal = floatBits(bitsFloat(absBits) + magic) - L::kSubnormalMagicF32;
  return selectBits(absBits < L::kMinNormalF32, subnormal, normal);
}

// Narrow magnitude bits (finite) to float32 bits; exact.
template <class L>
CHORUS_HD inline uint32_t widenFiniteMagnitude(uint32_t mag) {
  const uint32_t normal = (mag << L::kDropBits) + (uint32_t(kF32Bias - L::kBias) << kF32ManBits);
  // Subnormal (exponent field 0): mantissa times the subnormal ulp. An int-to-float convert and
  // a power-of-two multiply, so no float32 denormal is ever an operand (slow on some CPUs).
  const float subnormal = float(mag & L::kManMask) * bitsFloat(L::kSubnormalUlpF32);
  return selectBits((mag >> L::kManBits) == 0, floatBits(subnormal), normal);
}

using F16Layout = NarrowLayout<5, 10>;
using E4m3Layout = NarrowLayout<4, 3>;
using E5m2Layout = NarrowLayout<5, 2>;

}  // namespace detail

// ---- float16 -----------------------------------------------------------------------------

CHORUS_HD inline float halfBitsToFloat(uint16_t h) {
  using L = detail::F16Layout;
  const uint32_t sign = uint32_t(h & L::kSignBit) << 16;
  const uint32_t mag = h & L::kAbsMask;
  const uint32_t finite = detail::widenFiniteMagnitude<L>(mag);
  const uint32_t man = (mag & L::kManMask) << L::kDropBits;
  const uint32_t special = detail::kF32Inf | man | (man != 0 ? detail::kF32QuietBit : 0u);
  return detail::bitsFloat(sign | detail::selectBits(mag >= L::kExpAllOnes, special, finite));
}

CHORUS_HD inline uint16_t floatToHalfBits(float f) {
  using L = detail::F16Layout;
  const uint32_t bits = detail::floatBits(f);
  const uint32_t sign = (bits & detail::kF32SignMask) >> 16;
  const uint32_t absBits = bits & detail::kF32AbsMask;
  uint32_t mag = detail::roundMagnitude<L>(absBits);
  mag = detail::selectBits(mag > L::kExpAllOnes, L::kExpAllOnes, mag);  // overflow -> inf
  const uint32_t nan =
      (L::kExpAllOnes | (1u << (L::kManBits - 1)) | (absBits >> L::kDropBits)) & L::kAbsMask;
  return uint16_t(sign | detail::selectBits(detail::absBitsIsNan(absBits), nan, mag));
}

// ---- bfloat16 ----------------------------------------------------------------------------
// Same exponent range as float32, so rounding is one add on the bit pattern (subnormals and
// overflow to inf fall out of the carry) and widening is a shift.

CHORUS_HD inline float bfloat16BitsToFloat(uint16_t b) {
  return detail::bitsFloat(uint32_t(b) << 16);
}

// f rounded to bfloat16, left in the top 16 bits of the result (the low 16 are garbage). Loops
// that keep two bfloat16 per 32-bit lane use this form to avoid packing and unpacking.
// The NaN test is a float self-compare, one vector instruction; an integer test becomes an
// unsigned compare, which AVX2 lacks and emulates with two. Like all of the kernels, this
// assumes no -ffinite-math-only.
CHORUS_HD inline uint32_t floatToBfloat16High(float f) {
  const uint32_t bits = detail::floatBits(f);
  const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  const uint32_t nan = bits | detail::kF32QuietBit;
  return f != f ? nan : rounded;
}

CHORUS_HD inline uint16_t floatToBfloat16Bits(float f) {
  return uint16_t(floatToBfloat16High(f) >> 16);
}

// ---- float8 e4m3 (fn) --------------------------------------------------------------------

inline constexpr uint8_t kE4m3MaxFinite = 0x7e;  // 448
inline constexpr uint8_t kE4m3Nan = 0x7f;

CHORUS_HD inline float e4m3BitsToFloat(uint8_t v) {
  using L = detail::E4m3Layout;
  const uint32_t sign = uint32_t(v & L::kSignBit) << 24;
  const uint32_t mag = v & L::kAbsMask;
  const uint32_t finite = detail::widenFiniteMagnitude<L>(mag);
  const uint32_t nan = detail::kF32Inf | detail::kF32QuietBit;
  return detail::bitsFloat(sign | detail::selectBits(mag == kE4m3Nan, nan, finite));
}

CHORUS_HD inline uint8_t floatToE4m3Bits(float f) {
  using L = detail::E4m3Layout;
  const uint32_t bits = detail::floatBits(f);
  const uint32_t sign = (bits & detail::kF32SignMask) >> 24;
  const uint32_t absBits = bits & detail::kF32AbsMask;
  uint32_t mag = detail::roundMagnitude<L>(absBits);
  mag = detail::selectBits(mag > kE4m3MaxFinite, kE4m3MaxFinite, mag);  // saturate, inf too
  return uint8_t(sign | detail::selectBits(detail::absBitsIsNan(absBits), kE4m3Nan, mag));
}

// ---- float8 e5m2 -------------------------------------------------------------------------

inline constexpr uint8_t kE5m2MaxFinite = 0x7b;  // 57344
inline constexpr uint8_t kE5m2Inf = 0x7c;
inline constexpr uint8_t kE5m2Nan = 0x7e;  // the quiet NaN we produce

CHORUS_HD inline float e5m2BitsToFloat(uint8_t v) {
  using L = detail::E5m2Layout;
  const uint32_t sign = uint32_t(v & L::kSignBit) << 24;
  const uint32_t mag = v & L::kAbsMask;
  const uint32_t finite = detail::widenFiniteMagnitude<L>(mag);
  const uint32_t special =
      mag == kE5m2Inf ? detail::kF32Inf : detail::kF32Inf | detail::kF32QuietBit;
  return detail::bitsFloat(sign | detail::selectBits(mag >= L::kExpAllOnes, special, finite));
}

CHORUS_HD inline uint8_t floatToE5m2Bits(float f) {
  using L = detail::E5m2Layout;
  const uint32_t bits = detail::floatBits(f);
  const uint32_t sign = (bits & detail::kF32SignMask) >> 24;
  const uint32_t absBits = bits & detail::kF32AbsMask;
  uint32_t mag = detail::roundMagnitude<L>(absBits);
  mag = detail::selectBits(mag > kE5m2MaxFinite, kE5m2MaxFinite, mag);  // saturate, inf too
  return uint8_t(sign | detail::selectBits(detail::absBitsIsNan(absBits), kE5m2Nan, mag));
}

// ---- typed wrappers ----------------------------------------------------------------------

CHORUS_HD inline float toFloat(Float16 v) { return halfBitsToFloat(v.bits); }
CHORUS_HD inline float toFloat(Bfloat16 v) { return bfloat16BitsToFloat(v.bits); }
CHORUS_HD inline float toFloat(Float8e4m3 v) { return e4m3BitsToFloat(v.bits); }
CHORUS_HD inline float toFloat(Float8e5m2 v) { return e5m2BitsToFloat(v.bits); }

// fromFloat<Float16>(x) etc.: round x into the storage type T.
template <class T>
CHORUS_HD T fromFloat(float f);
template <>
CHORUS_HD inline Float16 fromFloat<Float16>(float f) {
  return Float16{floatToHalfBits(f)};
}
template <>
CHORUS_HD inline Bfloat16 fromFloat<Bfloat16>(float f) {
  return Bfloat16{floatToBfloat16Bits(f)};
}
template <>
CHORUS_HD inline Float8e4m3 fromFloat<Float8e4m3>(float f) {
  return Float8e4m3{floatToE4m3Bits(f)};
}
template <>
CHORUS_HD inline Float8e5m2 fromFloat<Float8e5m2>(float f) {
  return Float8e5m2{floatToE5m2Bits(f)};
}

template <class T>
inline constexpr bool kIsNarrowFloat =
    std::is_same_v<T, Float16> || std::is_same_v<T, Bfloat16> || std::is_same_v<T, Float8e4m3> ||
    std::is_same_v<T, Float8e5m2>;

}  // namespace chorus::kernels
