// CPU quantization kernels: a scalar path for any CPU and an AVX2 path, bit-identical to it.
//
// The group loops (quantizeGroups, sumPiece and the drivers below them) are written once,
// over an Ops policy that supplies the three inner loops: the range of a group (extent), the
// encoding of values to codes (encode) and the decoding of codes, optionally added to a float32
// accumulator (decode). ScalarOps works element by element through quantize_ops.h; Avx2Ops does
// eight floats per instruction with the same operations in the same order and hands its tails
// to ScalarOps. The entry points are [[gnu::flatten]], so an AVX2 entry inlines the driver and
// all of Avx2Ops into one function compiled for AVX2 (the Avx2Ops functions carry the target
// attribute and are not always_inline, because the driver template itself has no target).
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
inline const Bytes* codesAt(const Bytes* record, uint64_t j, const QuantConfig& c) {
  return record + quant::headerBytes(c) + quant::payloadBytes(c, j);
}

// ---- scalar loops --------------------------------------------------------------------------

// The code of one element, with the random keys of its index's high half cached.
class Encoder {
 public:
  Encoder(GroupParams p, const QuantConfig& c)
      : p_(p), c_(c), low_(quant::codeLow(c)), high_(quant::codeHigh(c)) {}

  int32_t code(float x, uint64_t index) {
    const float v = quant::scaled(x, p_, c_.asymmetric, low_, high_);
    if (!c_.stochastic) return quant::codeNearest(v);
    const auto indexHigh = uint32_t(index >> 32);
    if (!haveKeys_ || indexHigh != keysHigh_) {
      keys_ = quant::randomKeys(c_.seed, indexHigh);
      keysHigh_ = indexHigh;
      haveKeys_ = true;
    }
    return quant::codeStochastic(v, quant::uniform(keys_, uint32_t(index)), high_);
  }

 private:
  GroupParams p_;
  const QuantConfig& c_;
  float low_, high_;
  quant::RandomKeys keys_;
  uint32_t keysHigh_ = 0;
  bool haveKeys_ = false;
};

struct ScalarOps {
  template <class T>
  static void extent(const Bytes* src, size_t n, bool asymmetric, quant::Extent& e) {
    for (size_t i = 0; i < n; ++i) e.include(loadElement<T>(src + i * sizeof(T)), asymmetric);
  }

  // codes[0..) = the codes of src[0..n); index is the element index of src[0].
  template <class T>
  static void encode(const Bytes* src, size_t n, GroupParams p, const QuantConfig& c,
                     Bytes* codes, uint64_t index) {
    Encoder enc(p, c);
    if (c.bits == 8) {
      for (size_t i = 0; i < n; ++i) {
        codes[i] = Bytes(enc.code(loadElement<T>(src + i * sizeof(T)), index + i));
      }
      return;
    }
    size_t i = 0;
    for (; i + 2 <= n; i += 2) {
      const int32_t even = enc.code(loadElement<T>(src + i * sizeof(T)), index + i);
      const int32_t odd = enc.code(loadElement<T>(src + (i + 1) * sizeof(T)), index + i + 1);
      codes[i / 2] = Bytes((uint32_t(even) & 0xfu) | ((uint32_t(odd) & 0xfu) << 4));
    }
    if (i < n) {
      const int32_t last = enc.code(loadElement<T>(src + i * sizeof(T)), index + i);
      codes[i / 2] = Bytes(uint32_t(last) & 0xfu);  // the high nibble stays 0
    }
  }

  // out[j] = (kAccumulate ? acc[j] + v : v) rounded into Out, v the value of code j.
  // acc may equal out.
  template <class Out, bool kAccumulate>
  static void decode(Bytes* out, const float* acc, const Bytes* codes, size_t n, GroupParams p,
                     const QuantConfig& c) {
    for (size_t j = 0; j < n; ++j) {
      float v = quant::decode(quant::loadCode(codes, j, c), p, c.asymmetric);
      if constexpr (kAccumulate) v = quant::add(acc[j], v);
      storeElement<Out>(out + j * sizeof(Out), v);
    }
  }
};

