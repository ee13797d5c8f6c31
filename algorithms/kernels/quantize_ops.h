// The arithmetic and the byte layout of group quantization, shared by the CPU kernels
// (quantize.cc, scalar and AVX2) and the CUDA kernels (quantize.cu), so that every path gives the
// same bits. quantize.h states the contract; this file is how it is computed.
//
// Every float operation that decides a result is written once here, as a named function, and
// compiled by the host compiler and by nvcc (CHORUS_HD). On the device they are the _rn
// intrinsics, which nvcc never contracts into an FMA; quantize.cc is compiled with
// -ffp-contract=off for the same reason. Rounding to an integer code is the conversion
// instruction (cvtss2si / cvtps2dq on x86, which round in the current mode: nearest-even by
// default, as __float2int_rn always does on the GPU) or floor, which no mode affects.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if !defined(__CUDA_ARCH__) && (defined(__x86_64__) || defined(__SSE__))
#include <xmmintrin.h>
#define CHORUS_QUANT_HOST_SSE 1
#else
#define CHORUS_QUANT_HOST_SSE 0
#endif

#include "algorithms/kernels/dtype.h"
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

/// Whether t can be quantized (float32, bfloat16, float16).
CHORUS_HD constexpr bool isQuantizableType(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kBfloat16 || t == DataType::kFloat16;
}

