// Memory bandwidth probe: the physical bound the collective comparison is held against.
//
//   membw [-s BYTES] [-c BYTES] [-t THREADS,...] [-r REPS]
//
// Two kernels over arrays of -s bytes each (default 256 MiB: far beyond any cache), split into
// one contiguous part per thread:
//   copy: memcpy(dst, src)   traffic counted as 2 x bytes (read src, write dst)
//   add:  c[i] = a[i] + b[i] traffic counted as 3 x bytes (read a and b, write c), float
// GB/s is that counted traffic (1e9 bytes/s) over the wall time of all threads together, median
// of -r repetitions after one warm-up. The counted traffic is what a program asks for: a cache
// that allocates on write also reads each destination line first, and glibc's memcpy switches
// to non-temporal stores for large copies (no such read), so "add" can look slower than the bus
// really is. Both are measured because a shared-memory collective does both: copies in and out
// of shared buffers, and reductions that read two operands and write one.
//
// -c adds the same kernels on arrays of that size (default 256 KiB, 0 to skip), repeated until
// as many bytes as one -s pass have moved: what the kernels do when the data is cache-resident.
//
// Output: one line per (kernel, size, threads):  kernel level threads bytes GB/s min max
// with level "dram" for -s and "cache" for -c.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Array = std::unique_ptr<float, FreeDeleter>;

Array allocate(size_t bytes) {
  void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (p == nullptr) {
    std::fprintf(stderr, "membw: cannot allocate %zu bytes\n", bytes);
    std::exit(1);
  }
  return Array(static_cast<float*>(p));
}

size_t parseSize(const char* text) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  switch (*end) {
    case 'k': case 'K': v *= 1024; break;
    case 'm': case 'M': v *= 1024 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<size_t>(v);
}

enum class Kernel { kCopy, kAdd };

// The add loop is kept out of line so its vectorization does not depend on the call site.
__attribute__((noinline)) void addFloats(float* __restrict c, const float* __restrict a,
                                         const float* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

struct Result {
  double median = 0;
  double min = 0;
  double max = 0;
};

// A reusable barrier for the worker threads. (Not std::barrier: with libstdc++ 12 its
// arrive_and_wait sometimes returned at once with 3 parties, and the probe timed nothing.)
class Barrier {
 public:
  explicit Barrier(int parties) : parties_(parties) {}
  void arriveAndWait() {
    std::unique_lock lock(mu_);
    uint64_t gen = generation_;
    if (++arrived_ == parties_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != gen; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int parties_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
};

using Clock = std::chrono::steady_clock;

Result measure(Kernel k, float* a, float* b, float* c, size_t elems, int threads, int loops,
               int reps) {
  // Each thread times its own part between two barriers; a repetition lasts from the first
  // start to the last end, so thread start-up and barrier wake-up are not measured.
  Barrier sync(threads);
  std::vector<Clock::time_point> start(static_cast<size_t>(threads));
  std::vector<Clock::time_point> end(static_cast<size_t>(threads));
  std::vector<double> gbps;
  double bytesPerPass = static_cast<double>(elems * sizeof(float)) * (k == Kernel::kCopy ? 2 : 3);
  auto work = [&](int t) {
    size_t lo = elems * static_cast<size_t>(t) / static_cast<size_t>(threads);
    size_t hi = elems * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
    for (int r = 0; r <= reps; ++r) {
      sync.arriveAndWait();
      start[static_cast<size_t>(t)] = Clock::now();
      for (int l = 0; l < loops; ++l) {
        if (k == Kernel::kCopy) {
          std::memcpy(c + lo, a + lo, (hi - lo) * sizeof(float));
        } else {
          addFloats(c + lo, a + lo, b + lo, hi - lo);
        }
      }
      end[static_cast<size_t>(t)] = Clock::now();
      sync.arriveAndWait();
      if (t == 0 && r > 0) {  // repetition 0 warms up
        auto first = *std::min_element(start.begin(), start.end());
        auto last = *std::max_element(end.begin(), end.end());
        double sec = std::chrono::duration<double>(last - first).count();
        gbps.push_back(bytesPerPass * loops / sec / 1e9);
      }
    }
  };
  // The calling thread is worker 0: no extra thread competes for the cores.
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& th : pool) th.join();
  std::sort(gbps.begin(), gbps.end());
  size_t m = gbps.size();
  double median = m % 2 ? gbps[m / 2] : (gbps[m / 2 - 1] + gbps[m / 2]) / 2;
  return {median, gbps.front(), gbps.back()};
}

}  // namespace

int main(int argc, char** argv) {
  size_t dramBytes = 256u << 20;
  size_t cacheBytes = 256u << 10;
  std::vector<int> threadCounts = {1, 2};
  int reps = 9;
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    if (flag == "-h" || flag == "--help" || i + 1 >= argc) {
      std::printf("usage: membw [-s BYTES] [-c BYTES] [-t THREADS,...] [-r REPS]\n");
      return flag == "-h" || flag == "--help" ? 0 : 2;
    }
    const char* value = argv[++i];
    if (flag == "-s") {
      dramBytes = parseSize(value);
    } else if (flag == "-c") {
      cacheBytes = parseSize(value);
    } else if (flag == "-r") {
      reps = std::max(1, std::atoi(value));
    } else if (flag == "-t") {
      threadCounts.clear();
      for (const char* p = value; *p;) {
        threadCounts.push_back(std::max(1, std::atoi(p)));
        p = std::strchr(p, ',');
        if (p == nullptr) break;
        ++p;
      }
    } else {
      std::fprintf(stderr, "membw: unknown flag %s\n", argv[i - 1]);
      return 2;
    }
  }
  if (dramBytes < 4096) {
    std::fprintf(stderr, "membw: -s must be at least 4K\n");
    return 2;
  }

  std::printf("# membw: counted memory traffic in GB/s (1e9 B/s): copy = memcpy, 2 x bytes; "
              "add = float c = a + b, 3 x bytes; median of %d (min, max); %u hardware threads\n",
              reps, std::thread::hardware_concurrency());
  std::printf("# %-6s %-6s %7s %12s %8s %8s %8s\n", "kernel", "level", "threads", "bytes", "GB/s",
              "min", "max");
  struct Level {
    const char* name;
    size_t bytes;
  };
  for (Level lv : {Level{"dram", dramBytes}, Level{"cache", cacheBytes}}) {
    if (lv.bytes == 0) continue;
    size_t elems = lv.bytes / sizeof(float);
    Array a = allocate(lv.bytes), b = allocate(lv.bytes), c = allocate(lv.bytes);
    // Fill (and so fault in) every page before anything is timed.
    for (size_t i = 0; i < elems; ++i) a.get()[i] = static_cast<float>(i % 1024);
    std::memcpy(b.get(), a.get(), lv.bytes);
    std::memset(c.get(), 0, lv.bytes);
    int loops = static_cast<int>(std::max<size_t>(1, dramBytes / lv.bytes));
    for (Kernel k : {Kernel::kCopy, Kernel::kAdd}) {
      for (int t : threadCounts) {
        Result r = measure(k, a.get(), b.get(), c.get(), elems, t, loops, reps);
        const char* name = k == Kernel::kCopy ? "copy" : "add";
        std::printf("  %-6s %-6s %7d %12zu %8.2f %8.2f %8.2f\n", name, lv.name, t, lv.bytes,
                    r.median, r.min, r.max);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
