// CPU quantization kernels: a scalar path for any CPU, and AVX2 and AVX-512 paths
// bit-identical to it.
//
// The group loops (quantizeGroups, sumPiece and the drivers below them) are written once, over
// an Ops policy that supplies the three inner loops: the range of a group (extent), the encoding
// of values to codes (encode) and the decoding of codes, optionally added to a float32
// accumulator (decode). ScalarOps works element by element through quantize_ops.h; Avx2Ops does
// eight floats per instruction with the same operations in the same order and hands its tails to
// ScalarOps; Avx512Ops does the same on sixteen. Everything is instantiated per Mode (bits,
// symmetric or not, rounding) so the loops carry no branch on the config. The entry points are
// [[gnu::flatten]]: an AVX2 (AVX-512) entry inlines the driver and all of Avx2Ops (Avx512Ops)
// into one function compiled for that ISA (the Ops functions carry the target attribute and
// are not always_inline, because the driver template has no target).
//
// Why explicit intrinsics here when reduce.cc relies on the vectorizer: the range is a min/max
// reduction, which GCC only vectorizes when it may ignore NaN and signed zeros, and the code
// packing (int32 -> int8, two nibbles per byte) is a shuffle sequence the vectorizer does not
// find.
//
// The file is compiled with -ffp-contract=off: a multiply followed by an add must stay two
// roundings on every path (and on the GPU, where quantize_ops.h uses the _rn intrinsics).
#include "algorithms/kernels/quantize.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "algorithms/kernels/reduce.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CHORUS_QUANT_X86 1
#include <immintrin.h>
#else
#define CHORUS_QUANT_X86 0
#endif

namespace chorus::kernels {
namespace {

using Bytes = unsigned char;
using quant::GroupParams;

// Elements of the pieces summed in a float32 block at a time (dequantizeReduce*): 8 KiB, which
// stays in L1 while every source is added to it. Even, so a piece of a 4-bit group starts on a
// byte.
constexpr size_t kBlockElems = 2048;

// Sources a decoding pass sums in registers (more are summed in batches of this many).
constexpr size_t kFusedSources = 8;

// The config's shape as compile-time constants, so the inner loops have no branch on it (the
// seed and the group size stay run-time values of the QuantConfig).
template <uint32_t kBitsV, bool kAsymmetricV, bool kStochasticV>
struct Mode {
  static constexpr uint32_t kBits = kBitsV;
  static constexpr bool kAsymmetric = kAsymmetricV;
  static constexpr bool kStochastic = kStochasticV;
  static constexpr float kLow = quant::codeLow(kBits, kAsymmetric);
  static constexpr float kHigh = quant::codeHigh(kBits, kAsymmetric);
  static constexpr size_t kHeader = quant::headerBytes(kAsymmetric);
  static constexpr size_t payload(uint64_t n) { return quant::payloadBytes(kBits, n); }
  static constexpr size_t record(uint64_t n) { return quant::recordBytes(kBits, kAsymmetric, n); }
};

// ---- element access: any alignment -----------------------------------------------------------

template <class T>
inline float loadElement(const Bytes* p) {
  T x;
  std::memcpy(&x, p, sizeof(T));
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    return toFloat(x);
  }
}

template <class T>
inline void storeElement(Bytes* p, float v) {
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(p, &v, sizeof(v));
  } else {
    const T x = fromFloat<T>(v);
    std::memcpy(p, &x, sizeof(x));
  }
}

// Where element j of a group's codes starts (j even for 4 bits).
template <class M>
inline const Bytes* codesAt(const Bytes* record, uint64_t j) {
  return record + M::kHeader + M::payload(j);
}

template <class M>
inline GroupParams paramsOf(const quant::Extent& e) {
  return quant::paramsOf(e, M::kBits, M::kAsymmetric);
}

// ---- scalar loops --------------------------------------------------------------------------

// The code of one element, with the random keys of its index's high half cached.
template <class M>
class Encoder {
 public:
  Encoder(GroupParams p, uint64_t seed) : p_(p), seed_(seed) {}

