// The AVX-512 (F, BW, VL, DQ) loops of the CPU quantization kernels, bit-identical to the
// scalar ones (quantize_loops.h says how the files fit together).
#include "algorithms/kernels/quantize_loops.h"

#if CHORUS_QUANT_X86
#include <immintrin.h>

#include <cmath>
#include <vector>

namespace chorus::kernels::quant_cpu {
namespace {

// ---- AVX-512 loops -------------------------------------------------------------------------
//
// Avx2Ops' operations, sixteen floats per instruction, in the same order. AVX-512 also narrows
// 32-, 16- and 64-bit lanes to bytes in one instruction (vpmovdb, vpmovwb, vpmovqb), so the code
// packing needs no pack-and-permute, and masks replace the blends. Tails go to ScalarOps.

#define CHORUS_TARGET_AVX512 [[gnu::target("avx2,f16c,avx512f,avx512bw,avx512vl,avx512dq")]]

// GCC 12's AVX-512 intrinsics fill the unused merge source with _mm512_undefined_ps(), a
// self-initialized variable that -Wuninitialized reports once the intrinsic is inlined here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

struct Avx512Ops {
  template <class T>
  CHORUS_TARGET_AVX512 static __m512 load16(const Bytes* p) {
    if constexpr (std::is_same_v<T, float>) {
      return _mm512_loadu_ps(p);
    } else if constexpr (std::is_same_v<T, Float16>) {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    } else {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
  }

  // Thirty-two elements: 0-15 in `a` and 16-31 in `b`, except bfloat16, where (as in
  // Avx2Ops::load16) `a` gets the even elements and `b` the odd ones, widened without a shuffle.
  template <class T>
  CHORUS_TARGET_AVX512 static void load32(const Bytes* p, __m512& a, __m512& b) {
    if constexpr (std::is_same_v<T, Bfloat16>) {
      const __m512i x = _mm512_loadu_si512(p);
      a = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
      b = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(int(0xffff0000u))));
    } else {
      a = load16<T>(p);
      b = load16<T>(p + 16 * sizeof(T));
    }
  }

  // Avx2Ops::bfloat16Bits on sixteen lanes, the NaN lanes chosen by a mask.
  CHORUS_TARGET_AVX512 static __m512i bfloat16Bits(__m512 v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb);
    const __m512i rounded = _mm512_add_epi32(bits, bias);
    const __mmask16 isNan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i quiet = _mm512_set1_epi32(int(detail::kF32QuietBit));
    return _mm512_srli_epi32(_mm512_mask_or_epi32(rounded, isNan, bits, quiet), 16);
  }

