// Throughput of the CPU reduction kernels against memcpy, as memory traffic (the quantization
// kernels are in quantize_bench.cc, in the same binary).
//
// reduce/<type>/<op>/<bytes> moves 3 x bytes per call (two reads, one write) and memcpy/<bytes>
// 2 x bytes, so their bytes_per_second compare how close a reduction gets to the memory system.
// Sizes run from 4 KiB (L1) to 64 MiB (DRAM); the kernels' target is >= 80% of memcpy's traffic
// at >= 16 MiB for float32, bfloat16 and float16 sum.
//
//   kernels_bench --benchmark_filter='(reduce/(float32|bfloat16|float16)/sum|memcpy)/(16|64)M'
//       --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <string_view>

#include "algorithms/kernels/dtype.h"
#include "algorithms/kernels/float_formats.h"
#include "algorithms/kernels/reduce.h"
#include "algorithms/kernels/reduce_ops.h"
#include "bench/kernels/bench_buffers.h"

namespace chorus::kernels {
namespace {

constexpr size_t kMinBytes = size_t{4} << 10;
constexpr size_t kMaxBytes = size_t{64} << 20;

// Nonzero values of moderate size, so products and sums stay in the normal range (subnormal
// operands would measure the FPU's slow path, not the kernel).
Buffer randomBuffer(size_t bytes, DataType t, uint64_t seed) {
  Buffer buf = alignedBuffer(bytes);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> value(0.5f, 2.0f);
  visitDataType(t, [&]<class T>() {
    const size_t n = bytes / sizeof(T);
    for (size_t i = 0; i < n; ++i) {
      T x;
      if constexpr (std::is_integral_v<T>) {
        x = static_cast<T>(rng() | 1);
      } else if constexpr (kIsNarrowFloat<T>) {
        x = fromFloat<T>(value(rng));
      } else {
        x = static_cast<T>(value(rng));
      }
      std::memcpy(buf.data() + i * sizeof(T), &x, sizeof(T));
    }
  });
  return buf;
}

void benchReduce(benchmark::State& state, DataType t, ReduceOp op, size_t bytes) {
  const size_t count = bytes / dataTypeSize(t);
  const auto a = randomBuffer(bytes, t, 1);
  const auto b = randomBuffer(bytes, t, 2);
  const Buffer dst = alignedBuffer(bytes);
  timeCalls(state, dst.data(), [&] { reduce(dst.data(), a.data(), b.data(), count, t, op); });
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(3 * bytes));
  state.SetLabel(cpuIsaName(cpuIsa()));
}

void registerAll() {
  for (size_t bytes = kMinBytes; bytes <= kMaxBytes; bytes *= 4) {
    const std::string size = sizeLabel(bytes);
    benchmark::RegisterBenchmark(("memcpy/" + size).c_str(), benchMemcpy, bytes);
    for (int ti = 0; ti < kNumDataTypes; ++ti) {
      for (int oi = 0; oi < kNumReduceOps; ++oi) {
        const auto t = DataType(ti);
        const auto op = ReduceOp(oi);
        const std::string name =
            std::string("reduce/") + dataTypeName(t) + "/" + reduceOpName(op) + "/" + size;
        benchmark::RegisterBenchmark(name.c_str(), benchReduce, t, op, bytes);
      }
    }
  }
}

// Our flags, removed from argv before Google Benchmark parses it:
//   --kernel_isa=generic|avx2|avx512   another instruction set than the best one
//   --kernel_nt_bytes=N                non-temporal store threshold (0: always, huge: never)
bool applyKernelFlags(int* argc, char** argv) {
  constexpr std::string_view kIsaFlag = "--kernel_isa=";
  constexpr std::string_view kNtFlag = "--kernel_nt_bytes=";
  int out = 1;
  bool ok = true;
  for (int i = 1; i < *argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with(kIsaFlag)) {
      const std::string_view name = arg.substr(kIsaFlag.size());
      bool known = false;
      for (CpuIsa isa : {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
        if (name == cpuIsaName(isa)) known = setCpuIsa(isa);
      }
      if (!known) {
        std::fprintf(stderr, "kernels_bench: unsupported %s\n", argv[i]);
        ok = false;
      }
    } else if (arg.starts_with(kNtFlag)) {
      setNonTemporalThreshold(std::strtoull(argv[i] + kNtFlag.size(), nullptr, 10));
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  return ok;
}

}  // namespace

void benchMemcpy(benchmark::State& state, size_t bytes) {
  const auto src = randomBuffer(bytes, DataType::kUint8, 3);
  const Buffer dst = alignedBuffer(bytes);
  timeCalls(state, dst.data(), [&] { std::memcpy(dst.data(), src.data(), bytes); });
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(2 * bytes));
}

}  // namespace chorus::kernels

int main(int argc, char** argv) {
  if (!chorus::kernels::applyKernelFlags(&argc, argv)) return 2;
  chorus::kernels::registerAll();
  chorus::kernels::registerQuantizeBenchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("kernel_isa", chorus::kernels::cpuIsaName(chorus::kernels::cpuIsa()));
  benchmark::AddCustomContext("kernel_nt_bytes",
                              std::to_string(chorus::kernels::nonTemporalThreshold()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
