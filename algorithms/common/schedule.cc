// Schedule builders, queries and finalize().
//
// finalize() turns program order into the dependency graph an executor runs. It keeps, for every
// buffer (after in-place aliasing is resolved by canonical()), a set of disjoint byte intervals,
// each remembering its last writer and the readers since that write. A step then costs
// O(log intervals + intervals it touches) instead of a scan over all earlier steps, which
// matters at a few thousand steps (256 MiB over 8 ranks in 1 MiB chunks).
//
// Only the nearest hazards are recorded: a read waits for the last writer of each byte; a write
// waits for the last writer and every reader since. Older accesses are ordered before those by
// the same rule applied earlier, so the graph's transitive closure contains every hazard.
//
// One-sided steps add no hazard on the peer's range they read (that memory is not this rank's;
// the checker proves the peer does not write it meanwhile), only on their local b and dst.
// kNotify and kWait are fences: a notify depends, directly or transitively, on every earlier
// step, and every later step depends on every earlier wait. kSignal and kAwait are the same
// fences (a signal as a notify, an await as a wait); they touch no connection, so they take no
// place in the per-peer FIFO order of messages.
#include "algorithms/common/schedule.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <unordered_map>
#include <utility>

namespace chorus::sched {

const char* stepKindName(StepKind k) {
  switch (k) {
    case StepKind::kSend: return "send";
    case StepKind::kRecv: return "recv";
    case StepKind::kRecvReduce: return "recvReduce";
    case StepKind::kCopy: return "copy";
    case StepKind::kReduce: return "reduce";
    case StepKind::kGet: return "get";
    case StepKind::kGetReduce: return "getReduce";
    case StepKind::kNotify: return "notify";
    case StepKind::kWait: return "wait";
    case StepKind::kSignal: return "signal";
    case StepKind::kAwait: return "await";
    case StepKind::kQuantize: return "quantize";
    case StepKind::kDequantize: return "dequantize";
    case StepKind::kRequantize: return "requantize";
  }
  return "unknown";
}

const char* collName(Coll c) {
  switch (c) {
    case Coll::kAllReduce: return "allreduce";
    case Coll::kBroadcast: return "broadcast";
    case Coll::kReduce: return "reduce";
    case Coll::kAllGather: return "allgather";
    case Coll::kReduceScatter: return "reducescatter";
    case Coll::kAllToAll: return "alltoall";
    case Coll::kAllToAllv: return "alltoallv";
    case Coll::kGather: return "gather";
    case Coll::kScatter: return "scatter";
    case Coll::kBarrier: return "barrier";
    case Coll::kSendRecv: return "sendrecv";
  }
  return "unknown";
}

void Schedule::addPeer(int peer) {
  // Steps come in runs to the same peer, so the common case is the last entry.
  if (!peers.empty() && peers.back() == peer) return;
  if (std::find(peers.begin(), peers.end(), peer) == peers.end()) peers.push_back(peer);
}

void Schedule::send(int peer, Range a) {
  addPeer(peer);
  if (a.bytes == 0) return;
  Step s;
  s.kind = StepKind::kSend;
  s.peer = peer;
  s.a = a;
  steps.push_back(std::move(s));
}

void Schedule::recv(int peer, Range dst) {
  addPeer(peer);
  if (dst.bytes == 0) return;
  Step s;
  s.kind = StepKind::kRecv;
  s.peer = peer;
  s.dst = dst;
  steps.push_back(std::move(s));
}

void Schedule::recvReduce(int peer, Range a, Range dst) {
  addPeer(peer);
  if (dst.bytes == 0) return;
  Step s;
  s.kind = StepKind::kRecvReduce;
  s.peer = peer;
  s.a = a;
  s.dst = dst;
  steps.push_back(std::move(s));
}

void Schedule::copy(Range a, Range dst) {
  if (dst.bytes == 0) return;
  Step s;
  s.kind = StepKind::kCopy;
  s.a = a;
  s.dst = dst;
  steps.push_back(std::move(s));
}

void Schedule::reduce(Range a, Range b, Range dst) {
  if (dst.bytes == 0) return;
  Step s;
  s.kind = StepKind::kReduce;
  s.a = a;
  s.b = b;
  s.dst = dst;
  steps.push_back(std::move(s));
}

// A get of a peer's window region names no message peer: the window needs no connection.
void Schedule::get(int peer, Range remote, Range dst) {
  if (remote.buf != kWindow) addPeer(peer);
  if (dst.bytes == 0) return;
  Step s;
  s.kind = StepKind::kGet;
  s.peer = peer;
  s.a = remote;
  s.dst = dst;
  steps.push_back(std::move(s));
}

void Schedule::getReduce(int peer, Range remote, Range b, Range dst) {
  if (remote.buf != kWindow) addPeer(peer);
  if (dst.bytes == 0) return;
  Step s;
  s.kind = StepKind::kGetReduce;
  s.peer = peer;
  s.a = remote;
  s.b = b;
  s.dst = dst;
  steps.push_back(std::move(s));
}

// Notify and wait carry no data but are never dropped: their meaning is the synchronization.
void Schedule::notify(int peer) {
  addPeer(peer);
  Step s;
  s.kind = StepKind::kNotify;
  s.peer = peer;
  steps.push_back(std::move(s));
}

void Schedule::wait(int peer) {
  addPeer(peer);
  Step s;
  s.kind = StepKind::kWait;
  s.peer = peer;
  steps.push_back(std::move(s));
}

void Schedule::signal() {
  Step s;
  s.kind = StepKind::kSignal;
  steps.push_back(std::move(s));
}

void Schedule::await(int peer, uint32_t target) {
  Step s;
  s.kind = StepKind::kAwait;
  s.peer = peer;
  s.target = target;
  steps.push_back(std::move(s));
}

// Quantization steps are local: like copies, dropped when there is nothing to do.
void Schedule::quantize(Range elements, Range quantized, uint64_t count, uint64_t index) {
  if (count == 0) return;
  Step s;
  s.kind = StepKind::kQuantize;
  s.a = elements;
  s.dst = quantized;
  s.quant = QuantArgs{count, index, 1};
  steps.push_back(std::move(s));
}

void Schedule::dequantize(Range quantized, uint32_t sources, Range elements, uint64_t count) {
  if (count == 0 || sources == 0) return;
  Step s;
  s.kind = StepKind::kDequantize;
  s.a = quantized;
  s.dst = elements;
  s.quant = QuantArgs{count, 0, sources};
  steps.push_back(std::move(s));
}

void Schedule::requantize(Range quantized, uint32_t sources, Range dst, uint64_t count,
                          uint64_t index) {
  if (count == 0 || sources == 0) return;
  Step s;
  s.kind = StepKind::kRequantize;
  s.a = quantized;
  s.dst = dst;
  s.quant = QuantArgs{count, index, sources};
  steps.push_back(std::move(s));
}

bool Schedule::needsOneSided() const {
  return std::any_of(steps.begin(), steps.end(), [](const Step& s) {
    return isOneSided(s.kind) && s.a.buf != kWindow;
  });
}

bool Schedule::usesWindow() const {
  return std::any_of(steps.begin(), steps.end(), [](const Step& s) {
    return isWindowSync(s.kind) || s.a.buf == kWindow || s.b.buf == kWindow ||
           s.dst.buf == kWindow;
  });
}

uint32_t Schedule::signals() const {
  return static_cast<uint32_t>(std::count_if(
      steps.begin(), steps.end(), [](const Step& s) { return s.kind == StepKind::kSignal; }));
}

uint64_t Schedule::bytesTo(int peer) const {
  uint64_t n = 0;
  for (const Step& s : steps)
    if (s.kind == StepKind::kSend && s.peer == peer) n += s.a.bytes;
  return n;
}

uint64_t Schedule::bytesFrom(int peer) const {
  uint64_t n = 0;
  for (const Step& s : steps)
    if ((s.kind == StepKind::kRecv || s.kind == StepKind::kRecvReduce) && s.peer == peer)
      n += s.dst.bytes;
  return n;
}

uint32_t Schedule::messagesTo(int peer) const {
  uint32_t n = 0;
  for (const Step& s : steps)
    if ((s.kind == StepKind::kSend || s.kind == StepKind::kNotify) && s.peer == peer) ++n;
  return n;
}

uint32_t Schedule::messagesFrom(int peer) const {
  uint32_t n = 0;
  for (const Step& s : steps)
    if ((s.kind == StepKind::kRecv || s.kind == StepKind::kRecvReduce ||
         s.kind == StepKind::kWait) &&
        s.peer == peer)
      ++n;
  return n;
}

Range Schedule::canonical(Range r) const {
  if (r.buf == kInput && inputInOutput >= 0)
    return Range{kOutput, r.offset + static_cast<uint64_t>(inputInOutput), r.bytes};
  if (r.buf == kOutput && outputInInput >= 0)
    return Range{kInput, r.offset + static_cast<uint64_t>(outputInInput), r.bytes};
  return r;
}

namespace {

// Access history of one buffer: disjoint byte intervals keyed by their start.
class IntervalHistory {
 public:
  // Appends to `deps` the steps an access of [lo, hi) must wait for.
  void collect(uint64_t lo, uint64_t hi, bool write, std::vector<uint32_t>& deps) const {
    for (auto it = firstOverlap(lo); it != segs_.end() && it->first < hi; ++it) {
      const Seg& s = it->second;
      // A write after reads needs only the readers: each of them already waits for the writer.
      if (write && !s.readers.empty()) {
        deps.insert(deps.end(), s.readers.begin(), s.readers.end());
      } else if (s.writer >= 0) {
        deps.push_back(static_cast<uint32_t>(s.writer));
      }
    }
  }