  int32_t code(float x, uint64_t index) {
    const float v = quant::scaled(x, p_, M::kAsymmetric, M::kLow);
    if constexpr (!M::kStochastic) {
      return quant::codeNearest(v);
    } else {
      const auto indexHigh = uint32_t(index >> 32);
      if (!haveKeys_ || indexHigh != keysHigh_) {
        keys_ = quant::randomKeys(seed_, indexHigh);
        keysHigh_ = indexHigh;
        haveKeys_ = true;
      }
      return quant::codeStochastic(v, quant::uniform(keys_, uint32_t(index)), M::kHigh);
    }
  }

 private:
  GroupParams p_;
  uint64_t seed_;
  quant::RandomKeys keys_;
  uint32_t keysHigh_ = 0;
  bool haveKeys_ = false;
};

struct ScalarOps {
  template <class M, class T>
  static void extent(const Bytes* src, size_t n, quant::Extent& e) {
    for (size_t i = 0; i < n; ++i) e.include(loadElement<T>(src + i * sizeof(T)), M::kAsymmetric);
  }

  // codes[0..) = the codes of src[0..n); index is the element index of src[0].
  template <class M, class T>
  static void encode(const Bytes* src, size_t n, GroupParams p, uint64_t seed, Bytes* codes,
                     uint64_t index) {
    Encoder<M> enc(p, seed);
    for (size_t i = 0; i < n; ++i) {
      const int32_t q = enc.code(loadElement<T>(src + i * sizeof(T)), index + i);
      quant::storeCode(codes, i, M::kBits, q);
    }
  }

  // out[j] = ((acc[j] +) v_0[j] + v_1[j] + ... + v_{k-1}[j]) rounded into Out, left to right,
  // v_s[j] the value of code j of source s (codes[s], params p[s]). acc (when kAccumulate) may
  // equal out.
  template <class M, class Out, bool kAccumulate>
  static void decode(Bytes* out, const float* acc, const Bytes* const* codes,
                     const GroupParams* p, size_t k, size_t n) {
    for (size_t j = 0; j < n; ++j) {
      float v = 0;
      for (size_t s = 0; s < k; ++s) {
        const int32_t q = quant::loadCode(codes[s], j, M::kBits, M::kAsymmetric);
        const float d = quant::decode(q, p[s], M::kAsymmetric);
        v = s == 0 ? (kAccumulate ? quant::add(acc[j], d) : d) : quant::add(v, d);
      }
      storeElement<Out>(out + j * sizeof(Out), v);
    }
  }
};

// ---- AVX2 loops ----------------------------------------------------------------------------

