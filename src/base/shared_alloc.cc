#include "src/base/shared_alloc.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>

namespace chorus::mem {
namespace {

struct Segment {
  uint64_t bytes;
  int fd;
  uint64_t id;
  pid_t pid;
  uint32_t registrations;
};

// Freed bases remembered so a second free says so; an address a new segment reuses leaves the set.
constexpr size_t kFreedRemembered = 4096;

struct Registry {
  std::mutex mu;
  std::map<uintptr_t, Segment> live;  // by base
  std::set<uintptr_t> freed;
  uint64_t nextId = 1;
  // live.size(), readable without the lock: expose() of ordinary memory (every one-sided call)
  // then costs one load while no segment exists.
  std::atomic<size_t> liveCount{0};
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: segments may outlive static dtors
  return *r;
}

std::string hexAddr(uintptr_t p) {
  char b[32];
  std::snprintf(b, sizeof b, "%#jx", static_cast<uintmax_t>(p));
  return b;
}

// The live segment containing address p, or end().
std::map<uintptr_t, Segment>::iterator containing(Registry& r, uintptr_t p) {
  auto it = r.live.upper_bound(p);
  if (it == r.live.begin()) return r.live.end();
  --it;
  return p < it->first + it->second.bytes ? it : r.live.end();
}

}  // namespace

std::string segmentName(uint64_t id) { return "chorus-seg-" + std::to_string(id); }

StatusOr<void*> allocate(size_t bytes) {
  if (bytes == 0) return invalidArgument("size is 0");
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  if (bytes > SIZE_MAX - page) return invalidArgument("size " + std::to_string(bytes) +
                                                      " is too large");
  const size_t rounded = (bytes + page - 1) / page * page;
  Registry& r = registry();
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    id = r.nextId++;
  }
  const std::string name = segmentName(id);
  int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) return errnoStatus("memfd_create", name);
  if (::ftruncate(fd, static_cast<off_t>(rounded)) != 0) {
    Status st = errnoStatus("ftruncate", name + " to " + std::to_string(rounded) + " bytes");
    ::close(fd);
    return st;
  }
  void* p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    Status st = errnoStatus("mmap", name + " (" + std::to_string(rounded) + " bytes)");
    ::close(fd);
    return st;
  }
  std::lock_guard<std::mutex> lock(r.mu);
  const auto base = reinterpret_cast<uintptr_t>(p);
  r.freed.erase(base);
  r.live.emplace(base, Segment{rounded, fd, id, ::getpid(), 0});
  r.liveCount.store(r.live.size(), std::memory_order_release);
  return p;
}

Status release(void* ptr) {
  if (!ptr) return invalidArgument("ptr is NULL");
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  Registry& r = registry();
  Segment s;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = containing(r, p);
    if (it == r.live.end()) {
      if (r.freed.count(p))
        return invalidUsage("ptr " + hexAddr(p) + " was already freed by chorusMemFree");
      return invalidArgument("ptr " + hexAddr(p) + " was not returned by chorusMemAlloc");
    }
    if (it->first != p)
      return invalidArgument("ptr " + hexAddr(p) + " points " + std::to_string(p - it->first) +
                             " bytes into the chorusMemAlloc segment at " + hexAddr(it->first) +
                             "; free that address instead");
    if (it->second.registrations > 0)
      return invalidUsage("ptr " + hexAddr(p) + " is still registered " +
                          std::to_string(it->second.registrations) +
                          " time(s) with communicators; chorusCommDeregister (or destroy the "
                          "communicators) before chorusMemFree");
    s = it->second;
    r.live.erase(it);
    r.liveCount.store(r.live.size(), std::memory_order_release);
    if (r.freed.size() >= kFreedRemembered) r.freed.erase(r.freed.begin());
    r.freed.insert(p);
  }
  // Peers that mapped the segment keep their mapping (and the pages) until they unmap it.
  Status st;
  if (::munmap(ptr, s.bytes) != 0) st = errnoStatus("munmap", segmentName(s.id));
  ::close(s.fd);
  return st;
}

bool find(const void* ptr, size_t bytes, SegmentRef* out) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  Registry& r = registry();
  if (r.liveCount.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = containing(r, p);
  if (it == r.live.end()) return false;
  const Segment& s = it->second;
  const uint64_t offset = p - it->first;
  if (bytes > s.bytes - offset) return false;  // runs past the segment's end
  // A forked child inherits the registry, but peers name the segment by its allocator's pid.
  if (s.pid != ::getpid()) return false;
  *out = SegmentRef{s.pid, s.fd, s.id, s.bytes, it->first, offset, s.registrations};
  return true;
}

bool addRegistration(uintptr_t base) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.live.find(base);
  if (it == r.live.end()) return false;
  ++it->second.registrations;
  return true;
}

bool removeRegistration(uintptr_t base) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.live.find(base);
  if (it == r.live.end() || it->second.registrations == 0) return false;
  --it->second.registrations;
  return true;
}

size_t liveSegments() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.live.size();
}

}  // namespace chorus::mem
