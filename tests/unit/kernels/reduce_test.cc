// reduce / scale / divide / copy against a double reference, for every type, operator and
// compiled instruction set, on fresh random inputs, with in-place and misaligned buffers.
#include "algorithms/kernels/reduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "algorithms/kernels/reduce_ops.h"
#include "tests/unit/kernels/kernel_test_util.h"

namespace chorus::kernels {
namespace {

using testing::describe;
using testing::IsaScope;
using testing::randomElement;
using testing::randomVector;
using testing::sameValue;

constexpr size_t kCounts[] = {0, 1, 7, 1023, 4096 + 3};

// Where the buffers sit relative to each other and to alignment.
enum class Layout { kDistinct, kDstIsA, kDstIsB, kElementOffset, kByteOffset };
constexpr Layout kLayouts[] = {Layout::kDistinct, Layout::kDstIsA, Layout::kDstIsB,
                               Layout::kElementOffset, Layout::kByteOffset};
constexpr Layout kUnaryLayouts[] = {Layout::kDistinct, Layout::kDstIsA, Layout::kElementOffset,
                                    Layout::kByteOffset};

const char* layoutName(Layout l) {
  switch (l) {
    case Layout::kDistinct: return "distinct";
    case Layout::kDstIsA: return "dst==a";
    case Layout::kDstIsB: return "dst==b";
    case Layout::kElementOffset: return "offset by one element";
    case Layout::kByteOffset: return "offset by one byte";
  }
  return "?";
}

constexpr std::byte kPoison{0xa5};
constexpr size_t kGuardBytes = 16;

// A byte buffer holding `count` elements of T at a chosen offset from 64-byte alignment, with
// poisoned guard bytes behind it so a write past the end is caught.
template <class T>
class Buffer {
 public:
  Buffer(size_t count, size_t offset)
      : count_(count), storage_(count * sizeof(T) + offset + kGuardBytes + 64, kPoison) {
    auto base = reinterpret_cast<uintptr_t>(storage_.data());
    data_ = storage_.data() + ((64 - base % 64) % 64) + offset;
  }
  void* data() { return data_; }
  void fill(const std::vector<T>& v) {
    if (!v.empty()) std::memcpy(data_, v.data(), v.size() * sizeof(T));  // v.data() may be null
  }
  T at(size_t i) const {
    T x;
    std::memcpy(&x, data_ + i * sizeof(T), sizeof(T));
    return x;
  }
  bool guardIntact() const {
    for (size_t i = 0; i < kGuardBytes; ++i) {
      if (data_[count_ * sizeof(T) + i] != kPoison) return false;
    }
    return true;
  }

 private:
  size_t count_;
  std::vector<std::byte> storage_;
  std::byte* data_ = nullptr;
};

size_t offsetFor(Layout layout, size_t elementSize) {
  switch (layout) {
    case Layout::kElementOffset: return elementSize;
    case Layout::kByteOffset: return 1;  // an element offset too when elements are bytes
    default: return 0;
  }
}

// Forces or forbids the non-temporal output path for the scope.
class StreamScope {
 public:
  explicit StreamScope(bool stream) : saved_(nonTemporalThreshold()) {
    setNonTemporalThreshold(stream ? 0 : std::numeric_limits<size_t>::max());
  }
  ~StreamScope() { setNonTemporalThreshold(saved_); }

