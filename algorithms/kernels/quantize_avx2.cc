// The AVX2 (+ F16C) loops of the CPU quantization kernels, bit-identical to the scalar ones
// (quantize_loops.h says how the files fit together).
//
// Why explicit intrinsics here when reduce.cc relies on the vectorizer: the range is a min/max
// reduction, which GCC only vectorizes when it may ignore NaN and signed zeros, and the code
// packing (int32 -> int8, two nibbles per byte) is a shuffle sequence the vectorizer does not
// find.
#include "algorithms/kernels/quantize_loops.h"

#if CHORUS_QUANT_X86
#include <immintrin.h>

namespace chorus::kernels::quant_cpu {
namespace {

#define CHORUS_TARGET_AVX2 [[gnu::target("avx2,f16c")]]

struct Avx2Ops {
  // Eight elements to eight floats, as toFloat does (F16C is bit-identical to the portable
  // float16 conversion; bfloat16 widens by a shift).
  template <class T>
  CHORUS_TARGET_AVX2 static __m256 load8(const Bytes* p) {
    if constexpr (std::is_same_v<T, float>) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
    } else if constexpr (std::is_same_v<T, Float16>) {
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    } else {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
  }

  // Sixteen elements to two vectors of floats. In element order, except bfloat16: there the
  // 32-bit lanes of one load hold an even and an odd element, which a shift and a mask widen
  // without any shuffle, so `a` gets elements 0, 2, ..., 14 and `b` 1, 3, ..., 15.
  template <class T>
  CHORUS_TARGET_AVX2 static void load16(const Bytes* p, __m256& a, __m256& b) {
    if constexpr (std::is_same_v<T, Bfloat16>) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      a = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
      b = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(int(0xffff0000u))));
    } else {
      a = load8<T>(p);
      b = load8<T>(p + 8 * sizeof(T));
    }
  }

  // floatToBfloat16High lane-wise, shifted down: add 0x7fff plus the kept lsb; NaN -> quiet NaN.
  CHORUS_TARGET_AVX2 static __m256i bfloat16Bits(__m256 v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb);
    const __m256i rounded = _mm256_add_epi32(bits, bias);
    const __m256i nan = _mm256_or_si256(bits, _mm256_set1_epi32(int(detail::kF32QuietBit)));
    const __m256i isNan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_srli_epi32(_mm256_blendv_epi8(rounded, nan, isNan), 16);
  }

  // Elements 0-7 (a) and 8-15 (b) rounded into T and stored, as fromFloat does.
  template <class T>
  CHORUS_TARGET_AVX2 static void store16(Bytes* p, __m256 a, __m256 b) {
    if constexpr (std::is_same_v<T, float>) {
      _mm256_storeu_ps(reinterpret_cast<float*>(p), a);
      _mm256_storeu_ps(reinterpret_cast<float*>(p) + 8, b);
    } else if constexpr (std::is_same_v<T, Float16>) {
      const __m128i ha = _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT);
      const __m128i hb = _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_set_m128i(hb, ha));
    } else {
      // The pack interleaves 128-bit halves (a0-3 b0-3 a4-7 b4-7); the permute restores order.
      const __m256i packed = _mm256_packus_epi32(bfloat16Bits(a), bfloat16Bits(b));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_permute4x64_epi64(packed, 0xd8));
    }
  }

  template <class T>
  CHORUS_TARGET_AVX2 static void store8(Bytes* p, __m256 v) {
    if constexpr (std::is_same_v<T, float>) {
      _mm256_storeu_ps(reinterpret_cast<float*>(p), v);
    } else if constexpr (std::is_same_v<T, Float16>) {
      const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
    } else {
      const __m256i bits = bfloat16Bits(v);
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
    }
  }

  // The largest / smallest lane. The lanes hold no NaN (see quant::Extent), so the order of the
  // comparisons does not matter.
  CHORUS_TARGET_AVX2 static float laneMax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ps(m, _mm_shuffle_ps(m, m, 1)));
  }
  CHORUS_TARGET_AVX2 static float laneMin(__m256 v) {
    __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_min_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_min_ps(m, _mm_shuffle_ps(m, m, 1)));
  }

  // Four accumulators per quantity, so the loop is not one chain of dependent max instructions
  // (written out: an array indexed by the iteration ends up in memory). The order of the
  // elements does not matter here, so load16's bfloat16 split serves as is.
  template <class M, class T>
  CHORUS_TARGET_AVX2 static void extent(const Bytes* src, size_t n, GroupRange& e) {
    size_t i = 0;
    if constexpr (M::kAsymmetric) {
      __m256 lo0 = _mm256_set1_ps(e.lo), lo1 = lo0, lo2 = lo0, lo3 = lo0;
      __m256 hi0 = _mm256_set1_ps(e.hi), hi1 = hi0, hi2 = hi0, hi3 = hi0;
      for (; i + 32 <= n; i += 32) {
        __m256 x0, x1, x2, x3;
        load16<T>(src + i * sizeof(T), x0, x1);
        load16<T>(src + (i + 16) * sizeof(T), x2, x3);
        lo0 = _mm256_min_ps(x0, lo0), hi0 = _mm256_max_ps(x0, hi0);
        lo1 = _mm256_min_ps(x1, lo1), hi1 = _mm256_max_ps(x1, hi1);
        lo2 = _mm256_min_ps(x2, lo2), hi2 = _mm256_max_ps(x2, hi2);
        lo3 = _mm256_min_ps(x3, lo3), hi3 = _mm256_max_ps(x3, hi3);
      }
      for (; i + 8 <= n; i += 8) {
        const __m256 x = load8<T>(src + i * sizeof(T));
        lo0 = _mm256_min_ps(x, lo0), hi0 = _mm256_max_ps(x, hi0);
      }
      const __m256 l = _mm256_min_ps(_mm256_min_ps(lo0, lo1), _mm256_min_ps(lo2, lo3));
      const __m256 h = _mm256_max_ps(_mm256_max_ps(hi0, hi1), _mm256_max_ps(hi2, hi3));
      e.lo = quant::atMost(laneMin(l), e.lo);
      e.hi = quant::atLeast(laneMax(h), e.hi);
    } else {
      const __m256 absMask = _mm256_castsi256_ps(_mm256_set1_epi32(int(detail::kF32AbsMask)));
      __m256 m0 = _mm256_set1_ps(e.absmax), m1 = m0, m2 = m0, m3 = m0;
      for (; i + 32 <= n; i += 32) {
        __m256 x0, x1, x2, x3;
        load16<T>(src + i * sizeof(T), x0, x1);
        load16<T>(src + (i + 16) * sizeof(T), x2, x3);
        m0 = _mm256_max_ps(_mm256_and_ps(x0, absMask), m0);
        m1 = _mm256_max_ps(_mm256_and_ps(x1, absMask), m1);
        m2 = _mm256_max_ps(_mm256_and_ps(x2, absMask), m2);
        m3 = _mm256_max_ps(_mm256_and_ps(x3, absMask), m3);
      }
      for (; i + 8 <= n; i += 8) {
        m0 = _mm256_max_ps(_mm256_and_ps(load8<T>(src + i * sizeof(T)), absMask), m0);
      }
      const __m256 all = _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3));
      e.absmax = quant::atLeast(laneMax(all), e.absmax);
    }
    ScalarOps::extent<M, T>(src + i * sizeof(T), n - i, e);
  }

  CHORUS_TARGET_AVX2 static __m256i mix32(__m256i x) {
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(int(0x7feb352du)));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(int(0x846ca68bu)));
    return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  }

  // The per-group constants of the encoder, in registers. pair[v]: for the v-th vector of
  // eight pair hashes that encode32 takes, each lane's pair offset from the first pair, times
  // the random keys' multiplier (stochastic rounding only).
  struct EncodeConsts {
    __m256 inv, offset, low, high;
    __m256i pair[2];
  };

  // quant::scaled, then codeNearest or codeStochastic, on eight elements. odd: their 2 r + 1
  // (quant::randomOdd17), stochastic rounding only.
  template <class M>
  CHORUS_TARGET_AVX2 static __m256i encode8(__m256 x, const EncodeConsts& k, __m256i odd) {
    __m256 v = M::kAsymmetric ? _mm256_mul_ps(_mm256_sub_ps(x, k.offset), k.inv)
                              : _mm256_mul_ps(x, k.inv);
    v = _mm256_max_ps(v, k.low);
    if constexpr (!M::kStochastic) {
      return _mm256_cvtps_epi32(v);
    } else {
      const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(odd),
                                     _mm256_set1_ps(quant::kTwoToMinus17));
      const __m256 r = _mm256_floor_ps(_mm256_add_ps(v, u));
      return _mm256_cvttps_epi32(_mm256_min_ps(r, k.high));
    }
  }

  // 2 r + 1 from 16 random bits r in each 32-bit lane.
  CHORUS_TARGET_AVX2 static __m256i oddOf(__m256i r) {
    return _mm256_or_si256(_mm256_slli_epi32(r, 1), _mm256_set1_epi32(1));
  }

  // The codes of elements 0-31 at s, one per byte in element order. counter: the affine map of
  // pair 0 (element 0 is even), the others' offset by k.pair; stochastic rounding only.
  template <class M, class T>
  CHORUS_TARGET_AVX2 static __m256i encode32(const Bytes* s, const EncodeConsts& k,
                                             uint32_t counter) {
    __m256 x[4];
    load16<T>(s, x[0], x[1]);
    load16<T>(s + 16 * sizeof(T), x[2], x[3]);
    // odd[v]: 2 r + 1 of the elements of x[v]. Pair hash h0 covers elements 0-15, h1 16-31;
    // element e's 16 bits are 16-bit word e % 16 of its hash.
    __m256i odd[4] = {};
    if constexpr (M::kStochastic) {
      const __m256i base = _mm256_set1_epi32(int(counter));
      const __m256i h0 = mix32(_mm256_add_epi32(base, k.pair[0]));
      const __m256i h1 = mix32(_mm256_add_epi32(base, k.pair[1]));
      if constexpr (std::is_same_v<T, Bfloat16>) {  // x: even, odd, even, odd elements
        const __m256i low16 = _mm256_set1_epi32(0xffff);
        odd[0] = oddOf(_mm256_and_si256(h0, low16));
        odd[1] = oddOf(_mm256_srli_epi32(h0, 16));
        odd[2] = oddOf(_mm256_and_si256(h1, low16));
        odd[3] = oddOf(_mm256_srli_epi32(h1, 16));
      } else {  // x: elements 0-7, 8-15, 16-23, 24-31
        odd[0] = oddOf(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(h0)));
        odd[1] = oddOf(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(h0, 1)));
        odd[2] = oddOf(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(h1)));
        odd[3] = oddOf(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(h1, 1)));
      }
    }
    __m256i q[4];
    for (int v = 0; v < 4; ++v) q[v] = encode8<M>(x[v], k, odd[v]);
    if constexpr (std::is_same_v<T, Bfloat16>) {
      // Even and odd elements (load16): put back in order, two 16-bit codes per 32-bit lane,
      // giving elements 0-15 (w0) and 16-31 (w1).
      const __m256i low16 = _mm256_set1_epi32(0xffff);
      const __m256i w0 =
          _mm256_or_si256(_mm256_and_si256(q[0], low16), _mm256_slli_epi32(q[1], 16));
      const __m256i w1 =
          _mm256_or_si256(_mm256_and_si256(q[2], low16), _mm256_slli_epi32(q[3], 16));
      // The pack works per 128-bit half: 0-7 16-23 8-15 24-31.
      const __m256i bytes = M::kAsymmetric ? _mm256_packus_epi16(w0, w1)
                                           : _mm256_packs_epi16(w0, w1);
      return _mm256_permute4x64_epi64(bytes, 0xd8);
    } else {
      const __m256i ab = _mm256_packs_epi32(q[0], q[1]);  // codes fit int16
      const __m256i cd = _mm256_packs_epi32(q[2], q[3]);
      const __m256i bytes = M::kAsymmetric ? _mm256_packus_epi16(ab, cd)
                                           : _mm256_packs_epi16(ab, cd);
      // The packs work within 128-bit halves: dwords come out as 0-3 8-11 16-19 24-27 4-7 ...
      return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    }
  }

  // 32 codes, one per byte, to 16 bytes of nibbles (even element low).
  CHORUS_TARGET_AVX2 static __m128i packNibbles(__m256i bytes) {
    const __m256i low = _mm256_and_si256(bytes, _mm256_set1_epi16(0x000f));
    const __m256i high = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), _mm256_set1_epi16(0x00f0));
    const __m256i words = _mm256_or_si256(low, high);  // one packed byte per 16-bit word
    const __m256i packed = _mm256_packus_epi16(words, words);
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
  }

  template <class M, class T>
  CHORUS_TARGET_AVX2 static void encode(const Bytes* src, size_t n, GroupParams p, uint64_t seed,
                                        Bytes* codes, uint64_t index, bool finite = false) {
    (void)finite;  // GroupRange::finite: this loop keeps every clamp
    size_t i = 0;
    if constexpr (M::kStochastic) {
      if (!vectorStochastic<M, T>(src, n, p, seed, codes, index, i)) return;
    }
    EncodeConsts k{_mm256_set1_ps(p.inv), _mm256_set1_ps(p.offset), _mm256_set1_ps(M::kLow),
                   _mm256_set1_ps(M::kHigh), {}};
    quant::RandomKeys keys;
    if constexpr (M::kStochastic) {
      keys = quant::randomKeysFor(seed, index + i);
      const __m256i mult = _mm256_set1_epi32(int(keys.mult));
      const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      k.pair[0] = _mm256_mullo_epi32(lanes, mult);
      k.pair[1] = _mm256_mullo_epi32(_mm256_add_epi32(lanes, _mm256_set1_epi32(8)), mult);
    }
    // The pair index of element i (even) is pair0 + i / 2.
    const auto pair0 = uint32_t((index + i) >> 1) - uint32_t(i / 2);
    for (; i + 32 <= n; i += 32) {
      const uint32_t counter = (pair0 + uint32_t(i / 2)) * keys.mult + keys.add;
      const __m256i bytes = encode32<M, T>(src + i * sizeof(T), k, counter);
      if constexpr (M::kBits == 8) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i), bytes);
      } else {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i / 2), packNibbles(bytes));
      }
    }
    ScalarOps::encode<M, T>(src + i * sizeof(T), n - i, p, seed, codes + M::payload(i), index + i);
  }

  // Codes j..j+7 (j even) as int32.
  template <class M>
  CHORUS_TARGET_AVX2 static __m256i codes8(const Bytes* codes, size_t j) {
    if constexpr (M::kBits == 8) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + j));
      return M::kAsymmetric ? _mm256_cvtepu8_epi32(b) : _mm256_cvtepi8_epi32(b);
    } else {
      // Element k of these eight sits at bits 4k..4k+3 of the little-endian 32-bit word.
      uint32_t word;
      std::memcpy(&word, codes + j / 2, sizeof(word));
      const __m256i w = _mm256_set1_epi32(int(word));
      if constexpr (M::kAsymmetric) {
        const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
        return _mm256_and_si256(_mm256_srlv_epi32(w, shifts), _mm256_set1_epi32(0xf));
      } else {
        // Move the nibble to the top, then shift it back arithmetically: sign extension.
        const __m256i shifts = _mm256_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0);
        return _mm256_srai_epi32(_mm256_sllv_epi32(w, shifts), 28);
      }
    }
  }

  // The values of codes j..j+7 of every source, summed left to right after acc[j..j+7] when
  // accumulating (ScalarOps::decode's order). kSources: k as a constant, or 0 when it is not.
  template <class M, bool kAccumulate, size_t kSources>
  CHORUS_TARGET_AVX2 static __m256 sum8(const Bytes* const* codes, const GroupParams* p,
                                        size_t k, const float* acc, size_t j) {
    __m256 v = _mm256_setzero_ps();
    for (size_t s = 0; s < (kSources != 0 ? kSources : k); ++s) {
      __m256 d = _mm256_mul_ps(_mm256_cvtepi32_ps(codes8<M>(codes[s], j)),
                               _mm256_set1_ps(p[s].scale));
      if constexpr (M::kAsymmetric) d = _mm256_add_ps(d, _mm256_set1_ps(p[s].offset));
      if (s == 0) {
        v = kAccumulate ? _mm256_add_ps(_mm256_loadu_ps(acc + j), d) : d;
      } else {
        v = _mm256_add_ps(v, d);
      }
    }
    return v;
  }

  // The whole vectors of decode; returns where the scalar tail starts.
  template <class M, class Out, bool kAccumulate, size_t kSources>
  CHORUS_TARGET_AVX2 static size_t decodeVectors(Bytes* out, const float* acc,
                                                 const Bytes* const* codes, const GroupParams* p,
                                                 size_t k, size_t n) {
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
      store16<Out>(out + j * sizeof(Out), sum8<M, kAccumulate, kSources>(codes, p, k, acc, j),
                   sum8<M, kAccumulate, kSources>(codes, p, k, acc, j + 8));
    }
    for (; j + 8 <= n; j += 8) {
      store8<Out>(out + j * sizeof(Out), sum8<M, kAccumulate, kSources>(codes, p, k, acc, j));
    }
    return j;
  }

  template <class M, class Out, bool kAccumulate>
  CHORUS_TARGET_AVX2 static void decode(Bytes* out, const float* acc, const Bytes* const* codes,
                                        const GroupParams* p, size_t k, size_t n) {
    // One source (dequantize, dequantizeAccumulate) is the common case: its own loop.
    const size_t j = k == 1 ? decodeVectors<M, Out, kAccumulate, 1>(out, acc, codes, p, k, n)
                            : decodeVectors<M, Out, kAccumulate, 0>(out, acc, codes, p, k, n);
    if (j == n) return;
    const Bytes* rest[kFusedSources];
    for (size_t s = 0; s < k; ++s) rest[s] = codes[s] + M::payload(j);
    ScalarOps::decode<M, Out, kAccumulate>(out + j * sizeof(Out), kAccumulate ? acc + j : nullptr,
                                           rest, p, k, n - j);
  }
};