// ---- AVX2 loops ----------------------------------------------------------------------------

#if CHORUS_QUANT_X86

#define CHORUS_TARGET_AVX2 [[gnu::target("avx2,f16c")]]

struct Avx2Ops {
  // Eight elements to eight floats and back, as toFloat / fromFloat do (F16C is bit-identical
  // to the portable float16 conversions; bfloat16 is the same integer rounding, lane-wise).
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

  template <class T>
  CHORUS_TARGET_AVX2 static void store8(Bytes* p, __m256 v) {
    if constexpr (std::is_same_v<T, float>) {
      _mm256_storeu_ps(reinterpret_cast<float*>(p), v);
    } else if constexpr (std::is_same_v<T, Float16>) {
      const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
    } else {
      // floatToBfloat16High lane-wise: add 0x7fff plus the kept lsb; NaN -> quiet NaN.
      const __m256i bits = _mm256_castps_si256(v);
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
      const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb);
      const __m256i rounded = _mm256_add_epi32(bits, bias);
      const __m256i nan = _mm256_or_si256(bits, _mm256_set1_epi32(int(detail::kF32QuietBit)));
      const __m256i isNan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      const __m256i high = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, nan, isNan), 16);
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(high, high), 0x08);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
    }
  }

  template <class T>
  CHORUS_TARGET_AVX2 static void extent(const Bytes* src, size_t n, bool asymmetric,
                                        quant::Extent& e) {
    size_t i = 0;
    alignas(32) float lanes[8];
    if (asymmetric) {
      __m256 lo = _mm256_set1_ps(e.lo), hi = _mm256_set1_ps(e.hi);
      for (; i + 8 <= n; i += 8) {
        const __m256 x = load8<T>(src + i * sizeof(T));
        lo = _mm256_min_ps(x, lo);
        hi = _mm256_max_ps(x, hi);
      }
      _mm256_store_ps(lanes, lo);
      for (float x : lanes) e.lo = quant::atMost(x, e.lo);
      _mm256_store_ps(lanes, hi);
      for (float x : lanes) e.hi = quant::atLeast(x, e.hi);
    } else {
      const __m256 absMask = _mm256_castsi256_ps(_mm256_set1_epi32(int(detail::kF32AbsMask)));
      __m256 m = _mm256_set1_ps(e.absmax);
      for (; i + 8 <= n; i += 8) {
        m = _mm256_max_ps(_mm256_and_ps(load8<T>(src + i * sizeof(T)), absMask), m);
      }
      _mm256_store_ps(lanes, m);
      for (float x : lanes) e.absmax = quant::atLeast(x, e.absmax);
    }
    ScalarOps::extent<T>(src + i * sizeof(T), n - i, asymmetric, e);
  }

  CHORUS_TARGET_AVX2 static __m256i mix32(__m256i x) {
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(int(0x7feb352du)));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(int(0x846ca68bu)));
    return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  }

  // The per-group constants of encode8, in registers.
  struct EncodeConsts {
    __m256 inv, offset, low, high, magic, one;
    __m256i k0, k1, lanes;
  };

  // quant::scaled, then codeNearest or codeStochastic, on eight elements whose indices have low
  // halves indexLow + 0..7 (no carry into the high half: the caller checks).
  CHORUS_TARGET_AVX2 static __m256i encode8(__m256 x, const EncodeConsts& k, const QuantConfig& c,
                                            uint32_t indexLow) {
    __m256 v = c.asymmetric ? _mm256_mul_ps(_mm256_sub_ps(x, k.offset), k.inv)
                            : _mm256_mul_ps(x, k.inv);
    v = _mm256_min_ps(_mm256_max_ps(v, k.low), k.high);
    if (!c.stochastic) {
      return _mm256_cvttps_epi32(_mm256_sub_ps(_mm256_add_ps(v, k.magic), k.magic));
    }
    const __m256i index = _mm256_add_epi32(_mm256_set1_epi32(int(indexLow)), k.lanes);
    const __m256i h = mix32(_mm256_add_epi32(mix32(_mm256_xor_si256(index, k.k0)), k.k1));
    const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(h, 8)),
                                   _mm256_set1_ps(quant::kTwoToMinus24));
    const __m256 y = _mm256_add_ps(v, u);
    __m256 r = _mm256_sub_ps(_mm256_add_ps(y, k.magic), k.magic);
    r = _mm256_sub_ps(r, _mm256_and_ps(_mm256_cmp_ps(r, y, _CMP_GT_OQ), k.one));
    return _mm256_cvttps_epi32(_mm256_min_ps(r, k.high));
  }

  // Four vectors of codes (elements 0-7, 8-15, 16-23, 24-31) to 32 bytes in element order.
  CHORUS_TARGET_AVX2 static __m256i packBytes(__m256i a, __m256i b, __m256i c, __m256i d,
                                              bool asymmetric) {
    const __m256i ab = _mm256_packs_epi32(a, b);  // codes fit int16: [-127, 255]
    const __m256i cd = _mm256_packs_epi32(c, d);
    const __m256i bytes = asymmetric ? _mm256_packus_epi16(ab, cd) : _mm256_packs_epi16(ab, cd);
    // The packs work within 128-bit lanes: dwords come out as a0-3 b0-3 c0-3 d0-3 a4-7 ...
    return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  }

  // 32 codes, one per byte, to 16 bytes of nibbles (even element low).
  CHORUS_TARGET_AVX2 static __m128i packNibbles(__m256i bytes) {
    const __m256i low = _mm256_and_si256(bytes, _mm256_set1_epi16(0x000f));
    const __m256i high = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), _mm256_set1_epi16(0x00f0));
    const __m256i words = _mm256_or_si256(low, high);  // one packed byte per 16-bit word
    const __m256i packed = _mm256_packus_epi16(words, words);
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
  }

  template <class T>
  CHORUS_TARGET_AVX2 static void encode(const Bytes* src, size_t n, GroupParams p,
                                        const QuantConfig& c, Bytes* codes, uint64_t index) {
    // The vector loop keeps one pair of random keys; a piece whose indices cross a multiple of
    // 2^32 (once per 4 G elements of a stream) is left to the scalar loop.
    if (n == 0 || (c.stochastic && (index >> 32) != ((index + n - 1) >> 32))) {
      ScalarOps::encode<T>(src, n, p, c, codes, index);
      return;
    }
    const quant::RandomKeys keys = quant::randomKeys(c.seed, uint32_t(index >> 32));
    const EncodeConsts k{_mm256_set1_ps(p.inv),
                         _mm256_set1_ps(p.offset),
                         _mm256_set1_ps(quant::codeLow(c)),
                         _mm256_set1_ps(quant::codeHigh(c)),
                         _mm256_set1_ps(quant::kRoundMagic),
                         _mm256_set1_ps(1.0f),
                         _mm256_set1_epi32(int(keys.k0)),
                         _mm256_set1_epi32(int(keys.k1)),
                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)};
    const auto low = uint32_t(index);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const Bytes* s = src + i * sizeof(T);
      const __m256i q0 = encode8(load8<T>(s), k, c, low + uint32_t(i));
      const __m256i q1 = encode8(load8<T>(s + 8 * sizeof(T)), k, c, low + uint32_t(i + 8));
      const __m256i q2 = encode8(load8<T>(s + 16 * sizeof(T)), k, c, low + uint32_t(i + 16));
      const __m256i q3 = encode8(load8<T>(s + 24 * sizeof(T)), k, c, low + uint32_t(i + 24));
      const __m256i bytes = packBytes(q0, q1, q2, q3, c.asymmetric);
      if (c.bits == 8) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i), bytes);
      } else {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i / 2), packNibbles(bytes));
      }
    }
    ScalarOps::encode<T>(src + i * sizeof(T), n - i, p, c, codes + quant::payloadBytes(c, i),
                         index + i);
  }

  // Codes j..j+7 (j even) as int32.
  CHORUS_TARGET_AVX2 static __m256i codes8(const Bytes* codes, size_t j, const QuantConfig& c) {
    if (c.bits == 8) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + j));
      return c.asymmetric ? _mm256_cvtepu8_epi32(b) : _mm256_cvtepi8_epi32(b);
    }
    // Element k of these eight sits at bits 4k..4k+3 of the little-endian 32-bit word.
    uint32_t word;
    std::memcpy(&word, codes + j / 2, sizeof(word));
    const __m256i w = _mm256_set1_epi32(int(word));
    if (c.asymmetric) {
      const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
      return _mm256_and_si256(_mm256_srlv_epi32(w, shifts), _mm256_set1_epi32(0xf));
    }
    // Move the nibble to the top, then shift it back arithmetically: sign extension.
    const __m256i shifts = _mm256_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0);
    return _mm256_srai_epi32(_mm256_sllv_epi32(w, shifts), 28);
  }

  template <class Out, bool kAccumulate>
  CHORUS_TARGET_AVX2 static void decode(Bytes* out, const float* acc, const Bytes* codes,
                                        size_t n, GroupParams p, const QuantConfig& c) {
    const __m256 scale = _mm256_set1_ps(p.scale), offset = _mm256_set1_ps(p.offset);
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
      __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(codes8(codes, j, c)), scale);
      if (c.asymmetric) v = _mm256_add_ps(v, offset);
      if constexpr (kAccumulate) v = _mm256_add_ps(_mm256_loadu_ps(acc + j), v);
      store8<Out>(out + j * sizeof(Out), v);
    }
    ScalarOps::decode<Out, kAccumulate>(out + j * sizeof(Out), kAccumulate ? acc + j : nullptr,
                                        codes + quant::payloadBytes(c, j), n - j, p, c);
  }
};

