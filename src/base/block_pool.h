// Fixed-size blocks for the objects every nonblocking call makes (its request, the API's handle),
// so that posting a call allocates nothing in the steady state and a deeper queue than before
// does not fault in fresh pages one at a time.
//
// A first touch of a page costs a page fault; in a virtual machine that can be ~12 us (measured
// on the 2-core VM this was written on, against ~4 us per page when the kernel populates a whole
// mapping in one call). A program that posts 2000 all-reduces before waiting for the first met
// one fresh page every ~15 requests, which tripled the 8 B nonblocking all-reduce. So blocks
// come from slabs mapped with MAP_POPULATE and written to once per page when mapped (populated
// pages still cost ~6 us each at their first write there: a 2000-deep first queue of posted
// 8 B all-reduces took 0.74 us per call against 0.27 once its pages had been written), the
// first slab big enough for a few thousand requests and each next one twice the last (a
// slab's pages cost ~7 us each when it is mapped); freed blocks go back to their size class's free
// list and are reused, most recently freed first (still in cache). Slabs are never returned:
// a pool's memory is its high-water mark, like any allocator's arena.
//
// Process-wide (a request may outlive its communicator) and thread-safe (a request is freed by
// whichever thread drops it last): one spin lock per size class, held for a pointer swap.
#pragma once

#include <cstddef>
#include <new>

namespace chorus::pool {

/// Blocks of up to this many bytes come from the pool; larger requests go to operator new.
inline constexpr size_t kMaxBlock = 512;

/// A block of at least `bytes` (aligned to alignof(std::max_align_t)); never null (throws
/// std::bad_alloc like operator new when memory is exhausted).
void* allocate(size_t bytes);
/// Returns a block from allocate(bytes) (the same `bytes`).
void release(void* p, size_t bytes) noexcept;

/// Bytes the pool has mapped so far (tests and statistics).
size_t mappedBytes();

/// A standard allocator over the pool, for std::allocate_shared (one block holds the object
/// and its reference counts).
template <class T>
struct Allocator {
  using value_type = T;
  Allocator() = default;
  template <class U>
  Allocator(const Allocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor): rebinding
  T* allocate(size_t n) { return static_cast<T*>(pool::allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { pool::release(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const Allocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace chorus::pool
