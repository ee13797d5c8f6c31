#include "src/core/plan_cache.h"

namespace chorus {

namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

}  // namespace

size_t PlanKeyHash::operator()(const PlanKey& k) const {
  uint64_t h = mix(static_cast<uint64_t>(k.coll), k.count);
  h = mix(h, (static_cast<uint64_t>(k.segments) << 63) |
                 (static_cast<uint64_t>(k.elemSize) << 33) |
                 (static_cast<uint64_t>(k.inPlace) << 32) | static_cast<uint32_t>(k.root));
  h = mix(h, k.quant);
  for (uint64_t v : k.extra) h = mix(h, v);
  return static_cast<size_t>(h);
}

std::shared_ptr<const exec::Plan> PlanCache::find(const PlanKey& key) {
  auto it = map_.find(key);
  if (it == map_.end()) return nullptr;
  if (it->second != lru_.begin()) lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->plan;
}

void PlanCache::insert(const PlanKey& key, std::shared_ptr<const exec::Plan> plan) {
  auto it = map_.find(key);
  if (it != map_.end()) {
    bytes_ -= it->second->plan->footprint;
    lru_.erase(it->second);
    map_.erase(it);
  }
  bytes_ += plan->footprint;
  lru_.push_front(Entry{key, std::move(plan)});
  map_.emplace(key, lru_.begin());
  evict();
}

void PlanCache::evict() {
  // The newest entry stays even when it alone is over the byte bound: it is about to run.
  while (lru_.size() > 1 && (lru_.size() > maxEntries_ || bytes_ > maxBytes_)) {
    Entry& old = lru_.back();
    bytes_ -= old.plan->footprint;
    map_.erase(old.key);
    lru_.pop_back();
    ++evictions_;
  }
}

void PlanCache::clear() {
  map_.clear();
  lru_.clear();
  bytes_ = 0;
}

}  // namespace chorus