#endif  // CHORUS_QUANT_X86

// ---- group drivers (ISA-neutral; flattened into each entry point) ----------------------------

// Quantizes count elements of T at src into records at dst.
template <class Ops, class T>
void quantizeGroups(Bytes* dst, const Bytes* src, size_t count, const QuantConfig& c,
                    uint64_t firstIndex) {
  const size_t record = quant::recordBytes(c, c.groupSize);
  for (uint64_t start = 0, g = 0; start < count; start += c.groupSize, ++g) {
    const size_t n = size_t(std::min<uint64_t>(c.groupSize, count - start));
    const Bytes* in = src + start * sizeof(T);
    quant::Extent e;
    Ops::template extent<T>(in, n, c.asymmetric, e);
    const GroupParams p = quant::paramsOf(e, c);
    Bytes* out = dst + g * record;
    quant::storeHeader(out, c, p);
    Ops::template encode<T>(in, n, p, c, out + quant::headerBytes(c), firstIndex + start);
  }
}

// Elements [j, j + n) of the group whose records start at byte `recordOffset` of every source,
// summed in source order in float32 and written to out as Out. scratch (n floats) holds the
// partial sums and may be out itself when Out is float.
template <class Ops, class Out>
void sumPiece(Bytes* out, float* scratch, const void* const* srcs, size_t nsrcs,
              size_t recordOffset, uint64_t j, size_t n, const QuantConfig& c) {
  auto record = [&](size_t s) { return static_cast<const Bytes*>(srcs[s]) + recordOffset; };
  auto params = [&](size_t s) { return quant::loadHeader(record(s), c); };
  if (nsrcs == 1) {
    Ops::template decode<Out, false>(out, nullptr, codesAt(record(0), j, c), n, params(0), c);
    return;
  }
  auto* partial = reinterpret_cast<Bytes*>(scratch);
  Ops::template decode<float, false>(partial, nullptr, codesAt(record(0), j, c), n, params(0), c);
  for (size_t s = 1; s + 1 < nsrcs; ++s) {
    Ops::template decode<float, true>(partial, scratch, codesAt(record(s), j, c), n, params(s), c);
  }
  const size_t last = nsrcs - 1;
  Ops::template decode<Out, true>(out, scratch, codesAt(record(last), j, c), n, params(last), c);
}

