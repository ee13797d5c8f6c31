#include "tools/chorus-perf/element_codec.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace chorus::perf {
namespace {

template <typename T>
T load(const void* src) {
  T v;
  std::memcpy(&v, src, sizeof(T));
  return v;
}

template <typename T>
void store(void* dst, T v) {
  std::memcpy(dst, &v, sizeof(T));
}

struct MiniFormat {
  int expBits;
  int manBits;
  bool finiteOnly;
};
constexpr MiniFormat kHalf{5, 10, false};
constexpr MiniFormat kBf16{8, 7, false};
constexpr MiniFormat kE4m3{4, 3, true};
constexpr MiniFormat kE5m2{5, 2, false};

}  // namespace

uint32_t encodeMinifloat(double v, int expBits, int manBits, bool finiteOnly) {
  const uint32_t signBit = 1u << (expBits + manBits);
  const uint32_t expMax = (1u << expBits) - 1;
  const uint32_t manMask = (1u << manBits) - 1;
  const int bias = (1 << (expBits - 1)) - 1;
  const uint32_t nanBits = finiteOnly ? (expMax << manBits) | manMask
                                      : (expMax << manBits) | (1u << (manBits - 1));
  if (std::isnan(v)) return nanBits;
  uint32_t sign = std::signbit(v) ? signBit : 0;
  double a = std::fabs(v);
  // Largest finite magnitude: "fn" formats give the top exponent to finite values except the
  // all-ones mantissa; IEEE-like formats reserve the top exponent for inf/NaN.
  uint32_t maxExpField = finiteOnly ? expMax : expMax - 1;
  uint32_t maxMan = finiteOnly ? manMask - 1 : manMask;
  double maxFinite = std::ldexp(1.0 + static_cast<double>(maxMan) / (1u << manBits),
                                static_cast<int>(maxExpField) - bias);
  if (std::isinf(a) || a > maxFinite) {
    // Overflow: infinity where the format has one. Values between maxFinite and the rounding
    // boundary would round down to maxFinite; the checker never produces them, so saturating
    // "fn" formats to NaN and IEEE ones to inf is enough here.
    if (!std::isinf(a)) {
      double halfUlp = std::ldexp(1.0, static_cast<int>(maxExpField) - bias - manBits - 1);
      if (a < maxFinite + halfUlp) return sign | (maxExpField << manBits) | maxMan;
    }
    return finiteOnly ? (sign | nanBits) : (sign | (expMax << manBits));
  }
  if (a == 0) return sign;
  int e = std::ilogb(a);
  if (e < 1 - bias) {
    // Subnormal: a multiple of 2^(1-bias-manBits). A mantissa that rounds up to 2^manBits lands
    // exactly on the smallest normal encoding, which the plain sum below produces.
    double m = std::nearbyint(std::ldexp(a, manBits - (1 - bias)));
    return sign | static_cast<uint32_t>(m);
  }
  double m = std::nearbyint(std::ldexp(a, manBits - e));  // in [2^manBits, 2^(manBits+1)]
  uint32_t mi = static_cast<uint32_t>(m);
  if (mi == (2u << manBits)) {
    mi >>= 1;
    ++e;
  }
  uint32_t expField = static_cast<uint32_t>(e + bias);
  if (expField > maxExpField || (expField == maxExpField && (mi & manMask) > maxMan)) {
    return finiteOnly ? (sign | nanBits) : (sign | (expMax << manBits));
  }
  return sign | (expField << manBits) | (mi & manMask);
}

double decodeMinifloat(uint32_t bits, int expBits, int manBits, bool finiteOnly) {
  const uint32_t expMax = (1u << expBits) - 1;
  const uint32_t manMask = (1u << manBits) - 1;
  const int bias = (1 << (expBits - 1)) - 1;
  bool neg = (bits >> (expBits + manBits)) & 1;
  uint32_t expField = (bits >> manBits) & expMax;
  uint32_t man = bits & manMask;
  double mag;
  if (expField == expMax && (!finiteOnly || man == manMask)) {
    if (finiteOnly || man != 0) return std::numeric_limits<double>::quiet_NaN();
    mag = std::numeric_limits<double>::infinity();
  } else if (expField == 0) {
    mag = std::ldexp(static_cast<double>(man), 1 - bias - manBits);
  } else {
    mag = std::ldexp(static_cast<double>(man | (1u << manBits)),
                     static_cast<int>(expField) - bias - manBits);
  }
  return neg ? -mag : mag;
}

