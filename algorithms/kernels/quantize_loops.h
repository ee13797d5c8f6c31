// The ISA-neutral parts of the CPU quantization kernels, shared by quantize.cc (dispatch and
// the scalar path), quantize_avx2.cc and quantize_avx512.cc. Private to those three files.
//
// The group loops (quantizeGroups, sumPiece and the drivers below them) are written once, over
// an Ops policy that supplies the three inner loops: the range of a group (extent), the encoding
// of values to codes (encode) and the decoding of codes, optionally added to a float32
// accumulator (decode). ScalarOps (here) works element by element through quantize_ops.h;
// Avx2Ops (quantize_avx2.cc) does eight floats per instruction with the same operations in the
// same order and hands its tails to ScalarOps; Avx512Ops (quantize_avx512.cc) does the same on
// sixteen. Everything is instantiated per Mode (bits, symmetric or not, rounding) so the loops
// carry no branch on the config. Each ISA's entry points are [[gnu::flatten]] and carry that
// ISA's target attribute: they inline the driver and all of the Ops into one function compiled
// for the ISA (the Ops functions carry the target attribute and are not always_inline, because
// the drivers have no target).
//
// Why target attributes rather than -mavx2 on the ISA's file: an inline function of a shared
// header (std::, quant::, these drivers) compiled with -mavx2 would be a weak definition that
// the linker may pick for the scalar path too, and run AVX2 code on a CPU without it.
//
// Every file that includes this is compiled with -ffp-contract=off: a multiply followed by an
// add must stay two roundings on every path (and on the GPU, where quantize_ops.h uses the _rn
// intrinsics). algorithms/kernels/CMakeLists.txt sets it.
#pragma once

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "algorithms/kernels/quantize.h"
#include "algorithms/kernels/reduce.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CHORUS_QUANT_X86 1
#else
#define CHORUS_QUANT_X86 0
#endif

namespace chorus::kernels::quant_cpu {

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

// A group's range as the drivers carry it between the Ops' extent and encode. `finite`: every
// element seen was finite (no NaN, no infinity). Only Avx512Ops' symmetric extent establishes
// it (its maximum of the bits sees NaN and infinity for free); every other extent clears it,
// meaning "not known". Starts true so that a group measured in several pieces keeps it only if
// every piece did. Avx512Ops' encoders drop the clamps that only NaN and infinite inputs need
// when it is set.
struct GroupRange : quant::Extent {
  bool finite = true;
};

// ---- scalar loops --------------------------------------------------------------------------

// The code of one element, with the random keys of its pair index's high half cached.
template <class M>
class Encoder {
 public:
  Encoder(GroupParams p, uint64_t seed) : p_(p), seed_(seed) {}