#if CHORUS_QUANT_X86

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
  CHORUS_TARGET_AVX2 static void extent(const Bytes* src, size_t n, quant::Extent& e) {
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

  // The per-group constants of the encoder, in registers. lane[v]: for the v-th vector of
  // eight that encode32 codes, each lane's element offset from the first element, times the
  // random keys' multiplier (stochastic rounding only).
  struct EncodeConsts {
    __m256 inv, offset, low, high;
    __m256i lane[4];
  };

  // quant::scaled, then codeNearest or codeStochastic, on eight elements. counter: their
  // indices' low halves mapped by the random keys (index * mult + add), the hash's input.
  template <class M>
  CHORUS_TARGET_AVX2 static __m256i encode8(__m256 x, const EncodeConsts& k, __m256i counter) {
    __m256 v = M::kAsymmetric ? _mm256_mul_ps(_mm256_sub_ps(x, k.offset), k.inv)
                              : _mm256_mul_ps(x, k.inv);
    v = _mm256_max_ps(v, k.low);
    if constexpr (!M::kStochastic) {
      return _mm256_cvtps_epi32(v);
    } else {
      const __m256i h = mix32(counter);
      const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(h, 8)),
                                     _mm256_set1_ps(quant::kTwoToMinus24));
      const __m256 r = _mm256_floor_ps(_mm256_add_ps(v, u));
      return _mm256_cvttps_epi32(_mm256_min_ps(r, k.high));
    }
  }

  // The codes of elements 0-31 at s, one per byte in element order. counter: element 0's
  // index mapped by the random keys (see encode8); the others' are offset by k.lane.
  template <class M, class T>
  CHORUS_TARGET_AVX2 static __m256i encode32(const Bytes* s, const EncodeConsts& k,
                                             uint32_t counter) {
    const __m256i base = _mm256_set1_epi32(int(counter));
    __m256 x[4];
    load16<T>(s, x[0], x[1]);
    load16<T>(s + 16 * sizeof(T), x[2], x[3]);
    __m256i q[4];
    for (int v = 0; v < 4; ++v) q[v] = encode8<M>(x[v], k, _mm256_add_epi32(base, k.lane[v]));
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
                                        Bytes* codes, uint64_t index) {
    // The vector loop keeps one pair of random keys; a piece whose indices cross a multiple of
    // 2^32 (once per 4 G elements of a stream) is left to the scalar loop.
    if (n == 0 || (M::kStochastic && (index >> 32) != ((index + n - 1) >> 32))) {
      ScalarOps::encode<M, T>(src, n, p, seed, codes, index);
      return;
    }
    EncodeConsts k{_mm256_set1_ps(p.inv), _mm256_set1_ps(p.offset), _mm256_set1_ps(M::kLow),
                   _mm256_set1_ps(M::kHigh), {}};
    quant::RandomKeys keys;
    if constexpr (M::kStochastic) {
      keys = quant::randomKeys(seed, uint32_t(index >> 32));
      // Element offsets of the four vectors of encode32 (load16's order), times mult.
      const bool split = std::is_same_v<T, Bfloat16>;
      const __m256i first = split ? _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)
                                  : _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      const __m256i mult = _mm256_set1_epi32(int(keys.mult));
      const uint32_t next[4] = {0, split ? 1u : 8u, 16, split ? 17u : 24u};
      for (int v = 0; v < 4; ++v) {
        k.lane[v] = _mm256_mullo_epi32(_mm256_add_epi32(first, _mm256_set1_epi32(int(next[v]))),
                                       mult);
      }
    }
    const auto low = uint32_t(index);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const uint32_t counter = (low + uint32_t(i)) * keys.mult + keys.add;
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

  // As Avx2Ops::extent: four accumulators, lanes without NaN, so the order does not matter.
  template <class M, class T>
  CHORUS_TARGET_AVX512 static void extent(const Bytes* src, size_t n, quant::Extent& e) {
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

  // The 4-bit codes of 16 elements, one 64-bit lane per pair (even element in the low half), as
  // the 8 bytes of nibbles.
  CHORUS_TARGET_AVX512 static __m128i nibblePairs(__m512i x) {
    const __m512i low = _mm512_and_si512(x, _mm512_set1_epi64(0xf));
    const __m512i high = _mm512_and_si512(_mm512_srli_epi64(x, 28), _mm512_set1_epi64(0xf0));
    return _mm512_cvtepi64_epi8(_mm512_or_si512(low, high));
  }

  CHORUS_TARGET_AVX512 static __m512i mix32(__m512i x) {
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32(int(0x7feb352du)));
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32(int(0x846ca68bu)));
    return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  }

  // The per-group constants of the encoder. lane[v]: each lane's element offset within the
  // v-th vector of load32, times the random keys' multiplier (stochastic rounding only).
  struct EncodeConsts {
    __m512 inv, offset, low, high;
    __m512i lane[2];
  };

  // Avx2Ops::encode8 on sixteen elements.
  template <class M>
  CHORUS_TARGET_AVX512 static __m512i encode16(__m512 x, const EncodeConsts& k, __m512i counter) {
    __m512 v = M::kAsymmetric ? _mm512_mul_ps(_mm512_sub_ps(x, k.offset), k.inv)
                              : _mm512_mul_ps(x, k.inv);
    v = _mm512_max_ps(v, k.low);
    if constexpr (!M::kStochastic) {
      return _mm512_cvtps_epi32(v);
    } else {
      const __m512i h = mix32(counter);
      const __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(h, 8)),
                                     _mm512_set1_ps(quant::kTwoToMinus24));
      const __m512 r = _mm512_roundscale_ps(_mm512_add_ps(v, u),
                                            _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
      return _mm512_cvttps_epi32(_mm512_min_ps(r, k.high));
    }
  }

  // The codes of 32 elements (a, b as load32 gives them) stored at codes: 32 bytes (8 bits) or
  // 16 (4 bits). The codes are in range, so narrowing by truncation keeps them.
  template <class M, class T>
  CHORUS_TARGET_AVX512 static void store32(Bytes* codes, __m512i a, __m512i b) {
    if constexpr (std::is_same_v<T, Bfloat16>) {
      // a even, b odd elements: one 32-bit lane per pair, already in order.
      if constexpr (M::kBits == 8) {
        const __m512i w = _mm512_or_si512(_mm512_and_si512(a, _mm512_set1_epi32(0xffff)),
                                          _mm512_slli_epi32(b, 16));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes), _mm512_cvtepi16_epi8(w));
      } else {
        const __m512i nib = _mm512_set1_epi32(0xf);
        const __m512i w = _mm512_or_si512(_mm512_and_si512(a, nib),
                                          _mm512_slli_epi32(_mm512_and_si512(b, nib), 4));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(codes), _mm512_cvtepi32_epi8(w));
      }
    } else if constexpr (M::kBits == 8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes), _mm512_cvtepi32_epi8(a));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + 16), _mm512_cvtepi32_epi8(b));
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes),
                       _mm_unpacklo_epi64(nibblePairs(a), nibblePairs(b)));
    }
  }

  template <class M, class T>
  CHORUS_TARGET_AVX512 static void encode(const Bytes* src, size_t n, GroupParams p,
                                          uint64_t seed, Bytes* codes, uint64_t index) {
    // One pair of random keys per vector loop, as in Avx2Ops::encode.
    if (n == 0 || (M::kStochastic && (index >> 32) != ((index + n - 1) >> 32))) {
      ScalarOps::encode<M, T>(src, n, p, seed, codes, index);
      return;
    }
    EncodeConsts k{_mm512_set1_ps(p.inv), _mm512_set1_ps(p.offset), _mm512_set1_ps(M::kLow),
                   _mm512_set1_ps(M::kHigh), {}};
    quant::RandomKeys keys;
    if constexpr (M::kStochastic) {
      keys = quant::randomKeys(seed, uint32_t(index >> 32));
      const __m512i mult = _mm512_set1_epi32(int(keys.mult));
      const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
                                              15);
      if constexpr (std::is_same_v<T, Bfloat16>) {  // even, then odd elements
        const __m512i even = _mm512_add_epi32(lanes, lanes);
        k.lane[0] = _mm512_mullo_epi32(even, mult);
        k.lane[1] = _mm512_mullo_epi32(_mm512_add_epi32(even, _mm512_set1_epi32(1)), mult);
      } else {
        k.lane[0] = _mm512_mullo_epi32(lanes, mult);
        k.lane[1] = _mm512_mullo_epi32(_mm512_add_epi32(lanes, _mm512_set1_epi32(16)), mult);
      }
    }
    const auto low = uint32_t(index);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const __m512i base = _mm512_set1_epi32(int((low + uint32_t(i)) * keys.mult + keys.add));
      __m512 a, b;
      load32<T>(src + i * sizeof(T), a, b);
      store32<M, T>(codes + M::payload(i),
                    encode16<M>(a, k, _mm512_add_epi32(base, k.lane[0])),
                    encode16<M>(b, k, _mm512_add_epi32(base, k.lane[1])));
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
    __m512 table[kFusedSources] = {};
    if constexpr (M::kBits == 4) {
      for (size_t s = 0; s < (kSources != 0 ? kSources : k); ++s) table[s] = valueTable<M>(p[s]);
    }
    size_t j = 0;
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
};