 private:
  size_t saved_;
};

std::vector<CpuIsa> allIsas() { return {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx512}; }

}  // namespace

void PrintTo(CpuIsa isa, std::ostream* os) { *os << cpuIsaName(isa); }

namespace {

// ---- reduce ------------------------------------------------------------------------------

template <class T>
void checkReduce(DataType t, ReduceOp op, std::mt19937_64& rng) {
  for (size_t count : kCounts) {
    for (Layout layout : kLayouts) {
      for (bool stream : {false, true}) {
        StreamScope streamScope(stream);
        SCOPED_TRACE(::testing::Message() << "count " << count << ", " << layoutName(layout)
                                          << (stream ? ", non-temporal" : ""));
        const std::vector<T> a = randomVector<T>(count, rng);
        const std::vector<T> b = randomVector<T>(count, rng);
        const size_t offset = offsetFor(layout, sizeof(T));
        Buffer<T> bufA(count, offset), bufB(count, offset), bufD(count, offset);
        bufA.fill(a);
        bufB.fill(b);
        Buffer<T>* out = layout == Layout::kDstIsA   ? &bufA
                         : layout == Layout::kDstIsB ? &bufB
                                                     : &bufD;
        reduce(out->data(), bufA.data(), bufB.data(), count, t, op);
        ASSERT_TRUE(out->guardIntact()) << "wrote past the end";
        for (size_t i = 0; i < count; ++i) {
          const T want = testing::refReduce(a[i], b[i], op);
          const T got = out->at(i);
          ASSERT_TRUE(sameValue(got, want))
              << "i=" << i << ": " << describe(a[i]) << " " << reduceOpName(op) << " "
              << describe(b[i]) << " gave " << describe(got) << ", want " << describe(want);
        }
      }
    }
  }
}

class ReduceTest : public ::testing::TestWithParam<std::tuple<CpuIsa, DataType, ReduceOp>> {};

TEST_P(ReduceTest, MatchesDoubleReference) {
  // Not structured bindings: Clang 14 cannot capture those in the lambda below.
  const CpuIsa isa = std::get<0>(GetParam());
  const DataType t = std::get<1>(GetParam());
  const ReduceOp op = std::get<2>(GetParam());
  IsaScope scope(isa);
  if (!scope.ok()) GTEST_SKIP() << "this CPU or build has no " << cpuIsaName(isa) << " path";
  std::mt19937_64 rng(1000 * int(t) + 10 * int(op) + int(isa));
  visitDataType(t, [&]<class T>() { checkReduce<T>(t, op, rng); });
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, ReduceTest,
                         ::testing::Combine(::testing::ValuesIn(allIsas()),
                                            ::testing::ValuesIn(testing::allDataTypes()),
                                            ::testing::ValuesIn(testing::allReduceOps())),
                         [](const auto& info) {
                           return std::string(cpuIsaName(std::get<0>(info.param))) + "_" +
                                  dataTypeName(std::get<1>(info.param)) + "_" +
                                  reduceOpName(std::get<2>(info.param));
                         });

// ---- scale and divide ----------------------------------------------------------------------

template <class T>
void checkScale(DataType t, std::mt19937_64& rng) {
  for (size_t count : kCounts) {
    for (Layout layout : kUnaryLayouts) {
      for (bool stream : {false, true}) {
        StreamScope streamScope(stream);
        SCOPED_TRACE(::testing::Message() << "count " << count << ", " << layoutName(layout)
                                          << (stream ? ", non-temporal" : ""));
        const std::vector<T> src = randomVector<T>(count, rng);
        const T factor = randomElement<T>(rng);
        const size_t offset = offsetFor(layout, sizeof(T));
        Buffer<T> bufS(count, offset), bufD(count, offset);
        bufS.fill(src);
        Buffer<T>* out = layout == Layout::kDstIsA ? &bufS : &bufD;
        scale(out->data(), bufS.data(), count, t, &factor);
        ASSERT_TRUE(out->guardIntact()) << "wrote past the end";
        for (size_t i = 0; i < count; ++i) {
          const T want = testing::refScale(src[i], factor);
          ASSERT_TRUE(sameValue(out->at(i), want))
              << "i=" << i << ": " << describe(src[i]) << " * " << describe(factor) << " gave "
              << describe(out->at(i)) << ", want " << describe(want);
        }
      }
    }
  }
}

template <class T>
void checkDivide(DataType t, std::mt19937_64& rng) {
  for (uint64_t n : {uint64_t{1}, uint64_t{3}, uint64_t{8}, uint64_t{1000}}) {
    for (size_t count : kCounts) {
      for (Layout layout : kUnaryLayouts) {
        for (bool stream : {false, true}) {
          StreamScope streamScope(stream);
          SCOPED_TRACE(::testing::Message()
                       << "n " << n << ", count " << count << ", " << layoutName(layout)
                       << (stream ? ", non-temporal" : ""));
          const std::vector<T> src = randomVector<T>(count, rng);
          const size_t offset = offsetFor(layout, sizeof(T));
          Buffer<T> bufS(count, offset), bufD(count, offset);
          bufS.fill(src);
          Buffer<T>* out = layout == Layout::kDstIsA ? &bufS : &bufD;
          divide(out->data(), bufS.data(), count, t, n);
          ASSERT_TRUE(out->guardIntact()) << "wrote past the end";
          for (size_t i = 0; i < count; ++i) {
            const T want = testing::refDivide(src[i], n);
            ASSERT_TRUE(sameValue(out->at(i), want))
                << "i=" << i << ": " << describe(src[i]) << " / " << n << " gave "
                << describe(out->at(i)) << ", want " << describe(want);
          }
        }
      }
    }
  }
}

class ScaleDivideTest : public ::testing::TestWithParam<std::tuple<CpuIsa, DataType>> {};

TEST_P(ScaleDivideTest, ScaleMatchesDoubleReference) {
  const CpuIsa isa = std::get<0>(GetParam());
  const DataType t = std::get<1>(GetParam());
  IsaScope scope(isa);
  if (!scope.ok()) GTEST_SKIP() << "this CPU or build has no " << cpuIsaName(isa) << " path";
  std::mt19937_64 rng(77 + int(t));
  visitDataType(t, [&]<class T>() { checkScale<T>(t, rng); });
}

TEST_P(ScaleDivideTest, DivideMatchesDoubleReference) {
  const CpuIsa isa = std::get<0>(GetParam());
  const DataType t = std::get<1>(GetParam());
  IsaScope scope(isa);
  if (!scope.ok()) GTEST_SKIP() << "this CPU or build has no " << cpuIsaName(isa) << " path";
  std::mt19937_64 rng(99 + int(t));
  visitDataType(t, [&]<class T>() { checkDivide<T>(t, rng); });
}

INSTANTIATE_TEST_SUITE_P(AllTypes, ScaleDivideTest,
                         ::testing::Combine(::testing::ValuesIn(allIsas()),
                                            ::testing::ValuesIn(testing::allDataTypes())),
                         [](const auto& info) {
                           return std::string(cpuIsaName(std::get<0>(info.param))) + "_" +
                                  dataTypeName(std::get<1>(info.param));
                         });

// ---- edge cases, on every instruction set ----------------------------------------------------

class KernelEdgeTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    scope_ = std::make_unique<IsaScope>(GetParam());
    if (!scope_->ok()) GTEST_SKIP() << "this CPU or build has no " << cpuIsaName(GetParam());
  }
  void TearDown() override { scope_.reset(); }