  template <class T>
  CHORUS_TARGET_AVX512 static void store16(Bytes* p, __m512 v) {
    if constexpr (std::is_same_v<T, float>) {
      _mm512_storeu_ps(p, v);
    } else if constexpr (std::is_same_v<T, Float16>) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                          _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(bfloat16Bits(v)));
    }
  }

  // Elements 0, 2, ..., 30 (even) and 1, 3, ..., 31 (odd) rounded into T and stored in order.
  template <class T>
  CHORUS_TARGET_AVX512 static void storeEvenOdd(Bytes* p, __m512 even, __m512 odd) {
    if constexpr (std::is_same_v<T, Bfloat16>) {
      // One 32-bit lane per pair, the even element in the low half: no shuffle.
      const __m512i w =
          _mm512_or_si512(bfloat16Bits(even), _mm512_slli_epi32(bfloat16Bits(odd), 16));
      _mm512_storeu_si512(p, w);
    } else {
      const __m512i low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7,
                                            23);
      const __m512i high = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14,
                                             30, 15, 31);
      store16<T>(p, _mm512_permutex2var_ps(even, low, odd));
      store16<T>(p + 16 * sizeof(T), _mm512_permutex2var_ps(even, high, odd));
    }
  }

  // Sixteen elements of which the first n (< 16) are read, the other lanes 0: a masked load,
  // which touches nothing past them.
  template <class T>
  CHORUS_TARGET_AVX512 static __m512 load16Partial(const Bytes* p, size_t n) {
    const auto mask = __mmask16((1u << n) - 1);
    if constexpr (std::is_same_v<T, float>) {
      return _mm512_maskz_loadu_ps(mask, p);
    } else {
      const __m256i h = _mm256_maskz_loadu_epi16(mask, p);
      if constexpr (std::is_same_v<T, Float16>) {
        return _mm512_cvtph_ps(h);
      } else {
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      }
    }
  }

  CHORUS_TARGET_AVX512 static __m512i absBits(__m512 x) {
    return _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(int(detail::kF32AbsMask)));
  }

  // The symmetric range of a group and whether all of it is finite (GroupRange): the absolute
  // maximum taken on the floats' bits, an AND and an unsigned integer maximum per sixteen
  // elements, as many instructions as the AND and maxps of extentSkippingNan. Non-negative
  // floats order like their bits, and NaN's bits lie above infinity's, so the result shows
  // whether the group has a NaN (then, rarely, it is measured again by extentSkippingNan, which
  // ignores the NaN as quant::Extent does) or an infinity.
  template <class M, class T>
  CHORUS_TARGET_AVX512 static void extent(const Bytes* src, size_t n, GroupRange& e) {
    if constexpr (M::kAsymmetric) {
      extentSkippingNan<M, T>(src, n, e);
      e.finite = false;
    } else {
      __m512i m0 = _mm512_set1_epi32(int(detail::floatBits(e.absmax))), m1 = m0, m2 = m0,
              m3 = m0;
      size_t i = 0;
      for (; i + 64 <= n; i += 64) {  // 64 a turn: in L2 the loop's own overhead shows
        __m512 x0, x1, x2, x3;
        load32<T>(src + i * sizeof(T), x0, x1);
        load32<T>(src + (i + 32) * sizeof(T), x2, x3);
        m0 = _mm512_max_epu32(m0, absBits(x0));
        m1 = _mm512_max_epu32(m1, absBits(x1));
        m2 = _mm512_max_epu32(m2, absBits(x2));
        m3 = _mm512_max_epu32(m3, absBits(x3));
      }
      m0 = _mm512_max_epu32(m0, m2);
      m1 = _mm512_max_epu32(m1, m3);
      for (; i + 32 <= n; i += 32) {
        __m512 x0, x1;
        load32<T>(src + i * sizeof(T), x0, x1);
        m0 = _mm512_max_epu32(m0, absBits(x0));
        m1 = _mm512_max_epu32(m1, absBits(x1));
      }
      for (; i + 16 <= n; i += 16) {
        m0 = _mm512_max_epu32(m0, absBits(load16<T>(src + i * sizeof(T))));
      }
      if (i < n) m1 = _mm512_max_epu32(m1, absBits(load16Partial<T>(src + i * sizeof(T), n - i)));
      const uint32_t bits = uint32_t(_mm512_reduce_max_epu32(_mm512_max_epu32(m0, m1)));
      if (bits > detail::kF32Inf) {  // a NaN
        extentSkippingNan<M, T>(src, n, e);
        e.finite = false;
        return;
      }
      e.absmax = detail::bitsFloat(bits);
      e.finite = e.finite && bits < detail::kF32Inf;
    }
  }

  // As Avx2Ops::extent: four accumulators, lanes without NaN, so the order does not matter.
  template <class M, class T>
  CHORUS_TARGET_AVX512 static void extentSkippingNan(const Bytes* src, size_t n, GroupRange& e) {
    size_t i = 0;
    if constexpr (M::kAsymmetric) {
      __m512 lo0 = _mm512_set1_ps(e.lo), lo1 = lo0, lo2 = lo0, lo3 = lo0;
      __m512 hi0 = _mm512_set1_ps(e.hi), hi1 = hi0, hi2 = hi0, hi3 = hi0;
      for (; i + 64 <= n; i += 64) {
        __m512 x0, x1, x2, x3;
        load32<T>(src + i * sizeof(T), x0, x1);
        load32<T>(src + (i + 32) * sizeof(T), x2, x3);
        lo0 = _mm512_min_ps(x0, lo0), hi0 = _mm512_max_ps(x0, hi0);
        lo1 = _mm512_min_ps(x1, lo1), hi1 = _mm512_max_ps(x1, hi1);
        lo2 = _mm512_min_ps(x2, lo2), hi2 = _mm512_max_ps(x2, hi2);
        lo3 = _mm512_min_ps(x3, lo3), hi3 = _mm512_max_ps(x3, hi3);
      }
      for (; i + 16 <= n; i += 16) {
        const __m512 x = load16<T>(src + i * sizeof(T));
        lo0 = _mm512_min_ps(x, lo0), hi0 = _mm512_max_ps(x, hi0);
      }
      const __m512 l = _mm512_min_ps(_mm512_min_ps(lo0, lo1), _mm512_min_ps(lo2, lo3));
      const __m512 h = _mm512_max_ps(_mm512_max_ps(hi0, hi1), _mm512_max_ps(hi2, hi3));
      e.lo = quant::atMost(_mm512_reduce_min_ps(l), e.lo);
      e.hi = quant::atLeast(_mm512_reduce_max_ps(h), e.hi);
    } else {
      __m512 m0 = _mm512_set1_ps(e.absmax), m1 = m0, m2 = m0, m3 = m0;
      for (; i + 64 <= n; i += 64) {
        __m512 x0, x1, x2, x3;
        load32<T>(src + i * sizeof(T), x0, x1);
        load32<T>(src + (i + 32) * sizeof(T), x2, x3);
        m0 = _mm512_max_ps(abs(x0), m0);
        m1 = _mm512_max_ps(abs(x1), m1);
        m2 = _mm512_max_ps(abs(x2), m2);
        m3 = _mm512_max_ps(abs(x3), m3);
      }
      for (; i + 16 <= n; i += 16) m0 = _mm512_max_ps(abs(load16<T>(src + i * sizeof(T))), m0);
      const __m512 all = _mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3));
      e.absmax = quant::atLeast(_mm512_reduce_max_ps(all), e.absmax);
    }
    ScalarOps::extent<M, T>(src + i * sizeof(T), n - i, e);
  }

  CHORUS_TARGET_AVX512 static __m512 abs(__m512 x) {
    const __m512i absMask = _mm512_set1_epi32(int(detail::kF32AbsMask));
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), absMask));
  }

  // Bits 0-3 of `low` and bits 4-7 of `high` in each lane's low byte (the other bits of the
  // lane are whatever they were): one vpternlog, "mask ? high : low" with the mask 0xf0.
  CHORUS_TARGET_AVX512 static __m512i nibbleByte(__m512i low, __m512i high) {
    return _mm512_ternarylogic_epi32(low, high, _mm512_set1_epi32(0xf0), 0xd8);
  }

  // The 4-bit codes of 16 elements, one 64-bit lane per pair (even element in the low half), as
  // the 8 bytes of nibbles.
  CHORUS_TARGET_AVX512 static __m128i nibblePairs(__m512i x) {
    return _mm512_cvtepi64_epi8(nibbleByte(x, _mm512_srli_epi64(x, 28)));
  }

  CHORUS_TARGET_AVX512 static __m512i mix32(__m512i x) {
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32(int(0x7feb352du)));
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32(int(0x846ca68bu)));
    return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  }

  // The per-group constants of the encoder. pair: each lane's pair offset (0-15) times the
  // random keys' multiplier (stochastic rounding only).
  struct EncodeConsts {
    __m512 inv, offset, low, high;
    __m512i highCode, pair;
  };

  // Avx2Ops::encode8 on sixteen elements, u: quant::uniform of each (stochastic rounding).
  // floor, clamp and truncate are one conversion rounding down and an integer minimum here:
  // v + u is finite and small (v is clamped below and NaN-free), so the code is the same.
  // kFinite (symmetric only; GroupRange::finite): every element of the group is finite, so
  // |x * inv| <= high * (1 + 2^-24) before the product is rounded (|x| <= absmax, and the
  // reciprocal is rounded once), and |v| exceeds high by at most one step of the float grid
  // there (2^-21 at 7, 2^-17 at 127). The clamps that only NaN needs go: rounding to nearest
  // gives -high from anything that close to it; floor(v + u) is at least -high because
  // u >= 2^-17 and v + u is exact on that grid; and for 4 bits v + u < 8 (exact there), so
  // floor(v + u) <= 7. For 8 bits it can reach 128, which store32's saturating narrowing turns
  // into 127.
  template <class M, bool kFinite>
  CHORUS_TARGET_AVX512 static __m512i encode16(__m512 x, const EncodeConsts& k, __m512 u) {
    __m512 v = M::kAsymmetric ? _mm512_mul_ps(_mm512_sub_ps(x, k.offset), k.inv)
                              : _mm512_mul_ps(x, k.inv);
    if constexpr (!kFinite) v = _mm512_max_ps(v, k.low);
    if constexpr (!M::kStochastic) {
      return _mm512_cvtps_epi32(v);
    } else {
      const __m512i q = _mm512_cvt_roundps_epi32(_mm512_add_ps(v, u),
                                                 _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
      return kFinite ? q : _mm512_min_epi32(q, k.highCode);
    }
  }

  // quant::uniform, (2 r + 1) 2^-17, from 16 random bits r at bits 7-22 of each lane (the
  // others 0): the float 1 + u has mantissa r then a 1, and subtracting 1 is exact.
  CHORUS_TARGET_AVX512 static __m512 uniformOf(__m512i r7) {
    const __m512i onePlusU = _mm512_or_si512(r7, _mm512_set1_epi32(0x3f800040));
    return _mm512_sub_ps(_mm512_castsi512_ps(onePlusU), _mm512_set1_ps(1.0f));
  }

  // 2^e u for the 16 random bits r that sit at bits 7-22 of `bits` (whatever the others):
  // the float 2^e (1 + u) is built by one vpternlog ((bits & mask) | exponent and the trailing
  // 1) and 2^e subtracted, exactly. e = 0 gives uniformOf's u; 2^e u is exact too.
  template <int kExp>
  CHORUS_TARGET_AVX512 static __m512 scaledUniform(__m512i bits) {
    const __m512i mask = _mm512_set1_epi32(0x7fff80);
    const __m512i onePlus = _mm512_set1_epi32(int(0x3f800040u + (uint32_t(kExp) << 23)));
    const __m512i w = _mm512_ternarylogic_epi32(bits, mask, onePlus, 0xea);  // (a & b) | c
    return _mm512_sub_ps(_mm512_castsi512_ps(w), _mm512_set1_ps(float(1 << kExp)));
  }

  // Elements 0, 2, ..., 30 (even) and 1, 3, ..., 31 (odd) of the 32 at p (float32, bfloat16).
  template <class T>
  CHORUS_TARGET_AVX512 static void load32EvenOdd(const Bytes* p, __m512& even, __m512& odd) {
    if constexpr (std::is_same_v<T, Bfloat16>) {
      load32<T>(p, even, odd);
    } else {
      static_assert(std::is_same_v<T, float>);
      const __m512 a = _mm512_loadu_ps(p), b = _mm512_loadu_ps(p + 64);
      const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                              28, 30);
      even = _mm512_permutex2var_ps(a, evens, b);
      odd = _mm512_permutex2var_ps(a, _mm512_add_epi32(evens, _mm512_set1_epi32(1)), b);
    }
  }

  // The codes of 32 elements (a, b as load32 gives them) stored at codes: 32 bytes (8 bits) or
  // 16 (4 bits). The codes are in range, so narrowing by truncation keeps them; kFinite 8-bit
  // codes may be high + 1 (encode16), and symmetric 8-bit high is 127, so those narrow with
  // signed saturation.
  template <class M, class T, bool kFinite>
  CHORUS_TARGET_AVX512 static void store32(Bytes* codes, __m512i a, __m512i b) {
    if constexpr (std::is_same_v<T, Bfloat16>) {
      // a even, b odd elements: one 32-bit lane per pair, already in order.
      if constexpr (M::kBits == 8) {
        const __m512i w = _mm512_or_si512(_mm512_and_si512(a, _mm512_set1_epi32(0xffff)),
                                          _mm512_slli_epi32(b, 16));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes),
                            kFinite ? _mm512_cvtsepi16_epi8(w) : _mm512_cvtepi16_epi8(w));
      } else {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(codes),
                         _mm512_cvtepi32_epi8(nibbleByte(a, _mm512_slli_epi32(b, 4))));
      }
    } else if constexpr (M::kBits == 8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes),
                       kFinite ? _mm512_cvtsepi32_epi8(a) : _mm512_cvtepi32_epi8(a));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + 16),
                       kFinite ? _mm512_cvtsepi32_epi8(b) : _mm512_cvtepi32_epi8(b));
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes),
                       _mm_unpacklo_epi64(nibblePairs(a), nibblePairs(b)));
    }
  }

  template <class M, class T>
  CHORUS_TARGET_AVX512 static void encode(const Bytes* src, size_t n, GroupParams p,
                                          uint64_t seed, Bytes* codes, uint64_t index,
                                          bool finite = false) {
    if (!M::kAsymmetric && finite) {
      encodeLoops<M, T, true>(src, n, p, seed, codes, index);
    } else {
      encodeLoops<M, T, false>(src, n, p, seed, codes, index);
    }
  }

  // Stochastic rounding to 4 bits of a finite group (encode16's kFinite) from float32 or
  // bfloat16, 32 elements from i (even) while i + 32 <= n; returns where it stopped. The
  // elements are taken as evens and odds (a permute each for float32; bfloat16 comes that way),
  // which matches the generator: pair k's hash (lane k of h) has element 2k's random bits in
  // its low half and 2k + 1's in its high half, each placed by one shift. An odd element's code
  // is wanted in bits 4-7 of its byte, so it is computed 16 times larger: with w = 16 v (exact:
  // inv16 = 16 inv, and scaling by 16 commutes with rounding in the normal range; where v is
  // subnormal both v + u and w + 16 u round to u and 16 u) and 16 u (exact), floor(w + 16 u) =
  // 16 floor(v + u) + d with 0 <= d < 16, whose bits 4-7 are the code's nibble. One vpternlog
  // then takes bits 0-3 of the even code and 4-7 of the odd one, with no shift of either.
  // The caller checks that inv16 is finite.
  template <class M, class T>
  CHORUS_TARGET_AVX512 static size_t encodeStochastic4(const Bytes* src, size_t i, size_t n,
                                                       GroupParams p, quant::RandomKeys keys,
                                                       uint32_t pair0, Bytes* codes) {
    const __m512 inv = _mm512_set1_ps(p.inv), inv16 = _mm512_set1_ps(p.inv * 16.0f);
    const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i mult = _mm512_set1_epi32(int(keys.mult));
    // The affine map of the 16 pairs of the next 32 elements: stepped by 16 mult, wrapping as
    // the scalar uint32_t arithmetic does.
    __m512i counter = _mm512_add_epi32(
        _mm512_set1_epi32(int((pair0 + uint32_t(i / 2)) * keys.mult + keys.add)),
        _mm512_mullo_epi32(lanes, mult));
    const __m512i step = _mm512_set1_epi32(int(16 * keys.mult));
    const __m512i high4 = _mm512_set1_epi32(0xf0);
    for (; i + 32 <= n; i += 32) {
      __m512 even, odd;
      load32EvenOdd<T>(src + i * sizeof(T), even, odd);
      const __m512i h = mix32(counter);
      counter = _mm512_add_epi32(counter, step);
      const __m512 uEven = scaledUniform<0>(_mm512_slli_epi32(h, 7));
      const __m512 uOdd16 = scaledUniform<4>(_mm512_srli_epi32(h, 9));
      const __m512i qEven = _mm512_cvt_roundps_epi32(
          _mm512_add_ps(_mm512_mul_ps(even, inv), uEven),
          _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
      const __m512i qOdd16 = _mm512_cvt_roundps_epi32(
          _mm512_add_ps(_mm512_mul_ps(odd, inv16), uOdd16),
          _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i / 2),
                       _mm512_cvtepi32_epi8(_mm512_ternarylogic_epi32(qEven, qOdd16, high4, 0xd8)));
    }
    return i;
  }

  template <class M, class T, bool kFinite>
  CHORUS_TARGET_AVX512 static void encodeLoops(const Bytes* src, size_t n, GroupParams p,
                                               uint64_t seed, Bytes* codes, uint64_t index) {
    size_t i = 0;
    if constexpr (M::kStochastic) {
      if (!vectorStochastic<M, T>(src, n, p, seed, codes, index, i)) return;
    }
    EncodeConsts k{_mm512_set1_ps(p.inv), _mm512_set1_ps(p.offset), _mm512_set1_ps(M::kLow),
                   _mm512_set1_ps(M::kHigh), _mm512_set1_epi32(int(M::kHigh)), {}};
    quant::RandomKeys keys;
    if constexpr (M::kStochastic) {
      keys = quant::randomKeysFor(seed, index + i);
      const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
                                              15);
      k.pair = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(int(keys.mult)));
    }
    // The pair index of element i (even) is pair0 + i / 2.
    const auto pair0 = uint32_t((index + i) >> 1) - uint32_t(i / 2);
    if constexpr (kFinite && M::kStochastic && M::kBits == 4 &&
                  (std::is_same_v<T, float> || std::is_same_v<T, Bfloat16>)) {
      // 16 inv overflows only for scales below 2^-122 (absmax under ~2^-119).
      if (p.inv < 0x1p123f) i = encodeStochastic4<M, T>(src, i, n, p, keys, pair0, codes);
    }
    for (; i + 32 <= n; i += 32) {
      __m512 a, b;
      load32<T>(src + i * sizeof(T), a, b);
      // uA, uB: quant::uniform of a's and b's elements. The 16 pair hashes cover elements
      // 0-31, element e's 16 bits being 16-bit word e of h.
      __m512 uA = _mm512_setzero_ps(), uB = uA;
      if constexpr (M::kStochastic) {
        const uint32_t counter = (pair0 + uint32_t(i / 2)) * keys.mult + keys.add;
        const __m512i h = mix32(_mm512_add_epi32(_mm512_set1_epi32(int(counter)), k.pair));
        if constexpr (std::is_same_v<T, Bfloat16>) {  // a even, b odd elements
          const __m512i bits7to22 = _mm512_set1_epi32(0x7fff80);
          uA = uniformOf(_mm512_and_si512(_mm512_slli_epi32(h, 7), bits7to22));
          uB = uniformOf(_mm512_and_si512(_mm512_srli_epi32(h, 9), bits7to22));
        } else {  // a elements 0-15, b 16-31
          uA = uniformOf(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 7));
          uB = uniformOf(
              _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 7));
        }
      }
      store32<M, T, kFinite>(codes + M::payload(i), encode16<M, kFinite>(a, k, uA),
                             encode16<M, kFinite>(b, k, uB));
    }
    ScalarOps::encode<M, T>(src + i * sizeof(T), n - i, p, seed, codes + M::payload(i), index + i);
  }

  // Codes j..j+15 of an 8-bit source as int32.
  template <class M>
  CHORUS_TARGET_AVX512 static __m512i codes16(const Bytes* codes, size_t j) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + j));
    return M::kAsymmetric ? _mm512_cvtepu8_epi32(b) : _mm512_cvtepi8_epi32(b);
  }

  // The sixteen values a 4-bit source's codes can take, lane c holding the value of the code
  // whose nibble is c (quant::decode of it: the same multiply and add, so the same bits).
  template <class M>
  CHORUS_TARGET_AVX512 static __m512 valueTable(const GroupParams& p) {
    const __m512i codes =
        M::kAsymmetric
            ? _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
            : _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1);
    const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(codes), _mm512_set1_ps(p.scale));
    return M::kAsymmetric ? _mm512_add_ps(v, _mm512_set1_ps(p.offset)) : v;
  }

  // The values of codes j..j+15 (j even) of one source. 4 bits: each byte is widened into two
  // lanes, the odd lane shifted down by a nibble, and vpermps looks the value up by the lane's
  // low 4 bits (it ignores the others): five instructions instead of a sign extension, a
  // conversion and a multiply.
  template <class M>
  CHORUS_TARGET_AVX512 static __m512 values16(const Bytes* codes, const GroupParams& p,
                                              __m512 table, size_t j) {
    if constexpr (M::kBits == 8) {
      const __m512 d = _mm512_mul_ps(_mm512_cvtepi32_ps(codes16<M>(codes, j)),
                                     _mm512_set1_ps(p.scale));
      return M::kAsymmetric ? _mm512_add_ps(d, _mm512_set1_ps(p.offset)) : d;
    } else {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + j / 2));
      const __m512i twice = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));
      const __m512i shifts = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
      return _mm512_permutexvar_ps(_mm512_srlv_epi32(twice, shifts), table);
    }
  }

  // Avx2Ops::sum8 on sixteen elements. table: valueTable of each source (4 bits only).
  template <class M, bool kAccumulate, size_t kSources>
  CHORUS_TARGET_AVX512 static __m512 sum16(const Bytes* const* codes, const GroupParams* p,
                                           const __m512* table, size_t k, const float* acc,
                                           size_t j) {
    __m512 v = _mm512_setzero_ps();
    for (size_t s = 0; s < (kSources != 0 ? kSources : k); ++s) {
      const __m512 d = values16<M>(codes[s], p[s], table[s], j);
      if (s == 0) {
        v = kAccumulate ? _mm512_add_ps(_mm512_loadu_ps(acc + j), d) : d;
      } else {
        v = _mm512_add_ps(v, d);
      }
    }
    return v;
  }

  template <class M, class Out, bool kAccumulate, size_t kSources>
  CHORUS_TARGET_AVX512 static size_t decodeVectors(Bytes* out, const float* acc,
                                                   const Bytes* const* codes,
                                                   const GroupParams* p, size_t k, size_t n) {
    // Not zeroed: only the first k are read, and zeroing the array was a `rep stos` of 512 bytes
    // per call, 11% of dequantize_reduce_quantize int4's time.
    __m512 table[kFusedSources];
    if constexpr (M::kBits == 4) {
      for (size_t s = 0; s < (kSources != 0 ? kSources : k); ++s) table[s] = valueTable<M>(p[s]);
    }
    size_t j = 0;
    if constexpr (M::kBits == 4 && !kAccumulate) {
      // A code byte holds an even and an odd element. Widened to one lane per byte, it looks
      // up the even element's value by its low nibble (vpermps reads only the low 4 bits of an
      // index) and, shifted down a nibble, the odd one's: per source, a widening, a shift and
      // two lookups for 32 elements, where values16 takes five instructions for 16.
      for (; j + 32 <= n; j += 32) {
        __m512 even = _mm512_setzero_ps(), odd = even;
        for (size_t s = 0; s < (kSources != 0 ? kSources : k); ++s) {
          const __m512i x = _mm512_cvtepu8_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes[s] + j / 2)));
          const __m512 e = _mm512_permutexvar_ps(x, table[s]);
          const __m512 o = _mm512_permutexvar_ps(_mm512_srli_epi32(x, 4), table[s]);
          even = s == 0 ? e : _mm512_add_ps(even, e);
          odd = s == 0 ? o : _mm512_add_ps(odd, o);
        }
        storeEvenOdd<Out>(out + j * sizeof(Out), even, odd);
      }
    }
    for (; j + 32 <= n; j += 32) {
      const __m512 a = sum16<M, kAccumulate, kSources>(codes, p, table, k, acc, j);
      const __m512 b = sum16<M, kAccumulate, kSources>(codes, p, table, k, acc, j + 16);
      store16<Out>(out + j * sizeof(Out), a);
      store16<Out>(out + (j + 16) * sizeof(Out), b);
    }
    for (; j + 16 <= n; j += 16) {
      store16<Out>(out + j * sizeof(Out),
                   sum16<M, kAccumulate, kSources>(codes, p, table, k, acc, j));
    }
    return j;
  }

  template <class M, class Out, bool kAccumulate>
  CHORUS_TARGET_AVX512 static void decode(Bytes* out, const float* acc,
                                          const Bytes* const* codes, const GroupParams* p,
                                          size_t k, size_t n) {
    const size_t j = k == 1 ? decodeVectors<M, Out, kAccumulate, 1>(out, acc, codes, p, k, n)
                            : decodeVectors<M, Out, kAccumulate, 0>(out, acc, codes, p, k, n);
    if (j == n) return;
    const Bytes* rest[kFusedSources];
    for (size_t s = 0; s < k; ++s) rest[s] = codes[s] + M::payload(j);
    ScalarOps::decode<M, Out, kAccumulate>(out + j * sizeof(Out), kAccumulate ? acc + j : nullptr,
                                           rest, p, k, n - j);
  }

  // ---- dequantizeReduceQuantize, symmetric 4 bits, round to nearest, group size 256 ----------
  //
  // The generic driver sums a group into an L1 block (per source a widening load, a shift, two
  // vpermps lookups and the adds, then two vpermt2ps to put even and odd elements back in
  // order and the stores), takes its range in a second pass over the block and encodes it in a
  // third. Here a group's 256 sums stay in 16 registers from the first source to the encoding,
  // in "stride-8" order: the 64 code bytes of 128 elements, read as 16 dwords, hold elements
  // 8j .. 8j + 7 in dword j, element 8j + r at bits 4r .. 4r + 3 (quantize.h's nibble order),
  // so vector r of the block is elements 8j + r (j = 0 .. 15). vpermps reads only the low 4
  // bits of an index, so vector r's values are one shift down by 4r (done as a multiply, see
  // addSource256) and one lookup of the plain 64-byte load; no widening. The codes go back the
  // same way: the code of vector r, shifted up 4r bits (a multiply too), is merged in by one
  // vpternlog each, and the 128 elements leave in one 64-byte store. The sums are the same
  // additions in the same order, so the bits equal the scalar path's.

  // Adds (kFirst: sets) the values of one source's 256 codes to sum, in stride-8 order.
  template <bool kFirst>
  CHORUS_TARGET_AVX512 static void addSource256(__m512* sum, const Bytes* record) {
    float scale;
    std::memcpy(&scale, record, 4);
    const __m512i codes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2,
                                            -1);
    // valueTable: lane c is the value of the code whose nibble is c.
    const __m512 table = _mm512_mul_ps(_mm512_cvtepi32_ps(codes), _mm512_set1_ps(scale));
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i y = _mm512_loadu_si512(record + 4 + 64 * h);
      const __m512i yHigh = _mm512_srli_epi32(y, 16);
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) {
        // Nibble r of each dword into bits 0-3: the 16-bit half that holds it (y's low half, or
        // yHigh's for r >= 4) shifted down by 4 (r % 4) bits, as the high half of a 16-bit
        // product with 2^(16 - 4 (r % 4)). vpmulhuw instead of a shift because on this CPU
        // (Zen 5) the shifts compete with the float adds for the same pipes and the multiply
        // does not: the decode's shift, lookup and add ran 20% faster so (a throughput loop).
        const __m512i half = r < 4 ? y : yHigh;
        const __m512i scale = _mm512_set1_epi16(short(1 << (16 - 4 * (r % 4))));
        const __m512i index = r % 4 == 0 ? half : _mm512_mulhi_epu16(half, scale);
        const __m512 v = _mm512_permutexvar_ps(index, table);
        sum[8 * h + r] = kFirst ? v : _mm512_add_ps(sum[8 * h + r], v);
      }
    }
  }

  // Whether requantize256 can take the group whose records start at byte `offset` of every
  // source: its sums are then known finite without looking, so the range needs no NaN check
  // and the encoder no clamp (encode16's kFinite argument). |value| <= 8 |scale| per source and
  // rounding adds at most 2^-23 per sum, so scales up to 2^124 / nsrcs keep every sum below
  // 2^127. Other groups (an infinite or NaN scale, say) go to the generic driver.
  CHORUS_TARGET_AVX512 static bool fitsRequantize256(const void* const* srcs, size_t nsrcs,
                                                     size_t offset) {
    const float limit = 0x1p124f / float(nsrcs);
    for (size_t s = 0; s < nsrcs; ++s) {
      float scale;
      std::memcpy(&scale, static_cast<const Bytes*>(srcs[s]) + offset, 4);
      if (!(std::fabs(scale) <= limit)) return false;
    }
    return true;
  }

  // The 256 sums of that group, in stride-8 order, and their absolute maximum.
  CHORUS_TARGET_AVX512 static float sum256(__m512* sum, const void* const* srcs, size_t nsrcs,
                                           size_t offset) {
    addSource256<true>(sum, static_cast<const Bytes*>(srcs[0]) + offset);
    for (size_t s = 1; s < nsrcs; ++s) {
      addSource256<false>(sum, static_cast<const Bytes*>(srcs[s]) + offset);
    }
    // One vrangeps per vector (imm 0xb: the larger magnitude, sign cleared); the sums are
    // finite (fitsRequantize256), so its handling of NaN does not matter.
    __m512 m[8];
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) m[v] = _mm512_range_ps(sum[2 * v], sum[2 * v + 1], 0xb);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) m[v] = _mm512_range_ps(m[v], m[v + 4], 0xb);
    const __m512 all = _mm512_range_ps(_mm512_range_ps(m[0], m[2], 0xb),
                                       _mm512_range_ps(m[1], m[3], 0xb), 0xb);
    return _mm512_reduce_max_ps(all);
  }

  // The 128 codes (64 bytes) of the finite sums sum[0..8) in stride-8 order, rounded to nearest
  // without a clamp (encode16's kFinite), stored at codes.
  CHORUS_TARGET_AVX512 static void encode128(Bytes* codes, const float* sum, float scaleInv) {
    const __m512 inv = _mm512_set1_ps(scaleInv);
    __m512i w = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(sum), inv));
