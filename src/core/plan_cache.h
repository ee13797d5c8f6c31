// The communicator's plan cache: prepared plans (src/exec/plan.h) by call signature, so a
// repeated call costs a lookup, not a selection and a build.
//
// Key: collective, count, element size, root (-1 where the collective has none), in place or
// not, the quantization config's shape (bits, group size, mode, rounding: what sizes the
// blocks; the seed is bound per run), and for all-to-allv the per-peer counts and displacements (both directions). That is
// everything selection and the builders read of a call — the type only through its size, the
// operator not at all (a plan is "sum"; other operators are bound per run). Point-to-point
// groups are keyed by their ops: peer, direction and bytes of each, in order.
//
// Bound: at most `maxEntries` plans and `maxBytes` of plan memory (each plan's footprint);
// beyond either, the least recently used plans are dropped. An all-to-allv whose counts change
// on every call therefore keeps replacing old plans instead of growing the cache.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "algorithms/common/schedule.h"
#include "src/exec/plan.h"

namespace chorus {

struct PlanKey {
  sched::Coll coll = sched::Coll::kAllReduce;
  bool inPlace = false;
  uint32_t elemSize = 0;
  int32_t root = -1;
  uint64_t count = 0;
  uint64_t quant = 0;  // quantized calls: the config's shape (kernels::quantWords), else 0
  bool segments = false;  // CollDesc::segments (the tuner prices the call differently)
  std::vector<uint64_t> extra;  // all-to-allv counts/displacements; point-to-point ops
  bool operator==(const PlanKey&) const = default;
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const;
};

class PlanCache {
 public:
  static constexpr size_t kDefaultEntries = 512;
  static constexpr size_t kDefaultBytes = 64u << 20;

  explicit PlanCache(size_t maxEntries = kDefaultEntries, size_t maxBytes = kDefaultBytes)
      : maxEntries_(maxEntries), maxBytes_(maxBytes) {}

  /// The plan for `key`, now the most recently used; nullptr when absent.
  std::shared_ptr<const exec::Plan> find(const PlanKey& key);
  /// Adds (or replaces) `key`'s plan and drops least recently used plans beyond the bounds.
  void insert(const PlanKey& key, std::shared_ptr<const exec::Plan> plan);
  void clear();

  size_t size() const { return map_.size(); }
  size_t bytes() const { return bytes_; }
  uint64_t evictions() const { return evictions_; }

 private:
  struct Entry {
    PlanKey key;
    std::shared_ptr<const exec::Plan> plan;
  };
  using List = std::list<Entry>;
  void evict();

  size_t maxEntries_, maxBytes_;
  size_t bytes_ = 0;
  uint64_t evictions_ = 0;
  List lru_;  // most recently used first
  std::unordered_map<PlanKey, List::iterator, PlanKeyHash> map_;
};

}  // namespace chorus