  // One element through reduce(), for spot checks of rounding and overflow.
  template <class T>
  static T one(T a, T b, DataType t, ReduceOp op) {
    // Long enough that the vector body, not only the scalar tail, handles element 0.
    std::vector<T> x(64, a), y(64, b), d(64);
    reduce(d.data(), x.data(), y.data(), d.size(), t, op);
    for (const T& v : d) EXPECT_TRUE(sameValue(v, d[0]));
    return d[0];
  }

 private:
  std::unique_ptr<IsaScope> scope_;
};

TEST_P(KernelEdgeTest, HalfSumRoundsTiesToEven) {
  const auto h = [](float f) { return fromFloat<Float16>(f); };
  // Above 2048 float16 steps by 2: 2048 + 1 is a tie between 2048 (even mantissa) and 2050.
  EXPECT_EQ(toFloat(one(h(2048), h(1), DataType::kFloat16, ReduceOp::kSum)), 2048.0f);
  EXPECT_EQ(toFloat(one(h(2050), h(1), DataType::kFloat16, ReduceOp::kSum)), 2052.0f);
  EXPECT_EQ(toFloat(one(h(-2050), h(-1), DataType::kFloat16, ReduceOp::kSum)), -2052.0f);
}

TEST_P(KernelEdgeTest, Bfloat16SumRoundsTiesToEven) {
  const auto b = [](float f) { return fromFloat<Bfloat16>(f); };
  // bfloat16 has 8 significant bits: above 256 it steps by 2.
  EXPECT_EQ(toFloat(one(b(256), b(1), DataType::kBfloat16, ReduceOp::kSum)), 256.0f);
  EXPECT_EQ(toFloat(one(b(258), b(1), DataType::kBfloat16, ReduceOp::kSum)), 260.0f);
}