  int32_t code(float x, uint64_t index) {
    const float v = quant::scaled(x, p_, M::kAsymmetric, M::kLow);
    if constexpr (!M::kStochastic) {
      return quant::codeNearest(v);
    } else {
      const auto pairHigh = uint32_t(index >> 33);
      if (!haveKeys_ || pairHigh != keysHigh_) {
        keys_ = quant::randomKeys(seed_, pairHigh);
        keysHigh_ = pairHigh;
        haveKeys_ = true;
      }
      return quant::codeStochastic(v, quant::uniform(keys_, index), M::kHigh);
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
  static void extent(const Bytes* src, size_t n, GroupRange& e) {
    e.finite = false;
    for (size_t i = 0; i < n; ++i) e.include(loadElement<T>(src + i * sizeof(T)), M::kAsymmetric);
  }

  // codes[0..) = the codes of src[0..n); index is the element index of src[0]. finite: see
  // GroupRange (not used here).
  template <class M, class T>
  static void encode(const Bytes* src, size_t n, GroupParams p, uint64_t seed, Bytes* codes,
                     uint64_t index, bool finite = false) {
    (void)finite;
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

// Stochastic rounding's vector loops take 32 elements whose indices start a pair (even) and
// whose pairs share their random keys. Before such a loop: with an odd first index, the first
// element goes to the scalar loop (8 bits), or all of them (4 bits: the vector loop would start
// mid-byte; pieces of a stream at even indices, the usual case, never meet this); a piece whose
// pairs cross a multiple of 2^32 (once per 8 G elements of a stream) goes to the scalar loop.
// Returns whether the vector loop runs, from element `first`.
template <class M, class T>
bool vectorStochastic(const Bytes* src, size_t n, GroupParams p, uint64_t seed, Bytes* codes,
                      uint64_t index, size_t& first) {
  first = 0;
  if (n != 0 && (index & 1) != 0 && M::kBits == 8) {
    ScalarOps::encode<M, T>(src, 1, p, seed, codes, index);
    first = 1;
  }
  if (n <= first || ((index + first) & 1) != 0 ||
      (index + first) >> 33 != (index + n - 1) >> 33) {
    ScalarOps::encode<M, T>(src + first * sizeof(T), n - first, p, seed,
                            codes + M::payload(first), index + first);
    return false;
  }
  return true;
}

// ---- group drivers (ISA-neutral; flattened into each entry point) ----------------------------

// How far ahead of the group being encoded quantizeGroups asks for its input: 4 KiB. With only
// the hardware prefetcher, a 64 MiB input's DRAM reads and the encoder's work added up instead
// of overlapping (quantize float32 to int4: 16 GB/s at 64 MiB, 58 GB/s in L2); with it the
// encoder-heavy configs gained 18-49% at 64 MiB. 1 KiB ahead gained less, and
// dequantize_reduce_quantize, bound by its decoding, nothing (docs/performance.md).
constexpr size_t kPrefetchAhead = 4096;

// Asks for the cache lines of [p, p + n) (a hint: no fault, whatever the address).
inline void prefetchBytes(const Bytes* p, size_t n) {
  for (size_t o = 0; o < n; o += 64) __builtin_prefetch(p + o, 0, 3);
}

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
  GroupRange next;
  Ops::template extent<M, T>(src, length(0), next);
  const size_t bytes = count * sizeof(T);
  for (uint64_t start = 0, g = 0; start < count; start += group, ++g) {
    // The input kPrefetchAhead past the group whose range is taken next.
    const size_t ahead = (start + group) * sizeof(T) + kPrefetchAhead;
    if (ahead < bytes) prefetchBytes(src + ahead, std::min(group * sizeof(T), bytes - ahead));
    const GroupParams p = paramsOf<M>(next);
    const bool finite = next.finite;
    if (start + group < count) {
      next = GroupRange{};
      Ops::template extent<M, T>(src + (start + group) * sizeof(T), length(start + group), next);
    }
    Bytes* out = dst + g * record;
    quant::storeHeader(out, M::kAsymmetric, p);
    Ops::template encode<M, T>(src + start * sizeof(T), length(start), p, c.seed,
                               out + M::kHeader, firstIndex + start, finite);
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
// sum is deterministic, so both passes see the same values). Groups that fit the block are
// summed once, one group ahead: the sum and range of group g + 1 are taken before group g is
// encoded, so the divisions that turn a range into a scale overlap that work, as in
// quantizeGroups (the compare that waited on them held ~4% of int4's samples in perf).
template <class Ops, class M>
void dequantizeReduceQuantizeGroups(Bytes* dst, const void* const* srcs, size_t nsrcs,
                                    size_t count, const QuantConfig& c, uint64_t firstIndex) {
  alignas(64) float scratch[2][kBlockElems];
  const size_t record = M::record(c.groupSize);
  if (c.groupSize <= kBlockElems) {
    auto length = [&](uint64_t start) {
      return size_t(std::min<uint64_t>(c.groupSize, count - start));
    };
    // Sums group g (its elements from `start`) into block b and returns its range.
    auto sum = [&](uint64_t g, uint64_t start, size_t b) {
      auto* block = reinterpret_cast<Bytes*>(scratch[b]);
      GroupRange e;
      sumPiece<Ops, M, float>(block, scratch[b], srcs, nsrcs, g * record, 0, length(start));
      Ops::template extent<M, float>(block, length(start), e);
      return e;
    };
    GroupRange next = sum(0, 0, 0);
    for (uint64_t start = 0, g = 0; start < count; start += c.groupSize, ++g) {
      const GroupParams p = paramsOf<M>(next);
      const bool finite = next.finite;
      if (start + c.groupSize < count) next = sum(g + 1, start + c.groupSize, (g + 1) % 2);
      quant::storeHeader(dst + g * record, M::kAsymmetric, p);
      Ops::template encode<M, float>(reinterpret_cast<const Bytes*>(scratch[g % 2]),
                                     length(start), p, c.seed, dst + g * record + M::kHeader,
                                     firstIndex + start, finite);
    }
    return;
  }
  auto* block = reinterpret_cast<Bytes*>(scratch[0]);
  for (uint64_t start = 0, g = 0; start < count; start += c.groupSize, ++g) {
    const uint64_t n = std::min<uint64_t>(c.groupSize, count - start);
    const size_t offset = g * record;
    GroupRange e;
    for (uint64_t j = 0; j < n; j += kBlockElems) {
      const size_t m = size_t(std::min<uint64_t>(kBlockElems, n - j));
      sumPiece<Ops, M, float>(block, scratch[0], srcs, nsrcs, offset, j, m);
      Ops::template extent<M, float>(block, m, e);
    }
    const GroupParams p = paramsOf<M>(e);
    quant::storeHeader(dst + offset, M::kAsymmetric, p);
    for (uint64_t j = 0; j < n; j += kBlockElems) {
      const size_t m = size_t(std::min<uint64_t>(kBlockElems, n - j));
      if (n > kBlockElems) sumPiece<Ops, M, float>(block, scratch[0], srcs, nsrcs, offset, j, m);
      Bytes* codes = dst + offset + M::kHeader + M::payload(j);
      Ops::template encode<M, float>(block, m, p, c.seed, codes, firstIndex + start + j,
                                     e.finite);
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

// ---- one ISA's kernels behind the run-time config and type ------------------------------------

// The entry points of one ISA, the config's shape and the element type still run-time values.
struct IsaKernels {
  void (*quantize)(Bytes* dst, const Bytes* src, size_t count, DataType t, const QuantConfig& c,
                   uint64_t firstIndex);
  void (*dequantizeReduce)(Bytes* dst, DataType t, const void* const* srcs, size_t nsrcs,
                           size_t count, const QuantConfig& c);
  void (*accumulate)(float* acc, const Bytes* src, size_t count, const QuantConfig& c);
  void (*requantize)(Bytes* dst, const void* const* srcs, size_t nsrcs, size_t count,
                     const QuantConfig& c, uint64_t firstIndex);
};

// IsaKernels for a kernel set K (Kernels<ScalarOps>, Avx2Kernels, Avx512Kernels): picks K's
// instance for the config's Mode (quant::withShape) and the element type.
template <class K>
struct Dispatched {
  template <bool kDecodeOnly, class F>
  static void withMode(const QuantConfig& c, F&& f) {
    quant::withShape<kDecodeOnly>(c, [&]<uint32_t kBits, bool kAsymmetric, bool kStochastic>() {
      f.template operator()<Mode<kBits, kAsymmetric, kStochastic>>();
    });
  }
  static void quantize(Bytes* d, const Bytes* s, size_t n, DataType t, const QuantConfig& c,
                       uint64_t first) {
    withMode<false>(c, [&]<class M>() {
      quant::withType(t, [&]<class T>() { K::template quantize<M, T>(d, s, n, c, first); });
    });
  }
  static void dequantizeReduce(Bytes* d, DataType t, const void* const* s, size_t k, size_t n,
                               const QuantConfig& c) {
    withMode<true>(c, [&]<class M>() {
      quant::withType(t, [&]<class T>() { K::template dequantizeReduce<M, T>(d, s, k, n, c); });
    });
  }
  static void accumulate(float* a, const Bytes* s, size_t n, const QuantConfig& c) {
    withMode<true>(c, [&]<class M>() { K::template accumulate<M>(a, s, n, c); });
  }
  static void requantize(Bytes* d, const void* const* s, size_t k, size_t n,
                         const QuantConfig& c, uint64_t first) {
    withMode<false>(c, [&]<class M>() { K::template requantize<M>(d, s, k, n, c, first); });
  }
  static constexpr IsaKernels kTable{&quantize, &dequantizeReduce, &accumulate, &requantize};
};

// Each defined in its own file, so the three compile in parallel.
const IsaKernels& scalarKernels();  // quantize.cc
#if CHORUS_QUANT_X86
const IsaKernels& avx2Kernels();    // quantize_avx2.cc
const IsaKernels& avx512Kernels();  // quantize_avx512.cc
#endif

}  // namespace chorus::kernels::quant_cpu
