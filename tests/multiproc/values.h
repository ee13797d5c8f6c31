// Element values for multi-process tests: typed access through double, and input generators
// whose reductions are exact in every chorus type, so results are compared for equality.
#pragma once

#include <chorus/chorus.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "algorithms/kernels/float_formats.h"

namespace chorus::test {

inline size_t typeSize(chorusDataType_t t) {
  switch (t) {
    case chorusInt8: case chorusUint8: case chorusFloat8e4m3: case chorusFloat8e5m2: return 1;
    case chorusFloat16: case chorusBfloat16: return 2;
    case chorusInt32: case chorusUint32: case chorusFloat32: return 4;
    default: return 8;
  }
}

inline const char* typeName(chorusDataType_t t) {
  static const char* names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                "float16", "float32", "float64", "bfloat16", "e4m3", "e5m2"};
  return names[t];
}

inline bool isFloat(chorusDataType_t t) {
  return t == chorusFloat16 || t == chorusFloat32 || t == chorusFloat64 || t == chorusBfloat16 ||
         t == chorusFloat8e4m3 || t == chorusFloat8e5m2;
}
inline bool isUnsigned(chorusDataType_t t) {
  return t == chorusUint8 || t == chorusUint32 || t == chorusUint64;
}

inline double load(chorusDataType_t t, const void* base, size_t i) {
  const char* p = static_cast<const char*>(base) + i * typeSize(t);
  switch (t) {
    case chorusInt8: { int8_t v; std::memcpy(&v, p, 1); return v; }
    case chorusUint8: { uint8_t v; std::memcpy(&v, p, 1); return v; }
    case chorusInt32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case chorusUint32: { uint32_t v; std::memcpy(&v, p, 4); return v; }
    case chorusInt64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case chorusUint64: { uint64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case chorusFloat32: { float v; std::memcpy(&v, p, 4); return v; }
    case chorusFloat64: { double v; std::memcpy(&v, p, 8); return v; }
    case chorusFloat16: { uint16_t v; std::memcpy(&v, p, 2); return kernels::halfBitsToFloat(v); }
    case chorusBfloat16: { uint16_t v; std::memcpy(&v, p, 2); return kernels::bfloat16BitsToFloat(v); }
    case chorusFloat8e4m3: { uint8_t v; std::memcpy(&v, p, 1); return kernels::e4m3BitsToFloat(v); }
    case chorusFloat8e5m2: { uint8_t v; std::memcpy(&v, p, 1); return kernels::e5m2BitsToFloat(v); }
    default: return NAN;
  }
}

// Integers wrap like the kernels do (through int64).
inline void store(chorusDataType_t t, void* base, size_t i, double x) {
  char* p = static_cast<char*>(base) + i * typeSize(t);
  auto wrap = [&](auto v) { std::memcpy(p, &v, sizeof(v)); };
  int64_t n = static_cast<int64_t>(x);
  switch (t) {
    case chorusInt8: wrap(static_cast<int8_t>(n)); break;
    case chorusUint8: wrap(static_cast<uint8_t>(n)); break;
    case chorusInt32: wrap(static_cast<int32_t>(n)); break;
    case chorusUint32: wrap(static_cast<uint32_t>(n)); break;
    case chorusInt64: wrap(n); break;
    case chorusUint64: wrap(static_cast<uint64_t>(n)); break;
    case chorusFloat32: wrap(static_cast<float>(x)); break;
    case chorusFloat64: wrap(x); break;
    case chorusFloat16: wrap(kernels::floatToHalfBits(static_cast<float>(x))); break;
    case chorusBfloat16: wrap(kernels::floatToBfloat16Bits(static_cast<float>(x))); break;
    case chorusFloat8e4m3: wrap(kernels::floatToE4m3Bits(static_cast<float>(x))); break;
    case chorusFloat8e5m2: wrap(kernels::floatToE5m2Bits(static_cast<float>(x))); break;
    default: break;
  }
}

// The value `x` becomes when stored in type t.
inline double roundTo(chorusDataType_t t, double x) {
  uint64_t buf = 0;
  store(t, &buf, 0, x);
  return load(t, &buf, 0);
}

// Input element j of rank r: small integers chosen per op so that every partial reduction is
// exactly representable in every type (e5m2 holds integers exactly only up to 8).
inline double inputValue(chorusDataType_t t, int op, int rank, uint64_t j, uint32_t seed) {
  uint64_t h = (j + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(rank) + 1) * 0xC2B2AE3D27D4EB4Full ^
               (static_cast<uint64_t>(seed) << 32);
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  const bool uns = isUnsigned(t);
  switch (op) {
    case chorusProd: {
      // Magnitudes 1 or 2, with 2 only on ranks < 4: |product| <= 16.
      if (uns) return (rank < 4 && h % 2) ? 2 : 1;
      int k = static_cast<int>(h % 3);
      if (k == 2 && rank >= 4) k = 0;
      return k == 0 ? 1 : k == 1 ? -1 : 2;
    }
    case chorusMax:
    case chorusMin:
      if (uns) return static_cast<double>(h % 17);
      if (t == chorusFloat8e5m2) return static_cast<double>(h % 17) - 8;
      return static_cast<double>(h % 33) - 16;
    default:  // sum, avg, premulsum
      if (uns) return static_cast<double>(h % 4);
      if (t == chorusFloat8e5m2) return static_cast<double>(h % 3) - 1;
      return static_cast<double>(h % 5) - 2;
  }
}

inline double combine(int op, double acc, double v) {
  switch (op) {
    case chorusProd: return acc * v;
    case chorusMax: return std::max(acc, v);
    case chorusMin: return std::min(acc, v);
    default: return acc + v;
  }
}

// Expected reduced value; `avg` divides like the kernels (truncating for integers).
inline double finish(chorusDataType_t t, int op, double acc, int nranks) {
  if (op == chorusAvg) {
    if (isFloat(t)) return acc / nranks;
    return static_cast<double>(static_cast<int64_t>(acc) / nranks);
  }
  return acc;
}

inline bool matches(chorusDataType_t t, int op, double got, double want) {
  double w = roundTo(t, want);
  if (op != chorusAvg || !isFloat(t)) return got == w;
  double eps = t == chorusFloat64 ? 1e-12 : t == chorusFloat32 ? 1e-6
             : t == chorusFloat16 ? 2e-3 : t == chorusBfloat16 ? 1.6e-2
             : t == chorusFloat8e4m3 ? 0.13 : 0.26;
  return std::fabs(got - want) <= eps * std::max(1.0, std::fabs(want));
}

}  // namespace chorus::test
