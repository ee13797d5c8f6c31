#include "tools/chorus-sim/engine.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <new>
#include <type_traits>
#include <deque>
#include <queue>
#include <unordered_map>
#include <vector>

namespace chorus::sim {

namespace {

using sched::StepKind;

bool isSendLike(StepKind k) { return k == StepKind::kSend || k == StepKind::kNotify; }

// Memory for the engine's largest arrays (a step record per simulated step and its plan's step
// list: gigabytes at 16,384 ranks). A block of 2 MiB or more is mapped on its own and advised
// for transparent huge pages: the kernel then fills it 2 MiB per page fault instead of 4 KiB
// (an every-rank tree at 16,384 ranks and 256 MiB has 2.1 GB of step records: half a million
// 4 KiB faults, slow on a VM), and the event loop's accesses, scattered over all the ranks'
// records, miss the TLB less. Advice only: where THP is off the block has 4 KiB pages, as
// before. Smaller blocks come from operator new. (main.cc keeps freed heap memory in the
// process, the other half of the faults such a run took.)
template <typename T>
struct LargeArrays {
  using value_type = T;
  static constexpr size_t kHugePage = size_t{2} << 20;
  LargeArrays() = default;
  template <typename U>
  LargeArrays(const LargeArrays<U>&) {}  // NOLINT: allocators convert implicitly
  static size_t mapped(size_t n) {
    return (n * sizeof(T) + kHugePage - 1) / kHugePage * kHugePage;
  }
  T* allocate(size_t n) {
    if (n * sizeof(T) < kHugePage)
      return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{alignof(T)}));
    void* p = mmap(nullptr, mapped(n), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                   0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    madvise(p, mapped(n), MADV_HUGEPAGE);
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < kHugePage)
      ::operator delete(p, std::align_val_t{alignof(T)});
    else
      munmap(p, mapped(n));
  }
  friend bool operator==(const LargeArrays&, const LargeArrays&) { return true; }
};
template <typename T>
using LargeVector = std::vector<T, LargeArrays<T>>;

// kCpuSend / kCpuRecv: a message's msgUs piece at the sender / receiver; kCall: a rank's
// callUs piece (its `step` is the rank).
enum class FlowKind : uint8_t { kMessage, kGet, kMemory, kCpuSend, kCpuRecv, kCall };

// A short list kept inside its flow (or resource), spilling to the heap past N entries. A route
// crosses a handful of resources, and the rate computation walks every changed flow's resources
// and slots: kept in vectors, each was an allocation per flow and a cache miss per visit. 8
// bytes besides the N entries (the spilled list's pointer shares their space).
template <typename T, size_t N>
class SmallList {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  SmallList() = default;
  SmallList(const SmallList& o) { assign(o.data(), o.size_); }
  SmallList(SmallList&& o) noexcept { take(o); }
  ~SmallList() { release(); }
  SmallList& operator=(const SmallList& o) {
    return this == &o ? *this : assign(o.data(), o.size_);
  }
  SmallList& operator=(SmallList&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  SmallList& operator=(std::initializer_list<T> v) { return assign(v.begin(), v.size()); }
  SmallList& operator=(const std::vector<T>& v) { return assign(v.data(), v.size()); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  T& operator[](size_t k) { return data()[k]; }
  const T& operator[](size_t k) const { return data()[k]; }
  void resize(size_t n) {
    reserve(n);
    std::fill(data() + std::min<size_t>(n, size_), data() + n, T{});
    size_ = static_cast<uint32_t>(n);
  }
  void push_back(const T& v) {
    reserve(size_ + 1);
    data()[size_++] = v;
  }
  void pop_back() { --size_; }

 private:
  bool spilled() const { return capacity_ > N; }
  T* data() { return spilled() ? heap_ : local_; }
  const T* data() const { return spilled() ? heap_ : local_; }
  SmallList& assign(const T* from, size_t n) {
    size_ = 0;
    reserve(n);
    std::copy_n(from, n, data());
    size_ = static_cast<uint32_t>(n);
    return *this;
  }
  void reserve(size_t n) {
    if (n <= capacity_) return;
    const size_t grown = std::max<size_t>(n, 2 * size_t{capacity_});
    T* bigger = new T[grown];
    std::copy_n(data(), size_, bigger);
    release();
    heap_ = bigger;
    capacity_ = static_cast<uint32_t>(grown);
  }
  void release() {  // keeps size_: reserve copies first
    if (spilled()) delete[] heap_;
    capacity_ = N;
  }
  void take(SmallList& o) {
    size_ = o.size_;
    capacity_ = o.capacity_;
    if (o.spilled())
      heap_ = o.heap_;
    else
      std::copy_n(o.local_, o.size_, local_);
    o.size_ = 0;
    o.capacity_ = N;
  }
  uint32_t size_ = 0, capacity_ = N;  // capacity_ > N: the entries are in heap_
  union {
    T local_[N] = {};
    T* heap_;
  };
};

struct Flow {
  double remaining = 0;
  double rate = 0;
  double share = 0;  // the rate being computed (Sim::fillShares)
  double cap = kUnlimited;
  double latencyUs = 0;
  double updatedUs = 0;  // `remaining` is as of this time
  SmallList<int, 8> resources;
  std::vector<double> weights;  // per entry of `resources` (empty: all 1): load per unit rate
  SmallList<uint32_t, 8> slots;  // per entry of `resources`: its index in that resource's list
  int64_t step = -1;
  int bottleneck = -1;  // the full resource that holds `rate`; -1: its cap (or nothing)
  uint32_t conn = 0;  // kMessage: its ordered pair's id (Sim::connOf); a CPU piece: cpuConnOf
  FlowKind kind = FlowKind::kMemory;
  bool frozen = false;
};
static_assert(sizeof(Flow) == 176);

// What the engine reads and writes of one resource, in one record: every flow visits each
// resource it crosses when it starts and ends, a recomputation two or three times more, and with
// these fields in a dozen arrays each visit was a cache miss per array (2,048 DGX-like hosts have
// 315,392 resources). What every flow touches comes first, in one cache line.
struct alignas(64) ResState {
  // Read or written for every flow that starts or ends on it: the first cache line.
  double capacity = kUnlimited;  // Machine::capacity and burstBytes, read once
  double burst = 0;
  double bytes = 0, busyUs = 0;  // Result::resourceBytes and resourceBusyUs, until the end
  double busySince = 0;          // when its list last became non-empty
  // The active flows (a flow crossing it twice, as folded flows may, is listed twice).
  SmallList<int, 4> flows;
  // The rate computation's, when flows share it: the second.
  double left = 0;    // fillShares: the capacity not given out yet
  double weight = 0;  // fillShares: the unfrozen flows' weights here
  double out = 0, outMax = 0;  // the load and fastest rate of the flows outside S
  double load = 0, maxIn = 0;  // sharesHold: the load with S's shares, S's fastest rate
  double bottleneckMin = 0;    // sharesHold: the slowest S flow this resource holds
  int unfrozen = 0;            // fillShares: S flows here not frozen yet
  uint32_t mark = 0, growMark = 0;  // Sim::epoch_ / growEpoch_ when added to S / to grow
};
static_assert(offsetof(ResState, left) == 64 && sizeof(ResState) == 192);

// When each active flow with a rate sends its last byte: one entry per flow, earliest first (ties:
// lower flow id first), moved in place when the flow's rate changes. (A heap of every rate's
// completion, the stale ones skipped when they surfaced, held up to four times as many entries
// and cost a pop for each.)
class CompletionHeap {
 public:
  bool empty() const { return heap_.empty(); }
  double topAt() const { return heap_.front().at; }
  int topFlow() const { return heap_.front().flow; }
  // Sets (or moves) flow `id`'s completion to `at`.
  void set(int id, double at) {
    const size_t i = static_cast<size_t>(id);
    if (pos_.size() <= i) pos_.resize(i + 1, kNone);
    if (pos_[i] == kNone) {
      pos_[i] = heap_.size();
      heap_.push_back({at, id});
      up(pos_[i]);
      return;
    }
    Entry& e = heap_[pos_[i]];
    const bool earlier = at < e.at;
    e.at = at;
    if (earlier)
      up(pos_[i]);
    else
      down(pos_[i]);
  }
  // Drops flow `id`'s completion, if it has one.
  void erase(int id) {
    const size_t i = static_cast<size_t>(id);
    if (i >= pos_.size() || pos_[i] == kNone) return;
    const size_t at = pos_[i];
    pos_[i] = kNone;
    const Entry last = heap_.back();
    heap_.pop_back();
    if (at == heap_.size()) return;
    heap_[at] = last;
    pos_[static_cast<size_t>(last.flow)] = at;
    up(at);
    down(pos_[static_cast<size_t>(last.flow)]);
  }
  void pop() { erase(heap_.front().flow); }

 private:
  struct Entry {
    double at;
    int flow;
    bool before(const Entry& o) const { return at != o.at ? at < o.at : flow < o.flow; }
  };
  static constexpr size_t kNone = SIZE_MAX;
  void place(size_t i, const Entry& e) {
    heap_[i] = e;
    pos_[static_cast<size_t>(e.flow)] = i;
  }
  void up(size_t i) {
    const Entry e = heap_[i];
    while (i > 0) {
      const size_t parent = (i - 1) / 2;
      if (!e.before(heap_[parent])) break;
      place(i, heap_[parent]);
      i = parent;
    }
    place(i, e);
  }
  void down(size_t i) {
    const Entry e = heap_[i];
    const size_t n = heap_.size();
    for (;;) {
      size_t child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && heap_[child + 1].before(heap_[child])) ++child;
      if (!heap_[child].before(e)) break;
      place(i, heap_[child]);
      i = child;
    }
    place(i, e);
  }
  std::vector<Entry> heap_;
  std::vector<size_t> pos_;  // per flow id: its index in heap_, kNone without an entry
};

enum class TimerKind : uint8_t { kDeliver, kReadArrived, kAwaitDone };

// A token bucket (Resource::burstBytes) running dry at `at` at the rates of `version`.
struct BucketEvent {
  double at;
  int resource;
  uint32_t version;
  bool operator>(const BucketEvent& o) const {
    return at != o.at ? at > o.at : resource > o.resource;
  }
};

struct Timer {
  double at;
  uint64_t seq;
  TimerKind kind;
  int64_t step;   // the step it completes (the receive, the get, the await)
  int64_t cause;  // the step that caused it (the send, the signal)
  bool operator>(const Timer& o) const { return at != o.at ? at > o.at : seq > o.seq; }
};

// The pending timers, earliest first (ties: first set first). Almost every timer is due a route's
// latency after the time it is set, and the time only moves forward, so the timers of one delay
// come due in the order they were set: one FIFO per distinct delay (a handful: the machine's
// route latencies) instead of one heap over all of them, whose pushes and pops were most of the
// cost of a timer at millions of messages. Others (an await whose signal came earlier) and
// delays past kMaxFifos go to a heap.
class TimerQueue {
 public:
  void push(const Timer& t, double delay) {
    ++size_;
    if (delay >= 0) {
      for (size_t k = 0; k < delays_.size(); ++k)
        if (delays_[k] == delay) return fifos_[k].push_back(t);
      if (delays_.size() < kMaxFifos) {
        delays_.push_back(delay);
        fifos_.emplace_back().push_back(t);
        return;
      }
    }
    heap_.push(t);
  }
  bool empty() const { return size_ == 0; }
  // The next due; empty() must be false.
  const Timer& top() const { return *next(); }
  void pop() {
    --size_;
    const Timer* t = next();
    if (!heap_.empty() && t == &heap_.top()) {
      heap_.pop();
      return;
    }
    for (auto& f : fifos_)
      if (!f.empty() && &f.front() == t) return f.pop_front();
  }

