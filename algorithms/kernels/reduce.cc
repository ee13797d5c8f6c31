// CPU kernels. Each loop is a plain indexed loop over typed pointers with the element function
// inlined, which GCC and Clang vectorize at -O3. The only intrinsics are the F16C conversions,
// which compilers do not generate from portable code, and the non-temporal stores; bfloat16 is
// handled two elements per 32-bit lane (see binaryLoopBf16) because the element-wise form spends
// its time repacking.
//
// The loop templates are instantiated once per instruction set, into functions that differ only
// by their target attribute (baseline, "avx2,f16c", AVX-512); an always_inline callee takes its
// caller's target, so one source gives every variant. A table per (ISA, type) is picked once
// from cpuid. Separate translation units built with -mavx2 were avoided: the linker could keep
// an AVX2 copy of a shared inline function and call it from the baseline path.
//
// Aliasing: the loops neither use restrict nor need it. dst == a is a dependence distance of
// zero, which the compilers' runtime overlap checks accept, so in-place steps stay vectorized.
//
// Outputs too large to stay in cache are written with non-temporal stores (see viaStream).
#include "algorithms/kernels/reduce.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cassert>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "algorithms/kernels/reduce_ops.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CHORUS_KERNELS_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define CHORUS_KERNELS_X86 0
#endif

#define CHORUS_ALWAYS_INLINE [[gnu::always_inline]] inline

