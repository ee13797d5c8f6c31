// Every collective x type x op x size x rank count, in place and out of place, through real
// processes, the real bootstrap and the real transports, against a reference computed here;
// and every registered algorithm over every registered transport (see "What runs" below).
//
// One test per (collective, rank count, configuration): its ranks run the whole type/op/size
// sweep in one job, so a process launch is paid once. Inputs are fresh per case (seeded by the
// case), outputs are poisoned before every call, and the first wrong element is reported with
// its index and values.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <iterator>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "tests/multiproc/harness.h"
#include "tests/multiproc/values.h"

namespace chorus::test {
namespace {

enum class C { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll, kAllToAllv,
               kGather, kScatter, kBarrier };
const char* cName(C c) {
  static const char* n[] = {"AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter",
                            "AllToAll", "AllToAllv", "Gather", "Scatter", "Barrier"};
  return n[static_cast<int>(c)];
}
bool reduces(C c) { return c == C::kAllReduce || c == C::kReduce || c == C::kReduceScatter; }
bool rooted(C c) { return c == C::kBroadcast || c == C::kReduce || c == C::kGather || c == C::kScatter; }
bool hasInPlace(C c) {
  return c != C::kAllToAllv && c != C::kGather && c != C::kScatter && c != C::kBarrier;
}

constexpr uint8_t kPoison = 0xA5;
const uint64_t kSizes[] = {0, 1, 7, 1023, 4096, (1u << 20) + 3};
const chorusDataType_t kTypes[] = {chorusInt8,    chorusUint8,   chorusInt32,     chorusUint32,
                                   chorusInt64,   chorusUint64,  chorusFloat16,   chorusBfloat16,
                                   chorusFloat32, chorusFloat64, chorusFloat8e4m3, chorusFloat8e5m2};

struct Case {
  C coll;
  chorusDataType_t type;
  int op;
  uint64_t count;
  bool inPlace;
  int root;
  uint32_t seed;
};

std::string describe(const Case& c) {
  return std::string(cName(c.coll)) + "(" + typeName(c.type) + ", op " + std::to_string(c.op) +
         ", count " + std::to_string(c.count) + (c.inPlace ? ", in place" : "") +
         (rooted(c.coll) ? ", root " + std::to_string(c.root) : "") + ")";
}

// Per-pair element counts for AllToAllv: uneven, some zero.
uint64_t vcount(const Case& c, int from, int to) {
  if (c.count == 0) return 0;
  uint64_t h = (static_cast<uint64_t>(from) * 31 + static_cast<uint64_t>(to) * 17 + c.seed) % 7;
  return h == 3 ? 0 : (c.count * (h + 1)) / 4;
}

std::string checkRange(const Case& c, const char* what, const std::vector<uint8_t>& buf,
                       uint64_t first, uint64_t n, const std::function<double(uint64_t)>& want) {
  for (uint64_t i = 0; i < n; ++i) {
    double got = load(c.type, buf.data(), first + i);
    double w = want(i);
    if (!matches(c.type, c.op, got, w))
      return describe(c) + ": " + what + " element " + std::to_string(first + i) + " is " +
             std::to_string(got) + ", expected " + std::to_string(roundTo(c.type, w));
  }
  return "";
}

std::string runCase(chorusComm_t comm, int rank, int n, const Case& c) {
  const size_t es = typeSize(c.type);
  const uint64_t N = static_cast<uint64_t>(n);
  auto x = [&](int r, uint64_t j) { return inputValue(c.type, c.op, r, j, c.seed); };
  auto reduced = [&](uint64_t j) {
    double acc = x(0, j);
    for (int r = 1; r < n; ++r) acc = combine(c.op, acc, x(r, j));
    return finish(c.type, c.op, acc, n);
  };
  auto fill = [&](std::vector<uint8_t>& b, uint64_t first, uint64_t cnt, int r, uint64_t j0) {
    for (uint64_t i = 0; i < cnt; ++i) store(c.type, b.data(), first + i, x(r, j0 + i));
  };
  chorusRedOp_t op = static_cast<chorusRedOp_t>(c.op);
  std::vector<uint8_t> in, out;
  chorusResult_t res = chorusSuccess;
  std::string err;

  switch (c.coll) {
    case C::kAllReduce: {
      out.assign(c.count * es, kPoison);
      if (c.inPlace) {
        fill(out, 0, c.count, rank, 0);
        res = chorusAllReduce(out.data(), out.data(), c.count, c.type, op, comm, nullptr);
      } else {
        in.resize(c.count * es);
        fill(in, 0, c.count, rank, 0);
        res = chorusAllReduce(in.data(), out.data(), c.count, c.type, op, comm, nullptr);
      }
      if (res == chorusSuccess) err = checkRange(c, "output", out, 0, c.count, reduced);
      break;
    }
    case C::kBroadcast: {
      out.assign(c.count * es, kPoison);
      if (rank == c.root) {
        if (c.inPlace) {
          fill(out, 0, c.count, rank, 0);
        } else {
          in.resize(c.count * es);
          fill(in, 0, c.count, rank, 0);
        }
      }
      const void* src = c.inPlace ? out.data() : (rank == c.root ? in.data() : nullptr);
      res = chorusBroadcast(src, out.data(), c.count, c.type, c.root, comm, nullptr);
      if (res == chorusSuccess)
        err = checkRange(c, "output", out, 0, c.count, [&](uint64_t j) { return x(c.root, j); });
      break;
    }
    case C::kReduce: {
      out.assign(c.count * es, kPoison);
      in.resize(c.count * es);
      fill(in, 0, c.count, rank, 0);
      if (c.inPlace) {
        out = in;
        res = chorusReduce(out.data(), out.data(), c.count, c.type, op, c.root, comm, nullptr);
      } else {
        res = chorusReduce(in.data(), rank == c.root ? out.data() : nullptr, c.count, c.type, op,
                           c.root, comm, nullptr);
      }
      if (res == chorusSuccess && rank == c.root)
        err = checkRange(c, "root output", out, 0, c.count, reduced);
      break;
    }
    case C::kAllGather: {
      out.assign(N * c.count * es, kPoison);
      if (c.inPlace) {
        fill(out, static_cast<uint64_t>(rank) * c.count, c.count, rank, 0);
        res = chorusAllGather(out.data() + static_cast<uint64_t>(rank) * c.count * es, out.data(),
                              c.count, c.type, comm, nullptr);
      } else {
        in.resize(c.count * es);
        fill(in, 0, c.count, rank, 0);
        res = chorusAllGather(in.data(), out.data(), c.count, c.type, comm, nullptr);
      }
      for (int r = 0; r < n && res == chorusSuccess && err.empty(); ++r)
        err = checkRange(c, "output", out, static_cast<uint64_t>(r) * c.count, c.count,
                         [&](uint64_t j) { return x(r, j); });
      break;
    }
    case C::kReduceScatter: {
      in.resize(N * c.count * es);
      fill(in, 0, N * c.count, rank, 0);
      uint64_t off = static_cast<uint64_t>(rank) * c.count;
      auto want = [&](uint64_t j) { return reduced(off + j); };
      if (c.inPlace) {
        res = chorusReduceScatter(in.data(), in.data() + off * es, c.count, c.type, op, comm,
                                  nullptr);
        if (res == chorusSuccess) err = checkRange(c, "in-place output", in, off, c.count, want);
      } else {
        out.assign(c.count * es, kPoison);
        res = chorusReduceScatter(in.data(), out.data(), c.count, c.type, op, comm, nullptr);
        if (res == chorusSuccess) err = checkRange(c, "output", out, 0, c.count, want);
      }
      break;
    }
    case C::kAllToAll: {
      in.resize(N * c.count * es);
      fill(in, 0, N * c.count, rank, 0);
      if (c.inPlace) {
        out = in;
        res = chorusAllToAll(out.data(), out.data(), c.count, c.type, comm, nullptr);
      } else {
        out.assign(N * c.count * es, kPoison);
        res = chorusAllToAll(in.data(), out.data(), c.count, c.type, comm, nullptr);
      }
      for (int s = 0; s < n && res == chorusSuccess && err.empty(); ++s)
        err = checkRange(c, "output", out, static_cast<uint64_t>(s) * c.count, c.count,
                         [&](uint64_t j) { return x(s, static_cast<uint64_t>(rank) * c.count + j); });
      break;
    }
    case C::kAllToAllv: {
      std::vector<size_t> sc(N), sd(N), rc(N), rd(N);
      uint64_t sTotal = 0, rTotal = 0;
      for (int p = 0; p < n; ++p) {
        sc[p] = vcount(c, rank, p);
        sd[p] = sTotal + 1;  // gaps between blocks catch writes past a block
        sTotal += sc[p] + 1;
        rc[p] = vcount(c, p, rank);
        rd[p] = rTotal + 2;
        rTotal += rc[p] + 2;
      }
      in.assign(sTotal * es, 0);
      for (int p = 0; p < n; ++p) fill(in, sd[p], sc[p], rank, static_cast<uint64_t>(p) << 32);
      out.assign(rTotal * es, kPoison);
      res = chorusAllToAllv(in.data(), sc.data(), sd.data(), out.data(), rc.data(), rd.data(),
                            c.type, comm, nullptr);
      for (int p = 0; p < n && res == chorusSuccess && err.empty(); ++p) {
        err = checkRange(c, "output", out, rd[p], rc[p], [&](uint64_t j) {
          return x(p, (static_cast<uint64_t>(rank) << 32) + j);
        });
        // The gap before each block must still hold the poison.
        if (err.empty() && rTotal > 0 && out[(rd[p] - 1) * es] != kPoison)
          err = describe(c) + ": a write landed in the gap before the block from rank " +
                std::to_string(p);
      }
      break;
    }
    case C::kGather: {
      in.resize(c.count * es);
      fill(in, 0, c.count, rank, 0);
      if (rank == c.root) out.assign(N * c.count * es, kPoison);
      res = chorusGather(in.data(), rank == c.root ? out.data() : nullptr, c.count, c.type, c.root,
                         comm, nullptr);
      for (int r = 0; r < n && res == chorusSuccess && rank == c.root && err.empty(); ++r)
        err = checkRange(c, "root output", out, static_cast<uint64_t>(r) * c.count, c.count,
                         [&](uint64_t j) { return x(r, j); });
      break;
    }
    case C::kScatter: {
      if (rank == c.root) {
        in.resize(N * c.count * es);
        fill(in, 0, N * c.count, rank, 0);
      }
      out.assign(c.count * es, kPoison);
      res = chorusScatter(rank == c.root ? in.data() : nullptr, out.data(), c.count, c.type,
                          c.root, comm, nullptr);
      if (res == chorusSuccess)
        err = checkRange(c, "output", out, 0, c.count, [&](uint64_t j) {
          return x(c.root, static_cast<uint64_t>(rank) * c.count + j);
        });
      break;
    }
    case C::kBarrier:  // no data: runBarriers() checks it
      break;
  }
  if (res != chorusSuccess)
    return describe(c) + " returned " + chorusGetErrorString(res) + ": " + chorusGetLastError(comm);
  return err;
}

// ---- What runs: the registries decide ---------------------------------------------------------
//
// Four kinds of test, each one job of real ranks:
//   - the tuner's choice with every transport allowed, over 1-5 ranks with the full type x op
//     sweep (the kernels and the default path; its largest size over a chosen part of it, see
//     largeCase), and over 8 ranks (four per core) with the
//     smaller sweep below: the kernels do not change with the rank count;
//   - every registered algorithm (chorusGetAlgorithmInfo) forced with CHORUS_ALGO, over every
//     registered transport (chorusGetTransportInfo) alone with CHORUS_TRANSPORT, on 2, 3 and 5
//     ranks (both parities of slicing, and more ranks than cores): a new algorithm or transport
//     is swept by registering it. Element sizes 1, 2 and 8 and the operators sum and avg (the
//     divide the communicator adds around a schedule) cover every slicing and alignment path
//     and the data movement at a fraction of the full sweep's time;
//   - every registered algorithm forced on 4 ranks laid out as 2 pretend hosts (CHORUS_HOST_ID,
//     ranks dealt round-robin) with every transport allowed: the host-aware algorithms build
//     their hierarchy instead of their single-host fallback, over both transports at once;
//   - a few named configurations of the shared-memory paths that the transport list does not
//     reach (no cross-memory attach; the host window in many small rounds);
//   - UCX named in CHORUS_TRANSPORT (its forced-algorithm cases above skip: it is eligible by
//     default only with an RDMA-class device) over UCX_TLS=tcp and posix,cma on 2-4 ranks.
// A forced algorithm that cannot run where it is put (its needs: one-sided reads, the host
// window, which pretend hosts and some transports lack) is refused by the library with
// chorusInvalidUsage before anything moves; the test is then skipped with the library's reason.
// Refusal anywhere later is a failure.

struct Param {
  C coll;
  int nranks;
  std::string algo;         // registered name; "" for the tuner's choice
  std::string transport;    // registered name; "" for every transport
  std::string config;       // a named configuration; "" for none
  std::string unavailable;  // why the transport cannot be used in this process
  std::map<std::string, std::string> env;
  bool fullSweep = false;
  int hosts = 1;  // > 1: pretend hosts, rank r on host r % hosts
};

// Test names say it all; keep gtest from dumping the parameter's bytes.
void PrintTo(const Param& p, std::ostream* os) {
  *os << cName(p.coll) << ", " << p.nranks << " ranks";
  for (const std::string* part : {&p.algo, &p.transport, &p.config})
    if (!part->empty()) *os << ", " << *part;
  if (p.hosts > 1) *os << ", " << p.hosts << " hosts";
}

std::string testName(const Param& p) {
  std::string name = std::string(cName(p.coll)) + "_" + std::to_string(p.nranks) + "ranks";
  for (const std::string* part : {&p.algo, &p.transport, &p.config})
    if (!part->empty()) name += "_" + *part;
  if (p.hosts > 1) name += "_" + std::to_string(p.hosts) + "hosts";
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_') ch = '_';
  return name;
}

// What a rank returns when the library refused the forced algorithm on this platform.
constexpr const char* kRefused = "not applicable here: ";

// A refusal comes at a rank's first call, before any data moved; the rank then leaves. (Rank 0's
// process serves the bootstrap store; its leaving right after init is covered by
// Teardown.RankServingTheStoreMayExitRightAfterInit.)
std::string refused(const std::string& why) { return kRefused + why; }

// Barrier: rounds in which each rank publishes its arrival in memory shared by the ranks, then
// checks after the barrier that every rank has arrived. A barrier that returns early is caught
// whenever a peer is late, which the rounds make likely on every run.
std::string runBarriers(chorusComm_t comm, int rank, int n, uint32_t* arrivals, bool* ran) {
  constexpr uint32_t kRounds = 200;
  for (uint32_t k = 1; k <= kRounds; ++k) {
    std::atomic_ref<uint32_t>(arrivals[rank]).store(k, std::memory_order_release);
    chorusResult_t r = chorusBarrier(comm, nullptr);
    if (r != chorusSuccess)
      return std::string("barrier ") + std::to_string(k) + " returned " +
             chorusGetErrorString(r) + ": " + chorusGetLastError(comm);
    *ran = true;
    for (int p = 0; p < n; ++p)
      if (std::atomic_ref<uint32_t>(arrivals[p]).load(std::memory_order_acquire) < k)
        return "barrier " + std::to_string(k) + " returned before rank " + std::to_string(p) +
               " had entered it";
  }
  return "";
}

// The full sweep's largest size is there for what depends on bytes: chunks, pipelined rounds,
// the staging window and slot boundaries, and the divide `avg` adds after a schedule. Those do
// not change with the operator, and the element's size and kind (integer or float) is all they
// see of the type; each type x operator kernel is checked at every size up to 4096 elements
// (past every vector loop and its tail). So the largest size runs sum and avg over one integer
// and one float type per element size (7 of the 12 types; 14 of the 60 type x operator pairs of
// a reduction). The test computes every reference element itself, so the largest size is where
// the full sweep spent its time.
constexpr uint64_t kLargestKernelCase = 4096;
bool largeCase(chorusDataType_t t, int op) {
  const bool typeKept = t == chorusInt8 || t == chorusFloat8e4m3 || t == chorusBfloat16 ||
                        t == chorusInt32 || t == chorusFloat32 || t == chorusInt64 ||
                        t == chorusFloat64;
  return typeKept && (op < 0 || op == chorusSum || op == chorusAvg);
}

std::string runSweep(const Param& p, chorusComm_t comm, int rank, int n, uint32_t* arrivals) {
  bool ran = false;  // a call that moved data has succeeded: refusing from now on is a bug
  auto refusedHere = [&](const std::string& err) {
    return !ran && !p.algo.empty() && n > 1 &&
           err.find(chorusGetErrorString(chorusInvalidUsage)) != std::string::npos &&
           err.find("cannot run here") != std::string::npos;
  };
  if (p.coll == C::kBarrier) {
    std::string err = runBarriers(comm, rank, n, arrivals, &ran);
    if (!err.empty() && refusedHere(err)) return refused(err);
    return err;
  }
  uint32_t seed = 1;
  std::vector<int> ops = {-1};
  if (reduces(p.coll)) {
    ops = {chorusSum, chorusAvg};
    if (p.fullSweep) ops = {chorusSum, chorusProd, chorusMax, chorusMin, chorusAvg};
  }
  std::vector<chorusDataType_t> types = {chorusInt8, chorusBfloat16, chorusFloat64};
  if (p.fullSweep) types.assign(std::begin(kTypes), std::end(kTypes));
  for (chorusDataType_t t : types) {
    for (int op : ops) {
      for (uint64_t count : kSizes) {
        if (p.fullSweep && count > kLargestKernelCase && !largeCase(t, op)) continue;
        for (int inPlace = 0; inPlace < (hasInPlace(p.coll) ? 2 : 1); ++inPlace) {
          Case c{p.coll, t, op < 0 ? chorusSum : op, count, inPlace != 0,
                 rooted(p.coll) ? static_cast<int>(seed % static_cast<uint32_t>(n)) : -1, seed};
          ++seed;
          std::string err = runCase(comm, rank, n, c);
          if (!err.empty() && refusedHere(err)) return refused(err);
          if (!err.empty()) return err;
          if (count > 0) ran = true;
        }
      }
    }
  }
  return "";
}

class Collectives : public ::testing::TestWithParam<Param> {};

TEST_P(Collectives, MatchesReference) {
  const Param p = GetParam();
  if (!p.unavailable.empty())
    GTEST_SKIP() << "transport " << p.transport << " is unavailable: " << p.unavailable;
  auto* arrivals = static_cast<uint32_t*>(sharedScratch(sizeof(uint32_t) * 64));
  auto outcomes = runRanks(p.nranks, [&](chorusComm_t comm, int rank, int n) -> std::string {
    std::string err = runSweep(p, comm, rank, n, arrivals);
    return err.empty() ? err : "rank " + std::to_string(rank) + ": " + err;
  }, RunOptions{.deadlineSeconds = 600, .env = p.env, .rankEnv = [&p](int rank) {
    std::map<std::string, std::string> env;
    if (p.hosts > 1)
      env["CHORUS_HOST_ID"] = "collectives-host-" + std::to_string(rank % p.hosts);
    return env;
  }});
  // Refused by every rank before anything ran: the algorithm does not apply here.
  const bool allRefused = std::all_of(outcomes.begin(), outcomes.end(), [](const RankOutcome& o) {
    return o.failure.find(kRefused) != std::string::npos && o.leftovers.empty();
  });
  if (allRefused) GTEST_SKIP() << outcomes.front().failure;
  EXPECT_EQ(summarize(outcomes), "");
}

// Every registered algorithm, by collective ("allreduce") and name ("ring").
std::vector<std::pair<std::string, std::string>> registeredAlgorithms() {
  std::vector<std::pair<std::string, std::string>> v;
  const char *coll = nullptr, *name = nullptr;
  for (int i = 0; chorusGetAlgorithmInfo(i, &coll, &name, nullptr) == chorusSuccess; ++i)
    v.emplace_back(coll, name);
  return v;
}

// Every transport of this build: its name and, when it cannot be used here, why.
std::vector<std::pair<std::string, std::string>> registeredTransports() {
  std::vector<std::pair<std::string, std::string>> v;
  const char *name = nullptr, *unavailable = nullptr;
  for (int i = 0; chorusGetTransportInfo(i, &name, nullptr, &unavailable) == chorusSuccess; ++i)
    v.emplace_back(name, unavailable ? unavailable : "");
  return v;
}

const C kAll[] = {C::kAllReduce, C::kBroadcast, C::kReduce,   C::kAllGather, C::kReduceScatter,
                  C::kAllToAll,  C::kAllToAllv, C::kGather,   C::kScatter,   C::kBarrier};

// How CHORUS_ALGO and the registry spell a collective: "AllReduce" -> "allreduce".
std::string registryName(C c) {
  std::string s = cName(c);
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::vector<Param> allParams() {
  std::vector<Param> v;
  const auto algorithms = registeredAlgorithms();
  const auto transports = registeredTransports();
  const bool ucxBuilt = std::any_of(transports.begin(), transports.end(),
                                    [](const auto& t) { return t.first == "ucx"; });
  const std::string ucxMissing = ucxBuilt ? "" : "not built (CHORUS_WITH_UCX=OFF)";
  for (C c : kAll) {
    const std::string coll = registryName(c);
    for (int n : {1, 2, 3, 4, 5, 8}) {
      Param p{c, n, "", "", "", "", {}};
      p.fullSweep = n <= 5;
      v.push_back(p);
    }
    for (const auto& [algoColl, algo] : algorithms) {
      // Quantized algorithms ("quant_*", algorithms/registry.h) serve the chorus*Quantized
      // calls: tests/multiproc/quantized_test.cc runs them.
      if (algoColl != coll || algo.starts_with("quant_")) continue;
      const std::map<std::string, std::string> forced = {{"CHORUS_ALGO", coll + ":" + algo}};
      for (const auto& [transport, unavailable] : transports) {
        auto env = forced;
        env["CHORUS_TRANSPORT"] = transport;
        for (int n : {2, 3, 5}) v.push_back({c, n, algo, transport, "", unavailable, env});
      }
      Param hosts{c, 4, algo, "", "", "", forced};
      hosts.hosts = 2;
      v.push_back(hosts);
    }
    // UCX, made eligible by naming it (it is chosen by default only with an RDMA-class
    // device), over its TCP and over its shared memory, with the tuner's choice of algorithm.
    for (const char* tls : {"tcp", "posix,cma"})
      for (int n : {2, 3, 4})
        v.push_back({c, n, "", "ucx", std::string("tls_") + tls, ucxMissing,
                     {{"CHORUS_TRANSPORT", "ucx"}, {"UCX_TLS", tls}}});
    if (c == C::kBarrier) continue;
    // Shared memory without cross-memory attach: everything through the slots, and the
    // one-sided algorithms out of the tuner's reach.
    for (int n : {2, 3, 5}) v.push_back({c, n, "", "", "nocma", "", {{"CHORUS_SHM_CMA", "0"}}});
    if (c == C::kAllReduce || c == C::kAllGather) {
      // The host window in many small rounds: an uneven last round, and slices of a round
      // smaller than a cache line.
      for (int n : {2, 3, 5})
        v.push_back({c, n, "", "", "rounds4k", "", {{"CHORUS_SHM_STAGING_ROUND", "4K"}}});
    }
  }
  return v;
}

// The sweep above knows how to call and check each collective it lists; an algorithm of any
// other collective would silently go untested.
TEST(CollectivesRegistry, EveryRegisteredAlgorithmIsSwept) {
  const auto algorithms = registeredAlgorithms();
  ASSERT_FALSE(algorithms.empty());
  ASSERT_FALSE(registeredTransports().empty());
  for (const auto& [coll, name] : algorithms) {
    const bool known = std::any_of(std::begin(kAll), std::end(kAll),
                                   [&, &coll = coll](C c) { return registryName(c) == coll; });
    EXPECT_TRUE(known) << coll << ":" << name << " is registered but this test cannot run "
                       << coll << ": add it to kAll and runCase()";
  }
}

INSTANTIATE_TEST_SUITE_P(All, Collectives, ::testing::ValuesIn(allParams()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return testName(info.param);
                         });

}  // namespace
}  // namespace chorus::test
