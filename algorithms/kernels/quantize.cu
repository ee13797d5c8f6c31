// Device quantization: the arithmetic of quantize_ops.h in CUDA threads, so the bytes and values
// match the CPU kernels exactly.
//
// Encoding kernels give each group to one warp: the lanes take strided elements, fold their
// ranges (quant::Extent, order-independent) with shuffles, compute the same parameters, and
// write the codes (a 4-bit lane writes whole bytes: elements 2k and 2k+1). Decoding kernels are
// element-parallel: a thread reads its group's header and its code from every source and sums
// in source order. All loops are grid-stride, with the grid capped, so one launch shape serves
// every size. The reductions take up to kMaxCudaSources source pointers by value.
#include <algorithm>

#include "algorithms/kernels/quantize_cuda.h"
#include "algorithms/kernels/reduce_ops.h"

namespace chorus::kernels {
namespace {

using Bytes = unsigned char;
using quant::GroupParams;

constexpr unsigned kThreadsPerBlock = 256;
constexpr unsigned kWarp = 32;
constexpr size_t kMaxBlocks = 4096;
constexpr unsigned kFullMask = 0xffffffffu;

struct Sources {
  const Bytes* p[kMaxCudaSources];
  unsigned n;
};

template <class T>
__device__ float widen(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    return toFloat(x);
  }
}

template <class T>
__device__ T narrowTo(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return fromFloat<T>(v);
  }
}

// This thread's warp and lane, and the number of warps in the grid.
struct WarpSlot {
  size_t warp, warps;
  unsigned lane;
};
__device__ WarpSlot warpSlot() {
  const size_t thread = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  return {thread / kWarp, size_t(gridDim.x) * blockDim.x / kWarp, threadIdx.x % kWarp};
}

// The range of value(j) over j < n, each lane taking j = lane, lane + 32, ...; every lane gets
// the result.
template <bool kAsymmetric, class Value>
__device__ quant::Extent groupExtent(size_t n, unsigned lane, Value value) {
  quant::Extent e;
  for (size_t j = lane; j < n; j += kWarp) e.include(value(j), kAsymmetric);
  for (unsigned offset = kWarp / 2; offset > 0; offset /= 2) {
    quant::Extent other;
    other.absmax = __shfl_xor_sync(kFullMask, e.absmax, offset);
    other.lo = __shfl_xor_sync(kFullMask, e.lo, offset);
    other.hi = __shfl_xor_sync(kFullMask, e.hi, offset);
    e.merge(other);
  }
  return e;
}

// Writes one group's record: header (lane 0) and codes of value(j), j < n. index0: the element
// index of j = 0.
template <uint32_t kBits, bool kAsymmetric, bool kStochastic, class Value>
__device__ void encodeGroup(Bytes* record, size_t n, uint64_t seed, uint64_t index0,
                            unsigned lane, Value value) {
  const GroupParams p = quant::paramsOf(groupExtent<kAsymmetric>(n, lane, value), kBits,
                                        kAsymmetric);
  if (lane == 0) quant::storeHeader(record, kAsymmetric, p);
  Bytes* codes = record + quant::headerBytes(kAsymmetric);
  const float low = quant::codeLow(kBits, kAsymmetric), high = quant::codeHigh(kBits, kAsymmetric);
  auto code = [&](size_t j) {
    const float v = quant::scaled(value(j), p, kAsymmetric, low);
    if constexpr (!kStochastic) {
      return quant::codeNearest(v);
    } else {
      const uint64_t index = index0 + j;
      const quant::RandomKeys keys = quant::randomKeysFor(seed, index);
      return quant::codeStochastic(v, quant::uniform(keys, index), high);
    }
  };
  if constexpr (kBits == 8) {
    for (size_t j = lane; j < n; j += kWarp) codes[j] = Bytes(code(j));
  } else {
    for (size_t pair = lane; 2 * pair < n; pair += kWarp) {
      const uint32_t even = uint32_t(code(2 * pair)) & 0xfu;
      const uint32_t odd = 2 * pair + 1 < n ? uint32_t(code(2 * pair + 1)) & 0xfu : 0u;
      codes[pair] = Bytes(even | (odd << 4));
    }
  }
}

// Each group of `count` elements to one warp (grid-stride over the groups), which writes its
// record; value(g, j) is element j of group g.
template <uint32_t kBits, bool kAsymmetric, bool kStochastic, class Value>
__device__ void encodeGroups(Bytes* dst, size_t count, uint64_t group, uint64_t seed,
                             uint64_t firstIndex, Value value) {
  const WarpSlot w = warpSlot();
  const size_t groups = (count + group - 1) / group;
  const size_t record = quant::recordBytes(kBits, kAsymmetric, group);
  for (size_t g = w.warp; g < groups; g += w.warps) {
    const size_t start = g * group;
    const size_t n = count - start < group ? count - start : group;
    encodeGroup<kBits, kAsymmetric, kStochastic>(dst + g * record, n, seed, firstIndex + start,
                                                 w.lane, [&](size_t j) { return value(g, j); });
  }
}

template <class T, uint32_t kBits, bool kAsymmetric, bool kStochastic>
__global__ void quantizeKernel(Bytes* dst, const T* src, size_t count, uint64_t group,
                               uint64_t seed, uint64_t firstIndex) {
  encodeGroups<kBits, kAsymmetric, kStochastic>(
      dst, count, group, seed, firstIndex,
      [&](size_t g, size_t j) { return widen(src[g * group + j]); });
}

