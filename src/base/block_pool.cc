#include "src/base/block_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>

#include <sched.h>

namespace chorus::pool {
namespace {

constexpr size_t kGranule = 32;  // size classes: 32, 64, ..., kMaxBlock bytes
constexpr size_t kClasses = kMaxBlock / kGranule;
constexpr size_t kFirstSlabBlocks = 2048;
constexpr size_t kMinSlab = 64 << 10;
constexpr size_t kMaxSlab = 64 << 20;
constexpr size_t kPage = 4096;  // the smallest page size: a write to each touches them all

struct FreeBlock {
  FreeBlock* next;
};

// Held for a pointer swap or two; a pthread mutex's lock and unlock cost more than that (they
// were ~40% of the pool's instructions per nonblocking call). A holder preempted mid-swap is
// waited out with sched_yield.
class SpinLock {
 public:
  void lock() {
    for (int spins = 0; flag_.exchange(true, std::memory_order_acquire); ++spins) {
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins > 64) sched_yield();
      }
    }
  }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

struct SizeClass {
  SpinLock mu;
  FreeBlock* free = nullptr;
  std::byte* cursor = nullptr;  // the current slab's blocks not handed out yet
  std::byte* end = nullptr;
  size_t nextSlab = 0;
};

std::atomic<size_t> gMapped{0};

// Leaked on purpose: requests may be freed by static destructors of other objects after ours
// would have run.
std::array<SizeClass, kClasses>& classes() {
  static auto* c = new std::array<SizeClass, kClasses>();
  return *c;
}

size_t classOf(size_t bytes) { return (std::max<size_t>(bytes, 1) + kGranule - 1) / kGranule - 1; }

// Each thread keeps the blocks it freed last, up to kCachedBlocks per class, and takes them back
// without the class's lock: a thread that posts calls and waits for them frees and reuses the
// same blocks, and the spin lock's atomic exchange (two per block) was the largest part of the
// pool's cost per nonblocking call. Blocks a thread frees beyond that go to the class's list;
// a thread's cache goes back to the lists when it exits.
constexpr uint32_t kCachedBlocks = 4096;  // a queue of a few thousand posted calls, per class

// Trivially destructible, so it stays usable until the thread is gone: a block freed by a
// destructor that runs after the flusher's (another thread_local's, or at exit a static's)
// goes to the class's list instead (`flushed`).
struct ThreadCache {
  FreeBlock* head[kClasses];
  uint32_t count[kClasses];
  bool flushed;
};
thread_local ThreadCache tCache{};

void pushAll(size_t cls, FreeBlock* first) {
  if (!first) return;
  FreeBlock* last = first;
  while (last->next) last = last->next;
  SizeClass& c = classes()[cls];
  std::lock_guard<SpinLock> lock(c.mu);
  last->next = c.free;
  c.free = first;
}

struct CacheFlusher {
  bool armed = false;
  ~CacheFlusher() {
    tCache.flushed = true;
    for (size_t cls = 0; cls < kClasses; ++cls) {
      pushAll(cls, tCache.head[cls]);
      tCache.head[cls] = nullptr;
      tCache.count[cls] = 0;
    }
  }
};
thread_local CacheFlusher tFlusher;

}  // namespace

void* allocate(size_t bytes) {
  if (bytes > kMaxBlock) return ::operator new(bytes);
  const size_t cls = classOf(bytes);
  const size_t block = (cls + 1) * kGranule;
  ThreadCache& t = tCache;
  if (FreeBlock* b = t.head[cls]) {
    t.head[cls] = b->next;
    --t.count[cls];
    return b;
  }
  SizeClass& c = classes()[cls];
  std::lock_guard<SpinLock> lock(c.mu);
  if (c.free) {
    FreeBlock* b = c.free;
    c.free = b->next;
    return b;
  }
  if (c.cursor == c.end) {
    if (c.nextSlab == 0) c.nextSlab = std::max(kMinSlab, block * kFirstSlabBlocks);
    const size_t slab = c.nextSlab;
    void* m = ::mmap(nullptr, slab, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    // A write to every page now: MAP_POPULATE (and MADV_POPULATE_WRITE alike) left a page's
    // first write from user space at ~6 us on the VM this was measured on (against ~13 us
    // unpopulated, and 0.01 us once written), so without it the calls that first use a block
    // of each page pay it one at a time (block_pool.h).
    for (size_t off = 0; off < slab; off += kPage) static_cast<volatile std::byte*>(m)[off] = {};
    gMapped.fetch_add(slab, std::memory_order_relaxed);
    c.cursor = static_cast<std::byte*>(m);
    c.end = c.cursor + slab / block * block;
    c.nextSlab = std::min(kMaxSlab, slab * 2);
  }
  void* p = c.cursor;
  c.cursor += block;
  return p;
}

void release(void* p, size_t bytes) noexcept {
  if (!p) return;
  if (bytes > kMaxBlock) {
    ::operator delete(p);
    return;
  }
  const size_t cls = classOf(bytes);
  auto* b = static_cast<FreeBlock*>(p);
  ThreadCache& t = tCache;
  if (t.count[cls] < kCachedBlocks && !t.flushed) {
    if (t.count[cls] == 0) tFlusher.armed = true;  // constructs it (at the thread's first use)
    b->next = t.head[cls];
    t.head[cls] = b;
    ++t.count[cls];
    return;
  }
  SizeClass& c = classes()[cls];
  std::lock_guard<SpinLock> lock(c.mu);
  b->next = c.free;
  c.free = b;
}

size_t mappedBytes() { return gMapped.load(std::memory_order_relaxed); }

}  // namespace chorus::pool
