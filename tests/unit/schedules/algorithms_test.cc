// Every registered algorithm, through the symbolic checker, for every rank count 1..33. The
// checker reads the schedules of the plans the executor runs (exec::planAlgorithm, as the
// communicator makes them), not a twin built for the test.
//
// Each (algorithm, band of rank counts) is its own test so ctest -j spreads the sweep over cores.
// For every rank count: counts {0, 1, 7, n-1, n+1, 1000}, element sizes {1, 2, 4, 8}, in place
// and out of place, chunks of 3 elements (many chunks; chunkBytes deliberately not a multiple of
// the element size) and of 1 MiB (one chunk), and roots 0, n-1 and n/2 for rooted collectives.
// Where count is per block (reduce-scatter, all-gather, gather, scatter, all-to-all) the large
// case is max(n+2, 1000/n) so a rank holds about 1000 elements, not n*1000. Above 8 ranks the
// large case runs with one element size per rank count (rotating through all four) to keep the
// binary fast; the schedule does not depend on the element size beyond scaling, which the
// small counts cover at every size.
#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <numeric>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/support/checker.h"
#include "algorithms/registry.h"
#include "src/exec/plan.h"

namespace chorus::algo {
namespace {

// The checker builds and drops large vectors case after case; by default glibc hands freed
// memory back to the kernel and maps big blocks afresh, so every case faults its pages in
// again, which on a VM (~12 us a fault) was most of the sweep's time. Keep the heap.
const bool kHeapKept = [] {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // the largest glibc takes
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  return true;
}();


using sched::CollDesc;
using sched::Coll;

bool rooted(Coll c) {
  return c == Coll::kBroadcast || c == Coll::kReduce || c == Coll::kGather || c == Coll::kScatter;
}

constexpr size_t kElemSizes[] = {1, 2, 4, 8};

uint64_t smallChunk(size_t es) { return 3 * es + es / 2; }  // rounds down to 3 elements
constexpr uint64_t kLargeChunk = 1 << 20;

// Random all-to-allv views: per-pair counts in [0, maxCount] with many zeros, blocks laid out in
// a random order with random gaps. In place the count matrix is symmetric and the send layout
// is the receive layout (MPI_IN_PLACE semantics).
std::vector<CollDesc> allToAllvViews(int n, uint64_t maxCount, size_t es, bool inPlace,
                                     uint64_t chunkBytes, std::mt19937_64& rng) {
  std::vector<std::vector<uint64_t>> m(n, std::vector<uint64_t>(n, 0));  // m[p][q]: p sends q
  for (int p = 0; p < n; ++p)
    for (int q = 0; q < n; ++q) {
      if (inPlace && q < p) {
        m[p][q] = m[q][p];
        continue;
      }
      m[p][q] = (rng() % 4 == 0 || maxCount == 0) ? 0 : rng() % (maxCount + 1);
    }
  auto layout = [&](const std::vector<uint64_t>& counts, std::vector<uint64_t>& displs) {
    std::vector<int> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    displs.assign(static_cast<size_t>(n), 0);
    uint64_t at = 0;
    for (int p : order) {
      at += rng() % 3;  // a gap the collective must leave alone
      displs[static_cast<size_t>(p)] = at;
      at += counts[static_cast<size_t>(p)];
    }
  };
  std::vector<CollDesc> d(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    CollDesc& x = d[r];
    x.coll = Coll::kAllToAllv;
    x.elemSize = es;
    x.inPlace = inPlace;
    x.chunkBytes = chunkBytes;
    for (int p = 0; p < n; ++p) {
      x.sendCounts.push_back(m[r][p]);
      x.recvCounts.push_back(m[p][r]);
    }
    layout(x.recvCounts, x.recvDispls);
    if (inPlace) {
      x.sendDispls = x.recvDispls;
    } else {
      layout(x.sendCounts, x.sendDispls);
    }
  }
  return d;
}

void checkOne(const AlgoInfo& a, int n, const std::vector<CollDesc>& d, uint64_t seed) {
  sched::CheckOptions opts;
  opts.seed = seed;
  const CollDesc& x = d[0];
  // What the executor runs: each rank's prepared plan, made the way the communicator makes it.
  std::vector<sched::Schedule> plans;
  for (int r = 0; r < n; ++r) {
    auto plan = exec::planAlgorithm(a, d[r], r, n, {});
    ASSERT_TRUE(plan.ok()) << collName(a.coll) << ":" << a.name << " n=" << n << " rank " << r
                           << ": " << plan.status().toString();
    plans.push_back((*plan)->schedule);
  }
  Status st = sched::checkSchedules(a.coll, n, d, plans, opts);
  ASSERT_TRUE(st.ok()) << collName(a.coll) << ":" << a.name << " n=" << n << " count=" << x.count
                       << " elemSize=" << x.elemSize << " inPlace=" << x.inPlace
                       << " chunkBytes=" << x.chunkBytes << " root=" << x.root << "\n"
                       << st.toString();
  for (int r = 0; r < n; ++r) {
    const sched::Schedule& s = plans[static_cast<size_t>(r)];
    // Its own name, or the registered algorithm it falls back to where it does not apply.
    const AlgoInfo* built = findAlgorithm(a.coll, s.algo);
    ASSERT_NE(built, nullptr) << s.algo;
    if (n > 1 && built->hearsEveryPeer) {
      // Its headers go to and come from every other rank (what they carry besides the call
      // must reach every rank alike).
      const std::set<int> peers(s.peers.begin(), s.peers.end());
      ASSERT_EQ(peers.size(), static_cast<size_t>(n - 1)) << s.algo << " rank " << r;
      ASSERT_EQ(peers.count(r), 0u) << s.algo << " rank " << r;
    }
    if (n > 1 && s.usesWindow()) {
      // Window schedules have no message peers; they await every other rank at least once,
      // which is where mismatched calls are caught (each rank's header comes with its signal).
      std::set<int> awaited;
      for (const sched::Step& st : s.steps)
        if (st.kind == sched::StepKind::kAwait) awaited.insert(st.peer);
      ASSERT_EQ(awaited.size(), static_cast<size_t>(n - 1)) << "rank " << r;
    } else if (n > 1) {
      ASSERT_FALSE(s.peers.empty()) << "rank " << r << " records no peer";
    }
  }
}

void sweep(const AlgoInfo& a, int n) {
  std::mt19937_64 rng(static_cast<uint64_t>(n) * 7919 + static_cast<uint64_t>(a.coll));
  if (a.coll == Coll::kBarrier) {
    checkOne(a, n, std::vector<CollDesc>(static_cast<size_t>(n), CollDesc{Coll::kBarrier}), n);
    return;
  }
  if (a.coll == Coll::kAllToAllv) {
    for (uint64_t maxCount : {0, 1, 3, 12})
      for (size_t es : kElemSizes)
        for (bool inPlace : {false, true})
          for (uint64_t chunk : {smallChunk(es), kLargeChunk}) {
            if (n > 8 && maxCount == 12 && es != kElemSizes[n % 4]) continue;
            checkOne(a, n, allToAllvViews(n, maxCount, es, inPlace, chunk, rng), rng());
          }
    return;
  }
  std::set<uint64_t> counts = {0, 1, 7, static_cast<uint64_t>(n - 1),
                               static_cast<uint64_t>(n + 1), 1000};
  std::set<int> roots = {0};
  if (rooted(a.coll)) roots = {0, n - 1, n / 2};
  // Where count is per block, a rank holds n*count elements (and a reduce-scatter's partials
  // hold up to n contributions each): keep the largest case near 1000 elements per rank.
  const bool perBlock = a.coll == Coll::kAllToAll || a.coll == Coll::kReduceScatter ||
                        a.coll == Coll::kAllGather || a.coll == Coll::kGather ||
                        a.coll == Coll::kScatter;
  const uint64_t big = perBlock ? std::max<uint64_t>(n + 2, 1000 / n) : 1000;
  counts.erase(1000);
  counts.insert(big);
  for (uint64_t count : counts)
    for (size_t es : kElemSizes)
      for (bool inPlace : {false, true})
        for (uint64_t chunk : {smallChunk(es), kLargeChunk})
          for (int root : roots) {
            if (n > 8 && count == big && es != kElemSizes[n % 4]) continue;
            CollDesc d;
            d.coll = a.coll;
            d.count = count;
            d.elemSize = es;
            d.inPlace = inPlace;
            d.chunkBytes = chunk;
            d.root = root;
            // A window of small rounds (many rounds; the one-shot applies only to small
            // messages and builds its fallback above) with the small chunks, a large one with
            // the large chunks. Algorithms without Needs::kHostWindow ignore it.
            d.window = chunk == kLargeChunk ? sched::WindowGeometry{8 << 10, 8 << 10}
                                            : sched::WindowGeometry{256, 1024};
            checkOne(a, n, std::vector<CollDesc>(static_cast<size_t>(n), d), rng());
            if (testing::Test::HasFatalFailure()) return;
          }
}

struct Band {
  std::string algo;  // qualified name
  int lo, hi;        // rank counts, inclusive
};

void PrintTo(const Band& b, std::ostream* os) {
  *os << b.algo << " n=" << b.lo << ".." << b.hi;
}

class AlgorithmSweep : public testing::TestWithParam<Band> {};

TEST_P(AlgorithmSweep, SymbolicChecker) {
  const Band b = GetParam();
  const std::string_view q = b.algo;
  const size_t colon = q.find(':');
  const AlgoInfo* a = nullptr;
  for (const AlgoInfo* x : allAlgorithms())
    if (q.substr(0, colon) == collName(x->coll) && q.substr(colon + 1) == x->name) a = x;
  ASSERT_NE(a, nullptr) << b.algo;
  for (int n = b.lo; n <= b.hi; ++n) {
    sweep(*a, n);
    if (HasFatalFailure()) return;
  }
}

// Every registered algorithm (the registry is complete before main(), when gtest expands this);
// the quantized ones have their own sweep (quant_algorithms_test.cc): they need a config and
// quantizable types.
std::vector<Band> bands() {
  std::vector<Band> out;
  for (const AlgoInfo* a : allAlgorithms()) {
    if (a->quantized) continue;
    const std::string name = std::string(collName(a->coll)) + ":" + a->name;
    for (Band b : {Band{name, 1, 12}, Band{name, 13, 20}, Band{name, 21, 27},
                   Band{name, 28, 33}})
      out.push_back(b);
  }
  return out;
}

std::string bandName(const testing::TestParamInfo<Band>& info) {
  std::string s = info.param.algo;
  std::replace(s.begin(), s.end(), ':', '_');
  return s + "_n" + std::to_string(info.param.lo) + "to" + std::to_string(info.param.hi);
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, AlgorithmSweep, testing::ValuesIn(bands()), bandName);

TEST(Registry, EveryCollectiveHasItsAlgorithm) {
  const struct {
    Coll coll;
    const char* name;
    Needs needs;
  } want[] = {{Coll::kAllReduce, "ring", Needs::kMessages},
              {Coll::kAllReduce, "oneshot", Needs::kMessages},
              {Coll::kReduceScatter, "ring", Needs::kMessages},
              {Coll::kAllGather, "ring", Needs::kMessages},
              {Coll::kBroadcast, "chain", Needs::kMessages},
              {Coll::kReduce, "chain", Needs::kMessages},
              {Coll::kAllToAll, "pairwise", Needs::kMessages},
              {Coll::kAllToAllv, "pairwise", Needs::kMessages},
              {Coll::kGather, "linear", Needs::kMessages},
              {Coll::kScatter, "linear", Needs::kMessages},
              {Coll::kBarrier, "dissemination", Needs::kMessages},
              {Coll::kAllReduce, "twoshot", Needs::kOneSided},
              {Coll::kReduceScatter, "direct", Needs::kOneSided},
              {Coll::kAllGather, "direct", Needs::kOneSided},
              {Coll::kBroadcast, "direct", Needs::kOneSided},
              {Coll::kReduce, "direct", Needs::kOneSided},
              {Coll::kAllToAll, "direct", Needs::kOneSided},
              {Coll::kGather, "direct", Needs::kOneSided},
              {Coll::kScatter, "direct", Needs::kOneSided},
              {Coll::kAllReduce, "oneshot_staged", Needs::kHostWindow},
              {Coll::kAllReduce, "twoshot_staged", Needs::kHostWindow},
              {Coll::kAllGather, "direct_staged", Needs::kHostWindow},
              {Coll::kAllReduce, "tree", Needs::kMessages},
              {Coll::kAllReduce, "rabenseifner", Needs::kMessages},
              {Coll::kAllReduce, "recursive_doubling", Needs::kMessages},
              {Coll::kAllReduce, "hier", Needs::kMessages},
              {Coll::kBroadcast, "binomial", Needs::kMessages},
              {Coll::kBroadcast, "hier", Needs::kMessages},
              {Coll::kReduce, "binomial", Needs::kMessages},
              {Coll::kAllGather, "hier", Needs::kMessages},
              {Coll::kReduceScatter, "hier", Needs::kMessages},
              {Coll::kAllToAll, "hier", Needs::kMessages}};
  size_t unquantized = 0;
  for (const AlgoInfo* a : allAlgorithms()) unquantized += a->quantized ? 0 : 1;
  EXPECT_EQ(unquantized, std::size(want));
  for (const auto& w : want) {
    const AlgoInfo* a = findAlgorithm(w.coll, w.name);
    ASSERT_NE(a, nullptr) << w.name;
    EXPECT_EQ(a->coll, w.coll);
    EXPECT_NE(std::string(a->description), "");
    EXPECT_NE(a->traffic, nullptr);
    EXPECT_EQ(findAlgorithm(w.coll, std::string(collName(w.coll)) + ":" + w.name), a);
    EXPECT_EQ(a->needs, w.needs) << collName(w.coll) << ":" << w.name;
    EXPECT_EQ(algorithmAt(algorithmIndex(a)), a);
    // The declared needs are what the schedules do: gets of peers' buffers exactly for
    // kOneSided, the window exactly for kHostWindow.
    CollDesc d{w.coll};
    d.count = 6;
    d.root = 1;
    d.window = {256, 96};
    if (w.coll == Coll::kAllToAllv) {
      d.sendCounts = d.recvCounts = std::vector<uint64_t>(4, 2);
      d.sendDispls = d.recvDispls = {0, 2, 4, 6};
    }
    bool oneSided = false, window = false;
    for (int r = 0; r < 4; ++r) {
      const sched::Schedule sch = makeSchedule(*a, d, r, 4);
      oneSided = oneSided || sch.needsOneSided();
      window = window || sch.usesWindow();
    }
    EXPECT_EQ(oneSided, w.needs == Needs::kOneSided) << collName(w.coll) << ":" << w.name;
    EXPECT_EQ(window, w.needs == Needs::kHostWindow) << collName(w.coll) << ":" << w.name;
  }
  // Sorted by collective, tie priority, then name; a stable order every rank of a build shares.
  const auto all = allAlgorithms();
  for (size_t i = 1; i < all.size(); ++i) {
    const AlgoInfo& x = *all[i - 1];
    const AlgoInfo& y = *all[i];
    EXPECT_TRUE(x.coll < y.coll ||
                (x.coll == y.coll && (x.tiePriority < y.tiePriority ||
                                      (x.tiePriority == y.tiePriority &&
                                       std::string(x.name) < y.name))));
  }
  EXPECT_EQ(findAlgorithm(Coll::kAllReduce, "chain"), nullptr);
  EXPECT_EQ(findAlgorithm(Coll::kAllReduce, "broadcast:ring"), nullptr);
  EXPECT_EQ(findAlgorithm(Coll::kAllReduce, "allreduce:"), nullptr);
  EXPECT_EQ(algorithmAt(kNoAlgorithm), nullptr);
}

TEST(Registry, CountZeroStillNamesPeers) {
  for (const AlgoInfo* ap : allAlgorithms()) {
    const AlgoInfo& a = *ap;
    CollDesc d{a.coll};
    d.count = 0;
    d.root = 2;
    if (a.quantized) d.quant = kernels::QuantConfig{};
    d.window = {256, 96};
    if (a.coll == Coll::kAllToAllv) {
      d.sendCounts = d.sendDispls = d.recvCounts = d.recvDispls = std::vector<uint64_t>(5, 0);
    }
    for (int r = 0; r < 5; ++r) {
      const sched::Schedule s = makeSchedule(a, d, r, 5);
      if (a.needs == Needs::kHostWindow) {
        // A signal (with the header) and an await of every peer, nothing else.
        ASSERT_EQ(s.steps.size(), 5u) << a.name;
        EXPECT_EQ(s.steps[0].kind, sched::StepKind::kSignal) << a.name;
        for (size_t k = 1; k < s.steps.size(); ++k)
          EXPECT_EQ(s.steps[k].kind, sched::StepKind::kAwait) << a.name;
        continue;
      }
      EXPECT_TRUE(s.steps.empty() || a.coll == Coll::kBarrier) << a.name;
      EXPECT_FALSE(s.peers.empty()) << collName(a.coll) << " rank " << r;
      if (a.hearsEveryPeer) {
        EXPECT_EQ(s.peers.size(), 4u) << a.name << " rank " << r;
      }
    }
    d.root = 0;
    const sched::Schedule one = makeSchedule(a, d, 0, 1);
    EXPECT_TRUE(one.peers.empty()) << collName(a.coll);
  }
}

// Ring step counts and traffic: the schedule moves exactly 2(n-1)/n of the message per rank.
TEST(RingAllReduce, TrafficIsBandwidthOptimal) {
  const AlgoInfo* a = findAlgorithm(Coll::kAllReduce, "ring");
  CollDesc d{Coll::kAllReduce};
  d.count = 1000;
  d.elemSize = 4;
  d.chunkBytes = 64;
  for (int n : {2, 3, 7, 8}) {
    const sched::Schedule s = makeSchedule(*a, d, 1, n);
    EXPECT_EQ(s.peers.front(), 2 % n);  // next first, then prev
    uint64_t sent = 0;
    for (int p = 0; p < n; ++p) sent += s.bytesTo(p);
    // Slices differ by at most one element: sent is within n-1 elements of 2(n-1)/n * N per
    // phase pair.
    const double ideal = 2.0 * (n - 1) / n * 4000;
    EXPECT_NEAR(static_cast<double>(sent), ideal, 2.0 * 4 * n) << "n=" << n;
    EXPECT_EQ(s.scratchBytes, 0u);
  }
}

TEST(ScratchBound, PartialsUseAFewChunksNotTheMessage) {
  CollDesc d{Coll::kReduce};
  d.count = 1 << 20;
  d.elemSize = 4;
  d.chunkBytes = 4096;
  const sched::Schedule mid = makeSchedule(*findAlgorithm(Coll::kReduce, "chain"), d, 3, 8);
  EXPECT_EQ(mid.scratchBytes, 4u * 4096);
  d.coll = Coll::kReduceScatter;
  const sched::Schedule rs =
      makeSchedule(*findAlgorithm(Coll::kReduceScatter, "ring"), d, 3, 8);
  EXPECT_EQ(rs.scratchBytes, 4u * 4096);
}

}  // namespace
}  // namespace chorus::algo