double decodeElement(chorusDataType_t t, const void* src) {
  switch (t) {
    case chorusInt8: return load<int8_t>(src);
    case chorusUint8: return load<uint8_t>(src);
    case chorusInt32: return load<int32_t>(src);
    case chorusUint32: return load<uint32_t>(src);
    case chorusInt64: return static_cast<double>(load<int64_t>(src));
    case chorusUint64: return static_cast<double>(load<uint64_t>(src));
    case chorusFloat32: return load<float>(src);
    case chorusFloat64: return load<double>(src);
    case chorusFloat16:
      return decodeMinifloat(load<uint16_t>(src), kHalf.expBits, kHalf.manBits, kHalf.finiteOnly);
    case chorusBfloat16:
      return decodeMinifloat(load<uint16_t>(src), kBf16.expBits, kBf16.manBits, kBf16.finiteOnly);
    case chorusFloat8e4m3:
      return decodeMinifloat(load<uint8_t>(src), kE4m3.expBits, kE4m3.manBits, kE4m3.finiteOnly);
    case chorusFloat8e5m2:
      return decodeMinifloat(load<uint8_t>(src), kE5m2.expBits, kE5m2.manBits, kE5m2.finiteOnly);
    default: break;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

void encodeElement(chorusDataType_t t, double v, void* dst) {
  switch (t) {
    case chorusInt8: store(dst, static_cast<int8_t>(v)); break;
    case chorusUint8: store(dst, static_cast<uint8_t>(v)); break;
    case chorusInt32: store(dst, static_cast<int32_t>(v)); break;
    case chorusUint32: store(dst, static_cast<uint32_t>(v)); break;
    case chorusInt64: store(dst, static_cast<int64_t>(v)); break;
    case chorusUint64: store(dst, static_cast<uint64_t>(v)); break;
    case chorusFloat32: store(dst, static_cast<float>(v)); break;
    case chorusFloat64: store(dst, v); break;
    case chorusFloat16:
      store(dst, static_cast<uint16_t>(encodeMinifloat(v, kHalf.expBits, kHalf.manBits, kHalf.finiteOnly)));
      break;
    case chorusBfloat16:
      store(dst, static_cast<uint16_t>(encodeMinifloat(v, kBf16.expBits, kBf16.manBits, kBf16.finiteOnly)));
      break;
    case chorusFloat8e4m3:
      store(dst, static_cast<uint8_t>(encodeMinifloat(v, kE4m3.expBits, kE4m3.manBits, kE4m3.finiteOnly)));
      break;
    case chorusFloat8e5m2:
      store(dst, static_cast<uint8_t>(encodeMinifloat(v, kE5m2.expBits, kE5m2.manBits, kE5m2.finiteOnly)));
      break;
    default: break;
  }
}

void writePoison(chorusDataType_t t, void* dst) {
  switch (t) {
    case chorusInt8: store(dst, std::numeric_limits<int8_t>::max()); break;
    case chorusUint8: store(dst, std::numeric_limits<uint8_t>::max()); break;
    case chorusInt32: store(dst, std::numeric_limits<int32_t>::max()); break;
    case chorusUint32: store(dst, std::numeric_limits<uint32_t>::max()); break;
    case chorusInt64: store(dst, std::numeric_limits<int64_t>::max()); break;
    case chorusUint64: store(dst, std::numeric_limits<uint64_t>::max()); break;
    default: encodeElement(t, std::numeric_limits<double>::quiet_NaN(), dst); break;
  }
}

TypeLimits typeLimits(chorusDataType_t t) {
  TypeLimits l;
  switch (t) {
    // Integers: one below the poison value. 64-bit types stay within double's exact range.
    case chorusInt8: l.exact = 126; break;
    case chorusUint8: l.exact = 254; l.isSigned = false; break;
    case chorusInt32: l.exact = std::ldexp(1.0, 30); break;
    case chorusUint32: l.exact = std::ldexp(1.0, 30); l.isSigned = false; break;
    case chorusInt64: l.exact = std::ldexp(1.0, 50); break;
    case chorusUint64: l.exact = std::ldexp(1.0, 50); l.isSigned = false; break;
    // Floats: 2^(mantissa bits + 1) is the first integer after which gaps appear.
    case chorusFloat16: l = {2048, true, true, std::ldexp(1.0, -10), std::ldexp(1.0, -14)}; break;
    case chorusFloat32: l = {std::ldexp(1.0, 24), true, true, std::ldexp(1.0, -23), std::ldexp(1.0, -126)}; break;
    case chorusFloat64: l = {std::ldexp(1.0, 50), true, true, std::ldexp(1.0, -52), std::ldexp(1.0, -1022)}; break;
    case chorusBfloat16: l = {256, true, true, std::ldexp(1.0, -7), std::ldexp(1.0, -126)}; break;
    case chorusFloat8e4m3: l = {16, true, true, std::ldexp(1.0, -3), std::ldexp(1.0, -6)}; break;
    case chorusFloat8e5m2: l = {8, true, true, std::ldexp(1.0, -2), std::ldexp(1.0, -14)}; break;
    default: break;
  }
  return l;
}

}  // namespace chorus::perf