// The float32 sum, in source order, of element j of group g of every source (after acc, when
// given) — ScalarOps::decode's order on the CPU.
template <uint32_t kBits, bool kAsymmetric>
__device__ float sumAt(const Sources& s, size_t record, size_t g, size_t j, const float* acc) {
  float v = 0;
  for (unsigned k = 0; k < s.n; ++k) {
    const Bytes* rec = s.p[k] + g * record;
    const int32_t q = quant::loadCode(rec + quant::headerBytes(kAsymmetric), j, kBits, kAsymmetric);
    const float d = quant::decode(q, quant::loadHeader(rec, kAsymmetric), kAsymmetric);
    v = k == 0 ? (acc != nullptr ? quant::add(*acc, d) : d) : quant::add(v, d);
  }
  return v;
}

template <class Out, uint32_t kBits, bool kAsymmetric>
__global__ void decodeKernel(Out* dst, bool accumulate, Sources srcs, size_t count,
                             uint64_t group) {
  const size_t record = quant::recordBytes(kBits, kAsymmetric, group);
  const size_t stride = size_t(blockDim.x) * gridDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const size_t g = i / group;
    const float* acc = nullptr;
    if constexpr (std::is_same_v<Out, float>) acc = accumulate ? dst + i : nullptr;
    dst[i] = narrowTo<Out>(sumAt<kBits, kAsymmetric>(srcs, record, g, i - g * group, acc));
  }
}

template <uint32_t kBits, bool kAsymmetric, bool kStochastic>
__global__ void requantizeKernel(Bytes* dst, Sources srcs, size_t count, uint64_t group,
                                 uint64_t seed, uint64_t firstIndex) {
  const size_t record = quant::recordBytes(kBits, kAsymmetric, group);  // also the sources'
  encodeGroups<kBits, kAsymmetric, kStochastic>(
      dst, count, group, seed, firstIndex,
      [&](size_t g, size_t j) { return sumAt<kBits, kAsymmetric>(srcs, record, g, j, nullptr); });
}

// ---- host side -----------------------------------------------------------------------------

unsigned blocksFor(size_t threads) {
  return unsigned(std::min(kMaxBlocks, (threads + kThreadsPerBlock - 1) / kThreadsPerBlock));
}

bool packSources(const void* const* srcs, size_t nsrcs, Sources* out) {
  if (srcs == nullptr || nsrcs == 0 || nsrcs > kMaxCudaSources) return false;
  for (size_t s = 0; s < nsrcs; ++s) out->p[s] = static_cast<const Bytes*>(srcs[s]);
  out->n = unsigned(nsrcs);
  return true;
}

cudaError_t decode(void* dst, DataType t, bool accumulate, const Sources& srcs, size_t count,
                   const QuantConfig& c, cudaStream_t stream) {
  const bool known = quant::withType(t, [&]<class T>() {
    quant::withShape<true>(c, [&]<uint32_t kBits, bool kAsymmetric, bool>() {
      decodeKernel<T, kBits, kAsymmetric><<<blocksFor(count), kThreadsPerBlock, 0, stream>>>(
          static_cast<T*>(dst), accumulate, srcs, count, c.groupSize);
    });
  });
  return known ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launchQuantize(void* dst, const void* src, size_t count, DataType t,
                           const QuantConfig& c, uint64_t firstIndex, cudaStream_t stream) {
  if (!quant::usable(c) || !isQuantizableType(t)) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  const size_t groups = (count + c.groupSize - 1) / c.groupSize;
  quant::withType(t, [&]<class T>() {
    quant::withShape<false>(c, [&]<uint32_t kBits, bool kAsymmetric, bool kStochastic>() {
      quantizeKernel<T, kBits, kAsymmetric, kStochastic>
          <<<blocksFor(groups * kWarp), kThreadsPerBlock, 0, stream>>>(
              static_cast<Bytes*>(dst), static_cast<const T*>(src), count, c.groupSize, c.seed,
              firstIndex);
    });
  });
  return cudaGetLastError();
}

cudaError_t launchDequantize(void* dst, const void* src, size_t count, DataType t,
                             const QuantConfig& c, cudaStream_t stream) {
  return launchDequantizeReduce(dst, t, &src, 1, count, c, stream);
}

cudaError_t launchDequantizeAccumulate(float* acc, const void* src, size_t count,
                                       const QuantConfig& c, cudaStream_t stream) {
  if (!quant::usable(c)) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  Sources srcs;
  packSources(&src, 1, &srcs);
  return decode(acc, DataType::kFloat32, true, srcs, count, c, stream);
}

cudaError_t launchDequantizeReduce(void* dst, DataType t, const void* const* srcs, size_t nsrcs,
                                   size_t count, const QuantConfig& c, cudaStream_t stream) {
  Sources s;
  if (!quant::usable(c) || !isQuantizableType(t) || !packSources(srcs, nsrcs, &s)) {
    return cudaErrorInvalidValue;
  }
  if (count == 0) return cudaSuccess;
  return decode(dst, t, false, s, count, c, stream);
}

cudaError_t launchDequantizeReduceQuantize(void* dst, const void* const* srcs, size_t nsrcs,
                                           size_t count, const QuantConfig& c,
                                           uint64_t firstIndex, cudaStream_t stream) {
  Sources s;
  if (!quant::usable(c) || !packSources(srcs, nsrcs, &s)) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  const size_t groups = (count + c.groupSize - 1) / c.groupSize;
  quant::withShape<false>(c, [&]<uint32_t kBits, bool kAsymmetric, bool kStochastic>() {
    requantizeKernel<kBits, kAsymmetric, kStochastic>
        <<<blocksFor(groups * kWarp), kThreadsPerBlock, 0, stream>>>(
            static_cast<Bytes*>(dst), s, count, c.groupSize, c.seed, firstIndex);
  });
  return cudaGetLastError();
}

}  // namespace chorus::kernels