namespace quant {

/// Whether the kernels can run a config (validateQuantConfig in quantize.h says why not).
CHORUS_HD constexpr bool usable(const QuantConfig& c) {
  return (c.bits == 4 || c.bits == 8) && c.groupSize != 0 && (c.bits == 8 || c.groupSize % 2 == 0);
}

// ---- the config as compile-time constants (host code) ----------------------------------------
//
// The CPU and the CUDA kernels are instantiated per shape (bits, symmetric or not, rounding) and
// per input type, so their loops carry no branch on the config; these pick the instance.

/// f.template operator()<kBits, kAsymmetric, kStochastic>() for a usable config's shape.
/// kDecodeOnly: the rounding does not matter (decoding kernels), so stochastic configs share the
/// round-to-nearest instances.
template <bool kDecodeOnly, class F>
void withShape(const QuantConfig& c, F&& f) {
  auto rounding = [&]<uint32_t kBits, bool kAsymmetric>() {
    if (!kDecodeOnly && c.stochastic) {
      f.template operator()<kBits, kAsymmetric, true>();
    } else {
      f.template operator()<kBits, kAsymmetric, false>();
    }
  };
  if (c.bits == 8) {
    c.asymmetric ? rounding.template operator()<8, true>()
                 : rounding.template operator()<8, false>();
  } else {
    c.asymmetric ? rounding.template operator()<4, true>()
                 : rounding.template operator()<4, false>();
  }
}

/// f.template operator()<T>() for the quantizable types; false (f not called) for the others.
template <class F>
bool withType(DataType t, F&& f) {
  switch (t) {
    case DataType::kFloat32: f.template operator()<float>(); return true;
    case DataType::kBfloat16: f.template operator()<Bfloat16>(); return true;
    case DataType::kFloat16: f.template operator()<Float16>(); return true;
    default: return false;
  }
}

// ---- layout --------------------------------------------------------------------------------
//
// The functions take the shape as (bits, asymmetric) so the CPU loops can pass compile-time
// constants and the GPU kernels run-time values.

/// Bytes of a group's header: the float32 scale, then (asymmetric) the float32 offset.
CHORUS_HD constexpr size_t headerBytes(bool asymmetric) { return asymmetric ? 8 : 4; }

/// Bytes of the codes of n elements: one per element (8 bits), two elements per byte (4 bits;
/// an odd n leaves the high nibble of the last byte zero).
CHORUS_HD constexpr size_t payloadBytes(uint32_t bits, uint64_t n) {
  return bits == 8 ? size_t(n) : size_t((n + 1) / 2);
}

/// Bytes of the record of a group of n elements (header + codes).
CHORUS_HD constexpr size_t recordBytes(uint32_t bits, bool asymmetric, uint64_t n) {
  return headerBytes(asymmetric) + payloadBytes(bits, n);
}

/// Bytes of `count` elements quantized: whole groups back to back, then the short last group.
CHORUS_HD inline size_t packedBytes(const QuantConfig& c, uint64_t count) {
  const uint64_t full = count / c.groupSize, rest = count % c.groupSize;
  return size_t(full) * recordBytes(c.bits, c.asymmetric, c.groupSize) +
         (rest != 0 ? recordBytes(c.bits, c.asymmetric, rest) : 0);
}

/// What a group's header holds, plus the reciprocal the encoder multiplies by.
struct GroupParams {
  float scale = 0;   ///< value of one code step
  float offset = 0;  ///< asymmetric: value of code 0 (the group's minimum); symmetric: 0
  float inv = 0;     ///< 1 / scale as the encoder uses it (0 when scale is 0)
};

CHORUS_HD inline void storeHeader(unsigned char* record, bool asymmetric, GroupParams p) {
  std::memcpy(record, &p.scale, 4);
  if (asymmetric) std::memcpy(record + 4, &p.offset, 4);
}

CHORUS_HD inline GroupParams loadHeader(const unsigned char* record, bool asymmetric) {
  GroupParams p;
  std::memcpy(&p.scale, record, 4);
  if (asymmetric) std::memcpy(&p.offset, record + 4, 4);
  return p;
}

// ---- code ranges ---------------------------------------------------------------------------

/// Lowest and highest code, as floats: symmetric [-(2^(b-1)-1), 2^(b-1)-1] (±7, ±127),
/// asymmetric [0, 2^b-1] (15, 255).
CHORUS_HD constexpr float codeLow(uint32_t bits, bool asymmetric) {
  return asymmetric ? 0.0f : -float((1u << (bits - 1)) - 1);
}
CHORUS_HD constexpr float codeHigh(uint32_t bits, bool asymmetric) {
  return asymmetric ? float((1u << bits) - 1) : float((1u << (bits - 1)) - 1);
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

/// v rounded to an integer code: nearest, ties to even (in the default rounding mode, the one
/// the kernels assume). Scalar and vector x86 code use the same conversion, so they agree in
/// any mode.
CHORUS_HD inline int32_t codeNearest(float v) {
#if defined(__CUDA_ARCH__)
  return __float2int_rn(v);
#elif CHORUS_QUANT_HOST_SSE
  return _mm_cvtss_si32(_mm_set_ss(v));
#else
  return int32_t(std::nearbyint(v));
#endif
}

CHORUS_HD inline float floorOf(float v) {
#if defined(__CUDA_ARCH__)
  return floorf(v);
#else
  return std::floor(v);
#endif
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

CHORUS_HD inline GroupParams paramsOf(const Extent& e, uint32_t bits, bool asymmetric) {
  return asymmetric ? asymmetricParams(e.lo, e.hi, codeHigh(bits, asymmetric))
                    : symmetricParams(e.absmax, codeHigh(bits, asymmetric));
}

// ---- stochastic rounding: a counter-based generator ----------------------------------------
//
// The random number for element i (its index in the stream being quantized, see quantize.h) is
// a hash of (seed, i): no state, so the result depends neither on how the work is split nor on
// the order it is done in. One hash serves a pair of elements, 2k and 2k + 1: its low 16 bits
// go to the even element, its high 16 bits to the odd one (a vector loop hashes half as many
// lanes as it rounds: the hash was most of the encoder's work). The hash is a 32-bit
// multiply-xorshift permutation (the "lowbias32" constants from Chris Wellons' hash-prospector
// search) of an affine map of the pair index's low half, m * k + a, whose odd multiplier m and
// addend a come from the seed (a also from the pair index's high half): a bijection of the 2^32
// pair indices for every key, so no two pairs of a stretch share a hash. 32-bit operations only:
// AVX2 and GPUs multiply 32-bit lanes natively, and a vector loop steps m * k by adding
// m * width.

CHORUS_HD inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

/// The keys for the 2^32 pairs (2^33 elements) whose pair index k = i >> 1 has high half
/// pairHigh = k >> 32.
struct RandomKeys {
  uint32_t mult = 1;  ///< odd
  uint32_t add = 0;
};

CHORUS_HD inline RandomKeys randomKeys(uint64_t seed, uint32_t pairHigh) {
  const uint32_t a = mix32(uint32_t(seed >> 32) + 0x9e3779b9u);
  RandomKeys k;
  k.mult = mix32(uint32_t(seed) ^ a) | 1u;
  k.add = mix32((pairHigh ^ k.mult) + 0x85ebca6bu);
  return k;
}

/// The keys of element `index`'s pair.
CHORUS_HD inline RandomKeys randomKeysFor(uint64_t seed, uint64_t index) {
  return randomKeys(seed, uint32_t(index >> 33));
}

/// The hash of the pair whose index has low half pairLow: 16 random bits for each element.
CHORUS_HD inline uint32_t pairHash(RandomKeys k, uint32_t pairLow) {
  return mix32(pairLow * k.mult + k.add);
}

/// 2 r + 1 for the 16 random bits r of element `index` (keys: randomKeysFor(seed, index)).
CHORUS_HD inline uint32_t randomOdd17(RandomKeys k, uint64_t index) {
  const uint32_t h = pairHash(k, uint32_t(index >> 1));
  const uint32_t r = (index & 1) != 0 ? h >> 16 : h & 0xffffu;
  return 2 * r + 1;
}

/// Uniform in (0, 1): (2 r + 1) 2^-17, the midpoints of 2^16 equal steps (exact in float).
/// Midpoints, so that E[floor(v + u)] - v is within ±2^-17 of a step for every v and averages
/// 0 over the fraction of v; the left ends, r 2^-16, would bias every code down by up to 2^-16.
inline constexpr float kTwoToMinus17 = 7.62939453125e-06f;
CHORUS_HD inline float uniform(RandomKeys k, uint64_t index) {
  return mul(float(int32_t(randomOdd17(k, index))), kTwoToMinus17);
}

// ---- one element ---------------------------------------------------------------------------

/// The value the rounding step starts from: x / scale relative to the offset, NaN replaced by
/// the lowest code. No upper clamp is needed: x is at most the group's absmax (or max), so
/// v <= high * (1 + 2^-23) — the reciprocal and the product each round once — and that rounds
/// to high; likewise v >= low (x - min >= 0 exactly, since rounding is monotonic).
CHORUS_HD inline float scaled(float x, GroupParams p, bool asymmetric, float low) {
  const float v = asymmetric ? mul(sub(x, p.offset), p.inv) : mul(x, p.inv);
  return atLeast(v, low);
}

/// Stochastic code: floor(v + u) with u uniform in (0, 1), so the code is ceil(v) with
/// probability frac(v) and the expected code is v (up to the 2^-16 resolution of u, see
/// uniform, and the float rounding of v + u, each below 2^-17 of a step). v + u can reach
/// high + 1 only by rounding, hence the clamp.
CHORUS_HD inline int32_t codeStochastic(float v, float u, float high) {
  return int32_t(atMost(floorOf(add(v, u)), high));
}

/// The value of a code.
CHORUS_HD inline float decode(int32_t q, GroupParams p, bool asymmetric) {
  const float v = mul(float(q), p.scale);
  return asymmetric ? add(v, p.offset) : v;
}

/// The code of element j of a group's payload: a signed byte (symmetric 8 bits), an unsigned
/// byte (asymmetric 8 bits), or nibble j % 2 of byte j / 2 (the low nibble for even j) read as
/// 4-bit two's complement (symmetric) or unsigned (asymmetric).
CHORUS_HD inline int32_t loadCode(const unsigned char* payload, uint64_t j, uint32_t bits,
                                  bool asymmetric) {
  if (bits == 8) return asymmetric ? int32_t(payload[j]) : int32_t(int8_t(payload[j]));
  const uint32_t nibble = (payload[j / 2] >> ((j % 2) * 4)) & 0xfu;
  return asymmetric ? int32_t(nibble) : int32_t(nibble ^ 8u) - 8;
}

/// Code q stored into a payload: byte j (8 bits) or nibble j % 2 of byte j / 2 (4 bits), the
/// other nibble kept (it must have been zeroed or written before).
CHORUS_HD inline void storeCode(unsigned char* payload, uint64_t j, uint32_t bits, int32_t q) {
  if (bits == 8) {
    payload[j] = (unsigned char)(q);
  } else if (j % 2 == 0) {
    payload[j / 2] = (unsigned char)(uint32_t(q) & 0xfu);
  } else {
    payload[j / 2] = (unsigned char)(payload[j / 2] | ((uint32_t(q) & 0xfu) << 4));
  }
}

}  // namespace quant
}  // namespace chorus::kernels
