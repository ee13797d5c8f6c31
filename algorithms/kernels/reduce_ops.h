// The element-wise arithmetic of the reduction kernels, shared by the CPU loops (reduce.cc) and
// the CUDA kernels (reduce.cu) so both produce the same bits.
//
// Each operator works on a "compute" type: float for the 16- and 8-bit floats (widened, then
// rounded once on the way back), the type itself otherwise. Integers wrap modulo 2^bits, done
// in unsigned arithmetic because signed overflow is undefined. Max and min propagate NaN: a
// NaN in any rank's input must reach the result rather than vanish depending on rank order.
#pragma once

#include <cstdint>
#include <type_traits>

#include "algorithms/kernels/dtype.h"
#include "algorithms/kernels/float_formats.h"

namespace chorus::kernels {

// How an element type is widened to, and rounded back from, the type the arithmetic uses.
template <class T>
struct ElementMath {
  using Compute = T;
  CHORUS_HD static Compute widen(T x) { return x; }
  CHORUS_HD static T narrow(Compute x) { return x; }
};

template <class T>
struct NarrowFloatMath {
  using Compute = float;
  CHORUS_HD static float widen(T x) { return toFloat(x); }
  CHORUS_HD static T narrow(float x) { return fromFloat<T>(x); }
};
template <>
struct ElementMath<Float16> : NarrowFloatMath<Float16> {};
template <>
struct ElementMath<Bfloat16> : NarrowFloatMath<Bfloat16> {};
template <>
struct ElementMath<Float8e4m3> : NarrowFloatMath<Float8e4m3> {};
template <>
struct ElementMath<Float8e5m2> : NarrowFloatMath<Float8e5m2> {};

template <class T>
using ComputeType = typename ElementMath<T>::Compute;

struct SumOp {
  template <class C>
  CHORUS_HD static C apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      using U = std::make_unsigned_t<C>;
      return static_cast<C>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
};

struct ProdOp {
  template <class C>
  CHORUS_HD static C apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      // uint8 operands promote to int, whose range holds any 8-bit product; wider unsigned
      // types multiply modulo 2^bits.
      using U = std::make_unsigned_t<C>;
      return static_cast<C>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return a * b;
    }
  }
};

struct MaxOp {
  template <class C>
  CHORUS_HD static C apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      return a > b ? a : b;
    } else {
      return (a > b || a != a) ? a : b;  // b when b is NaN, a when a is
    }
  }
};

struct MinOp {
  template <class C>
  CHORUS_HD static C apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      return a < b ? a : b;
    } else {
      return (a < b || a != a) ? a : b;
    }
  }
};

// The divisor of an average as the arithmetic wants it: float for the narrow floats and
// float32, double for float64, a 64-bit integer of the element's signedness for integers (so
// every rank count is representable and x / n truncates toward zero, as C++ division does).
template <class T>
using DivisorType =
    std::conditional_t<std::is_floating_point_v<ComputeType<T>>, ComputeType<T>,
                       std::conditional_t<std::is_signed_v<ComputeType<T>>, int64_t, uint64_t>>;

// Element functions on compute values. Loops widen, apply one of these, and narrow; keeping the
// functions separate from the loops lets a loop choose how it widens (F16C, paired bfloat16).
template <class Op>
struct ApplyOp {
  template <class C>
  CHORUS_HD C operator()(C a, C b) const {
    return Op::template apply<C>(a, b);
  }
};

template <class C>
struct MultiplyBy {
  C factor;
  CHORUS_HD C operator()(C x) const { return ProdOp::apply<C>(x, factor); }
};

template <class C, class D>
struct DivideBy {
  D divisor;
  CHORUS_HD C operator()(C x) const { return static_cast<C>(x / divisor); }
};

// The same functions on stored elements.

template <class Op, class T>
CHORUS_HD inline T combine(T a, T b) {
  using M = ElementMath<T>;
  return M::narrow(ApplyOp<Op>{}(M::widen(a), M::widen(b)));
}

// x * s where s is already widened (scale(): PreMulSum's factor is loaded once per call).
template <class T>
CHORUS_HD inline T scaleElement(T x, ComputeType<T> s) {
  using M = ElementMath<T>;
  return M::narrow(MultiplyBy<ComputeType<T>>{s}(M::widen(x)));
}

template <class T>
CHORUS_HD inline T divideElement(T x, DivisorType<T> n) {
  using M = ElementMath<T>;
  return M::narrow(DivideBy<ComputeType<T>, DivisorType<T>>{n}(M::widen(x)));
}

// Calls f.template operator()<T>() with T the storage type of t; returns false for an unknown
// type. Host code: keeps the type switch in one place for the CPU dispatch and the CUDA launcher.
template <class F>
inline bool visitDataType(DataType t, F&& f) {
  switch (t) {
    case DataType::kInt8: f.template operator()<int8_t>(); return true;
    case DataType::kUint8: f.template operator()<uint8_t>(); return true;
    case DataType::kInt32: f.template operator()<int32_t>(); return true;
    case DataType::kUint32: f.template operator()<uint32_t>(); return true;
    case DataType::kInt64: f.template operator()<int64_t>(); return true;
    case DataType::kUint64: f.template operator()<uint64_t>(); return true;
    case DataType::kFloat16: f.template operator()<Float16>(); return true;
    case DataType::kFloat32: f.template operator()<float>(); return true;
    case DataType::kFloat64: f.template operator()<double>(); return true;
    case DataType::kBfloat16: f.template operator()<Bfloat16>(); return true;
    case DataType::kFloat8e4m3: f.template operator()<Float8e4m3>(); return true;
    case DataType::kFloat8e5m2: f.template operator()<Float8e5m2>(); return true;
  }
  return false;
}

template <class F>
inline bool visitReduceOp(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::kSum: f.template operator()<SumOp>(); return true;
    case ReduceOp::kProd: f.template operator()<ProdOp>(); return true;
    case ReduceOp::kMax: f.template operator()<MaxOp>(); return true;
    case ReduceOp::kMin: f.template operator()<MinOp>(); return true;
  }
  return false;
}

}  // namespace chorus::kernels