#endif  // CHORUS_QUANT_X86


// ---- group drivers (ISA-neutral; flattened into each entry point) ----------------------------

// Quantizes count elements of T at src into records at dst. The range of the next group is
// taken before this one is encoded: the divisions that turn a range into a scale then overlap
// that loop instead of holding up the encoder (at group size 256 the wait was a third of the
// time).
template <class Ops, class M, class T>
void quantizeGroups(Bytes* dst, const Bytes* src, size_t count, const QuantConfig& c,
                    uint64_t firstIndex) {
  const uint64_t group = c.groupSize;
  const size_t record = M::record(group);
  auto length = [&](uint64_t start) { return size_t(std::min<uint64_t>(group, count - start)); };
  quant::Extent next;
  Ops::template extent<M, T>(src, length(0), next);
  for (uint64_t start = 0, g = 0; start < count; start += group, ++g) {
    const GroupParams p = paramsOf<M>(next);
    if (start + group < count) {
      next = quant::Extent{};
      Ops::template extent<M, T>(src + (start + group) * sizeof(T), length(start + group), next);
    }
    Bytes* out = dst + g * record;
    quant::storeHeader(out, M::kAsymmetric, p);
    Ops::template encode<M, T>(src + start * sizeof(T), length(start), p, c.seed,
                               out + M::kHeader, firstIndex + start);
  }
}