 private:
  static constexpr size_t kMaxFifos = 32;
  const Timer* next() const {
    const Timer* best = heap_.empty() ? nullptr : &heap_.top();
    for (const auto& f : fifos_)
      if (!f.empty() && (!best || *best > f.front())) best = &f.front();
    return best;
  }
  size_t size_ = 0;
  std::vector<double> delays_;
  std::vector<std::deque<Timer>> fifos_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> heap_;
};

// What the simulation keeps of a plan's step, read-only: one copy per plan, which every rank
// running that plan (RankPlan::like) reads. The plans themselves are dropped once read.
struct StepInfo {
  uint64_t aBytes = 0;    // sched::Step::a.bytes
  uint64_t dstBytes = 0;  // sched::Step::dst.bytes
  uint32_t depBegin = 0;  // its dependents: dependents_[depBegin .. depBegin + depCount)
  uint32_t depCount = 0;
  uint32_t deps = 0;      // its dependencies (Plan::depCount)
  int32_t peer = -1;      // as the plan has it: Sim::peerOf moves it for the rank running it
  uint32_t target = 0;
  StepKind kind = StepKind::kCopy;
};

// A step's state, one per simulated step, in one record: starting or finishing a step touches
// one cache line of state rather than one per array (at millions of steps those misses are most
// of the run time), 32 bytes (two to a line; at 67 million steps the size is most of the memory
// too). Global step ids fit 31 bits, dependencies 30 (Sim::load checks). A step starts when it is
// ready (its dependencies done) and, for a receive, its message has arrived too; a receive's
// message came from its partner.
struct StepState {
  double startUs = -1;  // when it started: the later of ready and arrived (before: the first)
  double doneUs = -1;
  int32_t cause = -1;    // the step that set its start (critical path)
  int32_t partner = -1;  // the matching send or receive
  uint32_t pending : 30 = 0;  // dependencies not done yet
  uint32_t ready : 1 = 0;
  uint32_t arrived : 1 = 0;
  int32_t rank = 0;
};
static_assert(sizeof(StepState) == 32);

// What match() needs of a plan's peer: its message queues (in Sim::lists_, shared by the ranks
// running one plan).
struct PeerRec {
  int rank = -1;
  const std::vector<uint32_t>* sends = nullptr;
  const std::vector<uint32_t>* recvs = nullptr;
};

class Sim {
 public:
  Sim(const Machine& m, int count, const PlanSource& source, const EngineOptions& o)
      : m_(m), count_(count), source_(source), opt_(o) {}

  StatusOr<Result> run();

 private:
  struct Action {
    bool finish;  // false: start
    int64_t step;
    int64_t cause;
  };

  StepState& state(int64_t g) { return state_[static_cast<size_t>(g)]; }
  const StepState& state(int64_t g) const { return state_[static_cast<size_t>(g)]; }
  int rankOf(int64_t g) const { return state(g).rank; }
  const StepInfo& infoOf(int64_t g, int rank) const {
    const size_t r = static_cast<size_t>(rank);
    return infos_[infoBase_[r] + static_cast<size_t>(g - offset_[r])];
  }
  const StepInfo& infoOf(int64_t g) const { return infoOf(g, rankOf(g)); }
  // The step's peer for the rank running it: the plan's, moved as RankPlan::like says.
  int peerOf(const StepInfo& s, int rank) const {
    const int shift = shift_[static_cast<size_t>(rank)];
    return s.peer < 0 || shift == 0 ? s.peer : (s.peer + shift) % nranks_;
  }
  std::string where(int64_t g) const {
    const int r = rankOf(g);
    const StepInfo& s = infoOf(g, r);
    std::string w = "rank " + std::to_string(r) + " step " +
                    std::to_string(g - offset_[static_cast<size_t>(r)]) + " (" +
                    sched::stepKindName(s.kind);
    if (s.peer >= 0) w += " peer " + std::to_string(peerOf(s, r));
    return w + ")";
  }

