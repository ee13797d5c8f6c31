// The arithmetic and the byte layout of group quantization, shared by the CPU kernels
// (quantize.cc, scalar and AVX2) and the CUDA kernels (quantize.cu), so that every path gives the
// same bits. quantize.h states the contract; this file is how it is computed.
//
// Every float operation that decides a result is written once here, as a named function, and
// compiled by the host compiler and by nvcc (CHORUS_HD). On the device they are the _rn
// intrinsics, which nvcc never contracts into an FMA; quantize.cc is compiled with
// -ffp-contract=off for the same reason. Rounding to an integer is done with float additions
// (roundNearest, floorSmall) instead of library calls or conversion instructions, so it does not
// depend on which instructions a target has; the values it is applied to are clamped first and
// are always below 2^22 in magnitude.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "algorithms/kernels/float_formats.h"

namespace chorus::kernels {

/// How a buffer is quantized (see quantize.h for the full contract).
struct QuantConfig {
  uint32_t bits = 8;          ///< 4 or 8
  uint64_t groupSize = 256;   ///< elements per scale; even for 4 bits
  bool asymmetric = false;    ///< scale and offset per group instead of scale only
  bool stochastic = false;    ///< stochastic rounding instead of round-to-nearest-even
  uint64_t seed = 0;          ///< stochastic rounding only
};

namespace quant {

// ---- layout --------------------------------------------------------------------------------

/// Bytes of a group's header: the float32 scale, then (asymmetric) the float32 offset.
CHORUS_HD inline size_t headerBytes(const QuantConfig& c) { return c.asymmetric ? 8 : 4; }

/// Bytes of the codes of n elements: one per element (8 bits), two elements per byte (4 bits;
/// an odd n leaves the high nibble of the last byte zero).
CHORUS_HD inline size_t payloadBytes(const QuantConfig& c, uint64_t n) {
  return c.bits == 8 ? size_t(n) : size_t((n + 1) / 2);
}

/// Bytes of the record of a group of n elements (header + codes).
CHORUS_HD inline size_t recordBytes(const QuantConfig& c, uint64_t n) {
  return headerBytes(c) + payloadBytes(c, n);
}

/// Bytes of `count` elements quantized: whole groups back to back, then the short last group.
CHORUS_HD inline size_t packedBytes(const QuantConfig& c, uint64_t count) {
  const uint64_t full = count / c.groupSize, rest = count % c.groupSize;
  return size_t(full) * recordBytes(c, c.groupSize) + (rest != 0 ? recordBytes(c, rest) : 0);
}

/// What a group's header holds, plus the reciprocal the encoder multiplies by.
struct GroupParams {
  float scale = 0;   ///< value of one code step
  float offset = 0;  ///< asymmetric: value of code 0 (the group's minimum); symmetric: 0
  float inv = 0;     ///< 1 / scale as the encoder uses it (0 when scale is 0)
};

CHORUS_HD inline void storeHeader(unsigned char* record, const QuantConfig& c, GroupParams p) {
  std::memcpy(record, &p.scale, 4);
  if (c.asymmetric) std::memcpy(record + 4, &p.offset, 4);
}

CHORUS_HD inline GroupParams loadHeader(const unsigned char* record, const QuantConfig& c) {
  GroupParams p;
  std::memcpy(&p.scale, record, 4);
  if (c.asymmetric) std::memcpy(&p.offset, record + 4, 4);
  return p;
}

// ---- code ranges ---------------------------------------------------------------------------

/// Lowest and highest code, as floats: symmetric [-(2^(b-1)-1), 2^(b-1)-1] (±7, ±127),
/// asymmetric [0, 2^b-1] (15, 255).
CHORUS_HD inline float codeLow(const QuantConfig& c) {
  return c.asymmetric ? 0.0f : -float((1u << (c.bits - 1)) - 1);
}
CHORUS_HD inline float codeHigh(const QuantConfig& c) {
  return c.asymmetric ? float((1u << c.bits) - 1) : float((1u << (c.bits - 1)) - 1);
}

// ---- float operations (never contracted, identical on host and device) ---------------------

CHORUS_HD inline float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
CHORUS_HD inline float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
CHORUS_HD inline float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
CHORUS_HD inline float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/// max(v, lo) and min(v, hi) as x86's maxps/minps compute them (the second operand when either
/// is NaN), so a NaN input becomes the lowest code instead of an undefined conversion.
CHORUS_HD inline float atLeast(float v, float lo) { return v > lo ? v : lo; }
CHORUS_HD inline float atMost(float v, float hi) { return v < hi ? v : hi; }

/// 1.5 * 2^23: adding it leaves no fraction bits for |v| < 2^22, so the FPU rounds v to an
/// integer, to nearest-even (in the default rounding mode, the one kernels assume).
inline constexpr float kRoundMagic = 12582912.0f;

CHORUS_HD inline float roundNearest(float v) { return sub(add(v, kRoundMagic), kRoundMagic); }

/// floor(v) for |v| < 2^22.
CHORUS_HD inline float floorSmall(float v) {
  const float r = roundNearest(v);
  return r > v ? sub(r, 1.0f) : r;
}

// ---- group parameters ----------------------------------------------------------------------

/// A group's range as seen so far: its largest magnitude (symmetric) or its minimum and maximum
/// (asymmetric). Each update is maxps/minps(x, current): a NaN x leaves it unchanged and, with
/// NaN never stored, the result does not depend on the order elements are seen in (SIMD lanes,
/// GPU threads).
struct Extent {
  float absmax = 0.0f;
  float lo = detail::bitsFloat(detail::kF32Inf);
  float hi = detail::bitsFloat(detail::kF32Inf | detail::kF32SignMask);