  void addReader(uint64_t lo, uint64_t hi, uint32_t step) {
    splitAt(lo);
    splitAt(hi);
    uint64_t pos = lo;
    auto it = segs_.lower_bound(lo);
    while (pos < hi) {
      if (it == segs_.end() || it->first > pos) {
        // A gap nobody touched yet: it starts its history with this read.
        uint64_t end = (it == segs_.end()) ? hi : std::min(hi, it->first);
        Seg s;
        s.end = end;
        s.readers.push_back(step);
        it = std::next(segs_.emplace_hint(it, pos, std::move(s)));
        pos = end;
        continue;
      }
      Seg& s = it->second;
      if (s.readers.empty() || s.readers.back() != step) s.readers.push_back(step);
      pos = s.end;
      ++it;
    }
  }

  void setWriter(uint64_t lo, uint64_t hi, uint32_t step) {
    splitAt(lo);
    splitAt(hi);
    auto first = segs_.lower_bound(lo);
    auto last = segs_.lower_bound(hi);
    auto hint = segs_.erase(first, last);
    Seg s;
    s.end = hi;
    s.writer = static_cast<int64_t>(step);
    segs_.emplace_hint(hint, lo, std::move(s));
  }

 private:
  struct Seg {
    uint64_t end = 0;
    int64_t writer = -1;
    std::vector<uint32_t> readers;  // since the last write, in step order
  };
  using Map = std::map<uint64_t, Seg>;

