// Helpers shared by the kernel tests: per-type random and Gaussian inputs, and a reference that
// computes in double and rounds once into the element type.
//
// Why a double reference is exact here: for +, *, / on p-bit inputs, rounding the exact result
// first to q >= 2p + 2 bits and then to p bits gives the correctly rounded p-bit result. double
// (53) covers float32 (24), and float32 covers the 16- and 8-bit formats, so "compute in double,
// round to the type" is what a kernel that computes in float32 and rounds once must produce.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "algorithms/kernels/dtype.h"
#include "algorithms/kernels/float_formats.h"
#include "algorithms/kernels/reduce.h"
#include "algorithms/kernels/reduce_ops.h"

namespace chorus::kernels::testing {

template <class T>
constexpr bool kIsFloat = kIsNarrowFloat<T> || std::is_floating_point_v<T>;

template <class T>
double toDouble(T x) {
  if constexpr (kIsNarrowFloat<T>) {
    return toFloat(x);
  } else {
    return static_cast<double>(x);
  }
}

// Rounds a double that is the exact-or-correctly-rounded result of one operation into T.
template <class T>
T fromDouble(double d) {
  if constexpr (kIsNarrowFloat<T>) {
    return fromFloat<T>(static_cast<float>(d));
  } else {
    static_assert(std::is_floating_point_v<T>);
    return static_cast<T>(d);
  }
}

template <class T>
auto rawBits(T x) {
  if constexpr (sizeof(T) == 1) {
    uint8_t u;
    std::memcpy(&u, &x, 1);
    return u;
  } else if constexpr (sizeof(T) == 2) {
    uint16_t u;
    std::memcpy(&u, &x, 2);
    return u;
  } else if constexpr (sizeof(T) == 4) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
  } else {
    uint64_t u;
    std::memcpy(&u, &x, 8);
    return u;
  }
}

// Equal bits, or both NaN (NaN payloads are not part of the contract).
template <class T>
bool sameValue(T x, T y) {
  if constexpr (kIsFloat<T>) {
    if (std::isnan(toDouble(x)) && std::isnan(toDouble(y))) return true;
  }
  return rawBits(x) == rawBits(y);
}

template <class T>
std::string describe(T x) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g (bits 0x%llx)", toDouble(x),
                static_cast<unsigned long long>(rawBits(x)));
  return buf;
}

template <class T>
T fromBits(uint64_t bits) {
  T x;
  std::memcpy(&x, &bits, sizeof(T));  // little-endian: the low bytes
  return x;
}

// A nonzero, non-NaN random element. Floats mix "ordinary" magnitudes, which keep sums and
// products meaningful, with arbitrary bit patterns, which reach subnormals, the largest values
// and infinities.
template <class T>
T randomElement(std::mt19937_64& rng) {
  for (;;) {
    T x;
    if constexpr (std::is_integral_v<T>) {
      x = fromBits<T>(rng());
    } else if (rng() % 4 == 0) {
      x = fromBits<T>(rng());
    } else {
      std::uniform_real_distribution<double> mant(1.0, 2.0);
      std::uniform_int_distribution<int> exp(-8, 8);
      const double v = std::ldexp(mant(rng), exp(rng)) * ((rng() & 1) ? -1.0 : 1.0);
      if constexpr (kIsNarrowFloat<T>) {
        x = fromFloat<T>(static_cast<float>(v));
      } else {
        x = static_cast<T>(v);
      }
    }
    const double d = toDouble(x);
    if (d != 0 && !std::isnan(d)) return x;
  }
}

template <class T>
std::vector<T> randomVector(size_t n, std::mt19937_64& rng) {
  std::vector<T> v(n);
  for (auto& x : v) x = randomElement<T>(rng);
  return v;
}

// n values drawn from N(0, 1) in float32, each rounded into T as a caller holding T would have
// it.
template <class T>
std::vector<T> gaussianVector(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<T> v(n);
  for (auto& x : v) {
    if constexpr (std::is_same_v<T, float>) {
      x = normal(rng);
    } else {
      x = fromFloat<T>(normal(rng));
    }
  }
  return v;
}

// The bytes of v, for comparing kernels' outputs byte for byte.
template <class T>
std::vector<unsigned char> bytesOf(const std::vector<T>& v) {
  std::vector<unsigned char> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// ---- reference arithmetic ------------------------------------------------------------------

template <class T>
T refReduce(T a, T b, ReduceOp op) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case ReduceOp::kSum: return static_cast<T>(static_cast<U>(uint64_t(a) + uint64_t(b)));
      case ReduceOp::kProd: return static_cast<T>(static_cast<U>(uint64_t(a) * uint64_t(b)));
      case ReduceOp::kMax: return a > b ? a : b;
      case ReduceOp::kMin: return a < b ? a : b;
    }
  } else {
    const double x = toDouble(a), y = toDouble(b);
    switch (op) {
      case ReduceOp::kSum: return fromDouble<T>(x + y);
      case ReduceOp::kProd: return fromDouble<T>(x * y);
      // Through fromDouble like every other result: an e5m2 infinity comes back saturated.
      // Ties (+0 vs -0) give b, as the kernel does.
      case ReduceOp::kMax:
        if (std::isnan(x) || std::isnan(y)) return fromDouble<T>(NAN);
        return fromDouble<T>(x > y ? x : y);
      case ReduceOp::kMin:
        if (std::isnan(x) || std::isnan(y)) return fromDouble<T>(NAN);
        return fromDouble<T>(x < y ? x : y);
    }
  }
  return T{};
}

template <class T>
T refScale(T x, T s) {
  return refReduce(x, s, ReduceOp::kProd);
}

template <class T>
T refDivide(T x, uint64_t n) {
  if constexpr (std::is_integral_v<T>) {
    if constexpr (std::is_signed_v<T>) {
      return static_cast<T>(int64_t(x) / int64_t(n));
    } else {
      return static_cast<T>(uint64_t(x) / n);
    }
  } else {
    return fromDouble<T>(toDouble(x) / double(n));
  }
}

// Runs the test body with the kernels switched to `isa`, restoring the previous choice after.
class IsaScope {
 public:
  explicit IsaScope(CpuIsa isa) : saved_(cpuIsa()), ok_(setCpuIsa(isa)) {}
  ~IsaScope() { setCpuIsa(saved_); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;
  bool ok() const { return ok_; }

 private:
  CpuIsa saved_;
  bool ok_;
};

inline std::vector<DataType> allDataTypes() {
  std::vector<DataType> v;
  for (int i = 0; i < kNumDataTypes; ++i) v.push_back(DataType(i));
  return v;
}

inline std::vector<ReduceOp> allReduceOps() {
  return {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin};
}

}  // namespace chorus::kernels::testing

// Readable test parameters in gtest output (found by argument-dependent lookup).
namespace chorus {
inline void PrintTo(DataType t, std::ostream* os) { *os << dataTypeName(t); }
inline void PrintTo(ReduceOp op, std::ostream* os) { *os << reduceOpName(op); }
}  // namespace chorus
