// CPU quantization kernels: the entry points of quantize.h, dispatched by cpuIsa() to the
// scalar loops (here), the AVX2 loops (quantize_avx2.cc) or the AVX-512 loops
// (quantize_avx512.cc), all bit-identical. quantize_loops.h holds what the three share: the
// group drivers, the scalar inner loops and the per-config dispatch.
//
// The ISAs are separate files so they compile in parallel: one file of all three took ~54 s at
// -O3 (times in algorithms/kernels/README.md).
#include "algorithms/kernels/quantize.h"

#include <string>

#include "algorithms/kernels/quantize_loops.h"

namespace chorus::kernels {
namespace quant_cpu {

const IsaKernels& scalarKernels() { return Dispatched<Kernels<ScalarOps>>::kTable; }

}  // namespace quant_cpu

namespace {

using quant_cpu::Bytes;

const quant_cpu::IsaKernels& kernels() {
#if CHORUS_QUANT_X86
  switch (cpuIsa()) {
    case CpuIsa::kAvx512: return quant_cpu::avx512Kernels();
    case CpuIsa::kAvx2: return quant_cpu::avx2Kernels();
    case CpuIsa::kGeneric: break;
  }
#endif
  return quant_cpu::scalarKernels();
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
  kernels().quantize(static_cast<Bytes*>(dst), static_cast<const Bytes*>(src), count, t, c,
                     firstIndex);
}

void dequantizeReduce(void* dst, DataType t, const void* const* srcs, size_t nsrcs, size_t count,
                      const QuantConfig& c) {
  if (count == 0 || nsrcs == 0) return;
  kernels().dequantizeReduce(static_cast<Bytes*>(dst), t, srcs, nsrcs, count, c);
}

void dequantize(void* dst, const void* src, size_t count, DataType t, const QuantConfig& c) {
  const void* const srcs[1] = {src};
  dequantizeReduce(dst, t, srcs, 1, count, c);
}

void dequantizeAccumulate(float* acc, const void* src, size_t count, const QuantConfig& c) {
  if (count == 0) return;
  kernels().accumulate(acc, static_cast<const Bytes*>(src), count, c);
}

void dequantizeReduceQuantize(void* dst, const void* const* srcs, size_t nsrcs, size_t count,
                              const QuantConfig& c, uint64_t firstIndex) {
  if (count == 0 || nsrcs == 0) return;
  kernels().requantize(static_cast<Bytes*>(dst), srcs, nsrcs, count, c, firstIndex);
}

}  // namespace chorus::kernels
