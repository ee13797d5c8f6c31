// chorusQuantize / chorusDequantize / chorusQuantizedSize and their C++ wrappers: the same bytes
// as the kernels, and every bad argument refused with chorusInvalidArgument and a message naming
// it, without touching the output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "algorithms/kernels/float_formats.h"
#include "algorithms/kernels/quantize.h"
#include "chorus/chorus.h"
#include "chorus/chorus.hpp"

namespace chorus {
namespace {

using Bytes = std::vector<unsigned char>;

std::vector<float> gaussian(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

// The element bytes of n N(0, 1) values in type t.
Bytes input(chorusDataType_t t, size_t n, uint64_t seed) {
  const std::vector<float> v = gaussian(n, seed);
  Bytes b(n * (t == chorusFloat32 ? 4 : 2));
  for (size_t i = 0; i < n; ++i) {
    if (t == chorusFloat32) {
      std::memcpy(b.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h = t == chorusBfloat16 ? kernels::floatToBfloat16Bits(v[i])
                                             : kernels::floatToHalfBits(v[i]);
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
  }
  return b;
}

TEST(QuantApi, SameBytesAsTheKernels) {
  for (chorusDataType_t t : {chorusFloat32, chorusBfloat16, chorusFloat16}) {
    for (int bits : {4, 8}) {
      for (int mode : {chorusQuantSymmetric, chorusQuantAsymmetric}) {
        for (int rounding : {chorusRoundNearest, chorusRoundStochastic}) {
          chorusQuantConfig_t c = CHORUS_QUANT_CONFIG_INIT;
          c.bits = bits;
          c.mode = mode;
          c.rounding = rounding;
          c.groupSize = 96;
          c.seed = 5;
          kernels::QuantConfig k;
          k.bits = uint32_t(bits);
          k.groupSize = 96;
          k.asymmetric = mode == chorusQuantAsymmetric;
          k.stochastic = rounding == chorusRoundStochastic;
          k.seed = 5;
          const size_t count = 1001;
          size_t bytes = 0;
          ASSERT_EQ(chorusQuantizedSize(count, &c, &bytes), chorusSuccess);
          ASSERT_EQ(bytes, kernels::quantizedSize(count, k));
          const Bytes in = input(t, count, 3);
          Bytes got(bytes), want(bytes);
          ASSERT_EQ(chorusQuantize(in.data(), got.data(), count, t, &c, nullptr), chorusSuccess);
          kernels::quantize(want.data(), in.data(), count, DataType(t), k);
          EXPECT_EQ(got, want);
          Bytes out(in.size()), outWant(in.size());
          ASSERT_EQ(chorusDequantize(got.data(), out.data(), count, t, &c, nullptr), chorusSuccess);
          kernels::dequantize(outWant.data(), want.data(), count, DataType(t), k);
          EXPECT_EQ(out, outWant);
        }
      }
    }
  }
}

// A call that must fail: chorusInvalidArgument, the last error mentions `what`, and the output
// buffer still holds its poison.
void expectRefused(const std::string& what, const std::function<chorusResult_t()>& call,
                   const Bytes& output) {
  EXPECT_EQ(call(), chorusInvalidArgument) << what;
  const std::string message = chorusGetLastError(nullptr);
  EXPECT_NE(message.find(what), std::string::npos) << "message: " << message;
  for (unsigned char b : output) ASSERT_EQ(b, 0xa5) << what << ": the output was written";
}

TEST(QuantApi, BadArgumentsAreNamed) {
  const size_t count = 64;
  const Bytes in = input(chorusFloat32, count, 1);
  Bytes out(4096, 0xa5);
  auto withConfig = [&](chorusQuantConfig_t c) {
    return [&, c] {
      return chorusQuantize(in.data(), out.data(), count, chorusFloat32, &c, nullptr);
    };
  };
  auto config = [](auto change) {
    chorusQuantConfig_t c = CHORUS_QUANT_CONFIG_INIT;
    change(c);
    return c;
  };
  expectRefused("config is NULL", [&] {
    return chorusQuantize(in.data(), out.data(), count, chorusFloat32, nullptr, nullptr);
  }, out);
  expectRefused("config->structSize is 0", withConfig(chorusQuantConfig_t{}), out);
  expectRefused("config->structSize is 8", withConfig(config([](auto& c) { c.structSize = 8; })),
                out);
  expectRefused("config->bits is 3", withConfig(config([](auto& c) { c.bits = 3; })), out);
  expectRefused("config->bits is -8", withConfig(config([](auto& c) { c.bits = -8; })), out);
  expectRefused("config->bits is 16", withConfig(config([](auto& c) { c.bits = 16; })), out);
  expectRefused("config->groupSize is 0", withConfig(config([](auto& c) { c.groupSize = 0; })),
                out);
  expectRefused("config->groupSize is 33", withConfig(config([](auto& c) {
                  c.bits = 4;
                  c.groupSize = 33;
                })),
                out);
  expectRefused("config->mode is 2", withConfig(config([](auto& c) { c.mode = 2; })), out);
  expectRefused("config->rounding is 7", withConfig(config([](auto& c) { c.rounding = 7; })),
                out);
  expectRefused("config->reserved is 1", withConfig(config([](auto& c) { c.reserved = 1; })),
                out);
  const chorusQuantConfig_t good = CHORUS_QUANT_CONFIG_INIT;
  expectRefused("datatype int32 cannot be quantized", [&] {
    return chorusQuantize(in.data(), out.data(), 16, chorusInt32, &good, nullptr);
  }, out);
  expectRefused("datatype float64 cannot be quantized", [&] {
    return chorusDequantize(in.data(), out.data(), 8, chorusFloat64, &good, nullptr);
  }, out);
  expectRefused("datatype 99 is not a chorusDataType_t", [&] {
    return chorusQuantize(in.data(), out.data(), 16, chorusDataType_t(99), &good, nullptr);
  }, out);
  expectRefused("input is NULL", [&] {
    return chorusQuantize(nullptr, out.data(), count, chorusFloat32, &good, nullptr);
  }, out);
  expectRefused("quantized is NULL", [&] {
    return chorusQuantize(in.data(), nullptr, count, chorusFloat32, &good, nullptr);
  }, out);
  expectRefused("output is NULL", [&] {
    return chorusDequantize(in.data(), nullptr, count, chorusFloat32, &good, nullptr);
  }, out);
  expectRefused("stream is not NULL", [&] {
    return chorusQuantize(in.data(), out.data(), count, chorusFloat32, &good, &out);
  }, out);
  expectRefused("count 18446744073709551615 is too large", [&] {
    return chorusQuantize(in.data(), out.data(), SIZE_MAX, chorusFloat32, &good, nullptr);
  }, out);
  expectRefused("quantized overlaps input", [&] {
    return chorusQuantize(out.data(), out.data() + 100, count, chorusFloat32, &good, nullptr);
  }, out);
  size_t bytes = 0;
  expectRefused("bytes is NULL", [&] { return chorusQuantizedSize(10, &good, nullptr); }, out);
  const chorusQuantConfig_t noGroup = config([](auto& c) { c.groupSize = 0; });
  expectRefused("config->groupSize is 0", [&] { return chorusQuantizedSize(10, &noGroup, &bytes); },
                out);
  expectRefused("config is NULL", [&] { return chorusQuantizedSize(10, nullptr, &bytes); }, out);

  // Fine: no elements and no buffers; an odd group with 8 bits.
  EXPECT_EQ(chorusQuantize(nullptr, nullptr, 0, chorusFloat32, &good, nullptr), chorusSuccess);
  const chorusQuantConfig_t odd = config([](auto& c) { c.groupSize = 33; });
  EXPECT_EQ(chorusQuantize(in.data(), out.data(), count, chorusFloat32, &odd, nullptr),
            chorusSuccess);
}

// A caller built against a later, longer chorusQuantConfig_t: accepted while the fields this
// chorus does not know are 0, refused (naming the size) once one is set.
TEST(QuantApi, LongerConfigsFromLaterHeaders) {
  struct Later {
    chorusQuantConfig_t known;
    uint64_t newField;
  };
  Later later{CHORUS_QUANT_CONFIG_INIT, 0};
  later.known.structSize = sizeof(Later);
  const std::vector<float> x = gaussian(300, 2);
  size_t bytes = 0;
  ASSERT_EQ(chorusQuantizedSize(x.size(), &later.known, &bytes), chorusSuccess);
  Bytes q(bytes);
  EXPECT_EQ(chorusQuantize(x.data(), q.data(), x.size(), chorusFloat32, &later.known, nullptr),
            chorusSuccess);
  later.newField = 1;
  EXPECT_EQ(chorusQuantize(x.data(), q.data(), x.size(), chorusFloat32, &later.known, nullptr),
            chorusInvalidArgument);
  EXPECT_NE(std::string(chorusGetLastError(nullptr)).find("config->structSize is 48"),
            std::string::npos)
      << chorusGetLastError(nullptr);
}

TEST(QuantApi, CppWrapper) {
  const std::vector<float> x = gaussian(1000, 9);
  const QuantConfig c = QuantConfig().withBits(4).withGroupSize(128).asymmetric().stochastic(3);
  EXPECT_EQ(c.bits, 4);
  EXPECT_EQ(c.mode, chorusQuantAsymmetric);
  EXPECT_EQ(c.rounding, chorusRoundStochastic);
  const std::vector<std::byte> q = quantize(std::span<const float>(x), c);
  EXPECT_EQ(q.size(), quantizedSize(x.size(), c));
  std::vector<float> back(x.size());
  dequantize(std::span<const std::byte>(q), std::span<float>(back), c);
  double err = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (back[i] - x[i]) * (back[i] - x[i]);
    norm += x[i] * x[i];
  }
  EXPECT_LT(std::sqrt(err / norm), 0.2);  // int4 stochastic: ~1.2x nearest's ~10%
  // (999 elements would pack into the same bytes as 1000 at 4 bits: that is not detectable.)
  std::vector<float> tooShort(x.size() / 2);
  EXPECT_THROW(dequantize(std::span<const std::byte>(q), std::span<float>(tooShort), c), Error);
  try {
    quantize(std::span<const float>(x), QuantConfig().withBits(5));
    FAIL() << "bits 5 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), chorusInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("config->bits is 5"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace chorus
