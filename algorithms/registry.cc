#include "algorithms/registry.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <mutex>
#include <vector>

namespace chorus::algo {

namespace {

struct Registry {
  std::mutex mu;
  std::vector<const AlgoInfo*> entries;
  bool sorted = true;
};

// Never destroyed: a progress or heartbeat thread may still look algorithms up while a program
// that did not destroy its communicators runs its static destructors in exit().
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

// The registry's sorted entries. Registrations all happen during static initialization, before
// any lookup, so the list is sorted once and never changes afterwards.
const std::vector<const AlgoInfo*>& entries() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.sorted) {
    std::sort(r.entries.begin(), r.entries.end(), [](const AlgoInfo* a, const AlgoInfo* b) {
      if (a->coll != b->coll) return a->coll < b->coll;
      if (a->tiePriority != b->tiePriority) return a->tiePriority < b->tiePriority;
      return std::strcmp(a->name, b->name) < 0;
    });
    r.sorted = true;
  }
  return r.entries;
}

}  // namespace

const char* needsName(Needs n) {
  switch (n) {
    case Needs::kMessages: return "messages";
    case Needs::kOneSided: return "one-sided reads";
    case Needs::kHostWindow: return "the host window";
  }
  return "?";
}

Registration::Registration(const AlgoInfo& info) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  // The naming rule of quantized entries (registry.h), checked where it cannot be missed.
  if (info.quantized != std::string_view(info.name).starts_with("quant_")) {
    std::fprintf(stderr, "chorus: algorithm %s:%s: quantized algorithms, and only they, are "
                 "named quant_*\n", sched::collName(info.coll), info.name);
    std::abort();
  }
  // Entries live as long as the program: keep a copy, since `info` is a temporary.
  r.entries.push_back(new AlgoInfo(info));
  r.sorted = false;
}

std::span<const AlgoInfo* const> allAlgorithms() { return entries(); }

const AlgoInfo* findAlgorithm(sched::Coll coll, std::string_view name) {
  const std::string_view prefix = sched::collName(coll);
  if (name.size() > prefix.size() && name.substr(0, prefix.size()) == prefix &&
      name[prefix.size()] == ':')
    name.remove_prefix(prefix.size() + 1);
  for (const AlgoInfo* a : entries())
    if (a->coll == coll && name == a->name) return a;
  return nullptr;
}

uint16_t algorithmIndex(const AlgoInfo* a) {
  const auto& all = entries();
  auto it = std::find(all.begin(), all.end(), a);
  return it == all.end() ? kNoAlgorithm : static_cast<uint16_t>(it - all.begin());
}

const AlgoInfo* algorithmAt(uint16_t index) {
  const auto& all = entries();
  return index < all.size() ? all[index] : nullptr;
}

bool needsMet(const AlgoInfo& a, const Platform& p, const char** why) {
  if (p.nranks <= 1) return true;  // every algorithm is a local copy on one rank
  switch (a.needs) {
    case Needs::kMessages: return true;
    case Needs::kOneSided:
      if (p.oneSided) return true;
      *why = "needs one-sided reads of every peer (shared memory with cross-memory attach)";
      return false;
    case Needs::kHostWindow:
      if (p.window.present()) return true;
      *why = "needs the host window (every rank on one host, over shared memory)";
      return false;
  }
  return false;
}

sched::Schedule makeSchedule(const AlgoInfo& algo, const sched::CollDesc& d, int rank,
                             int nranks) {
  sched::Schedule s = algo.build(d, rank, nranks);
  s.finalize();
  return s;
}

// Built for ring positions, then renumbered back: a builder's rank p is the rank at ring
// position p. All-reduce, broadcast and reduce place nothing by rank, so only peers (and the
// root) move; the ring all-gather and reduce-scatter also index one buffer by rank (the
// output's blocks, the input's blocks), and their block offsets move with the ranks (ring
// steps never straddle a block, so each range moves whole).
sched::Schedule makeScheduleInOrder(const AlgoInfo& algo, const sched::CollDesc& d, int rank,
                                    int nranks, std::span<const int> order) {
  bool identity = order.size() != static_cast<size_t>(nranks);
  if (!identity) {
    identity = true;
    for (int i = 0; i < nranks; ++i) identity = identity && order[static_cast<size_t>(i)] == i;
  }
  if (identity || algo.order == RankOrder::kByRank) return makeSchedule(algo, d, rank, nranks);
  std::vector<int> pos(static_cast<size_t>(nranks));
  for (int i = 0; i < nranks; ++i) pos[static_cast<size_t>(order[static_cast<size_t>(i)])] = i;
  sched::CollDesc v = d;
  if (d.coll == sched::Coll::kBroadcast || d.coll == sched::Coll::kReduce ||
      d.coll == sched::Coll::kGather || d.coll == sched::Coll::kScatter)
    v.root = pos[static_cast<size_t>(d.root)];
  if (d.hostOf.size() == static_cast<size_t>(nranks))
    for (int i = 0; i < nranks; ++i)
      v.hostOf[static_cast<size_t>(i)] = d.hostOf[static_cast<size_t>(order[static_cast<size_t>(i)])];
  sched::Schedule s = algo.build(v, pos[static_cast<size_t>(rank)], nranks);
  for (sched::Step& st : s.steps)
    if (st.peer >= 0) st.peer = order[static_cast<size_t>(st.peer)];
  for (int& p : s.peers) p = order[static_cast<size_t>(p)];
  if (algo.order == RankOrder::kRingBlocks) {
    // Block k of the rank-indexed buffer (position k's) is rank order[k]'s.
    const sched::BufId indexed =
        d.coll == sched::Coll::kAllGather ? sched::kOutput : sched::kInput;
    const uint64_t block = d.count * d.elemSize;
    auto move = [&](sched::Range& r) {
      if (r.buf != indexed || block == 0 || r.bytes == 0) return;
      const uint64_t k = r.offset / block, within = r.offset % block;
      r.offset = static_cast<uint64_t>(order[static_cast<size_t>(k)]) * block + within;
    };
    for (sched::Step& st : s.steps) move(st.a), move(st.b), move(st.dst);
    const int64_t mine = static_cast<int64_t>(static_cast<uint64_t>(rank) * block);
    if (s.inputInOutput >= 0) s.inputInOutput = mine;
    if (s.outputInInput >= 0) s.outputInInput = mine;
  }
  s.finalize();
  return s;
}

}  // namespace chorus::algo
