#include "tests/support/checker.h"

#include <algorithm>
#include <optional>
#include <array>
#include <deque>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace chorus::sched {
namespace {

// ---- Symbolic values --------------------------------------------------------------------------

// A contribution: input element `idx` of rank `rank`, packed so that sorting orders by rank.
constexpr int kIndexBits = 40;
uint64_t term(int rank, uint64_t idx) { return (static_cast<uint64_t>(rank) << kIndexBits) | idx; }
int termRank(uint64_t t) { return static_cast<int>(t >> kIndexBits); }
uint64_t termIndex(uint64_t t) { return t & ((uint64_t{1} << kIndexBits) - 1); }
std::string termName(uint64_t t) {
  // Built by appending: g++ 12 at -O3 warns falsely on "literal" + std::string (PR105651).
  std::string s = "r";
  s += std::to_string(termRank(t));
  s += '[';
  s += std::to_string(termIndex(t));
  s += ']';
  return s;
}

// Values are interned sets of contributions; memory holds their ids. Id 0 is "poison": what
// output and scratch hold before anything is written to them.
constexpr uint32_t kPoison = 0;

class ValuePool {
 public:
  // The storage of the thread's previous pool is reused: a sweep checks thousands of cases one
  // after another, and growing these vectors afresh each time (doubling, copying, and for the
  // large ones mapping and faulting in new pages) took most of a large case's time.
  ValuePool() {
    terms_.swap(spareTerms());
    sets_.swap(spareSets());
    terms_.clear();
    sets_.clear();
    sets_.push_back({0, 0});
  }
  ~ValuePool() {
    terms_.swap(spareTerms());
    sets_.swap(spareSets());
  }
  ValuePool(const ValuePool&) = delete;
  ValuePool& operator=(const ValuePool&) = delete;

  uint32_t single(uint64_t t) {
    sets_.push_back({terms_.size(), 1});
    terms_.push_back(t);
    return static_cast<uint32_t>(sets_.size() - 1);
  }

  // The union of a and b, or kPoison with *dup set when a contribution is in both.
  uint32_t merge(uint32_t a, uint32_t b, uint64_t* dup) {
    const auto [ao, al] = sets_[a];
    const auto [bo, bl] = sets_[b];
    const size_t start = terms_.size();
    if (terms_.capacity() < start + al + bl)
      terms_.reserve(std::max(2 * terms_.capacity(), start + al + bl));
    size_t i = 0, j = 0;
    while (i < al && j < bl) {
      const uint64_t x = terms_[ao + i], y = terms_[bo + j];
      if (x == y) {
        *dup = x;
        terms_.resize(start);
        return kPoison;
      }
      terms_.push_back(x < y ? x : y);
      (x < y ? i : j)++;
    }
    for (; i < al; ++i) terms_.push_back(terms_[ao + i]);
    for (; j < bl; ++j) terms_.push_back(terms_[bo + j]);
    sets_.push_back({start, terms_.size() - start});
    return static_cast<uint32_t>(sets_.size() - 1);
  }

  std::span<const uint64_t> terms(uint32_t id) const {
    return {terms_.data() + sets_[id].first, sets_[id].second};
  }

 private:
  static std::vector<uint64_t>& spareTerms() {
    thread_local std::vector<uint64_t> v;
    return v;
  }
  static std::vector<std::pair<size_t, size_t>>& spareSets() {
    thread_local std::vector<std::pair<size_t, size_t>> v;
    return v;
  }

  std::vector<uint64_t> terms_;
  std::vector<std::pair<size_t, size_t>> sets_;  // id -> (offset, length) in terms_
};

// ---- Quantized blocks ------------------------------------------------------------------------

// A quantized block is the encoding of a few elements' values (kQuantize, kRequantize). Its bytes
// carry ids of their own, kEncoded | (the block's first id + the byte's position), so a step
// that decodes (kDequantize, kRequantize) can tell whether the bytes it reads are exactly one
// whole block, in order (not a block cut short, shifted, stitched from two, or stale) and which
// values it encodes. Element values are below kEncoded; reducing an encoded byte is an error.
constexpr uint32_t kEncoded = 0x80000000u;
bool isEncoded(uint32_t v) { return (v & kEncoded) != 0; }

struct Block {
  uint32_t first = 0;  // id of byte 0, kEncoded included
  uint64_t size = 0;   // bytes
  std::vector<uint32_t> values;  // per element
};

class BlockTable {
 public:
  // The first id of a new block of `size` bytes, or nullopt when the ids run out.
  std::optional<uint32_t> add(uint64_t size, std::vector<uint32_t> values) {
    if (size >= kEncoded - next_) return std::nullopt;
    blocks_.push_back(Block{kEncoded | next_, size, std::move(values)});
    next_ += static_cast<uint32_t>(size);
    return blocks_.back().first;
  }
  // The block holding encoded id `v`.
  const Block& of(uint32_t v) const {
    auto it = std::upper_bound(blocks_.begin(), blocks_.end(), v,
                               [](uint32_t x, const Block& b) { return x < b.first; });
    return *std::prev(it);
  }

 private:
  std::vector<Block> blocks_;  // in id order
  uint32_t next_ = 0;
};

std::string formatTerms(std::span<const uint64_t> ts) {
  if (ts.empty()) return "{}";
  constexpr size_t kShown = 6;
  std::string s = "{";
  for (size_t i = 0; i < ts.size() && i < kShown; ++i) s += (i ? ", " : "") + termName(ts[i]);
  if (ts.size() > kShown) s += ", ... (" + std::to_string(ts.size()) + " contributions)";
  return s + "}";
}

// ---- Memory layout ----------------------------------------------------------------------------

// Memory of one rank. Containers are the allocations; with in-place aliasing one logical buffer
// has no container of its own and lives inside the other.
constexpr int kInMem = 0, kOutMem = 1, kScratchMem = 2, kWinMem = 3, kNumMem = 4;
const char* const kMemName[kNumMem] = {"input", "output", "scratch", "window"};

struct Layout {
  uint64_t unit = 1;                            // bytes per cell (an element, or one byte)
  uint64_t cellsPerElement = 1;                 // elemSize in byte mode (see Checker)
  uint64_t logical[kNumMem] = {0, 0, 0, 0};     // elements of input, output, scratch, window
  int64_t inputInOutput = -1;                   // element offsets, as the call implies
  int64_t outputInInput = -1;
  uint64_t memSize[kNumMem] = {0, 0, 0, 0};     // elements of each container

  // The container and element index of logical buffer `buf`'s element `e`.
  std::pair<int, uint64_t> locate(BufId buf, uint64_t e) const {
    if (buf == kInput && inputInOutput >= 0)
      return {kOutMem, e + static_cast<uint64_t>(inputInOutput)};
    if (buf == kOutput && outputInInput >= 0)
      return {kInMem, e + static_cast<uint64_t>(outputInInput)};
    if (buf == kWindow) return {kWinMem, e};
    return {buf == kInput ? kInMem : buf == kOutput ? kOutMem : kScratchMem, e};
  }
  bool inPlace() const { return inputInOutput >= 0 || outputInInput >= 0; }
};

uint64_t entry(const std::vector<uint64_t>& v, int p) { return v[static_cast<size_t>(p)]; }

uint64_t extent(const std::vector<uint64_t>& counts, const std::vector<uint64_t>& displs) {
  uint64_t e = 0;
  for (size_t p = 0; p < counts.size(); ++p)
    if (counts[p]) e = std::max(e, displs[p] + counts[p]);
  return e;
}

bool isRecv(StepKind k) { return k == StepKind::kRecv || k == StepKind::kRecvReduce; }
// Steps that post a message (to the peer's entry queue) and steps that take one.
bool isExit(StepKind k) { return k == StepKind::kSend || k == StepKind::kNotify; }
bool isEntry(StepKind k) { return isRecv(k) || k == StepKind::kWait; }
bool hasPeer(StepKind k) {
  return k != StepKind::kCopy && k != StepKind::kReduce && k != StepKind::kSignal &&
         !isQuantStep(k);
}
// Steps that read a local `a`, a local `b`, and write `dst`.
bool readsLocalA(StepKind k) {
  return k == StepKind::kSend || k == StepKind::kRecvReduce || k == StepKind::kCopy ||
         k == StepKind::kReduce || isQuantStep(k);
}
bool readsLocalB(StepKind k) { return k == StepKind::kReduce || k == StepKind::kGetReduce; }
bool writesDst(StepKind k) {
  return k != StepKind::kSend && k != StepKind::kNotify && k != StepKind::kWait &&
         k != StepKind::kSignal && k != StepKind::kAwait;
}
// A step whose peer need not be in Schedule::peers (the message peers): window steps.
bool windowStep(const Step& s) {
  return s.kind == StepKind::kAwait || (isOneSided(s.kind) && s.a.buf == kWindow);
}

std::string bufName(BufId b) {
  if (b == kInput) return "input";
  if (b == kOutput) return "output";
  if (b == kScratch) return "scratch";
  if (b == kWindow) return "window";
  return "user" + std::to_string(b - kFirstUserBuf);
}

std::string rangeName(const Range& r) {
  return bufName(r.buf) + "[" + std::to_string(r.offset) + ", " +
         std::to_string(r.offset + r.bytes) + ")";
}

std::string describe(const Step& s) {
  std::string d = stepKindName(s.kind);
  switch (s.kind) {
    case StepKind::kSend: return d + " to " + std::to_string(s.peer) + " " + rangeName(s.a);
    case StepKind::kRecv: return d + " from " + std::to_string(s.peer) + " -> " + rangeName(s.dst);
    case StepKind::kRecvReduce:
      return d + " from " + std::to_string(s.peer) + " " + rangeName(s.a) + " -> " +
             rangeName(s.dst);
    case StepKind::kCopy: return d + " " + rangeName(s.a) + " -> " + rangeName(s.dst);
    case StepKind::kReduce:
      return d + " " + rangeName(s.a) + " + " + rangeName(s.b) + " -> " + rangeName(s.dst);
    case StepKind::kGet:
      return d + " from " + std::to_string(s.peer) + " " + rangeName(s.a) + " -> " +
             rangeName(s.dst);
    case StepKind::kGetReduce:
      return d + " from " + std::to_string(s.peer) + " " + rangeName(s.a) + " + " +
             rangeName(s.b) + " -> " + rangeName(s.dst);
    case StepKind::kNotify: return d + " " + std::to_string(s.peer);
    case StepKind::kWait: return d + " for " + std::to_string(s.peer);
    case StepKind::kSignal: return d;
    case StepKind::kAwait:
      return d + " " + std::to_string(s.peer) + "'s signal " + std::to_string(s.target);
    case StepKind::kQuantize:
    case StepKind::kDequantize:
    case StepKind::kRequantize:
      return d + " " + rangeName(s.a) + " -> " + rangeName(s.dst) + ", " +
             std::to_string(s.quant.count) + " elements" +
             (s.kind == StepKind::kQuantize ? "" : " x " + std::to_string(s.quant.sources));
  }
  return d;
}

std::string at(int rank, uint32_t step, const Step& s) {
  return "rank " + std::to_string(rank) + " step " + std::to_string(step) + " (" + describe(s) +
         ")";
}

// ---- Ordering proofs (program-order run) ------------------------------------------------------

// Per rank: the last writer and readers since of every element, to prove that each conflicting
// pair of steps is ordered by deps.
struct Hazards {
  std::vector<int32_t> lastWriter[kNumMem];
  std::vector<std::vector<uint32_t>> readers[kNumMem];
  std::vector<int64_t> lastSendTo, lastRecvFrom;
  std::vector<uint32_t> proven;  // steps already shown to precede `current`
  uint32_t current = 0;
  std::vector<uint32_t> stamp;
  uint32_t stampGen = 0;
  std::vector<uint32_t> stack;
};

struct Message {
  std::vector<uint32_t> values;
  uint32_t step = 0;
  std::vector<uint64_t> known;  // barrier: ranks the sender had heard from
};

using Memory = std::array<std::vector<uint32_t>, kNumMem>;

class Checker {
 public:
  Checker(Coll coll, int n, std::span<const CollDesc> descs, std::span<const Schedule> scheds,
          const CheckOptions& opts)
      : coll_(coll), n_(n), descs_(descs), scheds_(scheds), opts_(opts) {}