// Elements [j, j + n) of the group whose records start at byte `recordOffset` of every source,
// summed in source order in float32 and written to out as Out. Up to kFusedSources sources are
// summed in registers in one pass; more go through scratch (n floats, which may be out itself
// when Out is float) a batch at a time, in the same order.
template <class Ops, class M, class Out>
void sumPiece(Bytes* out, float* scratch, const void* const* srcs, size_t nsrcs,
              size_t recordOffset, uint64_t j, size_t n) {
  const Bytes* codes[kFusedSources];
  GroupParams params[kFusedSources];
  for (size_t first = 0; first < nsrcs; first += kFusedSources) {
    const size_t k = std::min(kFusedSources, nsrcs - first);
    for (size_t s = 0; s < k; ++s) {
      const Bytes* record = static_cast<const Bytes*>(srcs[first + s]) + recordOffset;
      codes[s] = codesAt<M>(record, j);
      params[s] = quant::loadHeader(record, M::kAsymmetric);
    }
    const bool last = first + k == nsrcs;
    auto* partial = reinterpret_cast<Bytes*>(scratch);
    if (first == 0) {
      if (last) {
        Ops::template decode<M, Out, false>(out, nullptr, codes, params, k, n);
      } else {
        Ops::template decode<M, float, false>(partial, nullptr, codes, params, k, n);
      }
    } else if (last) {
      Ops::template decode<M, Out, true>(out, scratch, codes, params, k, n);
    } else {
      Ops::template decode<M, float, true>(partial, scratch, codes, params, k, n);
    }
  }
}

template <class Ops, class M, class T>
void dequantizeReduceGroups(Bytes* dst, const void* const* srcs, size_t nsrcs, size_t count,
                            const QuantConfig& c) {
  alignas(64) float scratch[kBlockElems];
  const size_t record = M::record(c.groupSize);
  for (uint64_t start = 0, g = 0; start < count; start += c.groupSize, ++g) {
    const uint64_t n = std::min<uint64_t>(c.groupSize, count - start);
    for (uint64_t j = 0; j < n; j += kBlockElems) {
      const size_t m = size_t(std::min<uint64_t>(kBlockElems, n - j));
      sumPiece<Ops, M, T>(dst + (start + j) * sizeof(T), scratch, srcs, nsrcs, g * record, j, m);
    }
  }
}

