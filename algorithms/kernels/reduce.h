// CPU element-wise kernels the executor runs for reduce, copy and averaging steps.
//
// All take untyped buffers and a DataType, as schedules describe them. Pointers need not be
// aligned (misaligned buffers take a slower bounce path) and null is fine when count is 0.
// Aliasing: dst may be exactly equal to an input (in-place steps); any other overlap is a bug.
// 16- and 8-bit floats are computed in float32 and rounded once (see reduce_ops.h for the exact
// rules, float_formats.h for rounding and saturation). Integer arithmetic wraps.
//
// The loops are written once and compiled per instruction set: the baseline of the target and,
// on x86-64, AVX2 + F16C and AVX-512; the best the CPU has is chosen once from cpuid.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algorithms/kernels/dtype.h"

namespace chorus::kernels {

/// dst[i] = a[i] op b[i] for i < count. Avg and PreMulSum are kSum followed by divide()/scale().
void reduce(void* dst, const void* a, const void* b, size_t count, DataType t, ReduceOp op);

/// dst[i] = src[i] * scalar, with *scalar one element of type t (PreMulSum's factor).
void scale(void* dst, const void* src, size_t count, DataType t, const void* scalar);

/// dst[i] = src[i] / n (chorusAvg). Floats divide in float32 (float64 for float64) and round
/// once; integers use truncating division. n must be at least 1.
void divide(void* dst, const void* src, size_t count, DataType t, uint64_t n);

/// memcpy for executor steps: the one place to change if copies get a faster path.
void copy(void* dst, const void* src, size_t bytes);

/// Instruction sets the kernels are compiled for. kAvx2 includes F16C; kAvx512 is AVX-512
/// F/BW/VL/DQ on top of that.
enum class CpuIsa : uint8_t { kGeneric = 0, kAvx2 = 1, kAvx512 = 2 };

/// The instruction set in use: the best the CPU supports unless setCpuIsa() chose another.
CpuIsa cpuIsa();

/// Forces an instruction set (tests compare the paths; benchmarks measure them). Returns false,
/// changing nothing, when the CPU or the build lacks it.
bool setCpuIsa(CpuIsa isa);

/// "generic", "avx2", "avx512".
const char* cpuIsaName(CpuIsa isa);

/// reduce/scale/divide calls whose output is at least this many bytes write it with
/// non-temporal stores (it would leave the cache before anyone reads it). Defaults to a third of
/// the last-level cache; settable for tests and benchmarks.
size_t nonTemporalThreshold();
void setNonTemporalThreshold(size_t bytes);

}  // namespace chorus::kernels