  Status run() {
    CHORUS_RETURN_IF_ERROR(validateArgs());
    for (const Schedule& sc : scheds_)
      for (const Step& st : sc.steps) byteMode_ = byteMode_ || isQuantStep(st.kind);
    for (int r = 0; r < n_; ++r) layouts_.push_back(layoutOf(r));
    CHORUS_RETURN_IF_ERROR(validateSchedules());
    if (opts_.proveOrder) CHORUS_RETURN_IF_ERROR(proveOneSided());
    initialMemory();
    CHORUS_RETURN_IF_ERROR(runProgramOrder());
    CHORUS_RETURN_IF_ERROR(checkOutputs(""));
    if (opts_.concurrent) {
      const std::string mode =
          "concurrent execution (seed " + std::to_string(opts_.seed) + "): ";
      Status s = runConcurrent();
      if (!s.ok()) return Status(s.code(), mode + s.message());
      CHORUS_RETURN_IF_ERROR(checkOutputs(mode));
    }
    return Status();
  }

 private:
  // ---- arguments and layout ----

  Status validateArgs() {
    if (n_ < 1) return invalidArgument("nranks must be at least 1");
    if (descs_.size() != static_cast<size_t>(n_))
      return invalidArgument("expected " + std::to_string(n_) + " rank descriptions, got " +
                             std::to_string(descs_.size()));
    if (scheds_.size() != static_cast<size_t>(n_))
      return invalidArgument("expected " + std::to_string(n_) + " schedules, got " +
                             std::to_string(scheds_.size()));
    const CollDesc& d0 = descs_[0];
    for (int r = 0; r < n_; ++r) {
      const CollDesc& d = descs_[r];
      const std::string who = "rank " + std::to_string(r) + ": ";
      if (d.coll != coll_) return invalidArgument(who + "description is not " + collName(coll_));
      if (d.elemSize == 0) return invalidArgument(who + "elemSize 0");
      if (d.count != d0.count || d.elemSize != d0.elemSize || d.root != d0.root ||
          d.inPlace != d0.inPlace)
        return invalidArgument(who + "count, elemSize, root or inPlace differ from rank 0");
      if (d.root < 0 || d.root >= n_) return invalidArgument(who + "root out of range");
      if (d.quant.has_value() != d0.quant.has_value())
        return invalidArgument(who + "quantization config present on one rank only");
      if (d.quant) {
        const kernels::QuantConfig &q = *d.quant, &q0 = *d0.quant;
        if (!kernels::quant::usable(q))
          return invalidArgument(who + "quantization config the kernels cannot run");
        if (q.bits != q0.bits || q.groupSize != q0.groupSize || q.asymmetric != q0.asymmetric ||
            q.stochastic != q0.stochastic || q.seed != q0.seed)
          return invalidArgument(who + "quantization config differs from rank 0");
      }
      if (coll_ == Coll::kAllToAllv) {
        const size_t want = static_cast<size_t>(n_);
        if (d.sendCounts.size() != want || d.sendDispls.size() != want ||
            d.recvCounts.size() != want || d.recvDispls.size() != want)
          return invalidArgument(who + "all-to-allv counts and displacements need nranks entries");
      }
    }
    if (coll_ == Coll::kAllToAllv) {
      for (int r = 0; r < n_; ++r)
        for (int p = 0; p < n_; ++p) {
          const uint64_t got = entry(descs_[r].recvCounts, p);
          const uint64_t sent = d0.inPlace ? entry(descs_[p].recvCounts, r)
                                           : entry(descs_[p].sendCounts, r);
          if (got != sent)
            return invalidArgument("all-to-allv views disagree: rank " + std::to_string(r) +
                                   " expects " + std::to_string(got) + " elements from rank " +
                                   std::to_string(p) + ", which sends " + std::to_string(sent));
        }
    }
    return Status();
  }

  Layout layoutOf(int r) const {
    const CollDesc& d = descs_[r];
    const uint64_t n = static_cast<uint64_t>(n_), c = d.count;
    const bool root = r == d.root;
    Layout L;
    // Cells: elements, or bytes in byte mode, where quantized blocks have sizes of their own.
    L.unit = coll_ == Coll::kBarrier || byteMode_ ? 1 : d.elemSize;
    L.cellsPerElement = coll_ == Coll::kBarrier || !byteMode_ ? 1 : d.elemSize;
    uint64_t in = 0, out = 0;
    switch (coll_) {
      case Coll::kAllReduce: in = out = c; break;
      case Coll::kBroadcast: in = root ? c : 0, out = c; break;
      case Coll::kReduce: in = c, out = root ? c : 0; break;
      case Coll::kAllGather: in = c, out = n * c; break;
      case Coll::kReduceScatter: in = n * c, out = c; break;
      case Coll::kAllToAll: in = out = n * c; break;
      case Coll::kAllToAllv:
        out = extent(d.recvCounts, d.recvDispls);
        in = d.inPlace ? out : extent(d.sendCounts, d.sendDispls);
        break;
      case Coll::kGather: in = c, out = root ? n * c : 0; break;
      case Coll::kScatter: in = root ? n * c : 0, out = c; break;
      case Coll::kBarrier:
      case Coll::kSendRecv: break;
    }
    if (d.inPlace) {
      const int64_t mine = static_cast<int64_t>(static_cast<uint64_t>(r) * c);
      switch (coll_) {
        case Coll::kAllReduce:
        case Coll::kBroadcast:
        case Coll::kReduce:
        case Coll::kAllToAll:
        case Coll::kAllToAllv: L.outputInInput = 0; break;
        case Coll::kAllGather: L.inputInOutput = mine; break;
        case Coll::kReduceScatter: L.outputInInput = mine; break;
        case Coll::kGather:
          if (root) L.inputInOutput = mine;
          break;
        case Coll::kScatter:
          if (root) L.outputInInput = mine;
          break;
        case Coll::kBarrier:
        case Coll::kSendRecv: break;
      }
    }
    const uint64_t cpe = L.cellsPerElement;
    in *= cpe;
    out *= cpe;
    if (L.inputInOutput >= 0) L.inputInOutput *= static_cast<int64_t>(cpe);
    if (L.outputInInput >= 0) L.outputInInput *= static_cast<int64_t>(cpe);
    L.logical[kInMem] = in;
    L.logical[kOutMem] = out;
    L.logical[kScratchMem] = scheds_[r].scratchBytes / L.unit;
    L.logical[kWinMem] = d.window.bytes() / L.unit;
    L.memSize[kWinMem] = L.logical[kWinMem];
    L.memSize[kInMem] = L.inputInOutput >= 0 ? 0 : in;
    L.memSize[kOutMem] = L.outputInInput >= 0 ? 0 : out;
    if (L.inputInOutput >= 0)
      L.memSize[kOutMem] = std::max(out, static_cast<uint64_t>(L.inputInOutput) + in);
    if (L.outputInInput >= 0)
      L.memSize[kInMem] = std::max(in, static_cast<uint64_t>(L.outputInInput) + out);
    L.memSize[kScratchMem] = L.logical[kScratchMem];
    return L;
  }