template <class Ops, class T>
void dequantizeReduceGroups(Bytes* dst, const void* const* srcs, size_t nsrcs, size_t count,
                            const QuantConfig& c) {
  alignas(64) float scratch[kBlockElems];
  const size_t record = quant::recordBytes(c, c.groupSize);
  for (uint64_t start = 0, g = 0; start < count; start += c.groupSize, ++g) {
    const uint64_t n = std::min<uint64_t>(c.groupSize, count - start);
    for (uint64_t j = 0; j < n; j += kBlockElems) {
      const size_t m = size_t(std::min<uint64_t>(kBlockElems, n - j));
      sumPiece<Ops, T>(dst + (start + j) * sizeof(T), scratch, srcs, nsrcs, g * record, j, m, c);
    }
  }
}

template <class Ops>
void dequantizeAccumulateGroups(float* acc, const Bytes* src, size_t count, const QuantConfig& c) {
  const size_t record = quant::recordBytes(c, c.groupSize);
  for (uint64_t start = 0, g = 0; start < count; start += c.groupSize, ++g) {
    const size_t n = size_t(std::min<uint64_t>(c.groupSize, count - start));
    const Bytes* in = src + g * record;
    Ops::template decode<float, true>(reinterpret_cast<Bytes*>(acc + start), acc + start,
                                      codesAt(in, 0, c), n, quant::loadHeader(in, c), c);
  }
}

