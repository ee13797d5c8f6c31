// Throughput of the CPU quantization kernels (algorithms/kernels/quantize.h) against memcpy of
// the same bytes.
//
// quant/<kernel>/<type>/<config>/<size> reports bytes_per_second on the bytes the kernel
// touches — what it reads plus what it writes: the input and the codes for quantize, the codes
// and the output for dequantize, the codes and the float32 accumulator twice (read, write) for
// dequantize_accumulate, every source's codes and the output for the reductions — and the
// counter touched_bytes. Its yardstick is quant_memcpy/<n>, a memcpy of n = touched_bytes / 2
// bytes, which touches the same number of bytes. The size is that of the kernel's unquantized
// data (input of quantize, output of dequantize, the accumulator, one source's float32 sum):
// 256K, which stays in L2 together with everything else the kernel touches, and 64M, in DRAM.
// Group size 256; the reductions have 4 sources (the ranks of a host in qgZ's first hop).
//
//   kernels_bench --benchmark_filter='^quant' --benchmark_repetitions=5
//       --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
//       --benchmark_out=q.json --benchmark_out_format=json
//   python3 bench/kernels/quant_ratios.py q.json      # the table of docs/performance.md
#include <benchmark/benchmark.h>

#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "algorithms/kernels/dtype.h"
#include "algorithms/kernels/float_formats.h"
#include "algorithms/kernels/quantize.h"
#include "algorithms/kernels/reduce.h"
#include "bench/kernels/bench_buffers.h"

namespace chorus::kernels {
namespace {

constexpr size_t kSources = 4;
constexpr uint64_t kGroup = 256;

QuantConfig makeConfig(uint32_t bits, bool asymmetric, bool stochastic) {
  return {.bits = bits, .groupSize = kGroup, .asymmetric = asymmetric, .stochastic = stochastic,
          .seed = 1};
}

std::string configLabel(const QuantConfig& c) {
  return "int" + std::to_string(c.bits) + (c.asymmetric ? "-asym" : "-sym") +
         (c.stochastic ? "-sr" : "-rtn");
}

// N(0, 1) data of type t, made once per (type, count, seed) and kept: the 64 MiB inputs take
// longer to draw than to quantize, and Google Benchmark calls a benchmark several times.
const Buffer& gaussianInput(DataType t, size_t count, uint64_t seed) {
  static std::map<std::tuple<DataType, size_t, uint64_t>, Buffer> cache;
  auto it = cache.find({t, count, seed});
  if (it != cache.end()) return it->second;
  Buffer buf = alignedBuffer(count * dataTypeSize(t));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t i = 0; i < count; ++i) {
    const float x = normal(rng);
    if (t == DataType::kFloat32) {
      std::memcpy(buf.data() + 4 * i, &x, 4);
    } else {
      const uint16_t h = t == DataType::kBfloat16 ? floatToBfloat16Bits(x) : floatToHalfBits(x);
      std::memcpy(buf.data() + 2 * i, &h, 2);
    }
  }
  return cache.emplace(std::make_tuple(t, count, seed), std::move(buf)).first->second;
}

// `count` float32 N(0, 1) elements quantized with c: one source of the decoding kernels.
const Buffer& quantizedInput(const QuantConfig& c, size_t count, uint64_t seed) {
  static std::map<std::tuple<std::string, size_t, uint64_t>, Buffer> cache;
  const auto key = std::make_tuple(configLabel(c), count, seed);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  Buffer buf = alignedBuffer(quantizedSize(count, c));
  quantize(buf.data(), gaussianInput(DataType::kFloat32, count, seed).data(), count,
           DataType::kFloat32, c);
  return cache.emplace(key, std::move(buf)).first->second;
}

void finish(benchmark::State& state, size_t touched) {
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(touched));
  state.counters["touched_bytes"] = double(touched);
  state.SetLabel(cpuIsaName(cpuIsa()));
}

// Bytes a kernel touches for `count` elements of type t: what it reads plus what it writes.
size_t touchedCodecs(DataType t, const QuantConfig& c, size_t n) {
  return n * dataTypeSize(t) + quantizedSize(n, c);
}
size_t touchedAccumulate(DataType, const QuantConfig& c, size_t n) {
  return quantizedSize(n, c) + 2 * n * sizeof(float);
}
size_t touchedReduce(DataType t, const QuantConfig& c, size_t n) {
  return kSources * quantizedSize(n, c) + n * dataTypeSize(t);
}
size_t touchedRequantize(DataType, const QuantConfig& c, size_t n) {
  return (kSources + 1) * quantizedSize(n, c);
}

void benchQuantize(benchmark::State& state, DataType t, QuantConfig c, size_t count) {
  const Buffer& src = gaussianInput(t, count, 1);
  const Buffer dst = alignedBuffer(quantizedSize(count, c));
  timeCalls(state, dst.data(), [&] { quantize(dst.data(), src.data(), count, t, c); });
  finish(state, touchedCodecs(t, c, count));
}