  // ---- check 1: static shape of every schedule ----

  // `rg` is a range of rank `owner`'s buffers: r's own, or the peer's for a get's `a`.
  Status checkRange(int r, uint32_t i, const Step& st, const Range& rg, const char* what,
                    int owner) const {
    const Layout& L = layouts_[owner];
    uint64_t size = 0;
    if (rg.buf == kInput) {
      size = L.logical[kInMem] * L.unit;
    } else if (rg.buf == kOutput) {
      size = L.logical[kOutMem] * L.unit;
    } else if (rg.buf == kScratch) {
      size = scheds_[owner].scratchBytes;
    } else if (rg.buf == kWindow) {
      size = descs_[owner].window.bytes();
      if (size == 0)
        return internalError(at(r, i, st) + ": " + what + " names the host window, which this "
                             "call's description does not have (CollDesc::window)");
    } else {
      return internalError(at(r, i, st) + ": " + what + " names " + bufName(rg.buf) +
                           ", which a " + collName(coll_) + " does not have");
    }
    if (rg.bytes == 0)
      return internalError(at(r, i, st) + ": " + what + " is empty (builders drop empty steps)");
    if (rg.offset > size || rg.bytes > size - rg.offset)
      return internalError(at(r, i, st) + ": " + what + " is out of bounds of " +
                           bufName(rg.buf) + " (" + std::to_string(size) + " bytes on " +
                           (owner == r ? "this rank" : "rank " + std::to_string(owner)) + ")");
    if (rg.offset % L.unit || rg.bytes % L.unit)
      return internalError(at(r, i, st) + ": " + what + " is not aligned to the " +
                           std::to_string(L.unit) + "-byte element");
    return Status();
  }

  // Canonical element interval of a range: (container, first, count).
  struct Span {
    int mem;
    uint64_t first, count;
  };
  Span spanOf(int r, const Range& rg) const {
    const Layout& L = layouts_[r];
    auto [mem, first] = L.locate(rg.buf, rg.offset / L.unit);
    return Span{mem, first, rg.bytes / L.unit};
  }

  Status checkRange(int r, uint32_t i, const Step& st, const Range& rg, const char* what) const {
    return checkRange(r, i, st, rg, what, r);
  }

  Status checkOverlap(int r, uint32_t i, const Step& st, const Range& x, const Range& dst,
                      const char* what) const {
    const Span a = spanOf(r, x), b = spanOf(r, dst);
    if (a.mem != b.mem || (a.first == b.first && a.count == b.count)) return Status();
    if (a.first < b.first + b.count && b.first < a.first + a.count)
      return internalError(at(r, i, st) + ": " + what +
                           " partially overlaps the destination (must be identical or disjoint)");
    return Status();
  }

  Status checkElementAligned(int r, uint32_t i, const Step& st, const Range& rg) const {
    const uint64_t e = descs_[r].elemSize;
    if (rg.offset % e || rg.bytes % e)
      return internalError(at(r, i, st) + ": " + rangeName(rg) + " is not aligned to the " +
                           std::to_string(e) + "-byte element");
    return Status();
  }

  // Bytes of `count` elements quantized with the call's config.
  uint64_t blockBytes(int r, uint64_t count) const {
    return kernels::quant::packedBytes(*descs_[r].quant, count);
  }

  // A quantization step's shape: the call is quantized; a and dst in bounds, of the sizes its
  // count and sources imply under the call's config, elements element-aligned, and disjoint
  // (the kernels read all of a while writing dst).
  Status checkQuantStep(int r, uint32_t i, const Step& st) const {
    if (!descs_[r].quant)
      return internalError(at(r, i, st) + ": a quantization step in a call whose description " +
                           "has no quantization config (CollDesc::quant)");
    CHORUS_RETURN_IF_ERROR(checkRange(r, i, st, st.a, "a"));
    CHORUS_RETURN_IF_ERROR(checkRange(r, i, st, st.dst, "dst"));
    const uint64_t count = st.quant.count, sources = st.quant.sources;
    if (count == 0 || sources == 0 || (st.kind == StepKind::kQuantize && sources != 1))
      return internalError(at(r, i, st) + ": " + std::to_string(count) + " elements from " +
                           std::to_string(sources) + " blocks");
    const uint64_t block = blockBytes(r, count), elements = count * descs_[r].elemSize;
    const uint64_t in = st.kind == StepKind::kQuantize ? elements : sources * block;
    const uint64_t out = st.kind == StepKind::kDequantize ? elements : block;
    if (st.a.bytes != in || st.dst.bytes != out)
      return internalError(at(r, i, st) + ": a is " + std::to_string(st.a.bytes) +
                           " bytes and dst " + std::to_string(st.dst.bytes) + "; the call's " +
                           "quantization config needs " + std::to_string(in) + " and " +
                           std::to_string(out));
    if (st.kind != StepKind::kRequantize)
      CHORUS_RETURN_IF_ERROR(
          checkElementAligned(r, i, st, st.kind == StepKind::kQuantize ? st.a : st.dst));
    const Span a = spanOf(r, st.a), d = spanOf(r, st.dst);
    if (a.mem == d.mem && a.first < d.first + d.count && d.first < a.first + a.count)
      return internalError(at(r, i, st) + ": a and dst overlap");
    return Status();
  }

  Status validateSchedules() const {
    for (int r = 0; r < n_; ++r) {
      const Schedule& s = scheds_[r];
      const Layout& L = layouts_[r];
      const std::string who = "rank " + std::to_string(r) + ": ";
      const int64_t wantIo = L.inputInOutput < 0 ? -1 : L.inputInOutput * int64_t(L.unit);
      const int64_t wantOi = L.outputInInput < 0 ? -1 : L.outputInInput * int64_t(L.unit);
      if (s.inputInOutput != wantIo || s.outputInInput != wantOi)
        return internalError(who + "schedule declares inputInOutput=" +
                             std::to_string(s.inputInOutput) + " outputInInput=" +
                             std::to_string(s.outputInInput) + " but the " +
                             (descs_[r].inPlace ? "in-place" : "out-of-place") + " call implies " +
                             std::to_string(wantIo) + " and " + std::to_string(wantOi));
      for (size_t k = 0; k < s.peers.size(); ++k) {
        const int p = s.peers[k];
        if (p < 0 || p >= n_ || p == r)
          return internalError(who + "peer list names invalid peer " + std::to_string(p));
        if (std::find(s.peers.begin(), s.peers.begin() + k, p) != s.peers.begin() + k)
          return internalError(who + "peer list names " + std::to_string(p) + " twice");
        const auto& back = scheds_[p].peers;
        if (std::find(back.begin(), back.end(), r) == back.end())
          return internalError(who + "lists peer " + std::to_string(p) +
                               " but rank " + std::to_string(p) +
                               " does not list it back (consistency headers would not match)");
      }
      bool signalled = false;
      for (uint32_t i = 0; i < s.steps.size(); ++i) {
        const Step& st = s.steps[i];
        if (static_cast<uint8_t>(st.kind) > static_cast<uint8_t>(StepKind::kRequantize))
          return internalError(who + "step " + std::to_string(i) + " has an unknown kind");
        for (uint32_t d : st.deps)
          if (d >= i)
            return internalError(at(r, i, st) + ": depends on step " + std::to_string(d) +
                                 ", which is not earlier");
        if (hasPeer(st.kind)) {
          if (st.peer < 0 || st.peer >= n_ || st.peer == r)
            return internalError(at(r, i, st) + ": invalid peer " + std::to_string(st.peer));
          if (!windowStep(st) &&
              std::find(s.peers.begin(), s.peers.end(), st.peer) == s.peers.end())
            return internalError(at(r, i, st) + ": peer missing from Schedule::peers");
        }
        switch (st.kind) {
          case StepKind::kSend: CHORUS_RETURN_IF_ERROR(checkRange(r, i, st, st.a, "a")); break;
          case StepKind::kRecv: CHORUS_RETURN_IF_ERROR(checkRange(r, i, st, st.dst, "dst")); break;
          case StepKind::kRecvReduce:
          case StepKind::kCopy:
            CHORUS_RETURN_IF_ERROR(checkRange(r, i, st, st.a, "a"));
            CHORUS_RETURN_IF_ERROR(checkRange(r, i, st, st.dst, "dst"));
            if (st.a.bytes != st.dst.bytes)
              return internalError(at(r, i, st) + ": a and dst differ in size");
            CHORUS_RETURN_IF_ERROR(checkOverlap(r, i, st, st.a, st.dst, "a"));
            break;
          case StepKind::kReduce:
            CHORUS_RETURN_IF_ERROR(checkRange(r, i, st, st.a, "a"));
            CHORUS_RETURN_IF_ERROR(checkRange(r, i, st, st.b, "b"));
            CHORUS_RETURN_IF_ERROR(checkRange(r, i, st, st.dst, "dst"));
            if (st.a.bytes != st.dst.bytes || st.b.bytes != st.dst.bytes)
              return internalError(at(r, i, st) + ": a, b and dst differ in size");
            CHORUS_RETURN_IF_ERROR(checkOverlap(r, i, st, st.a, st.dst, "a"));
            CHORUS_RETURN_IF_ERROR(checkOverlap(r, i, st, st.b, st.dst, "b"));
            break;
          case StepKind::kGet:
            CHORUS_RETURN_IF_ERROR(checkRange(r, i, st, st.a, "a (the peer's range)", st.peer));
            CHORUS_RETURN_IF_ERROR(checkRange(r, i, st, st.dst, "dst"));
            if (st.a.bytes != st.dst.bytes)
              return internalError(at(r, i, st) + ": a and dst differ in size");
            break;
          case StepKind::kGetReduce:
            CHORUS_RETURN_IF_ERROR(checkRange(r, i, st, st.a, "a (the peer's range)", st.peer));
            CHORUS_RETURN_IF_ERROR(checkRange(r, i, st, st.b, "b"));
            CHORUS_RETURN_IF_ERROR(checkRange(r, i, st, st.dst, "dst"));
            if (st.a.bytes != st.dst.bytes || st.b.bytes != st.dst.bytes)
              return internalError(at(r, i, st) + ": a, b and dst differ in size");
            CHORUS_RETURN_IF_ERROR(checkOverlap(r, i, st, st.b, st.dst, "b"));
            break;
          case StepKind::kQuantize:
          case StepKind::kDequantize:
          case StepKind::kRequantize: CHORUS_RETURN_IF_ERROR(checkQuantStep(r, i, st)); break;
          case StepKind::kNotify:
          case StepKind::kWait: break;
          case StepKind::kSignal: signalled = true; break;
          case StepKind::kAwait:
            if (st.target == 0)
              return internalError(at(r, i, st) + ": awaits signal 0 (targets count from 1)");
            if (!signalled)
              return internalError(at(r, i, st) + ": awaits before this rank's first signal, "
                                   "which publishes its header");
            break;
        }
        if (writesDst(st.kind) && !L.inPlace() && st.dst.buf == kInput)
          return internalError(at(r, i, st) + ": writes the input of an out-of-place call");
        // In byte mode ranges need not be element-aligned (quantized blocks are not), but
        // whatever is reduced as elements must be.
        if (byteMode_ && (st.kind == StepKind::kReduce || st.kind == StepKind::kRecvReduce ||
                          st.kind == StepKind::kGetReduce)) {
          for (const Range* rg : {&st.b, &st.dst}) {
            if (rg == &st.b && st.kind == StepKind::kRecvReduce) continue;
            CHORUS_RETURN_IF_ERROR(checkElementAligned(r, i, st, *rg));
          }
          if (st.kind != StepKind::kGetReduce)
            CHORUS_RETURN_IF_ERROR(checkElementAligned(r, i, st, st.a));
        }
      }
    }
    return Status();
  }