  Status load();
  Status match();
  // The route from `src` to `dst`; folded, its resources are host 0's copies. Valid until the
  // next call (one scratch route: no allocation per message).
  const Route& routeOf(int src, int dst) {
    m_.routeInto(src, dst, route_);
    if (fold_)
      for (int& id : route_.resources) id %= localResources_;
    return route_;
  }
  void start(int64_t g, int64_t cause);
  void finish(int64_t g, int64_t cause);
  void startFlow(Flow&& f);
  void activate(int id);
  void bandwidthDone(int id);
  void memoryFlow(int64_t g, double bytes);
  // The message has arrived and the step has started; `messageLast`: the arrival was not
  // before the start (the same time counts as last).
  void receive(int64_t g, bool messageLast);
  void received(int64_t g);  // and its CPU piece is done
  void sendFlow(int64_t g);  // a send's or notify's message, after its CPU piece
  void cpuFlow(FlowKind kind, int64_t step, int rank, double us);
  void releaseRank(int rank);  // its call piece is done: its first steps start
  void nextOnConn(uint32_t conn);  // a flow of `conn` is done: the next one queued starts
  // Connections are numbered densely: rank r's to its k-th peer (in rank order) is
  // connBase_[r] + k, and rank r's CPU (its pieces run one at a time) is connBase_.back() + r.
  uint32_t connOf(int rank, int peer) const {
    const size_t r = static_cast<size_t>(rank);
    const auto begin = peerRanks_.begin();
    return static_cast<uint32_t>(
        std::lower_bound(begin + connBase_[r], begin + connBase_[r + 1], peer) - begin);
  }
  uint32_t cpuConnOf(int rank) const {
    return connBase_.back() + static_cast<uint32_t>(rank);
  }
  std::vector<int> cpusOf(int rank) const {
    std::vector<int> ids = m_.cpus(rank);
    if (fold_)
      for (int& id : ids) id %= localResources_;
    return ids;
  }
  // The CPU costs of a message between ranks a and b: shared memory within a host, a socket
  // between hosts.
  double msgUs(int a, int b) const {
    return m_.hostOf(a) == m_.hostOf(b) ? shmMsgUs_ : opt_.msgUs;
  }
  double msgBytesPerUs(int a, int b) const {
    return m_.hostOf(a) == m_.hostOf(b) ? shmMsgBytesPerUs_ : opt_.msgBytesPerUs;
  }
  static double weight(const Flow& f, size_t k) { return f.weights.empty() ? 1 : f.weights[k]; }
  // A timer due `delay` after now (negative: at `at`, which may be any time from now on).
  void addTimer(double at, double delay, TimerKind kind, int64_t step, int64_t cause);
  void signalDone(int rank);
  void settle(Flow& f);
  void removeActive(int id);
  void shareRates();
  void fillShares();
  bool sharesHold();
  void addToShare(int id);
  static constexpr size_t kAloneMax = 16;  // rateAlone's route length
  void rateAlone(int id);
  double weightOn(int id, size_t r, uint32_t slot) const;
  // Token buckets: brings resource r's tokens up to now at its last load; the capacity the
  // rates see (unlimited while tokens are left).
  void settleBucket(size_t r);
  double capacityNow(size_t r) const;

  const Machine& m_;
  int count_;  // plans
  const PlanSource& source_;
  EngineOptions opt_;
  double shmMsgUs_ = 0, shmMsgBytesPerUs_ = 0;  // resolved from opt_
  bool fold_ = false;
  Fold foldKind_ = Fold::kNone;
  int nranks_ = 0;          // ranks of the machine
  int localResources_ = 0;  // resources of one host

  std::vector<int64_t> offset_;   // first global step id of each rank, plus the total
  std::vector<size_t> infoBase_;  // per rank: its step 0 in infos_ (shared by RankPlan::like)
  std::vector<int> shift_;        // per rank: its plan's peers are moved by this, mod nranks_
  LargeVector<StepInfo> infos_;   // the steps of every plan read (not of the ranks sharing one)
  LargeVector<StepState> state_;  // every rank's steps, by global id
  LargeVector<uint32_t> dependents_;  // local step ids (of the same rank)
  std::vector<std::vector<PeerRec>> peers_;  // per rank, until match() has paired them
  std::deque<std::vector<uint32_t>> lists_;  // the message queues peers_ points into

  LargeVector<Flow> flows_;
  std::vector<int> freeFlows_;
  Route route_;  // routeOf's
  // The flows whose last byte left at the current time, with their steps (run()'s order).
  std::vector<std::pair<int64_t, int>> done_;
  std::vector<uint32_t> connBase_;  // per simulated rank, plus the total: see connOf
  std::vector<int> peerRanks_;       // every rank's peers, sorted, from connBase_[r]
  // Per connection: whether a flow of it is running, and the flows waiting, first to last,
  // linked through queueNext_ (by flow id).
  std::vector<uint8_t> connBusy_;
  std::vector<int> connHead_, connTail_, queueNext_;
  TimerQueue timers_;
  uint64_t timerSeq_ = 0;
  std::deque<Action> actions_;

  std::vector<std::vector<int64_t>> signals_;  // per rank: its signal steps in order
  std::vector<std::vector<int64_t>> waiters_;  // per rank: awaits on it not yet satisfied