void benchDequantize(benchmark::State& state, DataType t, QuantConfig c, size_t count) {
  const Buffer& src = quantizedInput(c, count, 1);
  const Buffer dst = alignedBuffer(count * dataTypeSize(t));
  timeCalls(state, dst.data(), [&] { dequantize(dst.data(), src.data(), count, t, c); });
  finish(state, touchedCodecs(t, c, count));
}

void benchAccumulate(benchmark::State& state, DataType t, QuantConfig c, size_t count) {
  const Buffer& src = quantizedInput(c, count, 1);
  Buffer acc = alignedBuffer(count * sizeof(float));
  std::memset(acc.data(), 0, count * sizeof(float));
  auto* a = reinterpret_cast<float*>(acc.data());
  timeCalls(state, a, [&] { dequantizeAccumulate(a, src.data(), count, c); });
  finish(state, touchedAccumulate(t, c, count));
}

std::vector<const void*> sources(const QuantConfig& c, size_t count) {
  std::vector<const void*> srcs;
  for (size_t s = 0; s < kSources; ++s) srcs.push_back(quantizedInput(c, count, 1 + s).data());
  return srcs;
}

void benchReduce(benchmark::State& state, DataType t, QuantConfig c, size_t count) {
  const std::vector<const void*> srcs = sources(c, count);
  const Buffer dst = alignedBuffer(count * dataTypeSize(t));
  timeCalls(state, dst.data(), [&] {
    dequantizeReduce(dst.data(), t, srcs.data(), srcs.size(), count, c);
  });
  finish(state, touchedReduce(t, c, count));
}

void benchRequantize(benchmark::State& state, DataType t, QuantConfig c, size_t count) {
  const std::vector<const void*> srcs = sources(c, count);
  const Buffer dst = alignedBuffer(quantizedSize(count, c));
  timeCalls(state, dst.data(), [&] {
    dequantizeReduceQuantize(dst.data(), srcs.data(), srcs.size(), count, c);
  });
  finish(state, touchedRequantize(t, c, count));
}

using BenchFn = void (*)(benchmark::State&, DataType, QuantConfig, size_t);

struct Kernel {
  const char* name;
  BenchFn fn;
  size_t (*touched)(DataType t, const QuantConfig& c, size_t count);
};

}  // namespace

void registerQuantizeBenchmarks() {
  const Kernel quantizeK{"quantize", benchQuantize, touchedCodecs};
  const Kernel dequantizeK{"dequantize", benchDequantize, touchedCodecs};
  const Kernel accumulateK{"dequantize_accumulate", benchAccumulate, touchedAccumulate};
  const Kernel reduceK{"dequantize_reduce", benchReduce, touchedReduce};
  const Kernel requantizeK{"dequantize_reduce_quantize", benchRequantize, touchedRequantize};
  const DataType f32 = DataType::kFloat32;
  struct Case {
    Kernel k;
    DataType t;
    QuantConfig c;
  };
  std::vector<Case> cases;
  for (uint32_t bits : {8u, 4u}) {
    const QuantConfig sym = makeConfig(bits, false, false);
    for (DataType t : {f32, DataType::kBfloat16, DataType::kFloat16}) {
      cases.push_back({quantizeK, t, sym});
      cases.push_back({dequantizeK, t, sym});
    }
    cases.push_back({quantizeK, f32, makeConfig(bits, true, false)});
    cases.push_back({quantizeK, f32, makeConfig(bits, false, true)});
    cases.push_back({dequantizeK, f32, makeConfig(bits, true, false)});
    cases.push_back({accumulateK, f32, sym});
    cases.push_back({reduceK, f32, sym});
    cases.push_back({reduceK, DataType::kBfloat16, sym});
    cases.push_back({requantizeK, f32, sym});
  }
  std::set<size_t> copies;
  for (size_t bytes : {size_t{256} << 10, size_t{64} << 20}) {
    for (const Case& k : cases) {
      // The size names the kernel's unquantized data: its input, output or accumulator.
      const size_t count = bytes / dataTypeSize(k.t);
      const std::string name = std::string("quant/") + k.k.name + "/" + dataTypeName(k.t) + "/" +
                               configLabel(k.c) + "/" + sizeLabel(bytes);
      benchmark::RegisterBenchmark(name.c_str(), k.k.fn, k.t, k.c, count);
      copies.insert(k.k.touched(k.t, k.c, count) / 2);
    }
  }
  for (size_t n : copies) {
    benchmark::RegisterBenchmark(("quant_memcpy/" + std::to_string(n)).c_str(), benchMemcpy, n);
  }
}

}  // namespace chorus::kernels
