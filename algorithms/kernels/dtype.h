// Element types and reduction operators as the internal layers see them.
//
// Values mirror chorusDataType_t / chorusRedOp_t so conversion at the API boundary is a checked
// cast. This is the lowest layer: kernels, schedules and the core all include it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace chorus {

enum class DataType : uint8_t {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
  kFloat8e4m3 = 10,
  kFloat8e5m2 = 11,
};
inline constexpr int kNumDataTypes = 12;

// The element-wise operator a kernel applies. Avg and PreMulSum are built from kSum plus a
// scaling pass (see kernels/reduce.h), so kernels only know these four.
enum class ReduceOp : uint8_t { kSum = 0, kProd = 1, kMax = 2, kMin = 3 };
inline constexpr int kNumReduceOps = 4;

constexpr size_t dataTypeSize(DataType t) {
  switch (t) {
    case DataType::kInt8:
    case DataType::kUint8:
    case DataType::kFloat8e4m3:
    case DataType::kFloat8e5m2: return 1;
    case DataType::kFloat16:
    case DataType::kBfloat16: return 2;
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kFloat32: return 4;
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kFloat64: return 8;
  }
  return 0;
}

constexpr bool isFloatType(DataType t) {
  switch (t) {
    case DataType::kFloat16:
    case DataType::kFloat32:
    case DataType::kFloat64:
    case DataType::kBfloat16:
    case DataType::kFloat8e4m3:
    case DataType::kFloat8e5m2: return true;
    default: return false;
  }
}

constexpr bool isValidDataType(int t) { return t >= 0 && t < kNumDataTypes; }

// "float32", "bfloat16", ... (nccl-tests spells float32 as "float"; tools map names themselves).
const char* dataTypeName(DataType t);
const char* reduceOpName(ReduceOp op);

}  // namespace chorus