#pragma GCC unroll 7
    for (int r = 1; r < 8; ++r) {
      const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(sum + 16 * r), inv));
      // q << 4r as a multiply, for the reason addSource256 gives.
      w = _mm512_ternarylogic_epi32(w, _mm512_mullo_epi32(q, _mm512_set1_epi32(1 << (4 * r))),
                                    _mm512_set1_epi32(int(0xfu << (4 * r))), 0xd8);
    }
    _mm512_storeu_si512(codes, w);
  }
};

struct Avx512Kernels {
  template <class M, class T>
  [[gnu::flatten]] CHORUS_TARGET_AVX512 static void quantize(Bytes* d, const Bytes* s, size_t n,
                                                             const QuantConfig& c,
                                                             uint64_t first) {
    quantizeGroups<Avx512Ops, M, T>(d, s, n, c, first);
  }
  template <class M, class T>
  [[gnu::flatten]] CHORUS_TARGET_AVX512 static void dequantizeReduce(Bytes* d,
                                                                     const void* const* s,
                                                                     size_t k, size_t n,
                                                                     const QuantConfig& c) {
    dequantizeReduceGroups<Avx512Ops, M, T>(d, s, k, n, c);
  }
  template <class M>
  [[gnu::flatten]] CHORUS_TARGET_AVX512 static void accumulate(float* a, const Bytes* s, size_t n,
                                                               const QuantConfig& c) {
    dequantizeAccumulateGroups<Avx512Ops, M>(a, s, n, c);
  }
  template <class M>
  [[gnu::flatten]] CHORUS_TARGET_AVX512 static void requantize(Bytes* d, const void* const* s,
                                                               size_t k, size_t n,
                                                               const QuantConfig& c,
                                                               uint64_t first) {
    if constexpr (M::kBits == 4 && !M::kAsymmetric && !M::kStochastic) {
      if (c.groupSize == 256) {
        requantize256Groups<M>(d, s, k, n, c, first);
        return;
      }
    }
    dequantizeReduceQuantizeGroups<Avx512Ops, M>(d, s, k, n, c, first);
  }