  // ---- memory ----

  void initialMemory() {
    initial_.resize(static_cast<size_t>(n_));
    for (int r = 0; r < n_; ++r) {
      const Layout& L = layouts_[r];
      for (int m = 0; m < kNumMem; ++m) initial_[r][m].assign(L.memSize[m], kPoison);
      // One value per element, in each of its cells.
      for (uint64_t e = 0; e < L.logical[kInMem]; e += L.cellsPerElement) {
        const uint32_t v = pool_.single(term(r, e / L.cellsPerElement));
        for (uint64_t k = 0; k < L.cellsPerElement; ++k) {
          auto [mem, idx] = L.locate(kInput, e + k);
          initial_[r][mem][idx] = v;
        }
      }
    }
  }

  // ---- executing one step ----

  // The contributions output element e of rank r must hold; false where the collective leaves
  // the element undefined (it must then keep its initial value).
  bool expected(int r, uint64_t e, std::vector<uint64_t>& out) const {
    const CollDesc& d = descs_[r];
    const uint64_t c = d.count;
    out.clear();
    auto everyone = [&](uint64_t idx) {
      for (int q = 0; q < n_; ++q) out.push_back(term(q, idx));
    };
    switch (coll_) {
      case Coll::kAllReduce:
      case Coll::kReduce: everyone(e); return true;
      case Coll::kReduceScatter: everyone(static_cast<uint64_t>(r) * c + e); return true;
      case Coll::kAllGather:
      case Coll::kGather: out.push_back(term(static_cast<int>(e / c), e % c)); return true;
      case Coll::kBroadcast: out.push_back(term(d.root, e)); return true;
      case Coll::kScatter:
        out.push_back(term(d.root, static_cast<uint64_t>(r) * c + e));
        return true;
      case Coll::kAllToAll:
        out.push_back(term(static_cast<int>(e / c), static_cast<uint64_t>(r) * c + e % c));
        return true;
      case Coll::kAllToAllv:
        for (int p = 0; p < n_; ++p) {
          const uint64_t lo = entry(d.recvDispls, p), cnt = entry(d.recvCounts, p);
          if (e < lo || e >= lo + cnt) continue;
          const CollDesc& src = descs_[p];
          const uint64_t from = d.inPlace ? entry(src.recvDispls, r) : entry(src.sendDispls, r);
          out.push_back(term(p, from + (e - lo)));
          return true;
        }
        return false;
      case Coll::kBarrier:
      case Coll::kSendRecv: return false;
    }
    return false;
  }

  std::string elementName(int r, int mem, uint64_t idx) const {
    const Layout& L = layouts_[r];
    std::string s = std::string(kMemName[mem]) + " element " + std::to_string(idx);
    if (mem == kOutMem && L.inputInOutput >= 0) s += " (in-place output buffer)";
    if (mem == kInMem && L.outputInInput >= 0) s += " (in-place input buffer)";
    return s;
  }

  // Proves that step j precedes step i of rank r through deps.
  bool precedes(int r, uint32_t j, uint32_t i, Hazards& hz) const {
    if (hz.current != i) {
      hz.current = i;
      hz.proven.clear();
    }
    if (std::find(hz.proven.begin(), hz.proven.end(), j) != hz.proven.end()) return true;
    const auto& steps = scheds_[r].steps;
    bool found = false;
    if (++hz.stampGen == 0) {
      std::fill(hz.stamp.begin(), hz.stamp.end(), 0);
      hz.stampGen = 1;
    }
    hz.stack.assign(steps[i].deps.begin(), steps[i].deps.end());
    while (!hz.stack.empty() && !found) {
      const uint32_t k = hz.stack.back();
      hz.stack.pop_back();
      if (k == j) found = true;
      if (k <= j || hz.stamp[k] == hz.stampGen) continue;  // deps only point backwards
      hz.stamp[k] = hz.stampGen;
      hz.stack.insert(hz.stack.end(), steps[k].deps.begin(), steps[k].deps.end());
    }
    if (found) hz.proven.push_back(j);
    return found;
  }

  Status unordered(int r, uint32_t j, uint32_t i, const std::string& what) const {
    const auto& steps = scheds_[r].steps;
    return internalError(at(r, i, steps[i]) + " " + what + " " + at(r, j, steps[j]) +
                         ", but does not depend on it, directly or through other deps: a " +
                         "concurrent executor may run them in either order");
  }

  Status noteRead(int r, uint32_t i, int mem, uint64_t idx, Hazards& hz) const {
    const int32_t w = hz.lastWriter[mem][idx];
    if (w >= 0 && static_cast<uint32_t>(w) != i && !precedes(r, static_cast<uint32_t>(w), i, hz))
      return unordered(r, static_cast<uint32_t>(w), i,
                       "reads " + elementName(r, mem, idx) + ", written by");
    auto& rd = hz.readers[mem][idx];
    if (rd.empty() || rd.back() != i) rd.push_back(i);
    return Status();
  }

  Status noteWrite(int r, uint32_t i, int mem, uint64_t idx, Hazards& hz) const {
    const int32_t w = hz.lastWriter[mem][idx];
    if (w >= 0 && static_cast<uint32_t>(w) != i && !precedes(r, static_cast<uint32_t>(w), i, hz))
      return unordered(r, static_cast<uint32_t>(w), i,
                       "overwrites " + elementName(r, mem, idx) + ", written by");
    for (uint32_t j : hz.readers[mem][idx])
      if (j != i && !precedes(r, j, i, hz))
        return unordered(r, j, i, "overwrites " + elementName(r, mem, idx) + ", read by");
    hz.readers[mem][idx].clear();
    hz.lastWriter[mem][idx] = static_cast<int32_t>(i);
    return Status();
  }

