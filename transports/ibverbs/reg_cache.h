// The registration cache: memory regions of one protection domain, registered in whole pages
// and shared by reference count. A send or receive acquires the region covering its buffer
// for as long as it is in flight; ops on the same pages share one registration.
//
// A region is deregistered when its last reference is released, not kept for reuse: a cached
// registration outlives free() of its memory, and once the pages are reused by another mapping
// the NIC would move bytes of the old pages (registration pins the physical pages, not the
// addresses). Hooking the allocator to invalidate (what UCX's memory hooks do) is not done;
// the cost is a registration per message whose buffer no in-flight op shares.
//
// Thread-safe: connections on different threads share their NIC's cache.
//
// Internal to transports/ibverbs/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>

#include "src/base/status.h"
#include "src/base/verbs_api.h"

namespace chorus::ib {

class RegCache {
 public:
  struct Entry {
    uintptr_t begin = 0;  ///< page-aligned
    uintptr_t end = 0;    ///< page-aligned, exclusive
    ibv_mr* mr = nullptr;
    int refs = 0;
  };
  /// A held registration (mr null for an empty range: nothing to register).
  struct Ref {
    Entry* entry = nullptr;
    uint32_t lkey() const { return entry ? entry->mr->lkey : 0; }
    uint32_t rkey() const { return entry ? entry->mr->rkey : 0; }
  };

  RegCache(const VerbsApi& api, ibv_pd* pd, int access, size_t pageBytes);
  ~RegCache();
  RegCache(const RegCache&) = delete;
  RegCache& operator=(const RegCache&) = delete;

  /// The registration covering [p, p + bytes), made if no held one covers it.
  StatusOr<Ref> acquire(const void* p, size_t bytes);
  void release(Ref& r);

  size_t regions() const;
  uint64_t registrations() const;  ///< reg_mr calls so far

 private:
  const VerbsApi& api_;
  ibv_pd* const pd_;
  const int access_;
  const uintptr_t page_;
  mutable std::mutex mu_;
  std::list<Entry> entries_;  // stable addresses: Refs point into it
  uint64_t registrations_ = 0;
};

}  // namespace chorus::ib