// The same drivers compiled for AVX2: Kernels<Ops> has no target, so these wrappers carry it.
struct Avx2Kernels {
  template <class M, class T>
  [[gnu::flatten]] CHORUS_TARGET_AVX2 static void quantize(Bytes* d, const Bytes* s, size_t n,
                                                           const QuantConfig& c, uint64_t first) {
    quantizeGroups<Avx2Ops, M, T>(d, s, n, c, first);
  }
  template <class M, class T>
  [[gnu::flatten]] CHORUS_TARGET_AVX2 static void dequantizeReduce(Bytes* d, const void* const* s,
                                                                   size_t k, size_t n,
                                                                   const QuantConfig& c) {
    dequantizeReduceGroups<Avx2Ops, M, T>(d, s, k, n, c);
  }
  template <class M>
  [[gnu::flatten]] CHORUS_TARGET_AVX2 static void accumulate(float* a, const Bytes* s, size_t n,
                                                             const QuantConfig& c) {
    dequantizeAccumulateGroups<Avx2Ops, M>(a, s, n, c);
  }
  template <class M>
  [[gnu::flatten]] CHORUS_TARGET_AVX2 static void requantize(Bytes* d, const void* const* s,
                                                             size_t k, size_t n,
                                                             const QuantConfig& c,
                                                             uint64_t first) {
    dequantizeReduceQuantizeGroups<Avx2Ops, M>(d, s, k, n, c, first);
  }
};

}  // namespace

const IsaKernels& avx2Kernels() { return Dispatched<Avx2Kernels>::kTable; }

}  // namespace chorus::kernels::quant_cpu
#endif  // CHORUS_QUANT_X86