  // Runs step i of rank r. Recv kinds consume `in`; a send fills `out`. With `hz`, also proves
  // that every conflicting earlier access is ordered before this step.
  Status exec(int r, uint32_t i, Memory& mem, const Message* in, Message* out, Hazards* hz) {
    const Step& st = scheds_[r].steps[i];
    if (in) {
      const Step& snd = scheds_[st.peer].steps[in->step];
      const bool wait = st.kind == StepKind::kWait;
      if (snd.kind != (wait ? StepKind::kNotify : StepKind::kSend))
        return internalError(at(r, i, st) + " is matched with " + at(st.peer, in->step, snd) +
                             (wait ? ": a wait takes only a notify"
                                   : ": a receive takes only a send") +
                             " (one queue per ordered pair of ranks)");
      if (in->values.size() != st.dst.bytes / layouts_[r].unit)
        return internalError(at(r, i, st) + " is matched with " + at(st.peer, in->step, snd) +
                             ": " + std::to_string(st.dst.bytes) + " bytes expected, " +
                             std::to_string(snd.a.bytes) + " sent");
    }
    const bool readsA = readsLocalA(st.kind), readsB = readsLocalB(st.kind);
    const bool writes = writesDst(st.kind);
    const Span a = readsA ? spanOf(r, st.a) : Span{}, b = readsB ? spanOf(r, st.b) : Span{};
    const Span d = writes ? spanOf(r, st.dst) : Span{};
    // A get reads the peer's memory as it is now: the race proof has shown that "now" is
    // well defined (every write of those elements is ordered with the get).
    const Span remote = isOneSided(st.kind) ? spanOf(st.peer, st.a) : Span{};
    if (hz) {
      for (uint64_t k = 0; readsA && k < a.count; ++k)
        CHORUS_RETURN_IF_ERROR(noteRead(r, i, a.mem, a.first + k, *hz));
      for (uint64_t k = 0; readsB && k < b.count; ++k)
        CHORUS_RETURN_IF_ERROR(noteRead(r, i, b.mem, b.first + k, *hz));
      for (uint64_t k = 0; writes && k < d.count; ++k)
        CHORUS_RETURN_IF_ERROR(noteWrite(r, i, d.mem, d.first + k, *hz));
    }
    auto fold = [&](uint32_t x, uint32_t y, uint64_t k, const char* yName,
                    const char* xName = "a") -> StatusOr<uint32_t> {
      if (x == kPoison || y == kPoison)
        return internalError(at(r, i, st) + ": element " + std::to_string(k) + " of the range " +
                             "reduces a value that was never written (" +
                             (x == kPoison ? xName : yName) + ")");
      if (isEncoded(x) || isEncoded(y))
        return internalError(at(r, i, st) + ": element " + std::to_string(k) + " of the range " +
                             "reduces bytes of a quantized block as elements (" +
                             (isEncoded(x) ? xName : yName) + "; decode them first)");
      uint64_t dup = 0;
      const uint32_t v = pool_.merge(x, y, &dup);
      if (v == kPoison)
        return internalError(at(r, i, st) + ": element " + std::to_string(k) + " of the range " +
                             "counts contribution " + termName(dup) + " twice");
      return v;
    };
    switch (st.kind) {
      case StepKind::kSend:
        out->values.assign(mem[a.mem].begin() + static_cast<int64_t>(a.first),
                           mem[a.mem].begin() + static_cast<int64_t>(a.first + a.count));
        out->step = i;
        break;
      case StepKind::kRecv:
        std::copy(in->values.begin(), in->values.end(),
                  mem[d.mem].begin() + static_cast<int64_t>(d.first));
        break;
      case StepKind::kRecvReduce:
        for (uint64_t k = 0; k < d.count; ++k) {
          CHORUS_ASSIGN_OR_RETURN(uint32_t v, fold(mem[a.mem][a.first + k], in->values[k], k,
                                                   "the received message"));
          mem[d.mem][d.first + k] = v;
        }
        break;
      case StepKind::kCopy:
        tmp_.assign(mem[a.mem].begin() + static_cast<int64_t>(a.first),
                    mem[a.mem].begin() + static_cast<int64_t>(a.first + a.count));
        std::copy(tmp_.begin(), tmp_.end(), mem[d.mem].begin() + static_cast<int64_t>(d.first));
        break;
      case StepKind::kReduce:
        for (uint64_t k = 0; k < d.count; ++k) {
          CHORUS_ASSIGN_OR_RETURN(uint32_t v,
                                  fold(mem[a.mem][a.first + k], mem[b.mem][b.first + k], k, "b"));
          mem[d.mem][d.first + k] = v;
        }
        break;
      case StepKind::kGet: {
        const auto& src = memory_[st.peer][remote.mem];
        std::copy(src.begin() + static_cast<int64_t>(remote.first),
                  src.begin() + static_cast<int64_t>(remote.first + remote.count),
                  mem[d.mem].begin() + static_cast<int64_t>(d.first));
        break;
      }
      case StepKind::kGetReduce: {
        const auto& src = memory_[st.peer][remote.mem];
        for (uint64_t k = 0; k < d.count; ++k) {
          CHORUS_ASSIGN_OR_RETURN(uint32_t v, fold(mem[b.mem][b.first + k],
                                                   src[remote.first + k], k, "the peer's a", "b"));
          mem[d.mem][d.first + k] = v;
        }
        break;
      }
      case StepKind::kNotify:
      case StepKind::kSignal:
        if (out) {
          out->values.clear();
          out->step = i;
        }
        break;
      case StepKind::kWait:
      case StepKind::kAwait: break;
      case StepKind::kQuantize: {
        CHORUS_ASSIGN_OR_RETURN(std::vector<uint32_t> values, readElements(r, i, mem, a));
        CHORUS_RETURN_IF_ERROR(writeBlock(r, i, mem, d, std::move(values)));
        break;
      }
      case StepKind::kDequantize:
      case StepKind::kRequantize: {
        CHORUS_ASSIGN_OR_RETURN(std::vector<uint32_t> sum, sumBlocks(r, i, mem, a));
        if (st.kind == StepKind::kRequantize) {
          CHORUS_RETURN_IF_ERROR(writeBlock(r, i, mem, d, std::move(sum)));
        } else {
          const uint64_t cpe = layouts_[r].cellsPerElement;
          for (uint64_t j = 0; j < sum.size(); ++j)
            std::fill_n(mem[d.mem].begin() + static_cast<int64_t>(d.first + j * cpe), cpe, sum[j]);
        }
        break;
      }
    }
    return Status();
  }

  // What a cell holds, for messages.
  std::string valueName(uint32_t v) const {
    if (v == kPoison) return "nothing written";
    if (isEncoded(v)) {
      const Block& b = blocks_.of(v);
      return "byte " + std::to_string(v - b.first) + " of a quantized block of " +
             std::to_string(b.values.size()) + " elements (" + std::to_string(b.size) + " bytes)";
    }
    return formatTerms(pool_.terms(v));
  }

  // The values of the quant.count elements at a (quantize's input): each written, not encoded,
  // and the same in all of its cells.
  StatusOr<std::vector<uint32_t>> readElements(int r, uint32_t i, const Memory& mem,
                                               const Span& a) const {
    const Step& st = scheds_[r].steps[i];
    const uint64_t cpe = layouts_[r].cellsPerElement;
    std::vector<uint32_t> values(st.quant.count);
    for (uint64_t j = 0; j < values.size(); ++j) {
      const uint32_t v = mem[a.mem][a.first + j * cpe];
      if (v == kPoison || isEncoded(v))
        return internalError(at(r, i, st) + ": element " + std::to_string(j) + " of a holds " +
                             valueName(v) + ", not an element's value");
      // Cells reduced one by one hold equal sets under different ids: compare the sets.
      const auto terms = pool_.terms(v);
      for (uint64_t k = 1; k < cpe; ++k)
        if (const uint32_t w = mem[a.mem][a.first + j * cpe + k];
            w != v && (w == kPoison || isEncoded(w) ||
                       !std::ranges::equal(pool_.terms(w), terms)))
          return internalError(at(r, i, st) + ": the bytes of element " + std::to_string(j) +
                               " of a hold different values (moved by a range that was not " +
                               "element-aligned)");
      values[j] = v;
    }
    return values;
  }

  // A new block encoding `values`, written to dst.
  Status writeBlock(int r, uint32_t i, Memory& mem, const Span& d, std::vector<uint32_t> values) {
    const std::optional<uint32_t> first = blocks_.add(d.count, std::move(values));
    if (!first)
      return internalError(at(r, i, scheds_[r].steps[i]) + ": more quantized bytes than the " +
                           "checker can name (2^31)");
    for (uint64_t k = 0; k < d.count; ++k)
      mem[d.mem][d.first + k] = *first + static_cast<uint32_t>(k);
    return Status();
  }

  // The element-wise sum of the quant.sources blocks back to back at a, each of which must be
  // exactly one whole block of quant.count elements; a contribution twice is an error.
  StatusOr<std::vector<uint32_t>> sumBlocks(int r, uint32_t i, const Memory& mem,
                                            const Span& a) {
    const Step& st = scheds_[r].steps[i];
    const uint64_t size = blockBytes(r, st.quant.count);
    std::vector<uint32_t> sum;
    for (uint32_t src = 0; src < st.quant.sources; ++src) {
      const uint64_t start = a.first + src * size;
      const uint32_t head = mem[a.mem][start];
      auto notABlock = [&](const std::string& why) {
        return internalError(at(r, i, st) + ": bytes [" + std::to_string(src * size) + ", " +
                             std::to_string((src + 1) * size) + ") of a are not one whole " +
                             "quantized block of " + std::to_string(st.quant.count) +
                             " elements: " + why);
      };
      if (!isEncoded(head)) return notABlock("byte 0 holds " + valueName(head));
      const Block& b = blocks_.of(head);
      if (head != b.first || b.size != size || b.values.size() != st.quant.count)
        return notABlock("byte 0 holds " + valueName(head));
      for (uint64_t k = 1; k < size; ++k) {
        const uint32_t v = mem[a.mem][start + k];
        if (v != head + k)
          return notABlock("byte " + std::to_string(k) + " holds " + valueName(v) +
                           " instead of byte " + std::to_string(k) + " of the block");
      }
      if (src == 0) {
        sum = b.values;
        continue;
      }
      for (uint64_t j = 0; j < sum.size(); ++j) {
        uint64_t dup = 0;
        const uint32_t v = pool_.merge(sum[j], b.values[j], &dup);
        if (v == kPoison)
          return internalError(at(r, i, st) + ": element " + std::to_string(j) + " of the sum " +
                               "counts contribution " + termName(dup) + " twice (block " +
                               std::to_string(src) + ")");
        sum[j] = v;
      }
    }
    return sum;
  }

  // ---- check 2, one-sided reads: happens-before ----
  //
  // A get reads the peer's memory whenever it runs, so the proof is about every execution, not
  // the program-order one. Events are the steps of all ranks; x happens before y when a chain of
  // edges leads from x to y: deps (x finishes before y starts) and message matching (a send or
  // notify starts before the receive or wait it is matched with finishes; matching is FIFO per
  // ordered pair, as the run below proves). Every rank's start (its header) precedes its steps
  // and every get aimed at it, and initial input values are there from the start; its end
  // follows all its steps. Nothing leaves rank a except through a message, so x of rank a
  // precedes y of another rank exactly when one of a's sends or notifies reachable from x
  // through a's own deps precedes y (or is y's match). Hence two bitsets per step: Exits (every
  // send/notify of any rank that precedes it) in a topological order, and Down (its own rank's
  // sends/notifies reachable through deps) in reverse program order; a query is an AND of the
  // owner's word range. Then, for every get of rank r reading element e of rank q:
  //   - every step of q that writes e precedes the get or follows it (else a race: the get may
  //     read either value), which makes the value it reads the same in every execution;
  //   - the get precedes q's end (else q may return, and its buffers be reused, mid-read).
  // Schedules whose messages do not match, or whose deps and messages form a cycle, are left to
  // the run below, which names the unmatched message or the deadlock.