namespace chorus::kernels {
namespace {

// ---- loops (ISA-neutral; inlined into each ISA's entry points) -----------------------------

// dst[i] = narrow(f(widen(a[i]), widen(b[i]))) and dst[i] = narrow(f(widen(a[i]))).
template <class T, class F>
CHORUS_ALWAYS_INLINE void binaryLoop(T* dst, const T* a, const T* b, size_t n, F f) {
  using M = ElementMath<T>;
  for (size_t i = 0; i < n; ++i) dst[i] = M::narrow(f(M::widen(a[i]), M::widen(b[i])));
}

template <class T, class F>
CHORUS_ALWAYS_INLINE void unaryLoop(T* dst, const T* a, size_t n, F f) {
  using M = ElementMath<T>;
  for (size_t i = 0; i < n; ++i) dst[i] = M::narrow(f(M::widen(a[i])));
}

// bfloat16 two at a time in a 32-bit lane: the even element widens with a shift, the odd one
// with a mask, and the rounded results recombine with a shift and a mask, so the vectorized loop
// never packs or unpacks 16-bit lanes (which is where the element-wise loop spends its time).
// Relies on little-endian element order within the lane.
inline constexpr bool kPairBfloat16 = std::endian::native == std::endian::little;
constexpr uint32_t kHighHalf = 0xffff0000u;

CHORUS_ALWAYS_INLINE uint32_t loadPair(const Bfloat16* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
CHORUS_ALWAYS_INLINE void storePair(Bfloat16* p, uint32_t v) { std::memcpy(p, &v, sizeof(v)); }
CHORUS_ALWAYS_INLINE float evenOf(uint32_t pair) { return detail::bitsFloat(pair << 16); }
CHORUS_ALWAYS_INLINE float oddOf(uint32_t pair) { return detail::bitsFloat(pair & kHighHalf); }
CHORUS_ALWAYS_INLINE uint32_t makePair(float even, float odd) {
  return (floatToBfloat16High(even) >> 16) | (floatToBfloat16High(odd) & kHighHalf);
}

template <class F>
CHORUS_ALWAYS_INLINE void binaryLoopBf16(Bfloat16* dst, const Bfloat16* a, const Bfloat16* b,
                                         size_t n, F f) {
  const size_t pairs = n / 2;
  for (size_t i = 0; i < pairs; ++i) {
    const uint32_t x = loadPair(a + 2 * i), y = loadPair(b + 2 * i);
    storePair(dst + 2 * i, makePair(f(evenOf(x), evenOf(y)), f(oddOf(x), oddOf(y))));
  }
  if (n % 2 != 0) binaryLoop(dst + n - 1, a + n - 1, b + n - 1, 1, f);
}

template <class F>
CHORUS_ALWAYS_INLINE void unaryLoopBf16(Bfloat16* dst, const Bfloat16* a, size_t n, F f) {
  const size_t pairs = n / 2;
  for (size_t i = 0; i < pairs; ++i) {
    const uint32_t x = loadPair(a + 2 * i);
    storePair(dst + 2 * i, makePair(f(evenOf(x)), f(oddOf(x))));
  }
  if (n % 2 != 0) unaryLoop(dst + n - 1, a + n - 1, 1, f);
}

#if CHORUS_KERNELS_X86

#define CHORUS_TARGET_AVX2 [[gnu::target("avx2,f16c")]]
#define CHORUS_TARGET_AVX512 [[gnu::target("avx2,f16c,avx512f,avx512bw,avx512vl,avx512dq")]]

// float16 with F16C: a vector of halves widens to floats, the element function runs on them as a
// float array (GCC and Clang keep it in a register), and they narrow back with round-to-nearest-
// even. vcvtph2ps/vcvtps2ph are bit-identical to halfBitsToFloat and floatToHalfBits, NaN
// payloads included, so the scalar tail may use those. Eight lanes under AVX2, 16 under AVX-512.
struct HalfLanes8 {
  static constexpr size_t kWidth = 8;
  CHORUS_TARGET_AVX2 static void load(float* out, const Float16* p) {
    _mm256_store_ps(out, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  CHORUS_TARGET_AVX2 static void store(Float16* p, const float* in) {
    const __m128i h = _mm256_cvtps_ph(_mm256_load_ps(in), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
  }
};

// The zero-masked forms with every lane enabled are the plain conversions; GCC 12's unmasked
// ones start from _mm512_undefined_*() and trip -Wmaybe-uninitialized (GCC PR 105593).
struct HalfLanes16 {
  static constexpr size_t kWidth = 16;
  static constexpr __mmask16 kAll = 0xffff;
  CHORUS_TARGET_AVX512 static void load(float* out, const Float16* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    _mm512_store_ps(out, _mm512_maskz_cvtph_ps(kAll, h));
  }
  CHORUS_TARGET_AVX512 static void store(Float16* p, const float* in) {
    const __m256i h = _mm512_maskz_cvtps_ph(kAll, _mm512_load_ps(in), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h);
  }
};

template <class Lanes, class F>
CHORUS_ALWAYS_INLINE void binaryLoopF16c(Float16* dst, const Float16* a, const Float16* b,
                                         size_t n, F f) {
  constexpr size_t kW = Lanes::kWidth;
  size_t i = 0;
  for (; i + kW <= n; i += kW) {
    alignas(64) float x[kW];
    alignas(64) float y[kW];
    Lanes::load(x, a + i);
    Lanes::load(y, b + i);
    for (size_t j = 0; j < kW; ++j) x[j] = f(x[j], y[j]);
    Lanes::store(dst + i, x);
  }
  for (; i < n; ++i) dst[i] = fromFloat<Float16>(f(toFloat(a[i]), toFloat(b[i])));
}

template <class Lanes, class F>
CHORUS_ALWAYS_INLINE void unaryLoopF16c(Float16* dst, const Float16* a, size_t n, F f) {
  constexpr size_t kW = Lanes::kWidth;
  size_t i = 0;
  for (; i + kW <= n; i += kW) {
    alignas(64) float x[kW];
    Lanes::load(x, a + i);
    for (size_t j = 0; j < kW; ++j) x[j] = f(x[j]);
    Lanes::store(dst + i, x);
  }
  for (; i < n; ++i) dst[i] = fromFloat<Float16>(f(toFloat(a[i])));
}

#else  // !CHORUS_KERNELS_X86: never used (HalfLanes is void), present so the bodies compile.

template <class Lanes, class F>
void binaryLoopF16c(Float16* dst, const Float16* a, const Float16* b, size_t n, F f) {
  binaryLoop(dst, a, b, n, f);
}
template <class Lanes, class F>
void unaryLoopF16c(Float16* dst, const Float16* a, size_t n, F f) {
  unaryLoop(dst, a, n, f);
}

#endif  // CHORUS_KERNELS_X86

// The per-type choice of loop. HalfLanes: HalfLanes8/16 when the caller's target has F16C (and
// AVX-512 for 16), void otherwise.
template <class T, class HalfLanes, class F>
CHORUS_ALWAYS_INLINE void binaryKernel(T* dst, const T* a, const T* b, size_t n, F f) {
  if constexpr (std::is_same_v<T, Float16> && !std::is_void_v<HalfLanes>) {
    binaryLoopF16c<HalfLanes>(dst, a, b, n, f);
  } else if constexpr (std::is_same_v<T, Bfloat16> && kPairBfloat16) {
    binaryLoopBf16(dst, a, b, n, f);
  } else {
    binaryLoop(dst, a, b, n, f);
  }
}

template <class T, class HalfLanes, class F>
CHORUS_ALWAYS_INLINE void unaryKernel(T* dst, const T* a, size_t n, F f) {
  if constexpr (std::is_same_v<T, Float16> && !std::is_void_v<HalfLanes>) {
    unaryLoopF16c<HalfLanes>(dst, a, n, f);
  } else if constexpr (std::is_same_v<T, Bfloat16> && kPairBfloat16) {
    unaryLoopBf16(dst, a, n, f);
  } else {
    unaryLoop(dst, a, n, f);
  }
}

// Entry points share one signature per kind so they fit a table. Scalars arrive already
// converted (see reduce() et al. below) so every ISA sees the same values.
using ReduceFn = void (*)(void*, const void*, const void*, size_t);
using ScaleFn = void (*)(void*, const void*, size_t, const void* /*ComputeType<T>*/);
using DivideFn = void (*)(void*, const void*, size_t, const void* /*DivisorType<T>*/);

template <class T, class Op, class HalfLanes>
CHORUS_ALWAYS_INLINE void reduceBody(void* dst, const void* a, const void* b, size_t n) {
  binaryKernel<T, HalfLanes>(static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b),
                         n, ApplyOp<Op>{});
}
template <class T, class HalfLanes>
CHORUS_ALWAYS_INLINE void scaleBody(void* dst, const void* src, size_t n, const void* s) {
  const MultiplyBy<ComputeType<T>> f{*static_cast<const ComputeType<T>*>(s)};
  unaryKernel<T, HalfLanes>(static_cast<T*>(dst), static_cast<const T*>(src), n, f);
}
template <class T, class HalfLanes>
CHORUS_ALWAYS_INLINE void divideBody(void* dst, const void* src, size_t n, const void* d) {
  const DivideBy<ComputeType<T>, DivisorType<T>> f{*static_cast<const DivisorType<T>*>(d)};
  unaryKernel<T, HalfLanes>(static_cast<T*>(dst), static_cast<const T*>(src), n, f);
}

// One struct per instruction set; the target attribute is the only difference.
struct GenericIsa {
  template <class T, class Op>
  static void reduce(void* d, const void* a, const void* b, size_t n) {
    reduceBody<T, Op, void>(d, a, b, n);
  }
  template <class T>
  static void scale(void* d, const void* s, size_t n, const void* f) {
    scaleBody<T, void>(d, s, n, f);
  }
  template <class T>
  static void divide(void* d, const void* s, size_t n, const void* f) {
    divideBody<T, void>(d, s, n, f);
  }
};

#if CHORUS_KERNELS_X86

struct Avx2Isa {
  template <class T, class Op>
  CHORUS_TARGET_AVX2 static void reduce(void* d, const void* a, const void* b, size_t n) {
    reduceBody<T, Op, HalfLanes8>(d, a, b, n);
  }
  template <class T>
  CHORUS_TARGET_AVX2 static void scale(void* d, const void* s, size_t n, const void* f) {
    scaleBody<T, HalfLanes8>(d, s, n, f);
  }
  template <class T>
  CHORUS_TARGET_AVX2 static void divide(void* d, const void* s, size_t n, const void* f) {
    divideBody<T, HalfLanes8>(d, s, n, f);
  }
};

struct Avx512Isa {
  template <class T, class Op>
  CHORUS_TARGET_AVX512 static void reduce(void* d, const void* a, const void* b, size_t n) {
    reduceBody<T, Op, HalfLanes16>(d, a, b, n);
  }
  template <class T>
  CHORUS_TARGET_AVX512 static void scale(void* d, const void* s, size_t n, const void* f) {
    scaleBody<T, HalfLanes16>(d, s, n, f);
  }
  template <class T>
  CHORUS_TARGET_AVX512 static void divide(void* d, const void* s, size_t n, const void* f) {
    divideBody<T, HalfLanes16>(d, s, n, f);
  }
};

// Clang 14's __builtin_cpu_supports does not know "f16c"; ask cpuid (leaf 1, ecx) directly.
bool cpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

bool cpuSupports(CpuIsa isa) {
  __builtin_cpu_init();
  switch (isa) {
    case CpuIsa::kGeneric: return true;
    case CpuIsa::kAvx2: return __builtin_cpu_supports("avx2") && cpuHasF16c();
    case CpuIsa::kAvx512:
      return cpuSupports(CpuIsa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
  }
  return false;
}

#else  // !CHORUS_KERNELS_X86

using Avx2Isa = GenericIsa;  // never selected: cpuSupports() says no
using Avx512Isa = GenericIsa;

bool cpuSupports(CpuIsa isa) { return isa == CpuIsa::kGeneric; }

#endif  // CHORUS_KERNELS_X86

struct KernelSet {
  std::array<ReduceFn, kNumReduceOps> reduce;  // indexed by ReduceOp
  ScaleFn scale;
  DivideFn divide;
  size_t elementSize;
  size_t elementAlign;
};

template <class Isa, class T>
KernelSet makeKernelSet() {
  return {{&Isa::template reduce<T, SumOp>, &Isa::template reduce<T, ProdOp>,
           &Isa::template reduce<T, MaxOp>, &Isa::template reduce<T, MinOp>},
          &Isa::template scale<T>,
          &Isa::template divide<T>,
          sizeof(T),
          alignof(T)};
}

// ---- dispatch ------------------------------------------------------------------------------

using KernelTable = std::array<KernelSet, kNumDataTypes>;
constexpr int kNumIsas = 3;

template <class Isa>
KernelTable buildTable() {
  KernelTable table{};
  for (int i = 0; i < kNumDataTypes; ++i) {
    visitDataType(DataType(i), [&]<class T>() { table[i] = makeKernelSet<Isa, T>(); });
  }
  return table;
}

CpuIsa bestIsa() {
  for (CpuIsa isa : {CpuIsa::kAvx512, CpuIsa::kAvx2}) {
    if (cpuSupports(isa)) return isa;
  }
  return CpuIsa::kGeneric;
}

std::atomic<CpuIsa>& isaSlot() {
  static std::atomic<CpuIsa> slot{bestIsa()};
  return slot;
}

const KernelSet& kernelsFor(DataType t) {
  static const std::array<KernelTable, kNumIsas> kTables = {
      buildTable<GenericIsa>(), buildTable<Avx2Isa>(), buildTable<Avx512Isa>()};
  const auto isa = isaSlot().load(std::memory_order_relaxed);
  assert(isValidDataType(int(t)));
  return kTables[size_t(isa)][size_t(t)];
}

bool isAligned(const void* p, size_t align) { return reinterpret_cast<uintptr_t>(p) % align == 0; }

// Misaligned buffers (a byte range at an odd offset) are staged through aligned stack blocks:
// rare, and it keeps the vectorized loops free of a second, unaligned, variant.
constexpr size_t kBounceBytes = 4096;

template <class Kernel>
void viaBounce(size_t elementSize, void* dst, const void* a, const void* b, size_t count,
               Kernel&& kernel) {
  alignas(64) std::byte x[kBounceBytes];
  alignas(64) std::byte y[kBounceBytes];
  const size_t perBlock = kBounceBytes / elementSize;
  auto* out = static_cast<std::byte*>(dst);
  const auto* inA = static_cast<const std::byte*>(a);
  const auto* inB = static_cast<const std::byte*>(b);
  for (size_t i = 0; i < count; i += perBlock) {
    const size_t bytes = std::min(perBlock, count - i) * elementSize;
    const size_t offset = i * elementSize;
    std::memcpy(x, inA + offset, bytes);
    if (inB != nullptr) std::memcpy(y, inB + offset, bytes);
    kernel(x, x, y, bytes / elementSize);
    std::memcpy(out + offset, x, bytes);
  }
}

// ---- non-temporal output ---------------------------------------------------------------------
//
// When a call streams more data than the last-level cache holds, its output is evicted by its own
// traffic before anyone reads it, and a normal store costs a read of the line first (write-
// allocate): four transfers where three are needed. Like memcpy past its own threshold, such calls
// compute 4 KiB at a time into an L1 block and write it out with non-temporal stores.

constexpr size_t kStreamBlockBytes = 4096;
constexpr size_t kStreamAlign = 64;

size_t lastLevelCacheBytes() {
#if defined(__linux__)
  // sysfs, not sysconf: in VMs glibc reports the host's whole L3 (all CCDs), not the slice a
  // core actually shares.
  size_t largest = 0;
  for (int index = 0; index < 8; ++index) {
    const std::string path =
        "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size";
    std::FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) break;
    unsigned long value = 0;
    char unit = 0;
    const int got = std::fscanf(f, "%lu%c", &value, &unit);
    std::fclose(f);
    if (got >= 1) {
      const size_t bytes = unit == 'K' ? value << 10 : unit == 'M' ? value << 20 : value;
      largest = std::max(largest, bytes);
    }
  }
  if (largest != 0) return largest;
#endif
  return size_t{32} << 20;
}

std::atomic<size_t>& streamThresholdSlot() {
  // A reduce moves three times its output; past the cache, stream.
  static std::atomic<size_t> slot{lastLevelCacheBytes() / 3};
  return slot;
}

void streamCopy(void* dst, const void* src, size_t bytes) {
#if CHORUS_KERNELS_X86
  // SSE2 is baseline on x86-64; the width of the store does not matter once the write-combining
  // buffers merge the lines.
  auto* d = static_cast<__m128i*>(dst);
  const auto* s = static_cast<const __m128i*>(src);
  for (size_t i = 0; i < bytes / sizeof(__m128i); ++i) {
    _mm_stream_si128(d + i, _mm_load_si128(s + i));
  }
#else
  std::memcpy(dst, src, bytes);
#endif
}

void streamFence() {
#if CHORUS_KERNELS_X86
  // Non-temporal stores are weakly ordered: fence before a peer (another thread, or a process
  // through shared memory) may be told the data is ready.
  _mm_sfence();
#endif
}

// kernel(out, offset, n): computes n elements starting at element `offset` into out.
template <class Kernel>
void viaStream(size_t elementSize, void* dst, size_t count, Kernel&& kernel) {
  auto* out = static_cast<std::byte*>(dst);
  const size_t misalign = reinterpret_cast<uintptr_t>(out) % kStreamAlign;
  size_t head = misalign == 0 ? 0 : (kStreamAlign - misalign) / elementSize;
  head = std::min(head, count);
  if (head != 0) kernel(out, 0, head);
  const size_t perBlock = kStreamBlockBytes / elementSize;
  alignas(kStreamAlign) std::byte block[kStreamBlockBytes];
  size_t i = head;
  for (; i + perBlock <= count; i += perBlock) {
    kernel(block, i, perBlock);
    streamCopy(out + i * elementSize, block, kStreamBlockBytes);
  }
  if (i < count) kernel(out + i * elementSize, i, count - i);
  streamFence();
}

bool shouldStream(void* dst, size_t bytes, size_t elementSize) {
  // The head loop needs whole elements to reach a 64-byte boundary.
  return bytes >= streamThresholdSlot().load(std::memory_order_relaxed) &&
         reinterpret_cast<uintptr_t>(dst) % elementSize == 0 && kStreamAlign % elementSize == 0;
}

// scale() and divide(): fn(dst, src, n, param) with the same alignment and streaming choices.
template <class Fn>
void unaryDispatch(const KernelSet& k, Fn fn, void* dst, const void* src, size_t count,
                   const void* param) {
  if (!isAligned(dst, k.elementAlign) || !isAligned(src, k.elementAlign)) {
    viaBounce(k.elementSize, dst, src, nullptr, count,
              [&](void* d, const void* x, const void*, size_t n) { fn(d, x, n, param); });
  } else if (shouldStream(dst, count * k.elementSize, k.elementSize)) {
    const auto* x = static_cast<const std::byte*>(src);
    const size_t size = k.elementSize;
    viaStream(size, dst, count,
              [&](void* out, size_t offset, size_t n) { fn(out, x + offset * size, n, param); });
  } else {
    fn(dst, src, count, param);
  }
}

}  // namespace

void reduce(void* dst, const void* a, const void* b, size_t count, DataType t, ReduceOp op) {
  if (count == 0) return;
  assert(int(op) < kNumReduceOps);
  const KernelSet& k = kernelsFor(t);
  const ReduceFn fn = k.reduce[size_t(op)];
  if (!isAligned(dst, k.elementAlign) || !isAligned(a, k.elementAlign) ||
      !isAligned(b, k.elementAlign)) {
    viaBounce(k.elementSize, dst, a, b, count,
              [fn](void* d, const void* x, const void* y, size_t n) { fn(d, x, y, n); });
  } else if (shouldStream(dst, count * k.elementSize, k.elementSize)) {
    const auto* x = static_cast<const std::byte*>(a);
    const auto* y = static_cast<const std::byte*>(b);
    const size_t size = k.elementSize;
    viaStream(size, dst, count, [&](void* out, size_t offset, size_t n) {
      fn(out, x + offset * size, y + offset * size, n);
    });
  } else {
    fn(dst, a, b, count);
  }
}

void scale(void* dst, const void* src, size_t count, DataType t, const void* scalar) {
  if (count == 0) return;
  const KernelSet& k = kernelsFor(t);
  // Widen the factor once, here, so every ISA multiplies by the same value.
  alignas(8) std::byte factor[8];
  visitDataType(t, [&]<class T>() {
    T s;
    std::memcpy(&s, scalar, sizeof(T));
    const ComputeType<T> c = ElementMath<T>::widen(s);
    std::memcpy(factor, &c, sizeof(c));
  });
  unaryDispatch(k, k.scale, dst, src, count, factor);
}

void divide(void* dst, const void* src, size_t count, DataType t, uint64_t n) {
  assert(n >= 1);
  if (count == 0) return;
  const KernelSet& k = kernelsFor(t);
  alignas(8) std::byte divisor[8];
  visitDataType(t, [&]<class T>() {
    using D = DivisorType<T>;
    // A signed divisor above INT64_MAX cannot occur for a rank count; clamp rather than wrap.
    const D d = std::is_signed_v<D> && n > uint64_t(std::numeric_limits<int64_t>::max())
                    ? static_cast<D>(std::numeric_limits<int64_t>::max())
                    : static_cast<D>(n);
    std::memcpy(divisor, &d, sizeof(d));
  });
  unaryDispatch(k, k.divide, dst, src, count, divisor);
}

void copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  std::memcpy(dst, src, bytes);
}

CpuIsa cpuIsa() { return isaSlot().load(std::memory_order_relaxed); }

bool setCpuIsa(CpuIsa isa) {
  if (int(isa) >= kNumIsas || !cpuSupports(isa)) return false;
  isaSlot().store(isa, std::memory_order_relaxed);
  return true;
}

size_t nonTemporalThreshold() { return streamThresholdSlot().load(std::memory_order_relaxed); }

void setNonTemporalThreshold(size_t bytes) {
  streamThresholdSlot().store(bytes, std::memory_order_relaxed);
}

const char* cpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kGeneric: return "generic";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
  }
  return "unknown";
}

}  // namespace chorus::kernels