template <class Ops, class M>
void dequantizeAccumulateGroups(float* acc, const Bytes* src, size_t count, const QuantConfig& c) {
  const size_t record = M::record(c.groupSize);
  for (uint64_t start = 0, g = 0; start < count; start += c.groupSize, ++g) {
    const size_t n = size_t(std::min<uint64_t>(c.groupSize, count - start));
    const Bytes* in = src + g * record;
    const Bytes* codes[1] = {codesAt<M>(in, 0)};
    const GroupParams p[1] = {quant::loadHeader(in, M::kAsymmetric)};
    Ops::template decode<M, float, true>(reinterpret_cast<Bytes*>(acc + start), acc + start,
                                         codes, p, 1, n);
  }
}

// A group longer than the block is summed twice: once for its range, once to encode it (the
// sum is deterministic, so both passes see the same values); shorter ones once.
template <class Ops, class M>
void dequantizeReduceQuantizeGroups(Bytes* dst, const void* const* srcs, size_t nsrcs,
                                    size_t count, const QuantConfig& c, uint64_t firstIndex) {
  alignas(64) float scratch[kBlockElems];
  auto* block = reinterpret_cast<Bytes*>(scratch);
  const size_t record = M::record(c.groupSize);
  for (uint64_t start = 0, g = 0; start < count; start += c.groupSize, ++g) {
    const uint64_t n = std::min<uint64_t>(c.groupSize, count - start);
    const size_t offset = g * record;
    quant::Extent e;
    for (uint64_t j = 0; j < n; j += kBlockElems) {
      const size_t m = size_t(std::min<uint64_t>(kBlockElems, n - j));
      sumPiece<Ops, M, float>(block, scratch, srcs, nsrcs, offset, j, m);
      Ops::template extent<M, float>(block, m, e);
    }
    const GroupParams p = paramsOf<M>(e);
    quant::storeHeader(dst + offset, M::kAsymmetric, p);
    for (uint64_t j = 0; j < n; j += kBlockElems) {
      const size_t m = size_t(std::min<uint64_t>(kBlockElems, n - j));
      if (n > kBlockElems) sumPiece<Ops, M, float>(block, scratch, srcs, nsrcs, offset, j, m);
      Bytes* codes = dst + offset + M::kHeader + M::payload(j);
      Ops::template encode<M, float>(block, m, p, c.seed, codes, firstIndex + start + j);
    }
  }
}

// ---- entry points per ISA ------------------------------------------------------------------

template <class Ops>
struct Kernels {
  template <class M, class T>
  [[gnu::flatten]] static void quantize(Bytes* d, const Bytes* s, size_t n, const QuantConfig& c,
                                        uint64_t first) {
    quantizeGroups<Ops, M, T>(d, s, n, c, first);
  }
  template <class M, class T>
  [[gnu::flatten]] static void dequantizeReduce(Bytes* d, const void* const* s, size_t k,
                                                size_t n, const QuantConfig& c) {
    dequantizeReduceGroups<Ops, M, T>(d, s, k, n, c);
  }
  template <class M>
  [[gnu::flatten]] static void accumulate(float* a, const Bytes* s, size_t n,
                                          const QuantConfig& c) {
    dequantizeAccumulateGroups<Ops, M>(a, s, n, c);
  }
  template <class M>
  [[gnu::flatten]] static void requantize(Bytes* d, const void* const* s, size_t k, size_t n,
                                          const QuantConfig& c, uint64_t first) {
    dequantizeReduceQuantizeGroups<Ops, M>(d, s, k, n, c, first);
  }
};

#if CHORUS_QUANT_X86
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
    dequantizeReduceQuantizeGroups<Avx512Ops, M>(d, s, k, n, c, first);
  }
};
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // CHORUS_QUANT_X86

// f.template operator()<K, M>() with K the kernel set of the ISA in use and M the config's
// Mode (kDecodeOnly as for quant::withShape).
template <bool kDecodeOnly, class F>
void dispatch(const QuantConfig& c, F&& f) {
  auto withMode = [&]<class K>() {
    quant::withShape<kDecodeOnly>(c, [&]<uint32_t kBits, bool kAsymmetric, bool kStochastic>() {
      f.template operator()<K, Mode<kBits, kAsymmetric, kStochastic>>();
    });
  };
#if CHORUS_QUANT_X86
  switch (cpuIsa()) {
    case CpuIsa::kAvx512: withMode.template operator()<Avx512Kernels>(); return;
    case CpuIsa::kAvx2: withMode.template operator()<Avx2Kernels>(); return;
    case CpuIsa::kGeneric: break;
  }
#endif
  withMode.template operator()<Kernels<ScalarOps>>();
}

}  // namespace

