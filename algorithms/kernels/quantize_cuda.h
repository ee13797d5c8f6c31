// CUDA group quantization, the device counterparts of quantize.h's kernels.
//
// Same contract, layout and arithmetic (quantize_ops.h, compiled for the device), so a GPU and a
// CPU quantization of the same input give the same bytes, and the same decoded bits. Built only
// with CHORUS_WITH_CUDA, into chorus_cuda_kernels.
//
// Every launcher enqueues on `stream` and returns the launch error, cudaErrorInvalidValue for a
// config quantize.h would refuse (validateQuantConfig), an input type that cannot be quantized or
// more than kMaxCudaSources sources, or cudaSuccess (count 0 launches nothing). Element buffers
// are device pointers (or managed/mapped memory) aligned to their element size; quantized
// buffers need no alignment.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "algorithms/kernels/dtype.h"
#include "algorithms/kernels/quantize_ops.h"

namespace chorus::kernels {

/// Sources one reduction launch takes (their pointers travel as a kernel argument).
inline constexpr size_t kMaxCudaSources = 32;

/// quantize(): dst (quantizedSize(count) bytes) = src (count elements of t) quantized.
cudaError_t launchQuantize(void* dst, const void* src, size_t count, DataType t,
                           const QuantConfig& config, uint64_t firstIndex, cudaStream_t stream);

/// dequantize(): dst (count elements of t) = the values of src's codes rounded into t.
cudaError_t launchDequantize(void* dst, const void* src, size_t count, DataType t,
                             const QuantConfig& config, cudaStream_t stream);

/// dequantizeAccumulate(): acc[i] += value of element i of src, in float32.
cudaError_t launchDequantizeAccumulate(float* acc, const void* src, size_t count,
                                       const QuantConfig& config, cudaStream_t stream);

/// dequantizeReduce(): dst (count elements of t) = the float32 sum, in source order, of the
/// values of srcs[0..nsrcs). `srcs` is a host array of device pointers.
cudaError_t launchDequantizeReduce(void* dst, DataType t, const void* const* srcs, size_t nsrcs,
                                   size_t count, const QuantConfig& config, cudaStream_t stream);

/// dequantizeReduceQuantize(): dst (quantized) = that float32 sum quantized again.
cudaError_t launchDequantizeReduceQuantize(void* dst, const void* const* srcs, size_t nsrcs,
                                           size_t count, const QuantConfig& config,
                                           uint64_t firstIndex, cudaStream_t stream);

}  // namespace chorus::kernels
