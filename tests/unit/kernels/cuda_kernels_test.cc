// The CUDA kernels against the CPU ones: same inputs, bit-identical outputs — the reduction for
// every type and operator, the quantization kernels for every type and config shape. Needs a
// GPU; without one (CI, development machines) every test skips and says why, except the argument
// checks, which refuse before touching the device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "algorithms/kernels/quantize.h"
#include "algorithms/kernels/quantize_cuda.h"
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

// ---- quantization --------------------------------------------------------------------------

using testing::bytesOf;
using Bytes = std::vector<unsigned char>;

template <class T>
void toDevice(DeviceBuffer& d, const std::vector<T>& v) {
  const Bytes b = bytesOf(v);
  EXPECT_EQ(cudaMemcpy(d.get(), b.data(), b.size(), cudaMemcpyHostToDevice), cudaSuccess);
}

Bytes fromDevice(const DeviceBuffer& d, size_t bytes) {
  Bytes b(bytes);
  EXPECT_EQ(cudaMemcpy(b.data(), d.get(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return b;
}

QuantConfig quantConfig(uint32_t bits, uint64_t group, bool asymmetric, bool stochastic) {
  return {.bits = bits, .groupSize = group, .asymmetric = asymmetric, .stochastic = stochastic,
          .seed = 17};
}

// Every quantization kernel on the GPU and the CPU, for one type and config: same bytes out.
template <class T>
void checkQuantization(DataType t, const QuantConfig& c, size_t count, std::mt19937_64& rng) {
  SCOPED_TRACE(::testing::Message() << dataTypeName(t) << " int" << c.bits << " group "
                                    << c.groupSize << (c.asymmetric ? " asym" : " sym")
                                    << (c.stochastic ? " stochastic" : "") << " count " << count);
  std::vector<T> x = testing::gaussianVector<T>(count, rng);
  const size_t qbytes = quantizedSize(count, c), tbytes = count * sizeof(T);
  DeviceBuffer dx(tbytes), dq(qbytes), dq2(qbytes), dout(tbytes), dacc(count * 4), dreq(qbytes);
  toDevice(dx, x);
  const uint64_t first = 1000;
  Bytes q(qbytes), q2(qbytes);
  quantize(q.data(), x.data(), count, t, c, first);
  ASSERT_EQ(launchQuantize(dq.get(), dx.get(), count, t, c, first, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(fromDevice(dq, qbytes), q) << "quantize";

  // A second source, from other data, for the reductions.
  std::reverse(x.begin(), x.end());
  quantize(q2.data(), x.data(), count, t, c, 0);
  toDevice(dq2, q2);

  std::vector<T> out(count);
  dequantize(out.data(), q.data(), count, t, c);
  ASSERT_EQ(launchDequantize(dout.get(), dq.get(), count, t, c, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(fromDevice(dout, tbytes), bytesOf(out)) << "dequantize";

  std::vector<float> acc(count, 0.25f);
  toDevice(dacc, acc);
  dequantizeAccumulate(acc.data(), q.data(), count, c);
  auto* accDevice = static_cast<float*>(dacc.get());
  ASSERT_EQ(launchDequantizeAccumulate(accDevice, dq.get(), count, c, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(fromDevice(dacc, count * 4), bytesOf(acc)) << "dequantizeAccumulate";

  const void* hostSrcs[3] = {q.data(), q2.data(), q.data()};
  const void* devSrcs[3] = {dq.get(), dq2.get(), dq.get()};
  dequantizeReduce(out.data(), t, hostSrcs, 3, count, c);
  ASSERT_EQ(launchDequantizeReduce(dout.get(), t, devSrcs, 3, count, c, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(fromDevice(dout, tbytes), bytesOf(out)) << "dequantizeReduce";

  Bytes req(qbytes);
  dequantizeReduceQuantize(req.data(), hostSrcs, 3, count, c, first);
  ASSERT_EQ(launchDequantizeReduceQuantize(dreq.get(), devSrcs, 3, count, c, first, nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(fromDevice(dreq, qbytes), req) << "dequantizeReduceQuantize";
}

TEST_F(CudaKernelsTest, QuantizationMatchesTheCpuByteForByte) {
  std::mt19937_64 rng(7);
  for (DataType t : {DataType::kFloat32, DataType::kBfloat16, DataType::kFloat16}) {
    for (uint32_t bits : {4u, 8u}) {
      for (bool asym : {false, true}) {
        for (bool stochastic : {false, true}) {
          for (uint64_t group : {32u, 256u, 5000u}) {
            for (size_t count : {size_t{1}, size_t{333}, size_t(3 * group + 7)}) {
              const QuantConfig c = quantConfig(bits, group, asym, stochastic);
              if (t == DataType::kFloat32) checkQuantization<float>(t, c, count, rng);
              if (t == DataType::kBfloat16) checkQuantization<Bfloat16>(t, c, count, rng);
              if (t == DataType::kFloat16) checkQuantization<Float16>(t, c, count, rng);
              if (HasFatalFailure()) return;
            }
          }
        }
      }
    }
  }
}

// Refused on the host, before any CUDA call: runs without a GPU.
TEST(CudaQuantizeArguments, BadConfigsTypesAndSourceCountsAreRefused) {
  int dummy = 0;
  const void* srcs[kMaxCudaSources + 1] = {};
  for (auto& p : srcs) p = &dummy;
  const QuantConfig good = quantConfig(8, 256, false, false);
  const QuantConfig bads[] = {quantConfig(3, 256, false, false), quantConfig(8, 0, false, false),
                              quantConfig(4, 33, true, false)};
  for (const QuantConfig& bad : bads) {
    EXPECT_EQ(launchQuantize(&dummy, &dummy, 4, DataType::kFloat32, bad, 0, nullptr),
              cudaErrorInvalidValue);
    EXPECT_EQ(launchDequantize(&dummy, &dummy, 4, DataType::kFloat32, bad, nullptr),
              cudaErrorInvalidValue);
    EXPECT_EQ(launchDequantizeAccumulate(nullptr, &dummy, 4, bad, nullptr), cudaErrorInvalidValue);
    EXPECT_EQ(launchDequantizeReduceQuantize(&dummy, srcs, 2, 4, bad, 0, nullptr),
              cudaErrorInvalidValue);
  }
  EXPECT_EQ(launchQuantize(&dummy, &dummy, 4, DataType::kInt32, good, 0, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(launchDequantize(&dummy, &dummy, 4, DataType::kFloat64, good, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(launchDequantizeReduce(&dummy, DataType::kFloat32, srcs, 0, 4, good, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(launchDequantizeReduce(&dummy, DataType::kFloat32, srcs, kMaxCudaSources + 1, 4, good,
                                   nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(launchDequantizeReduceQuantize(&dummy, nullptr, 1, 4, good, 0, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace chorus::kernels