Status validateQuantConfig(const QuantConfig& c, const char* what) {
  const std::string field = what;
  if (c.bits != 4 && c.bits != 8) {
    return invalidArgument(field + "bits is " + std::to_string(c.bits) +
                           ": quantization supports 4 or 8 bits");
  }
  if (c.groupSize == 0) {
    return invalidArgument(field + "groupSize is 0: a group needs at least one element");
  }
  if (c.bits == 4 && c.groupSize % 2 != 0) {
    return invalidArgument(field + "groupSize is " + std::to_string(c.groupSize) +
                           ": 4-bit codes are packed two per byte, so the group size must be even");
  }
  return Status();
}

std::string quantConfigText(const QuantConfig& c) {
  std::string s = "int" + std::to_string(c.bits) + ":" + std::to_string(c.groupSize);
  if (c.asymmetric) s += " asymmetric";
  if (c.stochastic) s += " stochastic seed=" + std::to_string(c.seed);
  return s;
}

// shape: bits in 0-7, asymmetric bit 8, stochastic bit 9, group size from bit 16 (48 bits).
QuantWords quantWords(const QuantConfig& c) {
  return QuantWords{(uint64_t{c.bits} & 0xff) | (uint64_t{c.asymmetric} << 8) |
                        (uint64_t{c.stochastic} << 9) | (c.groupSize << 16),
                    c.seed};
}

QuantConfig quantFromWords(QuantWords w) {
  QuantConfig c;
  c.bits = static_cast<uint32_t>(w.shape & 0xff);
  c.asymmetric = (w.shape >> 8) & 1;
  c.stochastic = (w.shape >> 9) & 1;
  c.groupSize = w.shape >> 16;
  c.seed = w.seed;
  return c;
}

size_t quantizedSize(size_t count, const QuantConfig& config) {
  return quant::packedBytes(config, count);
}

void quantize(void* dst, const void* src, size_t count, DataType t, const QuantConfig& c,
              uint64_t firstIndex) {
  if (count == 0) return;
  dispatch<false>(c, [&]<class K, class M>() {
    quant::withType(t, [&]<class T>() {
      K::template quantize<M, T>(static_cast<Bytes*>(dst), static_cast<const Bytes*>(src), count,
                                 c, firstIndex);
    });
  });
}

void dequantizeReduce(void* dst, DataType t, const void* const* srcs, size_t nsrcs, size_t count,
                      const QuantConfig& c) {
  if (count == 0 || nsrcs == 0) return;
  dispatch<true>(c, [&]<class K, class M>() {
    quant::withType(t, [&]<class T>() {
      K::template dequantizeReduce<M, T>(static_cast<Bytes*>(dst), srcs, nsrcs, count, c);
    });
  });
}

void dequantize(void* dst, const void* src, size_t count, DataType t, const QuantConfig& c) {
  const void* const srcs[1] = {src};
  dequantizeReduce(dst, t, srcs, 1, count, c);
}

void dequantizeAccumulate(float* acc, const void* src, size_t count, const QuantConfig& c) {
  if (count == 0) return;
  dispatch<true>(c, [&]<class K, class M>() {
    K::template accumulate<M>(acc, static_cast<const Bytes*>(src), count, c);
  });
}

void dequantizeReduceQuantize(void* dst, const void* const* srcs, size_t nsrcs, size_t count,
                              const QuantConfig& c, uint64_t firstIndex) {
  if (count == 0 || nsrcs == 0) return;
  dispatch<false>(c, [&]<class K, class M>() {
    K::template requantize<M>(static_cast<Bytes*>(dst), srcs, nsrcs, count, c, firstIndex);
  });
}

}  // namespace chorus::kernels