  Map::const_iterator firstOverlap(uint64_t lo) const {
    auto it = segs_.upper_bound(lo);
    if (it != segs_.begin()) {
      auto prev = std::prev(it);
      if (prev->second.end > lo) return prev;
    }
    return it;
  }

  // Makes `x` a segment boundary if it falls strictly inside a segment.
  void splitAt(uint64_t x) {
    auto it = segs_.upper_bound(x);
    if (it == segs_.begin()) return;
    --it;
    if (it->first < x && x < it->second.end) {
      Seg tail = it->second;
      it->second.end = x;
      segs_.emplace_hint(std::next(it), x, std::move(tail));
    }
  }

  Map segs_;
};

}  // namespace

void Schedule::finalize() {
  std::vector<IntervalHistory> history(kFirstUserBuf);  // grows for user buffers
  auto historyOf = [&](BufId b) -> IntervalHistory& {
    if (b >= history.size()) history.resize(b + 1u);
    return history[b];
  };
  std::unordered_map<int, uint32_t> lastSendTo, lastRecvFrom;
  // Fences. Steps before the last notify are ordered before it (it fenced them), so a notify
  // needs only the steps since then that no later step depends on yet: every other step since
  // is an ancestor of one of those. Every step after a wait depends on the last wait, which
  // depends on the one before it, so one edge per step carries all earlier waits.
  int64_t lastNotify = -1, lastWait = -1;
  std::vector<char> depended(steps.size(), 0);

  struct Access {
    Range r;
    bool write;
  };
  Access acc[3];
  std::vector<uint32_t> deps;

  for (uint32_t i = 0; i < steps.size(); ++i) {
    Step& st = steps[i];
    int n = 0;
    switch (st.kind) {
      case StepKind::kSend: acc[n++] = {st.a, false}; break;
      case StepKind::kRecv:
      case StepKind::kGet: acc[n++] = {st.dst, true}; break;  // a get's `a` is the peer's memory
      case StepKind::kRecvReduce:
      case StepKind::kCopy:
      case StepKind::kQuantize:
      case StepKind::kDequantize:
      case StepKind::kRequantize:
        acc[n++] = {st.a, false};
        acc[n++] = {st.dst, true};
        break;
      case StepKind::kReduce:
        acc[n++] = {st.a, false};
        acc[n++] = {st.b, false};
        acc[n++] = {st.dst, true};
        break;
      case StepKind::kGetReduce:
        acc[n++] = {st.b, false};
        acc[n++] = {st.dst, true};
        break;
      case StepKind::kNotify:
      case StepKind::kWait:
      case StepKind::kSignal:
      case StepKind::kAwait: break;
    }
    deps.clear();
    for (int k = 0; k < n; ++k) {
      acc[k].r = canonical(acc[k].r);
      if (acc[k].r.bytes == 0) continue;
      historyOf(acc[k].r.buf).collect(acc[k].r.offset, acc[k].r.offset + acc[k].r.bytes,
                                    acc[k].write, deps);
    }
    // A connection is ordered: messages to (from) one peer match in posting order, so the
    // executor must post them in program order. Notifies share the queue of sends, waits the
    // queue of receives.
    const bool toPeer = st.kind == StepKind::kSend || st.kind == StepKind::kNotify;
    const bool fromPeer = st.kind == StepKind::kRecv || st.kind == StepKind::kRecvReduce ||
                          st.kind == StepKind::kWait;
    if (toPeer) {
      auto [it, fresh] = lastSendTo.try_emplace(st.peer, i);
      if (!fresh) deps.push_back(std::exchange(it->second, i));
    } else if (fromPeer) {
      auto [it, fresh] = lastRecvFrom.try_emplace(st.peer, i);
      if (!fresh) deps.push_back(std::exchange(it->second, i));
    }
    if (lastWait >= 0) deps.push_back(static_cast<uint32_t>(lastWait));
    if (st.kind == StepKind::kNotify || st.kind == StepKind::kSignal) {
      for (uint32_t k = lastNotify < 0 ? 0 : static_cast<uint32_t>(lastNotify); k < i; ++k)
        if (!depended[k]) deps.push_back(k);
      lastNotify = i;
    } else if (st.kind == StepKind::kWait || st.kind == StepKind::kAwait) {
      lastWait = i;
    }
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    for (uint32_t k : deps) depended[k] = 1;
    st.deps = deps;

    // Reads first: a step that reads and writes the same bytes (recvReduce with a == dst) ends
    // up as their last writer with no readers, which is what later steps must wait for.
    for (int k = 0; k < n; ++k)
      if (!acc[k].write && acc[k].r.bytes != 0)
        historyOf(acc[k].r.buf).addReader(acc[k].r.offset, acc[k].r.offset + acc[k].r.bytes, i);
    for (int k = 0; k < n; ++k)
      if (acc[k].write && acc[k].r.bytes != 0)
        historyOf(acc[k].r.buf).setWriter(acc[k].r.offset, acc[k].r.offset + acc[k].r.bytes, i);
  }
}

double packedRatio(const CollDesc& d) {
  if (!d.quant) return 0;
  const uint64_t count = std::max<uint64_t>(d.count, d.quant->groupSize);
  return static_cast<double>(kernels::quant::packedBytes(*d.quant, count)) /
         static_cast<double>(count * std::max<size_t>(1, d.elemSize));
}

}  // namespace chorus::sched