// A group longer than the block is summed twice: once for its range, once to encode it (the
// sum is deterministic, so both passes see the same values); shorter ones once.
template <class Ops>
void dequantizeReduceQuantizeGroups(Bytes* dst, const void* const* srcs, size_t nsrcs,
                                    size_t count, const QuantConfig& c, uint64_t firstIndex) {
  alignas(64) float scratch[kBlockElems];
  auto* block = reinterpret_cast<Bytes*>(scratch);
  const size_t record = quant::recordBytes(c, c.groupSize);
  for (uint64_t start = 0, g = 0; start < count; start += c.groupSize, ++g) {
    const uint64_t n = std::min<uint64_t>(c.groupSize, count - start);
    const size_t offset = g * record;
    quant::Extent e;
    for (uint64_t j = 0; j < n; j += kBlockElems) {
      const size_t m = size_t(std::min<uint64_t>(kBlockElems, n - j));
      sumPiece<Ops, float>(block, scratch, srcs, nsrcs, offset, j, m, c);
      Ops::template extent<float>(block, m, c.asymmetric, e);
    }
    const GroupParams p = quant::paramsOf(e, c);
    quant::storeHeader(dst + offset, c, p);
    for (uint64_t j = 0; j < n; j += kBlockElems) {
      const size_t m = size_t(std::min<uint64_t>(kBlockElems, n - j));
      if (n > kBlockElems) sumPiece<Ops, float>(block, scratch, srcs, nsrcs, offset, j, m, c);
      Ops::template encode<float>(block, m, p, c, dst + offset + quant::headerBytes(c) +
                                                      quant::payloadBytes(c, j),
                                  firstIndex + start + j);
    }
  }
}

// ---- entry points per ISA ------------------------------------------------------------------

template <class Ops>
struct Kernels {
  template <class T>
  [[gnu::flatten]] static void quantize(Bytes* d, const Bytes* s, size_t n, const QuantConfig& c,
                                        uint64_t first) {
    quantizeGroups<Ops, T>(d, s, n, c, first);
  }
  template <class T>
  [[gnu::flatten]] static void dequantizeReduce(Bytes* d, const void* const* s, size_t k,
                                                size_t n, const QuantConfig& c) {
    dequantizeReduceGroups<Ops, T>(d, s, k, n, c);
  }
  [[gnu::flatten]] static void accumulate(float* a, const Bytes* s, size_t n,
                                          const QuantConfig& c) {
    dequantizeAccumulateGroups<Ops>(a, s, n, c);
  }
  [[gnu::flatten]] static void requantize(Bytes* d, const void* const* s, size_t k, size_t n,
                                          const QuantConfig& c, uint64_t first) {
    dequantizeReduceQuantizeGroups<Ops>(d, s, k, n, c, first);
  }
};

