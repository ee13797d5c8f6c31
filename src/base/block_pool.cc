#include "src/base/block_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "src/base/spin_lock.h"

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

// Held for a pointer swap or two: a spin lock (src/base/spin_lock.h), since a pthread mutex's
// lock and unlock were ~40% of the pool's instructions per nonblocking call.
struct SizeClass {
  SpinLock mu;
  FreeBlock* free = nullptr;
  std::byte* cursor = nullptr;  // the current slab's blocks not handed out yet
  std::byte* end = nullptr;
  size_t nextSlab = 0;
};

std::atomic<size_t> gMapped{0};

// Constant-initialized and never destroyed (every member is trivially destructible): requests
// may be freed by static destructors of other objects, and no call pays a guard for it.
constinit std::array<SizeClass, kClasses> gClasses{};
std::array<SizeClass, kClasses>& classes() { return gClasses; }

size_t classOf(size_t bytes) { return (std::max<size_t>(bytes, 1) + kGranule - 1) / kGranule - 1; }

}  // namespace

void* allocate(size_t bytes) {
  if (bytes > kMaxBlock) return ::operator new(bytes);
  const size_t cls = classOf(bytes);
  const size_t block = (cls + 1) * kGranule;
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
  SizeClass& c = classes()[classOf(bytes)];
  std::lock_guard<SpinLock> lock(c.mu);
  auto* b = static_cast<FreeBlock*>(p);
  b->next = c.free;
  c.free = b;
}

size_t mappedBytes() { return gMapped.load(std::memory_order_relaxed); }

}  // namespace chorus::pool
