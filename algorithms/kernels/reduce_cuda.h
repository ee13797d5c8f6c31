// CUDA element-wise reduction, the device counterpart of kernels::reduce().
//
// Same arithmetic as the CPU kernels (reduce_ops.h, float_formats.h, compiled for the device),
// so a reduction gives the same bits on either side. Built only with CHORUS_WITH_CUDA, into
// chorus_cuda_kernels.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "algorithms/kernels/dtype.h"

namespace chorus::kernels {

/// Enqueues dst[i] = a[i] op b[i] for i < count on `stream`; all three are device pointers (or
/// managed/mapped memory), aligned to their element size, dst may equal a or b. Returns the
/// launch error, cudaErrorInvalidValue for an unknown type or operator, or cudaSuccess (count 0
/// launches nothing).
cudaError_t launchReduce(void* dst, const void* a, const void* b, size_t count, DataType t,
                         ReduceOp op, cudaStream_t stream);

}  // namespace chorus::kernels