#if CHORUS_QUANT_X86
// The same drivers compiled for AVX2: Kernels<Ops> has no target, so these wrappers carry it.
struct Avx2Kernels {
  template <class T>
  [[gnu::flatten]] CHORUS_TARGET_AVX2 static void quantize(Bytes* d, const Bytes* s, size_t n,
                                                           const QuantConfig& c, uint64_t first) {
    quantizeGroups<Avx2Ops, T>(d, s, n, c, first);
  }
  template <class T>
  [[gnu::flatten]] CHORUS_TARGET_AVX2 static void dequantizeReduce(Bytes* d, const void* const* s,
                                                                   size_t k, size_t n,
                                                                   const QuantConfig& c) {
    dequantizeReduceGroups<Avx2Ops, T>(d, s, k, n, c);
  }
  [[gnu::flatten]] CHORUS_TARGET_AVX2 static void accumulate(float* a, const Bytes* s, size_t n,
                                                             const QuantConfig& c) {
    dequantizeAccumulateGroups<Avx2Ops>(a, s, n, c);
  }
  [[gnu::flatten]] CHORUS_TARGET_AVX2 static void requantize(Bytes* d, const void* const* s,
                                                             size_t k, size_t n,
                                                             const QuantConfig& c,
                                                             uint64_t first) {
    dequantizeReduceQuantizeGroups<Avx2Ops>(d, s, k, n, c, first);
  }
};
#endif

bool useAvx2() {
#if CHORUS_QUANT_X86
  return cpuIsa() != CpuIsa::kGeneric;  // kAvx2, or kAvx512 which includes it
#else
  return false;
#endif
}

// f.template operator()<K>() with K the kernel set of the ISA in use.
template <class F>
void withKernels(F&& f) {
#if CHORUS_QUANT_X86
  if (useAvx2()) {
    f.template operator()<Avx2Kernels>();
    return;
  }
#endif
  f.template operator()<Kernels<ScalarOps>>();
}

// f.template operator()<T>() for the quantizable types.
template <class F>
void withInputType(DataType t, F&& f) {
  switch (t) {
    case DataType::kFloat32: f.template operator()<float>(); return;
    case DataType::kBfloat16: f.template operator()<Bfloat16>(); return;
    case DataType::kFloat16: f.template operator()<Float16>(); return;
    default: return;
  }
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

size_t quantizedSize(size_t count, const QuantConfig& config) {
  return quant::packedBytes(config, count);
}

void quantize(void* dst, const void* src, size_t count, DataType t, const QuantConfig& c,
              uint64_t firstIndex) {
  if (count == 0) return;
  withKernels([&]<class K>() {
    withInputType(t, [&]<class T>() {
      K::template quantize<T>(static_cast<Bytes*>(dst), static_cast<const Bytes*>(src), count, c,
                              firstIndex);
    });
  });
}

void dequantizeReduce(void* dst, DataType t, const void* const* srcs, size_t nsrcs, size_t count,
                      const QuantConfig& c) {
  if (count == 0 || nsrcs == 0) return;
  withKernels([&]<class K>() {
    withInputType(t, [&]<class T>() {
      K::template dequantizeReduce<T>(static_cast<Bytes*>(dst), srcs, nsrcs, count, c);
    });
  });
}

void dequantize(void* dst, const void* src, size_t count, DataType t, const QuantConfig& c) {
  const void* const srcs[1] = {src};
  dequantizeReduce(dst, t, srcs, 1, count, c);
}

void dequantizeAccumulate(float* acc, const void* src, size_t count, const QuantConfig& c) {
  if (count == 0) return;
  withKernels([&]<class K>() { K::accumulate(acc, static_cast<const Bytes*>(src), count, c); });
}

void dequantizeReduceQuantize(void* dst, const void* const* srcs, size_t nsrcs, size_t count,
                              const QuantConfig& c, uint64_t firstIndex) {
  if (count == 0 || nsrcs == 0) return;
  withKernels([&]<class K>() {
    K::requantize(static_cast<Bytes*>(dst), srcs, nsrcs, count, c, firstIndex);
  });
}

}  // namespace chorus::kernels
