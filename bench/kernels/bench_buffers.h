// Buffers, size labels, the timed loop and the memcpy yardstick shared by the kernel benchmarks
// (kernels_bench.cc, quantize_bench.cc).
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

namespace chorus::kernels {

inline std::string sizeLabel(size_t bytes) {
  if (bytes >= (size_t{1} << 20)) return std::to_string(bytes >> 20) + "M";
  return std::to_string(bytes >> 10) + "K";
}

// Page-aligned, as framework tensors and our own scratch buffers are; glibc's large mallocs sit
// 16 bytes past a page boundary, which splits every 64-byte vector access across two lines.
struct Buffer {
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte[], Free> bytes;
  std::byte* data() const { return bytes.get(); }
};

inline Buffer alignedBuffer(size_t bytes) {
  constexpr size_t kPage = 4096;
  const size_t rounded = (bytes + kPage - 1) / kPage * kPage;
  auto* p = static_cast<std::byte*>(std::aligned_alloc(kPage, rounded == 0 ? kPage : rounded));
  if (p == nullptr) std::abort();
  std::memset(p, 0x3c, bytes);  // fault the pages in before timing
  return Buffer{std::unique_ptr<std::byte[], Buffer::Free>(p)};
}

// The timed loop: call() once per iteration, then dst escapes and memory is clobbered, so the
// compiler can neither drop the kernel's writes nor move the call out of the loop.
template <class Call>
void timeCalls(benchmark::State& state, void* dst, Call&& call) {
  for (auto _ : state) {
    call();
    benchmark::DoNotOptimize(dst);
    benchmark::ClobberMemory();
  }
}

// memcpy of `bytes`, which moves 2 x bytes per call: the yardstick of both files
// (kernels_bench.cc).
void benchMemcpy(benchmark::State& state, size_t bytes);

// Registers the quantization benchmarks (quantize_bench.cc).
void registerQuantizeBenchmarks();

}  // namespace chorus::kernels
