// Host-side reading and writing of single elements of every chorus type, through double.
//
// The checker works in double: every value it generates is a small integer, exactly
// representable in each type, so converting both ways is lossless for them. The 16- and 8-bit
// float formats (IEEE half, bfloat16, OCP FP8 E4M3 "fn" and E5M2) are converted here with
// round-to-nearest-even so the tool needs no CUDA or compiler extension types.
#pragma once

#include <cstddef>
#include <cstdint>

#include "chorus/chorus.h"

namespace chorus::perf {

double decodeElement(chorusDataType_t t, const void* src);
void encodeElement(chorusDataType_t t, double v, void* dst);
// A value no correct run can produce: NaN for floats, the type's maximum for integers (the
// value generator stays strictly below it).
void writePoison(chorusDataType_t t, void* dst);

// What the value generator may rely on for a type.
struct TypeLimits {
  double exact = 0;      // every integer in [-exact, exact] ([0, exact] unsigned) is exact and
                         // strictly below the poison value
  bool isSigned = true;
  bool isFloat = false;
  double epsilon = 0;    // 2^-mantissa bits (floats)
  double minNormal = 0;  // smallest normal (floats)
};
TypeLimits typeLimits(chorusDataType_t t);

// Generic minifloat with `expBits` exponent and `manBits` mantissa bits. finiteOnly selects the
// FP8 E4M3 "fn" convention: no infinities, the all-ones pattern is NaN, max 448.
uint32_t encodeMinifloat(double v, int expBits, int manBits, bool finiteOnly);
double decodeMinifloat(uint32_t bits, int expBits, int manBits, bool finiteOnly);

}  // namespace chorus::perf