TEST_P(KernelEdgeTest, Float8RoundsTiesToEven) {
  const auto e4 = [](float f) { return fromFloat<Float8e4m3>(f); };
  const auto e5 = [](float f) { return fromFloat<Float8e5m2>(f); };
  // e4m3 has 4 significant bits: 16 + 1 is a tie between 16 and 18.
  EXPECT_EQ(toFloat(one(e4(16), e4(1), DataType::kFloat8e4m3, ReduceOp::kSum)), 16.0f);
  EXPECT_EQ(toFloat(one(e4(18), e4(1), DataType::kFloat8e4m3, ReduceOp::kSum)), 20.0f);
  // e5m2 has 3: 8 + 1 ties between 8 and 10, 10 + 1 between 10 and 12.
  EXPECT_EQ(toFloat(one(e5(8), e5(1), DataType::kFloat8e5m2, ReduceOp::kSum)), 8.0f);
  EXPECT_EQ(toFloat(one(e5(10), e5(1), DataType::kFloat8e5m2, ReduceOp::kSum)), 12.0f);
}

TEST_P(KernelEdgeTest, Float8Saturates) {
  const Float8e4m3 m4{kE4m3MaxFinite};
  const Float8e4m3 nm4{uint8_t(kE4m3MaxFinite | 0x80)};
  EXPECT_EQ(one(m4, m4, DataType::kFloat8e4m3, ReduceOp::kSum).bits, kE4m3MaxFinite);
  EXPECT_EQ(one(m4, m4, DataType::kFloat8e4m3, ReduceOp::kProd).bits, kE4m3MaxFinite);
  EXPECT_EQ(one(nm4, nm4, DataType::kFloat8e4m3, ReduceOp::kSum).bits, nm4.bits);
  EXPECT_EQ(one(m4, nm4, DataType::kFloat8e4m3, ReduceOp::kProd).bits, nm4.bits);
  const Float8e5m2 m5{kE5m2MaxFinite};
  const Float8e5m2 inf5{kE5m2Inf};
  EXPECT_EQ(one(m5, m5, DataType::kFloat8e5m2, ReduceOp::kSum).bits, kE5m2MaxFinite);
  EXPECT_EQ(one(inf5, m5, DataType::kFloat8e5m2, ReduceOp::kSum).bits, kE5m2MaxFinite);
  EXPECT_EQ(toFloat(one(m5, m5, DataType::kFloat8e5m2, ReduceOp::kSum)), 57344.0f);
}

TEST_P(KernelEdgeTest, Float16AndBfloat16OverflowToInfinity) {
  const Float16 maxHalf{0x7bff};  // 65504
  EXPECT_EQ(one(maxHalf, maxHalf, DataType::kFloat16, ReduceOp::kSum).bits, 0x7c00);
  const Bfloat16 maxBf{0x7f7f};
  const Bfloat16 negMaxBf{0xff7f};
  EXPECT_EQ(one(maxBf, maxBf, DataType::kBfloat16, ReduceOp::kSum).bits, 0x7f80);
  EXPECT_EQ(one(negMaxBf, maxBf, DataType::kBfloat16, ReduceOp::kProd).bits, 0xff80);
}

TEST_P(KernelEdgeTest, HalfSubnormalSums) {
  // 2^-24 is the smallest float16 subnormal; sums of subnormals are exact, and crossing into
  // the normal range must carry into the exponent.
  const Float16 tiny{0x0001}, maxSub{0x03ff};
  EXPECT_EQ(one(tiny, tiny, DataType::kFloat16, ReduceOp::kSum).bits, 0x0002);
  EXPECT_EQ(one(maxSub, tiny, DataType::kFloat16, ReduceOp::kSum).bits, 0x0400);
  // 2^-24 * 0.5 is a tie between 0 and 2^-24: even is 0.
  const Float16 half{0x3800};
  EXPECT_EQ(one(tiny, half, DataType::kFloat16, ReduceOp::kProd).bits, 0x0000);
}

