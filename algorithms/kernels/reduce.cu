// Device reduction: one grid-stride loop per (type, operator), applying the same combine<Op>()
// as the CPU loops. Grid-stride so one launch shape serves every count, and the grid is capped
// so a huge buffer does not launch millions of blocks that each do one element.
#include <algorithm>

#include "algorithms/kernels/reduce_cuda.h"
#include "algorithms/kernels/reduce_ops.h"

namespace chorus::kernels {
namespace {

constexpr unsigned kThreadsPerBlock = 256;
// Enough blocks to fill any current GPU several times over; beyond that, threads loop.
constexpr size_t kMaxBlocks = 4096;

template <class T, class Op>
__global__ void reduceKernel(T* dst, const T* a, const T* b, size_t count) {
  const size_t stride = size_t(blockDim.x) * gridDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    dst[i] = combine<Op>(a[i], b[i]);
  }
}

}  // namespace

cudaError_t launchReduce(void* dst, const void* a, const void* b, size_t count, DataType t,
                         ReduceOp op, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const size_t blocks = std::min(kMaxBlocks, (count + kThreadsPerBlock - 1) / kThreadsPerBlock);
  bool known = false;
  visitDataType(t, [&]<class T>() {
    known = visitReduceOp(op, [&]<class Op>() {
      reduceKernel<T, Op><<<unsigned(blocks), kThreadsPerBlock, 0, stream>>>(
          static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b), count);
    });
  });
  if (!known) return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace chorus::kernels