  Status proveOneSided() const {
    bool any = false;
    for (const Schedule& s : scheds_)
      for (const Step& st : s.steps) any = any || isOneSided(st.kind);
    if (!any) return Status();
    const size_t n = static_cast<size_t>(n_);
    std::vector<size_t> base(n + 1, 0);
    for (size_t r = 0; r < n; ++r) base[r + 1] = base[r] + scheds_[r].steps.size();
    const size_t total = base[n];
    auto node = [&](int r, uint32_t i) { return base[static_cast<size_t>(r)] + i; };

    // Exits get global bit numbers; each rank's block starts on a word boundary.
    std::vector<int64_t> exitBit(total, -1);
    std::vector<size_t> exitWord(n + 1, 0);
    size_t bits = 0;
    for (size_t r = 0; r < n; ++r) {
      exitWord[r] = bits / 64;
      const auto& steps = scheds_[r].steps;
      for (uint32_t i = 0; i < steps.size(); ++i)
        if (isExit(steps[i].kind) || steps[i].kind == StepKind::kSignal)
          exitBit[base[r] + i] = static_cast<int64_t>(bits++);
      bits = (bits + 63) / 64 * 64;
    }
    exitWord[n] = bits / 64;
    const size_t words = exitWord[n];

    // Matching: the k-th send/notify from p to q with the k-th receive/wait of q from p.
    std::vector<std::vector<uint32_t>> posted(n * n);
    for (int p = 0; p < n_; ++p) {
      const auto& steps = scheds_[p].steps;
      for (uint32_t i = 0; i < steps.size(); ++i)
        if (isExit(steps[i].kind)) posted[static_cast<size_t>(p) * n + steps[i].peer].push_back(i);
    }
    std::vector<int64_t> match(total, -1);
    std::vector<size_t> taken(n * n, 0);
    for (int q = 0; q < n_; ++q) {
      const auto& steps = scheds_[q].steps;
      for (uint32_t i = 0; i < steps.size(); ++i) {
        if (!isEntry(steps[i].kind)) continue;
        const size_t c = static_cast<size_t>(steps[i].peer) * n + static_cast<size_t>(q);
        if (taken[c] == posted[c].size()) return Status();  // unmatched: the run reports it
        const uint32_t j = posted[c][taken[c]++];
        if ((steps[i].kind == StepKind::kWait) !=
            (scheds_[steps[i].peer].steps[j].kind == StepKind::kNotify))
          return Status();  // a wait matched with a send, or the reverse: the run reports it
        match[node(q, i)] = static_cast<int64_t>(node(steps[i].peer, j));
      }
    }
    for (size_t c = 0; c < n * n; ++c)
      if (taken[c] != posted[c].size()) return Status();
    // Window awaits: await(q, k) happens after q's k-th signal (any number of ranks may await
    // one signal; a signal nobody awaits is fine).
    std::vector<std::vector<uint32_t>> signalSteps(n);
    for (int q = 0; q < n_; ++q)
      for (uint32_t i = 0; i < scheds_[q].steps.size(); ++i)
        if (scheds_[q].steps[i].kind == StepKind::kSignal) signalSteps[static_cast<size_t>(q)].push_back(i);
    for (int r = 0; r < n_; ++r) {
      const auto& steps = scheds_[r].steps;
      for (uint32_t i = 0; i < steps.size(); ++i) {
        if (steps[i].kind != StepKind::kAwait) continue;
        const auto& sig = signalSteps[static_cast<size_t>(steps[i].peer)];
        if (steps[i].target > sig.size()) return Status();  // never signalled: the run reports it
        match[node(r, i)] = static_cast<int64_t>(node(steps[i].peer, sig[steps[i].target - 1]));
      }
    }

    // Exits, in a topological order of deps and matches (Kahn).
    std::vector<uint32_t> pending(total, 0);
    std::vector<size_t> succStart(total + 1, 0);
    for (int r = 0; r < n_; ++r) {
      const auto& steps = scheds_[r].steps;
      for (uint32_t i = 0; i < steps.size(); ++i) {
        const size_t x = node(r, i);
        pending[x] = static_cast<uint32_t>(steps[i].deps.size()) + (match[x] >= 0 ? 1 : 0);
        for (uint32_t d : steps[i].deps) ++succStart[node(r, d) + 1];
        if (match[x] >= 0) ++succStart[static_cast<size_t>(match[x]) + 1];
      }
    }
    for (size_t x = 0; x < total; ++x) succStart[x + 1] += succStart[x];
    std::vector<size_t> succ(succStart[total]), fill(succStart.begin(), succStart.end() - 1);
    std::vector<int> rankOf(total);
    for (int r = 0; r < n_; ++r) {
      const auto& steps = scheds_[r].steps;
      for (uint32_t i = 0; i < steps.size(); ++i) {
        const size_t x = node(r, i);
        rankOf[x] = r;
        for (uint32_t d : steps[i].deps) succ[fill[node(r, d)]++] = x;
        if (match[x] >= 0) succ[fill[static_cast<size_t>(match[x])]++] = x;
      }
    }
    std::vector<uint64_t> exits(total * words, 0);
    std::vector<size_t> queue;
    queue.reserve(total);
    for (size_t x = 0; x < total; ++x)
      if (pending[x] == 0) queue.push_back(x);
    for (size_t head = 0; head < queue.size(); ++head) {
      const size_t x = queue[head];
      uint64_t* row = exits.data() + x * words;
      const int r = rankOf[x];
      for (uint32_t d : scheds_[r].steps[x - base[r]].deps) {
        const uint64_t* from = exits.data() + node(r, d) * words;
        for (size_t w = 0; w < words; ++w) row[w] |= from[w];
      }
      if (match[x] >= 0) {
        const uint64_t* from = exits.data() + static_cast<size_t>(match[x]) * words;
        for (size_t w = 0; w < words; ++w) row[w] |= from[w];
      }
      if (exitBit[x] >= 0) row[exitBit[x] / 64] |= uint64_t{1} << (exitBit[x] % 64);
      for (size_t k = succStart[x]; k < succStart[x + 1]; ++k)
        if (--pending[succ[k]] == 0) queue.push_back(succ[k]);
    }
    if (queue.size() != total) return Status();  // a cycle: the run reports the deadlock

    // Down: per step, the own rank's exits reachable through deps (words of the rank's block).
    std::vector<size_t> downBase(n + 1, 0);
    for (size_t r = 0; r < n; ++r)
      downBase[r + 1] = downBase[r] + scheds_[r].steps.size() * (exitWord[r + 1] - exitWord[r]);
    std::vector<uint64_t> down(downBase[n], 0);
    for (size_t r = 0; r < n; ++r) {
      const size_t wr = exitWord[r + 1] - exitWord[r];
      if (wr == 0) continue;
      const auto& steps = scheds_[r].steps;
      for (uint32_t i = static_cast<uint32_t>(steps.size()); i-- > 0;) {
        uint64_t* row = down.data() + downBase[r] + i * wr;
        const int64_t b = exitBit[base[r] + i];
        if (b >= 0) {
          const size_t local = static_cast<size_t>(b) - exitWord[r] * 64;
          row[local / 64] |= uint64_t{1} << (local % 64);
        }
        for (uint32_t d : steps[i].deps) {
          uint64_t* to = down.data() + downBase[r] + d * wr;
          for (size_t w = 0; w < wr; ++w) to[w] |= row[w];
        }
      }
    }
    // Step x of rank a happens before the event whose Exits row is `target`.
    auto before = [&](int a, uint32_t x, const uint64_t* target) {
      const size_t ra = static_cast<size_t>(a), wr = exitWord[ra + 1] - exitWord[ra];
      const uint64_t* dn = down.data() + downBase[ra] + x * wr;
      for (size_t w = 0; w < wr; ++w)
        if (dn[w] & target[exitWord[ra] + w]) return true;
      return false;
    };
    auto row = [&](int r, uint32_t i) { return exits.data() + node(r, i) * words; };

    // Ends, and the writers of every element some get reads.
    std::vector<uint64_t> ends(n * words, 0);
    std::vector<char> read(n, 0);
    for (int r = 0; r < n_; ++r) {
      uint64_t* e = ends.data() + static_cast<size_t>(r) * words;
      const auto& steps = scheds_[r].steps;
      for (uint32_t i = 0; i < steps.size(); ++i) {
        for (size_t w = 0; w < words; ++w) e[w] |= row(r, i)[w];
        if (isOneSided(steps[i].kind)) read[static_cast<size_t>(steps[i].peer)] = 1;
      }
    }
    // writers[q][m]: for each element of container m of rank q, the steps of q writing it, in
    // program order (flattened: element e's list is list[start[e], start[e+1])).
    struct Writers {
      std::vector<size_t> start;
      std::vector<uint32_t> list;
    };
    std::vector<std::array<Writers, kNumMem>> writers(n);
    std::vector<std::vector<uint32_t>> memoStamp(n);
    std::vector<std::vector<uint8_t>> memoOrder(n);
    for (int q = 0; q < n_; ++q) {
      if (!read[static_cast<size_t>(q)]) continue;
      const Layout& L = layouts_[q];
      const auto& steps = scheds_[q].steps;
      for (int m = 0; m < kNumMem; ++m) writers[q][m].start.assign(L.memSize[m] + 1, 0);
      for (int pass = 0; pass < 2; ++pass) {
        for (uint32_t i = 0; i < steps.size(); ++i) {
          if (!writesDst(steps[i].kind)) continue;
          const Span d = spanOf(q, steps[i].dst);
          Writers& w = writers[q][d.mem];
          for (uint64_t k = d.first; k < d.first + d.count; ++k) {
            if (pass == 0) {
              ++w.start[k + 1];
            } else {
              w.list[w.start[k]++] = i;  // start[k] runs ahead; shifted back below
            }
          }
        }
        for (int m = 0; m < kNumMem; ++m) {
          Writers& w = writers[q][m];
          if (pass == 0) {
            for (size_t e = 0; e + 1 < w.start.size(); ++e) w.start[e + 1] += w.start[e];
            w.list.resize(w.start.back());
          } else {
            for (size_t e = w.start.size() - 1; e > 0; --e) w.start[e] = w.start[e - 1];
            w.start[0] = 0;
          }
        }
      }
      memoStamp[q].assign(steps.size(), 0);
      memoOrder[q].assign(steps.size(), 0);
    }

    uint32_t gen = 0;
    for (int r = 0; r < n_; ++r) {
      const auto& steps = scheds_[r].steps;
      for (uint32_t i = 0; i < steps.size(); ++i) {
        const Step& g = steps[i];
        if (!isOneSided(g.kind)) continue;
        const int q = g.peer;
        const Span src = spanOf(q, g.a);
        ++gen;
        const uint64_t* mine = row(r, i);
        for (uint64_t k = 0; k < src.count; ++k) {
          const Writers& ws = writers[q][src.mem];
          for (size_t x = ws.start[src.first + k]; x < ws.start[src.first + k + 1]; ++x) {
            const uint32_t w = ws.list[x];
            if (memoStamp[q][w] != gen) {
              memoStamp[q][w] = gen;
              memoOrder[q][w] = before(q, w, mine) ? 1 : before(r, i, row(q, w)) ? 2 : 0;
            }
            if (memoOrder[q][w] == 0)
              return internalError(
                  "race: " + at(r, i, g) + " reads rank " + std::to_string(q) + "'s " +
                  elementName(q, src.mem, src.first + k) + ", which " +
                  at(q, w, scheds_[q].steps[w]) + " writes, and no chain of deps and messages " +
                  "orders the two (the get may see the value before or after the write)");
          }
        }
        // The host window outlives the call: that a rank does not rewrite its region while a
        // slower peer still reads it follows from the executor's entry protocol (a rank enters
        // call s+2, the next to use this half, only after every peer has entered call s+1,
        // which it does after finishing call s), not from this call's steps.
        if (g.a.buf != kWindow && !before(r, i, ends.data() + static_cast<size_t>(q) * words))
          return internalError(
              "rank " + std::to_string(q) + " can return while " + at(r, i, g) +
              " still reads its " + elementName(q, src.mem, src.first) +
              ": no chain of deps and messages leads from the get to any step of rank " +
              std::to_string(q) + " (a notify after the get and a wait on rank " +
              std::to_string(q) + " would)");
      }
    }
    return Status();
  }

