// Group quantization of float32, bfloat16 and float16 data to 8- or 4-bit codes (ZeRO++'s
// qgZ/qwZ building blocks), on the CPU. quantize_cuda.h has the same kernels for the GPU and
// quantize_ops.h the arithmetic both share; all paths (scalar, AVX2, AVX-512, CUDA) give the
// same bits.
//
// Groups. The input is cut into groups of `groupSize` consecutive elements, counted from its
// first element; the last group is shorter when groupSize does not divide the count. Each group
// has its own scale (and, asymmetric, offset), computed in float32 from the group's values.
//
// Range convention (b = bits, high = the largest code):
//   symmetric    high = 2^(b-1) - 1 (7, 127); scale = absmax / high; code = round(x / scale),
//                clamped to [-high, high]; value = code * scale. The code range is symmetric
//                (-8 and -128 are never produced) so that quantizing -x gives exactly -code,
//                and the largest magnitude in the group is represented exactly up to one
//                rounding: nothing is clipped, and every element's error is at most scale / 2.
//                (DeepSpeed's absmax / 8 with [-8, 7] has a finer step but clips +absmax to 7/8
//                of its value, a larger worst-case error on the values that matter most.)
//   asymmetric   high = 2^b - 1 (15, 255); offset = min; scale = (max - min) / high;
//                code = round((x - min) / scale), clamped to [0, high];
//                value = code * scale + offset. Uses all 2^b codes on the group's actual range:
//                half the step of symmetric for data centred on zero, more for skewed data.
//                Zero is not exactly representable unless it is the minimum.
// The encoder multiplies by a reciprocal computed once per group (high / absmax or
// high / (max - min)), not by dividing each element. A group whose scale would be below FLT_MIN
// (all zeros, or values below ~1e-37) is stored with scale 0 and all codes 0 (value 0, or the
// offset). NaN elements are ignored by the range and encode as the lowest code; a group with an
// infinity gets an infinite scale and decodes to non-finite values (so an overflow stays
// visible). Rounding:
//   nearest      round to nearest, ties to even;
//   stochastic   code = floor(x / scale + u), u uniform in (0, 1) on the midpoints of 2^16
//                steps, from a counter-based generator keyed by (seed, element index; one
//                hash per pair of elements), so the expected value of the decoded element is x
//                (unbiased, to 2^-17 of a step) and the result depends only on
//                (input, config, element index) — never on threads, chunking or the ISA.
// The element index of element k of a call is firstIndex + k; a caller that quantizes a stream
// in pieces passes each piece's position so the pieces together equal one call (with pieces
// cut at group boundaries, which the grouping needs anyway).
// Arithmetic is float32 throughout, in the default rounding mode, without FMA contraction.
//
// Packed layout: one record per group, records back to back with no padding, in group order:
//   [float32 scale][float32 offset, asymmetric only][codes]
// all little-endian; codes are 1 byte per element for 8 bits (int8 two's complement when
// symmetric, uint8 when asymmetric) or 2 per byte for 4 bits: element 2k of the group in the low
// nibble (bits 0-3) of code byte k, element 2k+1 in the high nibble (bits 4-7) — equivalently,
// element j sits at bits 4j..4j+3 of the little-endian code bytes — as 4-bit two's complement
// (symmetric) or unsigned (asymmetric). A group of odd length leaves the last high nibble 0.
// Headers make records unaligned in general: nothing here needs alignment, of records or of the
// caller's buffers. quantizedSize() gives a buffer's size; a record of n elements is
// headerBytes + (8 bits: n, 4 bits: ceil(n / 2)) bytes, and whole groups of a buffer start at
// multiples of the full record size, so a slice of whole groups is a contiguous byte range.
//
// Dispatch: by cpuIsa() (reduce.h), chosen at run time from cpuid: the AVX-512 loops (F, BW, VL,
// DQ) for kAvx512, the AVX2 loops for kAvx2, the scalar loops otherwise; setCpuIsa() switches
// both the reduction and the quantization kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "algorithms/kernels/dtype.h"
#include "algorithms/kernels/quantize_ops.h"
#include "src/base/status.h"

namespace chorus::kernels {

/// chorusInvalidArgument naming the field (prefixed with `what`, e.g. "config->") when the
/// config cannot be used: bits not 4 or 8, group size 0, or odd with 4 bits.
Status validateQuantConfig(const QuantConfig& config, const char* what = "");

/// "int4:256" (symmetric, nearest), "int8:128 asymmetric stochastic seed=7": for errors and logs.
std::string quantConfigText(const QuantConfig& config);

/// The config's shape (bits, group size, mode, rounding) in one word, and the seed in another:
/// what the consistency header carries so ranks that disagree fail with both configs named.
struct QuantWords {
  uint64_t shape = 0;  ///< 0: not quantized
  uint64_t seed = 0;
};
QuantWords quantWords(const QuantConfig& config);
QuantConfig quantFromWords(QuantWords w);

/// Bytes that `count` elements occupy quantized (the layout above). The config must be valid.
size_t quantizedSize(size_t count, const QuantConfig& config);

/// dst (quantizedSize(count) bytes) = count elements of src (type t) quantized. firstIndex is the
/// element index of src[0] for stochastic rounding (ignored otherwise). Valid config and
/// quantizable t required; src and dst must not overlap.
void quantize(void* dst, const void* src, size_t count, DataType t, const QuantConfig& config,
              uint64_t firstIndex = 0);

/// dst (count elements of type t) = the values of src's codes, rounded once into t
/// (to nearest-even, as reduce.h's conversions do).
void dequantize(void* dst, const void* src, size_t count, DataType t, const QuantConfig& config);

/// acc[i] = acc[i] + value of element i of src, in float32 (an error-feedback residual, or a
/// partial sum kept in float32).
void dequantizeAccumulate(float* acc, const void* src, size_t count, const QuantConfig& config);

/// dst (count elements of type t) = sum of the values of srcs[0..nsrcs), accumulated in float32
/// in source order ((v0 + v1) + v2 ...) and rounded once into t. nsrcs >= 1; dst may not
/// overlap the sources.
void dequantizeReduce(void* dst, DataType t, const void* const* srcs, size_t nsrcs, size_t count,
                      const QuantConfig& config);

/// dst (quantized) = the float32 sum of srcs[0..nsrcs) as dequantizeReduce computes it,
/// quantized again with the same config (the middle hop of qgZ). Groups are those of the
/// sources; firstIndex as for quantize(). nsrcs >= 1; dst may not overlap the sources.
void dequantizeReduceQuantize(void* dst, const void* const* srcs, size_t nsrcs, size_t count,
                              const QuantConfig& config, uint64_t firstIndex = 0);

}  // namespace chorus::kernels