  LargeVector<ResState> rs_;  // per resource
  std::vector<uint32_t> flowMark_;
  // shareRates' set S (flows, and the resources they cross) and the resources it grows by.
  std::vector<int> scratchRes_, scratchFlows_, scratchGrow_;
  uint32_t growEpoch_ = 0;
  bool outsideFlows_ = false;  // a resource of S also carries flows outside S
  uint32_t epoch_ = 0;
  std::vector<int> dirtyResources_;  // where flows started or ended since the last computation
  CompletionHeap completions_;
  // Per resource with a token bucket: its tokens as of tokensAt_, the load (sum of its flows'
  // rates) since then, and a version that makes older dry-bucket events stale.
  std::vector<double> tokens_, tokensAt_, load_;
  std::vector<uint32_t> bucketVersion_;
  std::priority_queue<BucketEvent, std::vector<BucketEvent>, std::greater<BucketEvent>>
      bucketEvents_;
  double now_ = 0;
  Result res_;
};

// Reads every plan from the source into infos_, peers_ and the dependents, and drops it; a rank
// that runs an earlier rank's plan (RankPlan::like) gets that plan's steps with its peers moved.
// Every rank gets its steps' state.
Status Sim::load() {
  const size_t n = static_cast<size_t>(count_);
  offset_.assign(1, 0);
  infoBase_.clear();
  shift_.clear();
  infos_.clear();
  state_.clear();
  dependents_.clear();
  peers_.assign(n, {});
  lists_.clear();
  connBase_.assign(1, 0);
  peerRanks_.clear();
  for (size_t r = 0; r < n; ++r) {
    const std::string who = "simulate: rank " + std::to_string(r);
    CHORUS_ASSIGN_OR_RETURN(RankPlan rp, source_(static_cast<int>(r)));
    if (rp.like >= 0) {
      if (rp.like >= static_cast<int>(r) || fold_)
        return invalidArgument(who + " runs rank " + std::to_string(rp.like) + "'s plan" +
                               (fold_ ? ", but plans are not shared when folded"
                                      : ", which is not an earlier rank"));
      const size_t l = static_cast<size_t>(rp.like);
      const int moveBy = static_cast<int>(r - l);
      infoBase_.push_back(infoBase_[l]);
      shift_.push_back((shift_[l] + moveBy) % nranks_);
      for (const PeerRec& p : peers_[l])
        peers_[r].push_back({(p.rank + moveBy) % nranks_, p.sends, p.recvs});
    } else {
      if (!rp.plan) return invalidArgument(who + ": no plan");
      const exec::Plan& plan = *rp.plan;
      const auto& st = plan.schedule.steps;
      if (r == 0) {  // most plans are about as long as the first: grow once, not by doubling
        infos_.reserve(n * st.size());
        dependents_.reserve(n * plan.dependents.size());
      }
      infoBase_.push_back(infos_.size());
      shift_.push_back(0);
      for (size_t i = 0; i < st.size(); ++i) {
        const sched::Step& x = st[i];
        StepInfo info;
        info.aBytes = x.a.bytes;
        info.dstBytes = x.dst.bytes;
        const uint64_t depBegin = dependents_.size() + plan.depStart[i] - plan.depStart[0];
        if (depBegin + plan.depStart[i + 1] - plan.depStart[i] > UINT32_MAX)
          return invalidArgument(who + ": more than 2^32 dependencies in the plans");
        info.depBegin = static_cast<uint32_t>(depBegin);
        info.depCount = plan.depStart[i + 1] - plan.depStart[i];
        if (plan.depCount[i] >= (1u << 30))
          return invalidArgument(who + ": step " + std::to_string(i) + " has 2^30 or more "
                                 "dependencies");
        info.deps = plan.depCount[i];
        info.peer = x.peer;
        info.target = x.target;
        info.kind = x.kind;
        infos_.push_back(info);
      }
      for (const exec::Plan::Peer& p : plan.peers) {
        const std::vector<uint32_t>& sends = lists_.emplace_back(p.sends);
        const std::vector<uint32_t>& recvs = lists_.emplace_back(p.recvs);
        peers_[r].push_back({p.rank, &sends, &recvs});
      }
      dependents_.insert(dependents_.end(), plan.dependents.begin() + plan.depStart[0],
                         plan.dependents.begin() + plan.depStart[st.size()]);
    }
    const size_t steps = rp.like < 0
                             ? infos_.size() - infoBase_[r]
                             : static_cast<size_t>(offset_[static_cast<size_t>(rp.like) + 1] -
                                                   offset_[static_cast<size_t>(rp.like)]);
    offset_.push_back(offset_.back() + static_cast<int64_t>(steps));
    if (offset_.back() > INT32_MAX)
      return invalidArgument(who + ": more than 2^31 - 1 steps in all");
    if (r == 0) state_.reserve(n * steps);
    for (size_t i = 0; i < steps; ++i) {
      StepState st;
      st.pending = infos_[infoBase_[r] + i].deps;
      st.rank = static_cast<int32_t>(r);
      state_.push_back(st);
    }
    const size_t from = peerRanks_.size();
    for (const PeerRec& p : peers_[r]) peerRanks_.push_back(p.rank);
    std::sort(peerRanks_.begin() + static_cast<std::ptrdiff_t>(from), peerRanks_.end());
    connBase_.push_back(static_cast<uint32_t>(peerRanks_.size()));
  }
  return Status();
}

Status Sim::match() {
  const size_t n = static_cast<size_t>(count_);
  const int total = nranks_;
  std::vector<std::unordered_map<int, int>> slotOf(n);
  for (size_t r = 0; r < n; ++r)
    for (size_t s = 0; s < peers_[r].size(); ++s)
      slotOf[r][peers_[r][s].rank] = static_cast<int>(s);
  for (size_t r = 0; r < n; ++r) {
    for (const PeerRec& p : peers_[r]) {
      // Folded, the peer's steps are those of its representative on host 0 (q = peer mod K),
      // talking to this rank shifted back by the peer's host.
      // Host hq's ranks are host 0's mapped by g_hq (engine.h); the receive is at
      // g_hq^-1(peer), from g_hq^-1(r).
      const int shift = p.rank - p.rank % static_cast<int>(n);
      const size_t q = static_cast<size_t>(p.rank % static_cast<int>(n));
      const int from = foldKind_ == Fold::kXor ? static_cast<int>(r) ^ shift
                                                : (static_cast<int>(r) - shift + total) % total;
      auto it = slotOf[q].find(from);
      const std::string pair = "rank " + std::to_string(r) + " -> rank " + std::to_string(p.rank);
      if (it == slotOf[q].end()) {
        if (p.sends->empty()) continue;
        return invalidArgument(pair + ": rank " + std::to_string(p.rank) +
                               " has no steps with rank " + std::to_string(r));
      }
      const PeerRec& back = peers_[q][static_cast<size_t>(it->second)];
      if (p.sends->size() != back.recvs->size())
        return invalidArgument(pair + ": " + std::to_string(p.sends->size()) +
                               " messages sent, " + std::to_string(back.recvs->size()) +
                               " received");
      for (size_t k = 0; k < p.sends->size(); ++k) {
        const int64_t s = offset_[r] + (*p.sends)[k];
        const int64_t d = offset_[q] + (*back.recvs)[k];
        const StepInfo& ss = infoOf(s, static_cast<int>(r));
        const StepInfo& ds = infoOf(d, static_cast<int>(q));
        const bool zeroS = ss.kind == StepKind::kNotify, zeroD = ds.kind == StepKind::kWait;
        if (zeroS != zeroD || (!zeroS && ss.aBytes != ds.dstBytes))
          return invalidArgument(pair + ": message " + std::to_string(k) + " is " + where(s) +
                                 " but " + where(d) + " (" + std::to_string(ss.aBytes) +
                                 " vs " + std::to_string(ds.dstBytes) + " bytes)");
        state(s).partner = static_cast<int32_t>(d);
        state(d).partner = static_cast<int32_t>(s);
      }
    }
  }
  return Status();
}

void Sim::addTimer(double at, double delay, TimerKind kind, int64_t step, int64_t cause) {
  timers_.push({delay >= 0 ? now_ + delay : at, timerSeq_++, kind, step, cause}, delay);
}

void Sim::startFlow(Flow&& f) {
  res_.flows++;
  int id;
  if (!freeFlows_.empty()) {
    id = freeFlows_.back();
    freeFlows_.pop_back();
    flows_[static_cast<size_t>(id)] = std::move(f);
  } else {
    id = static_cast<int>(flows_.size());
    flows_.push_back(std::move(f));
  }
  Flow& fl = flows_[static_cast<size_t>(id)];
  if (fl.kind != FlowKind::kGet && fl.kind != FlowKind::kMemory) {  // one at a time per conn
    if (connBusy_[fl.conn]) {
      if (queueNext_.size() < flows_.size()) queueNext_.resize(flows_.size(), -1);
      queueNext_[static_cast<size_t>(id)] = -1;
      int& tail = connTail_[fl.conn];
      (tail < 0 ? connHead_[fl.conn] : queueNext_[static_cast<size_t>(tail)]) = id;
      tail = id;
      return;
    }
    connBusy_[fl.conn] = true;
  }
  activate(id);
}

void Sim::activate(int id) {
  Flow& f = flows_[static_cast<size_t>(id)];
  bool limited = f.cap < kUnlimited;
  for (int r : f.resources) limited = limited || rs_[static_cast<size_t>(r)].capacity < kUnlimited;
  if (f.remaining <= 0 || !limited) {
    f.remaining = 0;
    bandwidthDone(id);
    return;
  }
  f.updatedUs = now_;
  f.rate = 0;
  // Alone on every resource it crosses, without a token bucket: no other rate can change, and
  // its own is what the filling gives a flow by itself (most flows of a large run: a rank's
  // memory, a port only it uses at the time).
  bool alone = !opt_.wholeComponents && f.resources.size() <= kAloneMax;
  for (int r : f.resources) {
    const ResState& rs = rs_[static_cast<size_t>(r)];
    alone = alone && rs.flows.empty() && rs.burst <= 0;
  }
  f.slots.resize(f.resources.size());
  for (size_t k = 0; k < f.resources.size(); ++k) {
    const size_t r = static_cast<size_t>(f.resources[k]);
    // Every active flow runs to its end, so what it will carry over each resource is known now:
    // no per-resource bookkeeping each time its rate changes.
    ResState& rs = rs_[r];
    rs.bytes += f.remaining * weight(f, k);
    if (rs.flows.empty()) rs.busySince = now_;
    f.slots[k] = static_cast<uint32_t>(rs.flows.size());
    rs.flows.push_back(id);
    if (!alone) dirtyResources_.push_back(f.resources[k]);
  }
  if (alone) rateAlone(id);
}

// fillShares and shareRates for S = {flow id} with nothing else on its resources, in the same
// operations and order, so the rate (and so every time) is the same to the last bit: nothing
// outside S leaves each resource its whole capacity, and one round of the filling freezes the
// flow on a full resource or at its cap, or (rounding) on the tightest resource. Kept on local
// arrays: the resources' second cache lines (ResState) are not touched.
void Sim::rateAlone(int id) {
  Flow& f = flows_[static_cast<size_t>(id)];
  std::array<int, kAloneMax> ids;
  std::array<double, kAloneMax> left, weights;
  std::array<size_t, kAloneMax> at;  // per entry of f.resources: its distinct resource
  size_t m = 0;
  for (size_t k = 0; k < f.resources.size(); ++k) {
    size_t j = 0;
    while (j < m && ids[j] != f.resources[k]) ++j;
    if (j == m) {
      ids[m] = f.resources[k];
      left[m] = std::max(0.0, rs_[static_cast<size_t>(f.resources[k])].capacity);
      weights[m++] = 0;
    }
    weights[j] += weight(f, k);
    at[k] = j;
  }
  double delta = kUnlimited;
  int tightest = -1;
  for (size_t j = 0; j < m; ++j)
    if (left[j] / weights[j] < delta) {
      delta = left[j] / weights[j];
      tightest = ids[j];
    }
  const double share = std::min(delta, f.cap);
  for (size_t k = 0; k < f.resources.size(); ++k) left[at[k]] -= share * weight(f, k);
  int full = -1;
  for (size_t k = 0; k < f.resources.size() && full < 0; ++k) {
    const double cap = rs_[static_cast<size_t>(f.resources[k])].capacity;
    if (cap < kUnlimited && left[at[k]] <= cap * 1e-12) full = f.resources[k];
  }
  f.bottleneck = full >= 0 || share >= f.cap * (1 - 1e-12) ? full : tightest;
  f.share = share;
  if (share == f.rate) return;  // 0: no completion until a later computation gives it a rate
  f.rate = share;
  completions_.set(id, now_ + f.remaining / f.rate);
}

// Brings `remaining` up to now at the flow's current rate (the resources' byte counts took the
// whole flow when it became active).
void Sim::settle(Flow& f) {
  const double dt = now_ - f.updatedUs;
  if (dt > 0 && f.rate > 0) f.remaining -= f.rate * dt;
  f.updatedUs = now_;
}

void Sim::removeActive(int id) {
  Flow& f = flows_[static_cast<size_t>(id)];
  for (size_t k = 0; k < f.resources.size(); ++k) {
    const size_t r = static_cast<size_t>(f.resources[k]);
    ResState& rs = rs_[r];
    SmallList<int, 4>& list = rs.flows;
    const uint32_t at = f.slots[k];
    const uint32_t last = static_cast<uint32_t>(list.size() - 1);
    if (at != last) {
      // The entry moving into `at`: find which of its occurrences sat at `last`.
      const int moved = list[last];
      Flow& mf = flows_[static_cast<size_t>(moved)];
      for (size_t j = 0; j < mf.resources.size(); ++j)
        if (mf.resources[j] == f.resources[k] && mf.slots[j] == last) {
          mf.slots[j] = at;
          break;
        }
      list[at] = moved;
    }
    list.pop_back();
    if (list.empty()) rs.busyUs += now_ - rs.busySince;
    // A resource left without flows has no rate to change (but a bucket's load to set).
    if (!list.empty() || rs.burst > 0) dirtyResources_.push_back(f.resources[k]);
  }
}

void Sim::bandwidthDone(int id) {
  // Read before the slot is freed: the calls below may start flows, which reuse it or move flows_.
  const Flow& done = flows_[static_cast<size_t>(id)];
  const FlowKind kind = done.kind;
  const int64_t step = done.step;
  const uint32_t conn = done.conn;
  const double latencyUs = done.latencyUs;
  freeFlows_.push_back(id);
  switch (kind) {
    case FlowKind::kMessage: {
      actions_.push_back({true, step, -1});
      addTimer(0, latencyUs, TimerKind::kDeliver, state(step).partner, step);
      nextOnConn(conn);
      break;
    }
    case FlowKind::kGet: addTimer(0, latencyUs, TimerKind::kReadArrived, step, -1); break;
    case FlowKind::kMemory: actions_.push_back({true, step, -1}); break;
    case FlowKind::kCpuSend: nextOnConn(conn); sendFlow(step); break;
    case FlowKind::kCpuRecv: nextOnConn(conn); received(step); break;
    case FlowKind::kCall: nextOnConn(conn); releaseRank(static_cast<int>(step)); break;
  }
}

void Sim::nextOnConn(uint32_t conn) {
  const int next = connHead_[conn];
  if (next >= 0) {
    connHead_[conn] = queueNext_[static_cast<size_t>(next)];
    if (connHead_[conn] < 0) connTail_[conn] = -1;
    activate(next);
  } else {
    connBusy_[conn] = false;
  }
}

void Sim::cpuFlow(FlowKind kind, int64_t step, int rank, double us) {
  Flow f;
  f.kind = kind;
  f.step = step;
  f.remaining = us;
  f.resources = cpusOf(rank);
  // A rank is one thread: its pieces run one after another, in the order they became ready.
  f.conn = cpuConnOf(rank);
  startFlow(std::move(f));
}

void Sim::releaseRank(int rank) {
  const size_t r = static_cast<size_t>(rank);
  for (int64_t g = offset_[r]; g < offset_[r + 1]; ++g)
    if (state(g).pending == 0) actions_.push_back({false, g, -1});
}

void Sim::memoryFlow(int64_t g, double bytes) {
  const int r = rankOf(g);
  Flow f;
  f.kind = FlowKind::kMemory;
  f.step = g;
  f.remaining = bytes;
  f.resources = {m_.memory(r)};  // r < ranks per host when folded: host 0's
  startFlow(std::move(f));
}

void Sim::receive(int64_t g, bool messageLast) {
  StepState& st = state(g);
  if (messageLast) st.cause = st.partner;
  const int r = st.rank;
  if (const double us = msgUs(r, peerOf(infoOf(g, r), r)); us > 0)
    cpuFlow(FlowKind::kCpuRecv, g, r, us);
  else
    received(g);
}

void Sim::received(int64_t g) {
  const StepInfo& s = infoOf(g);
  if (s.kind == StepKind::kRecvReduce)
    memoryFlow(g, opt_.reduceTraffic * static_cast<double>(s.dstBytes));
  else
    actions_.push_back({true, g, -2});
}

void Sim::sendFlow(int64_t g) {
  const int r = rankOf(g);
  const StepInfo& s = infoOf(g, r);
  const int peer = peerOf(s, r);
  const Route& route = routeOf(r, peer);
  Flow f;
  f.kind = FlowKind::kMessage;
  f.step = g;
  f.remaining = s.kind == StepKind::kSend ? static_cast<double>(s.aBytes) : 0;
  f.cap = route.cap;
  f.latencyUs = route.latencyUs;
  f.resources = route.resources;
  if (const double rate = msgBytesPerUs(r, peer); rate > 0 && f.remaining > 0) {
    // The copies through both ends' socket stacks, while the bytes flow.
    f.weights.assign(f.resources.size(), 1);
    for (int end : {r, peer})
      for (int c : cpusOf(end)) {
        f.resources.push_back(c);
        f.weights.push_back(1 / rate);
      }
  }
  f.conn = connOf(r, peer);
  startFlow(std::move(f));
}

void Sim::start(int64_t g, int64_t cause) {
  StepState& st = state(g);
  const int r = st.rank;
  const StepInfo& s = infoOf(g, r);
  const int peer = peerOf(s, r);
  const bool arrivedNow = st.arrived && st.startUs >= now_;  // at this very time
  st.ready = 1;
  st.startUs = now_;
  st.cause = static_cast<int32_t>(cause);
  switch (s.kind) {
    case StepKind::kSend:
    case StepKind::kNotify:
      if (const double us = msgUs(r, peer); us > 0)
        cpuFlow(FlowKind::kCpuSend, g, r, us);
      else
        sendFlow(g);
      break;
    case StepKind::kRecv:
    case StepKind::kRecvReduce:
    case StepKind::kWait:
      if (st.arrived) receive(g, arrivedNow);
      break;
    case StepKind::kGet:
    case StepKind::kGetReduce: {
      const Route& route = routeOf(peer, r);
      Flow f;
      f.kind = FlowKind::kGet;
      f.step = g;
      f.remaining = static_cast<double>(s.aBytes);
      f.cap = route.cap;
      f.latencyUs = route.latencyUs;
      f.resources = route.resources;
      startFlow(std::move(f));
      break;
    }
    case StepKind::kCopy:
      memoryFlow(g, opt_.copyTraffic * static_cast<double>(s.dstBytes));
      break;
    case StepKind::kReduce:
      memoryFlow(g, opt_.reduceTraffic * static_cast<double>(s.dstBytes));
      break;
    case StepKind::kQuantize:
    case StepKind::kDequantize:
    case StepKind::kRequantize:
      memoryFlow(g, opt_.quantTraffic * static_cast<double>(s.aBytes + s.dstBytes));
      break;
    case StepKind::kSignal:
      signals_[static_cast<size_t>(r)].push_back(g);
      actions_.push_back({true, g, -2});
      signalDone(r);
      break;
    case StepKind::kAwait: {
      const auto& sig = signals_[static_cast<size_t>(peer)];
      if (sig.size() >= s.target) {
        const int64_t by = sig[s.target - 1];
        const double at = state(by).doneUs + routeOf(peer, r).latencyUs;
        if (at > now_) st.cause = static_cast<int32_t>(by);
        addTimer(std::max(at, now_), -1, TimerKind::kAwaitDone, g, at > now_ ? by : cause);
      } else {
        waiters_[static_cast<size_t>(peer)].push_back(g);
      }
      break;
    }
  }
}

void Sim::signalDone(int rank) {
  auto& w = waiters_[static_cast<size_t>(rank)];
  const auto& sig = signals_[static_cast<size_t>(rank)];
  for (size_t k = 0; k < w.size();) {
    const int r = rankOf(w[k]);
    const StepInfo& s = infoOf(w[k], r);
    if (sig.size() >= s.target) {
      const int64_t by = sig[s.target - 1];
      addTimer(0, routeOf(rank, r).latencyUs, TimerKind::kAwaitDone, w[k], by);
      w[k] = w.back();
      w.pop_back();
    } else {
      ++k;
    }
  }
}

void Sim::finish(int64_t g, int64_t cause) {
  StepState& st = state(g);
  if (cause >= 0) st.cause = static_cast<int32_t>(cause);
  st.doneUs = now_;
  const int r = st.rank;
  const int64_t base = offset_[static_cast<size_t>(r)];
  const StepInfo& done = infoOf(g, r);
  for (uint32_t k = done.depBegin; k < done.depBegin + done.depCount; ++k) {
    const int64_t d = base + dependents_[k];
    if (--state(d).pending == 0) actions_.push_back({false, d, g});
  }
}

void Sim::settleBucket(size_t r) {
  const ResState& rs = rs_[r];
  if (rs.burst <= 0) return;
  const double dt = now_ - tokensAt_[r];
  tokens_[r] = std::clamp(tokens_[r] + (rs.capacity - load_[r]) * dt, 0.0, rs.burst);
  tokensAt_[r] = now_;
}

double Sim::capacityNow(size_t r) const {
  const ResState& rs = rs_[r];
  // A bucket with a byte's worth or less left counts as empty, so rounding cannot leave a
  // resource flipping between its two capacities.
  if (rs.burst > 0 && tokens_[r] > 1) return kUnlimited;
  return rs.capacity;
}

// Progressive filling over S (scratchFlows_, crossing scratchRes_): every rate of S grows
// from 0 together; a resource that fills (its capacity less what flows outside S use there)
// freezes its flows there, a flow reaching its cap freezes. Sets each S flow's `share` and
// `bottleneck`, and per resource what sharesHold needs: the load and fastest rate outside S.
void Sim::fillShares() {
  const std::vector<int>& res = scratchRes_;
  const std::vector<int>& fl = scratchFlows_;
  outsideFlows_ = false;
  for (int r : res) {
    const size_t ri = static_cast<size_t>(r);
    settleBucket(ri);  // at the load it had until now
    double out = 0, outMax = 0;
    ResState& rs = rs_[ri];
    const SmallList<int, 4>& on = rs.flows;
    for (size_t i = 0; i < on.size(); ++i) {
      if (flowMark_[static_cast<size_t>(on[i])] == epoch_) continue;
      outsideFlows_ = true;
      const double rate = flows_[static_cast<size_t>(on[i])].rate;
      out += rate * weightOn(on[i], ri, static_cast<uint32_t>(i));
      outMax = std::max(outMax, rate);
    }
    const double cap = capacityNow(ri);
    rs.left = cap == kUnlimited ? cap : std::max(0.0, cap - out);
    rs.out = out;
    rs.outMax = outMax;
    rs.unfrozen = 0;
    rs.weight = 0;
  }
  for (int id : fl) {
    Flow& f = flows_[static_cast<size_t>(id)];
    f.share = 0;
    f.bottleneck = -1;
    f.frozen = false;
    for (size_t k = 0; k < f.resources.size(); ++k) {
      ResState& rs = rs_[static_cast<size_t>(f.resources[k])];
      ++rs.unfrozen;
      rs.weight += weight(f, k);
    }
  }
  size_t unfrozen = fl.size();
  while (unfrozen > 0) {
    double delta = kUnlimited;
    int tightest = -1;
    for (int r : res) {
      const ResState& rs = rs_[static_cast<size_t>(r)];
      if (rs.unfrozen > 0 && rs.left / rs.weight < delta) {
        delta = rs.left / rs.weight;
        tightest = r;
      }
    }
    for (int id : fl) {
      const Flow& f = flows_[static_cast<size_t>(id)];
      if (!f.frozen) delta = std::min(delta, f.cap - f.share);
    }
    for (int id : fl) {
      Flow& f = flows_[static_cast<size_t>(id)];
      if (f.frozen) continue;
      f.share += delta;
      for (size_t k = 0; k < f.resources.size(); ++k)
        rs_[static_cast<size_t>(f.resources[k])].left -= delta * weight(f, k);
    }
    // Freeze flows at their ceiling or on a full resource (all of them, should rounding leave
    // none to freeze: the loop must end).
    const size_t before = unfrozen;
    for (int id : fl) {
      Flow& f = flows_[static_cast<size_t>(id)];
      if (f.frozen) continue;
      int full = -1;
      for (int r : f.resources) {
        const size_t ri = static_cast<size_t>(r);
        const double cap = capacityNow(ri);
        if (cap < kUnlimited && rs_[ri].left <= cap * 1e-12) {
          full = r;
          break;
        }
      }
      if (full < 0 && f.share < f.cap * (1 - 1e-12)) continue;
      f.frozen = true;
      f.bottleneck = full;
      --unfrozen;
      for (size_t k = 0; k < f.resources.size(); ++k) {
        ResState& rs = rs_[static_cast<size_t>(f.resources[k])];
        if (--rs.unfrozen == 0) rs.weight = 0;  // no rounding residue
        else rs.weight -= weight(f, k);
      }
    }
    if (unfrozen == before) {
      for (int id : fl) {
        Flow& f = flows_[static_cast<size_t>(id)];
        if (f.frozen) continue;
        f.frozen = true;
        f.bottleneck = tightest;
        for (int r : f.resources) --rs_[static_cast<size_t>(r)].unfrozen;
      }
      unfrozen = 0;
    }
  }
}

// Whether the filling's rates and the outside flows' kept ones are max-min fair together (see
// shareRates); if not, the resources whose flows must join S are in scratchGrow_ and the
// function has added their flows.
bool Sim::sharesHold() {
  if (!outsideFlows_) return true;  // S holds every flow on its resources: nothing to meet
  const std::vector<int>& res = scratchRes_;
  const std::vector<int>& fl = scratchFlows_;
  for (int r : res) {
    ResState& rs = rs_[static_cast<size_t>(r)];
    rs.load = rs.out;
    rs.maxIn = 0;
    rs.bottleneckMin = kUnlimited;
  }
  for (int id : fl) {
    const Flow& f = flows_[static_cast<size_t>(id)];
    for (size_t k = 0; k < f.resources.size(); ++k) {
      ResState& rs = rs_[static_cast<size_t>(f.resources[k])];
      rs.load += f.share * weight(f, k);
      rs.maxIn = std::max(rs.maxIn, f.share);
    }
    if (f.bottleneck >= 0) {
      ResState& b = rs_[static_cast<size_t>(f.bottleneck)];
      b.bottleneckMin = std::min(b.bottleneckMin, f.share);
    }
  }
  const auto full = [&](size_t ri) {
    const double cap = capacityNow(ri);
    return cap < kUnlimited && rs_[ri].load >= cap * (1 - 1e-9);
  };
  std::vector<int>& grow = scratchGrow_;
  grow.clear();
  if (++growEpoch_ == 0) {
    for (ResState& rs : rs_) rs.growMark = 0;
    growEpoch_ = 1;
  }
  const auto mark = [&](size_t ri) {
    if (rs_[ri].growMark == growEpoch_) return;
    rs_[ri].growMark = growEpoch_;
    grow.push_back(static_cast<int>(ri));
  };
  for (int r : res) {
    const size_t ri = static_cast<size_t>(r);
    const ResState& rs = rs_[ri];
    // A flow outside S faster than an S flow held here: it must give way.
    if (rs.outMax > rs.bottleneckMin * (1 + 1e-9)) mark(ri);
    // Flows outside S whose bottleneck S crosses: it must still be full, and theirs the top rate.
    for (int id : rs.flows) {
      if (flowMark_[static_cast<size_t>(id)] == epoch_) continue;
      const Flow& g = flows_[static_cast<size_t>(id)];
      if (g.bottleneck < 0) continue;
      const size_t b = static_cast<size_t>(g.bottleneck);
      const ResState& bs = rs_[b];
      if (bs.mark != epoch_ || bs.growMark == growEpoch_) continue;
      if (!full(b) || g.rate < std::max(bs.maxIn, bs.outMax) * (1 - 1e-9)) mark(b);
    }
  }
  for (int r : grow)
    for (int id : rs_[static_cast<size_t>(r)].flows) addToShare(id);
  return grow.empty();
}

// The weight of flow `id`'s entry at position `slot` of resource r's list (a flow crossing r
// twice has two entries there, with their own weights).
double Sim::weightOn(int id, size_t r, uint32_t slot) const {
  const Flow& f = flows_[static_cast<size_t>(id)];
  if (f.weights.empty()) return 1;
  for (size_t k = 0; k < f.resources.size(); ++k)
    if (static_cast<size_t>(f.resources[k]) == r && f.slots[k] == slot) return f.weights[k];
  return 1;  // not reached: every entry of the list is one of the flow's
}

// Brings flow `id` into the computation, with every resource it crosses.
void Sim::addToShare(int id) {
  if (flowMark_[static_cast<size_t>(id)] == epoch_) return;
  flowMark_[static_cast<size_t>(id)] = epoch_;
  scratchFlows_.push_back(id);
  for (int r : flows_[static_cast<size_t>(id)].resources) {
    uint32_t& mark = rs_[static_cast<size_t>(r)].mark;
    if (mark == epoch_) continue;
    mark = epoch_;
    scratchRes_.push_back(r);
  }
}

// Max-min fair rates, by progressive filling over a set S of flows (Sim::fillShares) while the
// flows outside S keep their rates, checked afterwards (Sim::sharesHold) and S grown where the
// check fails. The allocation is max-min fair exactly when every flow is at its cap or crosses
// a full resource on which no flow has a higher rate (its bottleneck); the filling gives S's
// flows such a bottleneck among the capacity outside flows leave them, so what remains to check
// is where S and the outside meet: no outside flow on an S flow's bottleneck may be faster, and
// an outside flow whose bottleneck S crosses must still have it. An outside flow whose
// bottleneck S does not cross keeps it (no rate on it changed). S starts as the flows on the
// resources where flows started or ended; after four growths it becomes everything connected to
// them through shared resources (which needs no check). Buckets whose tokens run out mark their
// resource too. Checks use a relative tolerance of 1e-9.
void Sim::shareRates() {
  res_.events++;
  if (++epoch_ == 0) {  // wrapped: clear the marks
    for (ResState& rs : rs_) rs.mark = 0;
    std::fill(flowMark_.begin(), flowMark_.end(), 0);
    epoch_ = 1;
  }
  if (flowMark_.size() < flows_.size()) flowMark_.resize(flows_.size(), 0);
  std::vector<int>& res = scratchRes_;
  std::vector<int>& fl = scratchFlows_;
  res.clear();
  fl.clear();
  // The changed resources open `res` (one left without flows is kept too: its bucket's load
  // must become 0); their flows, and the resources those cross, follow.
  for (int r : dirtyResources_) {
    uint32_t& mark = rs_[static_cast<size_t>(r)].mark;
    if (mark == epoch_) continue;
    mark = epoch_;
    res.push_back(r);
  }
  dirtyResources_.clear();
  for (size_t k = 0, changed = res.size(); k < changed; ++k)
    for (int id : rs_[static_cast<size_t>(res[k])].flows) addToShare(id);
  // The discovery order is itself deterministic (resource lists change only through events,
  // which run in a fixed order), so the result does not depend on anything but the input.
  for (int growths = 0;; ++growths) {
    if (growths == 4 || opt_.wholeComponents) {
      for (size_t k = 0; k < res.size(); ++k)
        for (int id : rs_[static_cast<size_t>(res[k])].flows) addToShare(id);
      fillShares();
      break;
    }
    fillShares();
    if (sharesHold()) break;
    res_.growths++;
  }
  res_.sharedFlows += fl.size();
  for (int id : fl) {
    Flow& f = flows_[static_cast<size_t>(id)];
    if (f.share == f.rate) continue;  // its completion stands
    settle(f);  // at the old rate, up to now
    f.rate = f.share;
    if (f.rate > 0)
      completions_.set(id, now_ + f.remaining / f.rate);
    else
      completions_.erase(id);
  }
  // Buckets: the new load, and when a bucket that is drained faster than it fills runs dry
  // (then its capacity falls back and the rates change).
  for (int r : res) {
    const size_t ri = static_cast<size_t>(r);
    const ResState& rs = rs_[ri];
    if (rs.burst <= 0) continue;
    double load = 0;  // weight 1: only NIC ports have buckets, and CPU weights are on CPUs
    for (int id : rs.flows) load += flows_[static_cast<size_t>(id)].rate;
    load_[ri] = load;
    ++bucketVersion_[ri];
    const double over = load - rs.capacity;
    if (capacityNow(ri) == kUnlimited && over > 0)
      bucketEvents_.push({now_ + tokens_[ri] / over, r, bucketVersion_[ri]});
  }
}

StatusOr<Result> Sim::run() {
  const size_t n = static_cast<size_t>(count_);
  nranks_ = m_.nranks();
  localResources_ = m_.localResources();
  foldKind_ = opt_.fold;
  fold_ = foldKind_ != Fold::kNone;
  if (fold_ && !m_.notFoldable().empty())
    return invalidArgument("simulate: cannot fold by host: " + m_.notFoldable());
  if (foldKind_ == Fold::kXor) {
    auto pow2 = [](int v) { return v > 0 && (v & (v - 1)) == 0; };
    if (!pow2(m_.hosts()) || !pow2(m_.ranksPerHost()))
      return invalidArgument("simulate: folding by XOR needs powers of two hosts and ranks per "
                             "host, not " + std::to_string(m_.hosts()) + " x " +
                             std::to_string(m_.ranksPerHost()));
  }
  const size_t expected = static_cast<size_t>(fold_ ? m_.ranksPerHost() : nranks_);
  if (n != expected)
    return invalidArgument("simulate: " + std::to_string(n) + " plans for a machine of " +
                           std::to_string(m_.nranks()) + " ranks" +
                           (fold_ ? " folded by host (one plan per rank of a host)" : ""));
  if (opt_.msgUs < 0 || opt_.msgBytesPerUs < 0 || opt_.callUs < 0)
    return invalidArgument("simulate: negative CPU cost");
  shmMsgUs_ = opt_.shmMsgUs < 0 ? opt_.msgUs : opt_.shmMsgUs;
  shmMsgBytesPerUs_ = opt_.shmMsgBytesPerUs < 0 ? opt_.msgBytesPerUs : opt_.shmMsgBytesPerUs;
  if ((opt_.msgUs > 0 || opt_.msgBytesPerUs > 0 || opt_.callUs > 0 || shmMsgUs_ > 0 ||
       shmMsgBytesPerUs_ > 0) &&
      !m_.hasCpu())
    return invalidArgument("simulate: CPU costs need a machine with CPUs (flat hosts with "
                           "FlatSpec::cpu)");
  CHORUS_RETURN_IF_ERROR(load());
  const size_t conns = connBase_.back() + n;
  connBusy_.assign(conns, 0);
  connHead_.assign(conns, -1);
  connTail_.assign(conns, -1);
  queueNext_.clear();
  const size_t total = static_cast<size_t>(offset_[n]);
  signals_.assign(static_cast<size_t>(nranks_), {});
  waiters_.assign(static_cast<size_t>(nranks_), {});
  const size_t nres = static_cast<size_t>(m_.numResources());
  rs_.assign(nres, {});
  for (size_t r = 0; r < nres; ++r) {
    rs_[r].capacity = m_.capacity(static_cast<int>(r));
    rs_[r].burst = m_.burstBytes(static_cast<int>(r));
  }
  // Buckets start empty: the calls a benchmark times run back to back, and each leaves the
  // links it saturated with no tokens left (a full bucket would be an isolated call's).
  tokens_.assign(nres, 0);
  if (opt_.buckets == BucketStart::kFull)
    for (size_t r = 0; r < nres; ++r) tokens_[r] = m_.burstBytes(static_cast<int>(r));
  tokensAt_.assign(nres, 0);
  load_.assign(nres, 0);
  bucketVersion_.assign(nres, 0);
  CHORUS_RETURN_IF_ERROR(match());
  peers_ = {};
  lists_ = {};
  for (size_t r = 0; r < n; ++r)
    if (opt_.callUs > 0)
      cpuFlow(FlowKind::kCall, static_cast<int64_t>(r), static_cast<int>(r), opt_.callUs);
    else
      releaseRank(static_cast<int>(r));

  for (;;) {
    while (!actions_.empty()) {
      const Action a = actions_.front();
      actions_.pop_front();
      if (a.finish)
        finish(a.step, a.cause);
      else
        start(a.step, a.cause);
    }
    if (!dirtyResources_.empty()) shareRates();
    while (!bucketEvents_.empty() &&
           bucketEvents_.top().version !=
               bucketVersion_[static_cast<size_t>(bucketEvents_.top().resource)])
      bucketEvents_.pop();
    const double next = completions_.empty() ? kUnlimited : completions_.topAt();
    const double timerAt = timers_.empty() ? kUnlimited : timers_.top().at;
    const double dryAt = bucketEvents_.empty() ? kUnlimited : bucketEvents_.top().at;
    const double t = std::min({next, timerAt, dryAt});
    if (t == kUnlimited) break;
    now_ = std::max(now_, t);
    // Buckets that run dry now: their resources' flows are shared out again.
    while (!bucketEvents_.empty() && bucketEvents_.top().at <= now_) {
      const BucketEvent e = bucketEvents_.top();
      bucketEvents_.pop();
      const size_t ri = static_cast<size_t>(e.resource);
      if (e.version != bucketVersion_[ri]) continue;
      settleBucket(ri);
      tokens_[ri] = 0;
      ++bucketVersion_[ri];
      dirtyResources_.push_back(e.resource);
    }
    // Flows whose last byte leaves now (within rounding), in a fixed order: by step (ties in the
    // order std::sort leaves them, which depends only on the order they were found in).
    done_.clear();
    while (!completions_.empty() && completions_.topAt() <= t + t * 1e-12 + 1e-12) {
      const int id = completions_.topFlow();
      completions_.pop();
      Flow& f = flows_[static_cast<size_t>(id)];
      settle(f);
      done_.emplace_back(f.step, id);
    }
    std::sort(done_.begin(), done_.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& d : done_) removeActive(d.second);
    for (const auto& d : done_) bandwidthDone(d.second);
    while (!timers_.empty() && timers_.top().at <= now_) {
      const Timer tm = timers_.top();
      timers_.pop();
      switch (tm.kind) {
        case TimerKind::kDeliver: {  // from its partner, tm.cause
          StepState& st = state(tm.step);
          st.arrived = 1;
          st.startUs = now_;  // the arrival is the first event, or the later one
          if (st.ready) receive(tm.step, true);
          break;
        }
        case TimerKind::kReadArrived:
          if (infoOf(tm.step).kind == StepKind::kGetReduce)
            memoryFlow(tm.step,
                       opt_.reduceTraffic * static_cast<double>(infoOf(tm.step).dstBytes));
          else
            actions_.push_back({true, tm.step, -2});
          break;
        case TimerKind::kAwaitDone: actions_.push_back({true, tm.step, tm.cause}); break;
      }
    }
  }

  // Everything must have run; what did not names the first stuck step of each rank.
  std::string stuck;
  int stuckRanks = 0;
  res_.rankDoneUs.assign(static_cast<size_t>(nranks_), 0);
  for (size_t r = 0; r < n; ++r) {
    for (int64_t g = offset_[r]; g < offset_[r + 1]; ++g) {
      const double d = state(g).doneUs;
      if (d < 0) {
        if (stuckRanks++ < 4) stuck += (stuck.empty() ? "" : "; ") + where(g);
        break;
      }
      res_.rankDoneUs[r] = std::max(res_.rankDoneUs[r], d);
    }
  }
  res_.resourceBytes.resize(rs_.size());
  res_.resourceBusyUs.resize(rs_.size());
  for (size_t r = 0; r < rs_.size(); ++r) {
    res_.resourceBytes[r] = rs_[r].bytes;
    res_.resourceBusyUs[r] = rs_[r].busyUs;
  }
  if (fold_) {
    // Every image on host h did what its representative did, on host h's copies.
    for (size_t r = n; r < res_.rankDoneUs.size(); ++r) res_.rankDoneUs[r] = res_.rankDoneUs[r % n];
    const size_t local = static_cast<size_t>(localResources_);
    for (size_t id = local; id < static_cast<size_t>(m_.hostResources()); ++id) {
      res_.resourceBytes[id] = res_.resourceBytes[id % local];
      res_.resourceBusyUs[id] = res_.resourceBusyUs[id % local];
    }
  }
  if (stuckRanks > 0)
    return internalError("simulate: deadlock, " + std::to_string(stuckRanks) +
                         " rank(s) never finished: " + stuck);
  res_.timeUs = 0;
  int64_t last = -1;
  for (size_t g = 0; g < total; ++g)
    if (last < 0 || state_[g].doneUs > res_.timeUs) {
      res_.timeUs = state_[g].doneUs;
      last = static_cast<int64_t>(g);
    }
  for (int64_t g = last; g >= 0; g = state(g).cause) {
    const int r = rankOf(g);
    const StepInfo& s = infoOf(g, r);
    PathStep ps;
    ps.rank = r;
    ps.step = static_cast<uint32_t>(g - offset_[static_cast<size_t>(r)]);
    ps.kind = s.kind;
    ps.peer = peerOf(s, r);
    ps.bytes = isSendLike(s.kind) || s.kind == StepKind::kGet || s.kind == StepKind::kGetReduce
                   ? s.aBytes
                   : s.dstBytes;
    ps.startUs = state(g).startUs;
    ps.endUs = state(g).doneUs;
    res_.criticalPath.push_back(ps);
    if (res_.criticalPath.size() > total) break;  // a cycle would be a bug; do not hang
  }
  std::reverse(res_.criticalPath.begin(), res_.criticalPath.end());
  return std::move(res_);
}

}  // namespace

