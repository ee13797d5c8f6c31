// The CUDA reduction against the CPU one: same inputs, bit-identical outputs, for every type and
// operator. Needs a GPU; without one (CI, development machines) every test skips and says why.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "algorithms/kernels/reduce.h"
#include "algorithms/kernels/reduce_cuda.h"
#include "tests/unit/kernels/kernel_test_util.h"

namespace chorus::kernels {
namespace {

// Why the tests cannot run here, or empty when a device is usable.
std::string noGpuReason() {
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess) {
    return std::string("no usable CUDA device: cudaGetDeviceCount failed with ") +
           cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  }
  if (devices == 0) return "no CUDA device: cudaGetDeviceCount returned 0";
  return "";
}

class CudaKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static const std::string reason = noGpuReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
  }
};

// Device buffer freed on scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    EXPECT_EQ(cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

template <class T>
void checkAgainstCpu(DataType t, ReduceOp op, size_t count, bool inPlace, std::mt19937_64& rng) {
  SCOPED_TRACE(::testing::Message() << dataTypeName(t) << " " << reduceOpName(op) << " count "
                                    << count << (inPlace ? " in place" : ""));
  const size_t bytes = count * sizeof(T);
  const std::vector<T> a = testing::randomVector<T>(count, rng);
  const std::vector<T> b = testing::randomVector<T>(count, rng);
  std::vector<T> want(count);
  reduce(want.data(), a.data(), b.data(), count, t, op);

  DeviceBuffer da(bytes), db(bytes), dd(bytes);
  ASSERT_EQ(cudaMemcpy(da.get(), a.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(db.get(), b.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(dd.get(), 0xa5, bytes), cudaSuccess);  // poison
  void* out = inPlace ? da.get() : dd.get();
  ASSERT_EQ(launchReduce(out, da.get(), db.get(), count, t, op, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<T> got(count);
  ASSERT_EQ(cudaMemcpy(got.data(), out, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < count; ++i) {
    ASSERT_TRUE(testing::sameValue(got[i], want[i]))
        << "i=" << i << ": GPU " << testing::describe(got[i]) << ", CPU "
        << testing::describe(want[i]);
  }
}

TEST_F(CudaKernelsTest, EveryTypeAndOpMatchesTheCpuBitForBit) {
  std::mt19937_64 rng(2024);
  for (DataType t : testing::allDataTypes()) {
    for (ReduceOp op : testing::allReduceOps()) {
      for (size_t count : {size_t{1}, size_t{7}, size_t{4096 + 3}, size_t{1} << 20}) {
        for (bool inPlace : {false, true}) {
          visitDataType(t, [&]<class T>() { checkAgainstCpu<T>(t, op, count, inPlace, rng); });
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST_F(CudaKernelsTest, ZeroCountLaunchesNothing) {
  EXPECT_EQ(launchReduce(nullptr, nullptr, nullptr, 0, DataType::kFloat32, ReduceOp::kSum,
                         nullptr),
            cudaSuccess);
}

TEST_F(CudaKernelsTest, RejectsUnknownTypeAndOp) {
  DeviceBuffer d(64);
  EXPECT_EQ(launchReduce(d.get(), d.get(), d.get(), 4, DataType(200), ReduceOp::kSum, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(launchReduce(d.get(), d.get(), d.get(), 4, DataType::kFloat32, ReduceOp(9), nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace chorus::kernels