  // Avx512Ops' 256-element groups, software-pipelined: group g is summed in registers while
  // group g - 1, whose sums wait in an L1 block, is encoded, and g's range and scale are then
  // taken, to be used one group later. Encoding a group straight from its registers had to wait
  // for the horizontal maximum and the two divisions after its last add (about 80 cycles of
  // latency per group): 30% of the time. The generic driver takes the other groups (a short last
  // group, or sources fitsRequantize256 declines), one at a time, with the sources' pointers
  // moved to that group's records.
  template <class M>
  CHORUS_TARGET_AVX512 static void requantize256Groups(Bytes* d, const void* const* s, size_t k,
                                                       size_t n, const QuantConfig& c,
                                                       uint64_t first) {
    constexpr size_t kGroup = 256;
    const size_t record = M::record(kGroup);
    auto generic = [&](size_t g, size_t start) {
      const void* few[16];
      std::vector<const void*> many(k > 16 ? k : 0);
      const void** moved = k > 16 ? many.data() : few;
      for (size_t i = 0; i < k; ++i) moved[i] = static_cast<const Bytes*>(s[i]) + g * record;
      dequantizeReduceQuantizeGroups<Avx512Ops, M>(d + g * record, moved, k,
                                                   std::min(kGroup, n - start), c, first + start);
    };
    alignas(64) float block[kGroup];
    Bytes* pending = nullptr;  // the codes of the group whose sums are in block
    // A float, not a vector: the lambda below has no AVX-512 target attribute, and clang refuses
    // to pass a 512-bit vector from it (the calling convention would differ).
    float pendingInv = 0;
    auto encodePending = [&] {
      Avx512Ops::encode128(pending, block, pendingInv);
      Avx512Ops::encode128(pending + 64, block + 128, pendingInv);
      pending = nullptr;
    };
    size_t g = 0, start = 0;
    for (; start + kGroup <= n; start += kGroup, ++g) {
      Bytes* out = d + g * record;
      if (!Avx512Ops::fitsRequantize256(s, k, g * record)) {
        if (pending != nullptr) encodePending();
        generic(g, start);
        continue;
      }
      __m512 sum[16];
      const float absmax = Avx512Ops::sum256(sum, s, k, g * record);
      if (pending != nullptr) encodePending();
      const GroupParams p = quant::symmetricParams(absmax, M::kHigh);
      quant::storeHeader(out, false, p);
#pragma GCC unroll 16
      for (int v = 0; v < 16; ++v) _mm512_store_ps(block + 16 * v, sum[v]);
      pending = out + M::kHeader;
      pendingInv = p.inv;
    }
    if (pending != nullptr) encodePending();
    if (start < n) generic(g, start);
  }
};

}  // namespace

const IsaKernels& avx512Kernels() { return Dispatched<Avx512Kernels>::kTable; }

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace chorus::kernels::quant_cpu
#endif  // CHORUS_QUANT_X86