const char* foldName(Fold f) {
  switch (f) {
    case Fold::kNone: return "none";
    case Fold::kShift: return "shift";
    case Fold::kXor: return "xor";
  }
  return "?";
}

StatusOr<Result> simulate(const Machine& machine, int count, const PlanSource& source,
                          const EngineOptions& options) {
  if (count < 0) return invalidArgument("simulate: " + std::to_string(count) + " plans");
  if (options.buckets != BucketStart::kSteady) {
    Sim sim(machine, count, source, options);
    return sim.run();
  }
  EngineOptions o = options;
  o.buckets = BucketStart::kFull;
  StatusOr<Result> full = Sim(machine, count, source, o).run();
  if (!full.ok()) return full;
  for (int r = 0; r < machine.numResources(); ++r)
    if (machine.burstBytes(r) > 0 &&
        full->resourceBytes[static_cast<size_t>(r)] >
            machine.capacity(r) * full->timeUs * (1 + 1e-9)) {
      o.buckets = BucketStart::kEmpty;  // this link drains its bucket call after call
      return Sim(machine, count, source, o).run();
    }
  return full;
}

StatusOr<Result> simulate(const Machine& machine, std::span<const exec::Plan* const> plans,
                          const EngineOptions& options) {
  const PlanSource source = [&](int r) -> StatusOr<RankPlan> {
    // Not owned: the caller keeps the plans alive for the call.
    return RankPlan{std::shared_ptr<const exec::Plan>(std::shared_ptr<const exec::Plan>(),
                                                      plans[static_cast<size_t>(r)]),
                    -1};
  };
  return simulate(machine, static_cast<int>(plans.size()), source, options);
}

}  // namespace chorus::sim
