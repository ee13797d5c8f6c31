#include "transports/ibverbs/reg_cache.h"

#include <cerrno>
#include <cstring>
#include <string>

namespace chorus::ib {

RegCache::RegCache(const VerbsApi& api, ibv_pd* pd, int access, size_t pageBytes)
    : api_(api), pd_(pd), access_(access), page_(pageBytes) {}

RegCache::~RegCache() {
  for (Entry& e : entries_) api_.dereg_mr(e.mr);
}

StatusOr<RegCache::Ref> RegCache::acquire(const void* p, size_t bytes) {
  if (bytes == 0) return Ref{};
  const auto addr = reinterpret_cast<uintptr_t>(p);
  if (addr + bytes < addr) return invalidArgument("ibverbs: a buffer wraps the address space");
  const uintptr_t begin = addr & ~(page_ - 1);
  const uintptr_t end = (addr + bytes + page_ - 1) & ~(page_ - 1);
  std::lock_guard<std::mutex> lock(mu_);
  for (Entry& e : entries_) {
    if (e.begin <= begin && end <= e.end) {
      ++e.refs;
      return Ref{&e};
    }
  }
  ibv_mr* mr = api_.reg_mr(pd_, reinterpret_cast<void*>(begin), end - begin, access_);
  if (!mr) {
    const int err = errno;
    return systemError("ibverbs: ibv_reg_mr(" + std::to_string(end - begin) + " bytes at " +
                       std::to_string(begin) + "): " + std::strerror(err) +
                       (err == ENOMEM ? " (the locked-memory limit, ulimit -l?)" : ""));
  }
  ++registrations_;
  entries_.push_back(Entry{begin, end, mr, 1});
  return Ref{&entries_.back()};
}

void RegCache::release(Ref& r) {
  if (!r.entry) return;
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = r.entry;
  r.entry = nullptr;
  if (--e->refs > 0) return;
  api_.dereg_mr(e->mr);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (&*it == e) {
      entries_.erase(it);
      break;
    }
  }
}

size_t RegCache::regions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

uint64_t RegCache::registrations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return registrations_;
}

}  // namespace chorus::ib