TEST_P(KernelEdgeTest, MaxMinPropagateNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(one(nan, 1.0f, DataType::kFloat32, ReduceOp::kMax)));
  EXPECT_TRUE(std::isnan(one(1.0f, nan, DataType::kFloat32, ReduceOp::kMax)));
  EXPECT_TRUE(std::isnan(one(nan, 1.0f, DataType::kFloat32, ReduceOp::kMin)));
  EXPECT_TRUE(std::isnan(one(1.0f, nan, DataType::kFloat32, ReduceOp::kMin)));
  EXPECT_TRUE(std::isnan(one(1.0, double(nan), DataType::kFloat64, ReduceOp::kMax)));
  const Float16 hnan{0x7e00}, hone{0x3c00};
  EXPECT_TRUE(std::isnan(toFloat(one(hone, hnan, DataType::kFloat16, ReduceOp::kMax))));
  EXPECT_TRUE(std::isnan(toFloat(one(hnan, hone, DataType::kFloat16, ReduceOp::kMin))));
  const Bfloat16 bnan{0x7fc0}, bone{0x3f80};
  EXPECT_TRUE(std::isnan(toFloat(one(bone, bnan, DataType::kBfloat16, ReduceOp::kMax))));
  const Float8e4m3 e4nan{kE4m3Nan}, e4one{0x38};
  EXPECT_EQ(one(e4one, e4nan, DataType::kFloat8e4m3, ReduceOp::kMin).bits, kE4m3Nan);
  EXPECT_EQ(one(e4nan, e4one, DataType::kFloat8e4m3, ReduceOp::kSum).bits, kE4m3Nan);
}

TEST_P(KernelEdgeTest, IntegersWrap) {
  constexpr int32_t kMax32 = std::numeric_limits<int32_t>::max();
  constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(one(kMax32, 1, DataType::kInt32, ReduceOp::kSum), kMin32);
  EXPECT_EQ(one(kMax32, 2, DataType::kInt32, ReduceOp::kProd), -2);
  constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(one(kMin64, int64_t{-1}, DataType::kInt64, ReduceOp::kProd), kMin64);
  EXPECT_EQ(one(uint8_t{200}, uint8_t{100}, DataType::kUint8, ReduceOp::kSum), uint8_t{44});
  EXPECT_EQ(one(int8_t{-128}, int8_t{-1}, DataType::kInt8, ReduceOp::kProd), int8_t{-128});
  EXPECT_EQ(one(uint64_t{1} << 63, uint64_t{2}, DataType::kUint64, ReduceOp::kProd), 0u);
}

TEST_P(KernelEdgeTest, IntegerDivideTruncatesTowardZero) {
  std::vector<int32_t> v = {-7, 7, -1, std::numeric_limits<int32_t>::min()};
  divide(v.data(), v.data(), v.size(), DataType::kInt32, 2);
  EXPECT_EQ(v, (std::vector<int32_t>{-3, 3, 0, std::numeric_limits<int32_t>::min() / 2}));
  std::vector<int8_t> w = {-128, 127};
  divide(w.data(), w.data(), w.size(), DataType::kInt8, 1000);
  EXPECT_EQ(w, (std::vector<int8_t>{0, 0}));
}

TEST_P(KernelEdgeTest, ZeroCountTouchesNothing) {
  for (DataType t : testing::allDataTypes()) {
    for (ReduceOp op : testing::allReduceOps()) reduce(nullptr, nullptr, nullptr, 0, t, op);
    scale(nullptr, nullptr, 0, t, nullptr);
    divide(nullptr, nullptr, 0, t, 4);
  }
  copy(nullptr, nullptr, 0);
}

INSTANTIATE_TEST_SUITE_P(AllIsas, KernelEdgeTest, ::testing::ValuesIn(allIsas()),
                         [](const auto& info) { return std::string(cpuIsaName(info.param)); });

// ---- copy and ISA selection ----------------------------------------------------------------

TEST(KernelCopyTest, CopiesExactlyTheRange) {
  std::mt19937_64 rng(5);
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{7}, size_t{4099}, size_t{1} << 20}) {
    for (size_t offset : {0, 1, 3}) {
      std::vector<uint8_t> src(bytes + offset), dst(bytes + offset + kGuardBytes, 0xa5);
      for (auto& x : src) x = uint8_t(rng() | 1);
      copy(dst.data() + offset, src.data() + offset, bytes);
      EXPECT_TRUE(std::equal(src.begin() + offset, src.end(), dst.begin() + offset));
      EXPECT_TRUE(std::all_of(dst.begin() + offset + bytes, dst.end(),
                              [](uint8_t x) { return x == 0xa5; }));
    }
  }
}

TEST(KernelIsaTest, GenericIsAlwaysAvailable) {
  IsaScope scope(CpuIsa::kGeneric);
  EXPECT_TRUE(scope.ok());
  EXPECT_EQ(cpuIsa(), CpuIsa::kGeneric);
}

TEST(KernelIsaTest, RejectsUnknownIsa) { EXPECT_FALSE(setCpuIsa(CpuIsa(7))); }

}  // namespace
}  // namespace chorus::kernels