  // ---- check 3: program order ----

  std::deque<Message>& channel(int from, int to) {
    return channels_[static_cast<size_t>(from) * static_cast<size_t>(n_) +
                     static_cast<size_t>(to)];
  }

  size_t words() const { return (static_cast<size_t>(n_) + 63) / 64; }
  static void unite(std::vector<uint64_t>& x, const std::vector<uint64_t>& y) {
    for (size_t w = 0; w < x.size(); ++w) x[w] |= y[w];
  }
  void setBit(std::vector<uint64_t>& x, int r) const {
    x[static_cast<size_t>(r) / 64] |= uint64_t{1} << (r % 64);
  }
  bool bit(const std::vector<uint64_t>& x, int r) const {
    return (x[static_cast<size_t>(r) / 64] >> (r % 64)) & 1;
  }

  Status checkBarrier(const std::vector<std::vector<uint64_t>>& known) const {
    for (int r = 0; r < n_; ++r)
      for (int q = 0; q < n_; ++q)
        if (!bit(known[r], q))
          return internalError("rank " + std::to_string(r) + " can finish the barrier " +
                               "before hearing (even indirectly) from rank " + std::to_string(q));
    return Status();
  }

  Status leftovers() {
    for (int from = 0; from < n_; ++from)
      for (int to = 0; to < n_; ++to) {
        auto& q = channel(from, to);
        if (!q.empty())
          return internalError(at(from, q.front().step, scheds_[from].steps[q.front().step]) +
                               " sends a message rank " + std::to_string(to) + " never receives");
      }
    return Status();
  }

  Hazards* proof(std::vector<Hazards>& hz, int r) const {
    return opts_.proveOrder ? &hz[static_cast<size_t>(r)] : nullptr;
  }

  Status runProgramOrder() {
    memory_ = initial_;
    channels_.assign(static_cast<size_t>(n_) * static_cast<size_t>(n_), {});
    const bool barrier = coll_ == Coll::kBarrier;
    std::vector<std::vector<uint64_t>> known(static_cast<size_t>(n_),
                                             std::vector<uint64_t>(words(), 0));
    std::vector<Hazards> hz(static_cast<size_t>(n_));
    for (int r = 0; r < n_ && opts_.proveOrder; ++r) {
      const Layout& L = layouts_[r];
      for (int m = 0; m < kNumMem; ++m) {
        hz[r].lastWriter[m].assign(L.memSize[m], -1);
        hz[r].readers[m].resize(L.memSize[m]);
      }
      hz[r].lastSendTo.assign(static_cast<size_t>(n_), -1);
      hz[r].lastRecvFrom.assign(static_cast<size_t>(n_), -1);
      hz[r].stamp.assign(scheds_[r].steps.size(), 0);
      hz[r].current = UINT32_MAX;
    }
    for (int r = 0; r < n_; ++r) setBit(known[r], r);
    std::vector<uint32_t> pc(static_cast<size_t>(n_), 0);
    std::vector<uint32_t> signals(static_cast<size_t>(n_), 0);  // window signals made so far
    Message msg;
    for (bool progress = true; progress;) {
      progress = false;
      for (int r = 0; r < n_; ++r) {
        const auto& steps = scheds_[r].steps;
        while (pc[r] < steps.size()) {
          const uint32_t i = pc[r];
          const Step& st = steps[i];
          if (isEntry(st.kind) && channel(st.peer, r).empty()) break;  // retried next pass
          if (st.kind == StepKind::kAwait && signals[static_cast<size_t>(st.peer)] < st.target)
            break;
          if (opts_.proveOrder && (isExit(st.kind) || isEntry(st.kind))) {
            // Per-peer FIFO must be ordered by deps too, or the transport may match messages
            // in an order the program did not mean.
            auto& last = isExit(st.kind) ? hz[r].lastSendTo[st.peer]
                                         : hz[r].lastRecvFrom[st.peer];
            if (last >= 0 && !precedes(r, static_cast<uint32_t>(last), i, hz[r]))
              return unordered(r, static_cast<uint32_t>(last), i,
                               isExit(st.kind) ? "sends to the same peer after"
                                               : "receives from the same peer after");
            last = i;
          }
          if (isEntry(st.kind)) {
            auto& q = channel(st.peer, r);
            msg = std::move(q.front());
            q.pop_front();
            CHORUS_RETURN_IF_ERROR(exec(r, i, memory_[r], &msg, nullptr, proof(hz, r)));
            if (barrier) unite(known[r], msg.known);
          } else if (isExit(st.kind)) {
            Message out;
            CHORUS_RETURN_IF_ERROR(exec(r, i, memory_[r], nullptr, &out, proof(hz, r)));
            if (barrier) out.known = known[r];
            channel(r, st.peer).push_back(std::move(out));
          } else {
            CHORUS_RETURN_IF_ERROR(exec(r, i, memory_[r], nullptr, nullptr, proof(hz, r)));
            if (st.kind == StepKind::kSignal) ++signals[static_cast<size_t>(r)];
          }
          ++pc[r];
          progress = true;
        }
      }
    }
    for (int r = 0; r < n_; ++r) {
      if (pc[r] == scheds_[r].steps.size()) continue;
      std::string why = "deadlock: ";
      int shown = 0;
      for (int q = r; q < n_ && shown < 4; ++q) {
        if (pc[q] == scheds_[q].steps.size()) continue;
        const Step& st = scheds_[q].steps[pc[q]];
        why += (shown++ ? "; " : "") + at(q, pc[q], st) +
               (st.kind == StepKind::kAwait ? " waits for a signal rank " : " waits for a message rank ") +
               std::to_string(st.peer) + " never " + (st.kind == StepKind::kAwait ? "makes" : "sends");
      }
      return internalError(why);
    }
    CHORUS_RETURN_IF_ERROR(leftovers());
    if (barrier) CHORUS_RETURN_IF_ERROR(checkBarrier(known));
    return Status();
  }

  // ---- check 5: random order respecting deps and FIFO matching ----
  //
  // Sends are rendezvous here: a send whose deps are done is only offered, and completes (lets
  // its dependents run) together with the receive that takes it. That is the least buffering a
  // transport can have, so a schedule that finishes here cannot deadlock on any transport.
  // Notifies and waits behave as sends and receives; gets run as soon as their deps are done,
  // reading whatever the peer's memory holds at that point of the random order.