  CHORUS_HD void include(float x, bool asymmetric) {
    if (asymmetric) {
      lo = atMost(x, lo);
      hi = atLeast(x, hi);
    } else {
      absmax = atLeast(detail::bitsFloat(detail::floatBits(x) & detail::kF32AbsMask), absmax);
    }
  }
  CHORUS_HD void merge(const Extent& o) {
    absmax = atLeast(o.absmax, absmax);
    lo = atMost(o.lo, lo);
    hi = atLeast(o.hi, hi);
  }
};

/// Smallest scale kept: below it (absmax or range under ~2^-123) the group is stored as scale 0,
/// all codes 0, so 1/scale can never overflow. The values lost are below 1.2e-38 * 255.
inline constexpr float kMinScale = 1.17549435e-38f;  // FLT_MIN

/// Symmetric: scale = absmax / high, codes = round(x / scale) in [-high, high].
CHORUS_HD inline GroupParams symmetricParams(float absmax, float high) {
  GroupParams p;
  p.scale = div(absmax, high);
  if (!(p.scale >= kMinScale)) return GroupParams{};
  p.inv = div(high, absmax);
  return p;
}

/// Asymmetric: offset = min, scale = (max - min) / high, codes = round((x - min) / scale).
/// -0 is folded into +0 first (min and max of {-0, +0} depend on the order they are seen in),
/// so every path stores the same bits.
CHORUS_HD inline GroupParams asymmetricParams(float lo, float hi, float high) {
  lo = add(lo, 0.0f);
  hi = add(hi, 0.0f);
  GroupParams p;
  p.offset = lo;
  const float range = sub(hi, lo);
  p.scale = div(range, high);
  if (!(p.scale >= kMinScale)) {
    p.scale = 0;
    return p;
  }
  p.inv = div(high, range);
  return p;
}

CHORUS_HD inline GroupParams paramsOf(const Extent& e, const QuantConfig& c) {
  return c.asymmetric ? asymmetricParams(e.lo, e.hi, codeHigh(c))
                      : symmetricParams(e.absmax, codeHigh(c));
}

// ---- stochastic rounding: a counter-based generator ----------------------------------------
//
// The random number for element i (its index in the stream being quantized, see quantize.h) is
// a hash of (seed, i): no state, so the result depends neither on how the work is split nor on
// the order it is done in. The hash is a 32-bit multiply-xorshift permutation (the "lowbias32"
// constants from Chris Wellons' hash-prospector search), applied twice with keys derived from
// the seed and the high half of i. 32-bit operations only: AVX2 and GPUs multiply 32-bit lanes
// natively.

CHORUS_HD inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

/// The keys for the 2^32 indices that share indexHigh = i >> 32.
struct RandomKeys {
  uint32_t k0 = 0;
  uint32_t k1 = 0;
};

CHORUS_HD inline RandomKeys randomKeys(uint64_t seed, uint32_t indexHigh) {
  const uint32_t a = mix32(uint32_t(seed >> 32) + 0x9e3779b9u);
  RandomKeys k;
  k.k0 = mix32(uint32_t(seed) ^ a);
  k.k1 = mix32((indexHigh ^ k.k0) + 0x85ebca6bu);
  return k;
}

/// 24 random bits for the element whose index has low half indexLow.
CHORUS_HD inline uint32_t randomBits24(RandomKeys k, uint32_t indexLow) {
  return mix32(mix32(indexLow ^ k.k0) + k.k1) >> 8;
}

/// Uniform in [0, 1), in steps of 2^-24 (exact in float).
inline constexpr float kTwoToMinus24 = 5.9604644775390625e-08f;
CHORUS_HD inline float uniform(RandomKeys k, uint32_t indexLow) {
  return mul(float(int32_t(randomBits24(k, indexLow))), kTwoToMinus24);
}

// ---- one element ---------------------------------------------------------------------------

/// The value the rounding step starts from: x / scale relative to the offset, clamped to the
/// code range (NaN -> low).
CHORUS_HD inline float scaled(float x, GroupParams p, bool asymmetric, float low, float high) {
  const float v = asymmetric ? mul(sub(x, p.offset), p.inv) : mul(x, p.inv);
  return atMost(atLeast(v, low), high);
}

/// Round-to-nearest-even code of a clamped value.
CHORUS_HD inline int32_t codeNearest(float v) { return int32_t(roundNearest(v)); }

/// Stochastic code: floor(v + u) with u uniform in [0, 1), so the code is ceil(v) with
/// probability frac(v) and the expected code is v (up to the float rounding of v + u, a bias
/// below 2^-20 of a step). v + u can reach high + 1 only by rounding, hence the final clamp.
CHORUS_HD inline int32_t codeStochastic(float v, float u, float high) {
  return int32_t(atMost(floorSmall(add(v, u)), high));
}

/// The value of a code.
CHORUS_HD inline float decode(int32_t q, GroupParams p, bool asymmetric) {
  const float v = mul(float(q), p.scale);
  return asymmetric ? add(v, p.offset) : v;
}

/// The code of element j of a group's payload: a signed byte (symmetric 8 bits), an unsigned
/// byte (asymmetric 8 bits), or nibble j % 2 of byte j / 2 — the low nibble for even j — read as
/// 4-bit two's complement (symmetric) or unsigned (asymmetric).
CHORUS_HD inline int32_t loadCode(const unsigned char* payload, uint64_t j, const QuantConfig& c) {
  if (c.bits == 8) return c.asymmetric ? int32_t(payload[j]) : int32_t(int8_t(payload[j]));
  const uint32_t nibble = (payload[j / 2] >> ((j % 2) * 4)) & 0xfu;
  return c.asymmetric ? int32_t(nibble) : int32_t(nibble ^ 8u) - 8;
}

}  // namespace quant
}  // namespace chorus::kernels