  Status runConcurrent() {
    memory_ = initial_;
    const bool barrier = coll_ == Coll::kBarrier;
    const size_t nn = static_cast<size_t>(n_) * static_cast<size_t>(n_);
    std::mt19937_64 rng(opts_.seed);
    std::vector<std::vector<uint32_t>> waitingDeps(static_cast<size_t>(n_));
    std::vector<std::vector<std::vector<uint32_t>>> dependents(static_cast<size_t>(n_));
    std::vector<std::vector<char>> finished(static_cast<size_t>(n_));
    std::vector<std::vector<std::vector<uint64_t>>> stepKnown(static_cast<size_t>(n_));
    using Ref = std::pair<int, uint32_t>;
    std::vector<Ref> ready;
    std::vector<std::deque<Ref>> offered(nn);   // per channel, in the order sends became ready
    std::vector<std::vector<Ref>> blocked(nn);  // receives with nothing offered yet
    // Window: signals complete as soon as their deps are done; an await waits for its signal.
    std::vector<uint32_t> signals(static_cast<size_t>(n_), 0);
    std::vector<std::vector<Ref>> parked(static_cast<size_t>(n_));  // awaits, by awaited rank
    size_t total = 0, done = 0;
    for (int r = 0; r < n_; ++r) {
      const auto& steps = scheds_[r].steps;
      total += steps.size();
      waitingDeps[r].resize(steps.size());
      dependents[r].resize(steps.size());
      finished[r].assign(steps.size(), 0);
      if (barrier) stepKnown[r].assign(steps.size(), std::vector<uint64_t>(words(), 0));
      for (uint32_t i = 0; i < steps.size(); ++i) {
        waitingDeps[r][i] = static_cast<uint32_t>(steps[i].deps.size());
        for (uint32_t d : steps[i].deps) dependents[r][d].push_back(i);
        if (steps[i].deps.empty()) ready.emplace_back(r, i);
      }
    }
    auto chan = [&](int from, int to) {
      return static_cast<size_t>(from) * static_cast<size_t>(n_) + static_cast<size_t>(to);
    };
    auto knowFromDeps = [&](int r, uint32_t i) {
      if (!barrier) return;
      auto& k = stepKnown[r][i];
      setBit(k, r);
      for (uint32_t d : scheds_[r].steps[i].deps) unite(k, stepKnown[r][d]);
    };
    auto complete = [&](int r, uint32_t i) {
      finished[r][i] = 1;
      ++done;
      for (uint32_t k : dependents[r][i])
        if (--waitingDeps[r][k] == 0) ready.emplace_back(r, k);
    };
    Message msg;
    while (!ready.empty()) {
      const size_t pick = rng() % ready.size();
      const auto [r, i] = ready[pick];
      ready[pick] = ready.back();
      ready.pop_back();
      const Step& st = scheds_[r].steps[i];
      if (st.kind == StepKind::kAwait) {
        if (signals[static_cast<size_t>(st.peer)] < st.target) {
          parked[static_cast<size_t>(st.peer)].emplace_back(r, i);
          continue;
        }
        knowFromDeps(r, i);
        CHORUS_RETURN_IF_ERROR(exec(r, i, memory_[r], nullptr, nullptr, nullptr));
        complete(r, i);
        continue;
      }
      if (st.kind == StepKind::kSignal) {
        knowFromDeps(r, i);
        CHORUS_RETURN_IF_ERROR(exec(r, i, memory_[r], nullptr, nullptr, nullptr));
        ++signals[static_cast<size_t>(r)];
        // Release the awaits this signal satisfies; the others stay parked.
        auto& waiting = parked[static_cast<size_t>(r)];
        const uint32_t count = signals[static_cast<size_t>(r)];
        for (size_t k = 0; k < waiting.size();) {
          const auto [wr, wi] = waiting[k];
          if (scheds_[wr].steps[wi].target <= count) {
            ready.push_back(waiting[k]);
            waiting[k] = waiting.back();
            waiting.pop_back();
          } else {
            ++k;
          }
        }
        complete(r, i);
        continue;
      }
      if (isExit(st.kind)) {
        const size_t c = chan(r, st.peer);
        offered[c].emplace_back(r, i);
        ready.insert(ready.end(), blocked[c].begin(), blocked[c].end());
        blocked[c].clear();
        continue;
      }
      if (isEntry(st.kind)) {
        const size_t c = chan(st.peer, r);
        if (offered[c].empty()) {
          blocked[c].emplace_back(r, i);
          continue;
        }
        const auto [sr, si] = offered[c].front();
        offered[c].pop_front();
        knowFromDeps(sr, si);
        CHORUS_RETURN_IF_ERROR(exec(sr, si, memory_[sr], nullptr, &msg, nullptr));
        if (barrier) msg.known = stepKnown[sr][si];
        knowFromDeps(r, i);
        CHORUS_RETURN_IF_ERROR(exec(r, i, memory_[r], &msg, nullptr, nullptr));
        if (barrier) unite(stepKnown[r][i], msg.known);
        complete(sr, si);
        complete(r, i);
        continue;
      }
      knowFromDeps(r, i);
      CHORUS_RETURN_IF_ERROR(exec(r, i, memory_[r], nullptr, nullptr, nullptr));
      complete(r, i);
    }
    if (done != total) {
      std::string why = "deadlock with rendezvous sends: ";
      int shown = 0;
      for (int r = 0; r < n_ && shown < 3; ++r) {
        const auto& steps = scheds_[r].steps;
        for (uint32_t i = 0; i < steps.size() && shown < 3; ++i) {
          if (finished[r][i] || waitingDeps[r][i] != 0) continue;  // done, or stuck behind deps
          why += (shown++ ? "; " : "") + at(r, i, steps[i]) +
                 (isExit(steps[i].kind) ? " is never received"
                                                   : " waits for a message that is never sent");
        }
      }
      if (shown == 0) why += "steps wait for each other through deps";
      return internalError(why);
    }
    if (barrier) {
      std::vector<std::vector<uint64_t>> known(static_cast<size_t>(n_),
                                               std::vector<uint64_t>(words(), 0));
      for (int r = 0; r < n_; ++r) {
        setBit(known[r], r);
        for (const auto& k : stepKnown[r]) unite(known[r], k);
      }
      CHORUS_RETURN_IF_ERROR(checkBarrier(known));
    }
    return Status();
  }

  // ---- check 4: outputs ----

  Status checkOutputs(const std::string& mode) {
    std::vector<uint64_t> want;
    for (int r = 0; r < n_; ++r) {
      const Layout& L = layouts_[r];
      for (uint64_t e = 0; e < L.logical[kOutMem]; ++e) {
        const auto [mem, idx] = L.locate(kOutput, e);
        const uint32_t got = memory_[r][mem][idx];
        const uint64_t element = e / L.cellsPerElement;
        auto where = [&] {
          return mode + "rank " + std::to_string(r) + " output element " +
                 std::to_string(element) + " (byte " + std::to_string(e * L.unit) + ")";
        };
        if (!expected(r, element, want)) {
          if (got != initial_[r][mem][idx])
            return internalError(where() + " lies outside every block the collective defines " +
                                 "but was overwritten with " + valueName(got));
          continue;
        }
        if (got == kPoison)
          return internalError(where() + " was never written; expected " + formatTerms(want));
        if (isEncoded(got))
          return internalError(where() + " holds " + valueName(got) + "; expected " +
                               formatTerms(want));
        const auto have = pool_.terms(got);
        if (std::equal(have.begin(), have.end(), want.begin(), want.end())) continue;
        std::string diff;
        for (uint64_t t : want)
          if (!std::binary_search(have.begin(), have.end(), t)) {
            diff = ", missing " + termName(t);
            break;
          }
        for (uint64_t t : have)
          if (!std::binary_search(want.begin(), want.end(), t)) {
            diff += ", unexpected " + termName(t);
            break;
          }
        return internalError(where() + " holds " + formatTerms(have) + ", expected " +
                             formatTerms(want) + diff);
      }
    }
    return Status();
  }

  Coll coll_;
  int n_;
  std::span<const CollDesc> descs_;
  std::span<const Schedule> scheds_;
  CheckOptions opts_;
  std::vector<Layout> layouts_;
  ValuePool pool_;
  std::vector<Memory> initial_, memory_;
  std::vector<std::deque<Message>> channels_;
  std::vector<uint32_t> tmp_;
  bool byteMode_ = false;  // a schedule quantizes: one cell per byte instead of per element
  BlockTable blocks_;
};

}  // namespace

Status checkSchedules(Coll coll, int nranks, std::span<const CollDesc> perRank,
                      std::span<const Schedule> schedules, const CheckOptions& opts) {
  Checker c(coll, nranks, perRank, schedules, opts);
  Status s = c.run();
  if (s.ok()) return s;
  return s.withContext(std::string(collName(coll)) + " over " + std::to_string(nranks) +
                       " ranks");
}

Status checkAlgorithm(Coll coll, int nranks, std::span<const CollDesc> perRank,
                      const ScheduleBuilder& build, const CheckOptions& opts) {
  if (nranks < 1 || perRank.size() != static_cast<size_t>(nranks))
    return invalidArgument("need one description per rank");
  std::vector<Schedule> scheds;
  scheds.reserve(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    scheds.push_back(build(perRank[r], r, nranks));
    scheds.back().finalize();
  }
  return checkSchedules(coll, nranks, perRank, scheds, opts);
}

Status checkAlgorithm(Coll coll, int nranks, const CollDesc& desc, const ScheduleBuilder& build,
                      const CheckOptions& opts) {
  if (nranks < 1) return invalidArgument("nranks must be at least 1");
  std::vector<CollDesc> all(static_cast<size_t>(nranks), desc);
  return checkAlgorithm(coll, nranks, all, build, opts);
}

}  // namespace chorus::sched
