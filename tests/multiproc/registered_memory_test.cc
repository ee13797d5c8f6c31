// Registered memory (docs/design.md, "Registered memory"): chorusMemAlloc/chorusMemFree and
// chorusCommRegister/chorusCommDeregister through the public API.
//
//   - the allocator: argument errors, zero-filled pages, nothing left open or mapped after a
//     free, and every wrong free (unknown, interior, twice) a clear error that frees nothing;
//   - registrations: argument errors, deregistering twice, a garbage handle, another
//     communicator's handle, freeing while registered (naming how many registrations remain),
//     and chorusCommDestroy releasing what is still registered;
//   - collectives on chorusMemAlloc buffers with the one-sided algorithms forced (all-reduce,
//     all-gather, reduce-scatter, broadcast), over real forked ranks on shared memory: exact
//     results, and the peers' segments mapped read-only by each rank that reads (the zero-copy
//     path, seen in /proc/self/maps) rather than read by cross-memory attach;
//   - the tuner learning from every rank's call headers that the buffers are segments, and
//     taking the zero-copy all-reduce then (and only then).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/multiproc/harness.h"

namespace chorus::test {
namespace {

int openFds() {
  int n = 0;
  for (int fd = 0; fd < 4096; ++fd)
    if (::fcntl(fd, F_GETFD) != -1) ++n;
  return n;
}

// Mappings of chorusMemAlloc segments in this process: `writable` ones are its own
// allocations, read-only ones are peers' segments it maps to read them.
int segmentMappings(bool writable) {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/memfd:chorus-seg-") == std::string::npos) continue;
    const size_t sp = line.find(' ');
    const std::string perms = line.substr(sp + 1, 4);
    if ((perms == "rw-s") == writable && (perms == "r--s") != writable) ++n;
  }
  return n;
}

std::string lastError() { return chorusGetLastError(nullptr); }

TEST(MemAlloc, ArgumentErrors) {
  EXPECT_EQ(chorusMemAlloc(nullptr, 64), chorusInvalidArgument);
  EXPECT_NE(lastError().find("ptr is NULL"), std::string::npos) << lastError();
  void* p = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(chorusMemAlloc(&p, 0), chorusInvalidArgument);
  EXPECT_NE(lastError().find("size is 0"), std::string::npos) << lastError();
  EXPECT_EQ(p, nullptr) << "a failed chorusMemAlloc left *ptr set";
  EXPECT_EQ(chorusMemFree(nullptr), chorusInvalidArgument);
  EXPECT_NE(lastError().find("ptr is NULL"), std::string::npos) << lastError();
}

TEST(MemAlloc, ZeroFilledWritableAndGoneAfterFree) {
  const int fdsBefore = openFds();
  const int mapsBefore = segmentMappings(true);
  void* p = nullptr;
  constexpr size_t kBytes = 3 * 4096 + 5;
  ASSERT_EQ(chorusMemAlloc(&p, kBytes), chorusSuccess) << lastError();
  ASSERT_NE(p, nullptr);
  auto* b = static_cast<uint8_t*>(p);
  for (size_t i = 0; i < kBytes; ++i) ASSERT_EQ(b[i], 0) << "byte " << i << " is not zero";
  for (size_t i = 0; i < kBytes; ++i) b[i] = static_cast<uint8_t>(i * 7 + 1);
  for (size_t i = 0; i < kBytes; ++i) ASSERT_EQ(b[i], static_cast<uint8_t>(i * 7 + 1));
  EXPECT_EQ(openFds(), fdsBefore + 1) << "one memory file per allocation";
  EXPECT_EQ(segmentMappings(true), mapsBefore + 1);
  ASSERT_EQ(chorusMemFree(p), chorusSuccess) << lastError();
  EXPECT_EQ(openFds(), fdsBefore) << "chorusMemFree left the memory file open";
  EXPECT_EQ(segmentMappings(true), mapsBefore) << "chorusMemFree left the segment mapped";
}

TEST(MemAlloc, WrongFreesAreErrorsThatFreeNothing) {
  void* p = nullptr;
  ASSERT_EQ(chorusMemAlloc(&p, 10000), chorusSuccess) << lastError();
  auto* b = static_cast<uint8_t*>(p);
  b[0] = 42;
  b[9999] = 43;
  std::vector<uint8_t> heap(64);
  int onStack = 0;
  EXPECT_EQ(chorusMemFree(heap.data()), chorusInvalidArgument);
  EXPECT_NE(lastError().find("was not returned by chorusMemAlloc"), std::string::npos)
      << lastError();
  EXPECT_EQ(chorusMemFree(&onStack), chorusInvalidArgument);
  EXPECT_EQ(chorusMemFree(b + 8), chorusInvalidArgument);
  EXPECT_NE(lastError().find("8 bytes into"), std::string::npos) << lastError();
  EXPECT_EQ(chorusMemFree(b + 9999), chorusInvalidArgument);
  EXPECT_EQ(b[0], 42) << "a refused free unmapped the allocation";
  EXPECT_EQ(b[9999], 43);
  ASSERT_EQ(chorusMemFree(p), chorusSuccess) << lastError();
  EXPECT_EQ(chorusMemFree(p), chorusInvalidUsage);
  EXPECT_NE(lastError().find("already freed"), std::string::npos) << lastError();
}

// ---- Registrations --------------------------------------------------------------------------

#define RANK_EXPECT(call, code, text)                                                          \
  do {                                                                                         \
    chorusResult_t r_ = (call);                                                                \
    const std::string e_ = chorusGetLastError(comm);                                           \
    RANK_CHECK(r_ == (code), std::string(#call " -> ") + chorusGetErrorString(r_) + ": " + e_); \
    RANK_CHECK(e_.find(text) != std::string::npos, #call ": message '" + e_ + "' lacks '" +   \
                                                       std::string(text) + "'");             \
  } while (0)

TEST(CommRegister, LifetimeErrorsAreClear) {
  auto out = runRanks(2, [](chorusComm_t comm, int rank, int) -> std::string {
    void* seg = nullptr;
    RANK_OK(chorusMemAlloc(&seg, 1 << 16));
    void* h = nullptr;
    RANK_EXPECT(chorusCommRegister(comm, nullptr, 64, &h), chorusInvalidArgument, "buff is NULL");
    RANK_EXPECT(chorusCommRegister(comm, seg, 0, &h), chorusInvalidArgument, "size is 0");
    RANK_EXPECT(chorusCommRegister(comm, seg, 64, nullptr), chorusInvalidArgument,
                "handle is NULL");
    RANK_EXPECT(chorusCommRegister(comm, static_cast<char*>(seg) + 4096, 1 << 16, &h),
                chorusInvalidArgument, "runs past its end");
    // Twice the same segment, and once a part of it: three registrations hold it.
    void *h1 = nullptr, *h2 = nullptr, *h3 = nullptr;
    RANK_OK(chorusCommRegister(comm, seg, 1 << 16, &h1));
    RANK_OK(chorusCommRegister(comm, seg, 1 << 16, &h2));
    RANK_OK(chorusCommRegister(comm, static_cast<char*>(seg) + 100, 1000, &h3));
    RANK_CHECK(h1 && h2 && h3 && h1 != h2 && h2 != h3, "handles are not distinct");
    RANK_CHECK(chorusMemFree(seg) == chorusInvalidUsage, "freed while registered");
    RANK_CHECK(std::string(chorusGetLastError(nullptr)).find("registered 3 time(s)") !=
                   std::string::npos,
               std::string("free while registered: ") + chorusGetLastError(nullptr));
    RANK_OK(chorusCommDeregister(comm, h1));
    RANK_EXPECT(chorusCommDeregister(comm, h1), chorusInvalidUsage, "already deregistered");
    RANK_EXPECT(chorusCommDeregister(comm, nullptr), chorusInvalidArgument, "handle is NULL");
    RANK_EXPECT(chorusCommDeregister(comm, reinterpret_cast<void*>(uintptr_t{0x1234})),
                chorusInvalidArgument, "not returned by chorusCommRegister");
    RANK_EXPECT(chorusCommDeregister(comm, seg), chorusInvalidArgument,
                "not returned by chorusCommRegister");
    // Another communicator's handle.
    chorusComm_t other = nullptr;
    RANK_OK(chorusCommSplit(comm, 0, rank, &other));
    void* ho = nullptr;
    RANK_OK(chorusCommRegister(other, seg, 4096, &ho));
    RANK_EXPECT(chorusCommDeregister(comm, ho), chorusInvalidUsage, "another communicator");
    RANK_EXPECT(chorusCommDeregister(other, h2), chorusInvalidUsage, "another communicator");
    // Ordinary memory registers too (validated and recorded; see chorus.h).
    std::vector<float> heap(1000);
    void* hh = nullptr;
    RANK_OK(chorusCommRegister(comm, heap.data(), heap.size() * sizeof(float), &hh));
    RANK_OK(chorusCommDeregister(comm, hh));
    RANK_OK(chorusCommDeregister(comm, h2));
    RANK_OK(chorusCommDeregister(comm, h3));
    // `other` still holds the segment until it is destroyed, which releases its handle.
    RANK_CHECK(chorusMemFree(seg) == chorusInvalidUsage, "freed while `other` registers it");
    RANK_CHECK(std::string(chorusGetLastError(nullptr)).find("registered 1 time(s)") !=
                   std::string::npos,
               chorusGetLastError(nullptr));
    RANK_OK(chorusCommDestroy(other));
    RANK_OK(chorusMemFree(seg));
    RANK_EXPECT(chorusCommDeregister(comm, ho), chorusInvalidUsage, "already deregistered");
    return "";
  });
  EXPECT_EQ(summarize(out), "");
}

// ---- Collectives on chorusMemAlloc buffers --------------------------------------------------

// Rank r's input element i: small integers, so float sums are exact whatever the order.
std::vector<float> inputOf(int rank, size_t count, uint32_t seed) {
  std::mt19937 g(seed * 1000003u + static_cast<uint32_t>(rank));
  std::uniform_int_distribution<int> d(-1000, 1000);
  std::vector<float> v(count);
  for (float& x : v) x = static_cast<float>(d(g));
  return v;
}

enum class Coll { kAllReduce, kAllReduceInPlace, kAllGather, kReduceScatter, kBroadcast };

struct Case {
  Coll coll;
  const char* algo;  // CHORUS_ALGO
  int ranks;
  size_t count;      // all-reduce: elements; all-gather: per rank in; reduce-scatter: per rank out
};

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
  std::string a = info.param.algo;
  for (char& c : a)
    if (c == ':') c = '_';
  return a + (info.param.coll == Coll::kAllReduceInPlace ? "_inplace" : "") + "_" +
         std::to_string(info.param.ranks) + "ranks_" + std::to_string(info.param.count);
}

class RegisteredCollectives : public ::testing::TestWithParam<Case> {};

TEST_P(RegisteredCollectives, ExactResultsThroughMappedSegments) {
  const Case c = GetParam();
  RunOptions opt;
  opt.deadlineSeconds = 60;
  opt.env = {{"CHORUS_ALGO", c.algo}, {"CHORUS_TRANSPORT", "shm"}};
  const uint32_t seed = static_cast<uint32_t>(::getpid());
  auto out = runRanks(c.ranks, [&](chorusComm_t comm, int rank, int n) -> std::string {
    const size_t un = static_cast<size_t>(n);
    size_t inCount = c.count, outCount = c.count;
    if (c.coll == Coll::kAllGather) outCount = c.count * un;
    if (c.coll == Coll::kReduceScatter) inCount = c.count * un;
    void *in = nullptr, *outBuf = nullptr;
    RANK_OK(chorusMemAlloc(&in, inCount * sizeof(float)));
    if (c.coll == Coll::kAllReduceInPlace) {
      outBuf = in;
    } else {
      RANK_OK(chorusMemAlloc(&outBuf, outCount * sizeof(float)));
    }
    void *hIn = nullptr, *hOut = nullptr;
    RANK_OK(chorusCommRegister(comm, in, inCount * sizeof(float), &hIn));
    if (outBuf != in) RANK_OK(chorusCommRegister(comm, outBuf, outCount * sizeof(float), &hOut));
    auto* inF = static_cast<float*>(in);
    auto* outF = static_cast<float*>(outBuf);
    // Two calls with different inputs: the second reads through mappings the first made.
    for (uint32_t call = 0; call < 2; ++call) {
      const std::vector<float> mine = inputOf(rank, inCount, seed + call);
      std::memcpy(inF, mine.data(), inCount * sizeof(float));
      if (outBuf != in)
        for (size_t i = 0; i < outCount; ++i) outF[i] = std::nanf("");  // poison
      std::vector<float> expect(outCount, 0.0f);
      switch (c.coll) {
        case Coll::kAllReduce:
        case Coll::kAllReduceInPlace:
          RANK_OK(chorusAllReduce(inF, outF, c.count, chorusFloat32, chorusSum, comm, nullptr));
          for (int r = 0; r < n; ++r) {
            const auto v = inputOf(r, inCount, seed + call);
            for (size_t i = 0; i < outCount; ++i) expect[i] += v[i];
          }
          break;
        case Coll::kAllGather:
          RANK_OK(chorusAllGather(inF, outF, c.count, chorusFloat32, comm, nullptr));
          for (int r = 0; r < n; ++r) {
            const auto v = inputOf(r, inCount, seed + call);
            std::copy(v.begin(), v.end(), expect.begin() + static_cast<long>(r * c.count));
          }
          break;
        case Coll::kBroadcast: {
          constexpr int kRoot = 1;  // not 0, so the root is not the bootstrap's rank
          RANK_OK(chorusBroadcast(inF, outF, c.count, chorusFloat32, kRoot, comm, nullptr));
          expect = inputOf(kRoot, inCount, seed + call);
          break;
        }
        case Coll::kReduceScatter:
          RANK_OK(chorusReduceScatter(inF, outF, c.count, chorusFloat32, chorusSum, comm,
                                      nullptr));
          for (int r = 0; r < n; ++r) {
            const auto v = inputOf(r, inCount, seed + call);
            const size_t at = static_cast<size_t>(rank) * c.count;
            for (size_t i = 0; i < outCount; ++i) expect[i] += v[at + i];
          }
          break;
      }
      for (size_t i = 0; i < outCount; ++i)
        RANK_CHECK(outF[i] == expect[i], "call " + std::to_string(call) + ": element " +
                                             std::to_string(i) + " is " +
                                             std::to_string(outF[i]) + ", expected " +
                                             std::to_string(expect[i]));
    }
    // The forced algorithm ran, and read the peers' inputs through their mapped segments.
    chorusStats_t st{};
    st.structSize = sizeof st;
    RANK_OK(chorusCommGetStats(comm, &st));
    const std::string algo = c.algo;
    bool ran = false;
    for (int a = 0; a < st.numAlgos; ++a) ran = ran || (algo == st.algos[a].name);
    RANK_CHECK(ran, algo + " did not run");
    const bool reads = !(c.coll == Coll::kBroadcast && rank == 1);  // the root reads no one
    const int peerMaps = segmentMappings(false);
    RANK_CHECK(peerMaps >= (reads ? 1 : 0),
               "no peer segment is mapped: the reads did not take the zero-copy path");
    RANK_OK(chorusCommDeregister(comm, hIn));
    if (hOut) RANK_OK(chorusCommDeregister(comm, hOut));
    RANK_OK(chorusMemFree(in));
    if (outBuf != in) RANK_OK(chorusMemFree(outBuf));
    return "";
  }, opt);
  EXPECT_EQ(summarize(out), "");
}

INSTANTIATE_TEST_SUITE_P(
    Forced, RegisteredCollectives,
    ::testing::Values(Case{Coll::kAllReduce, "allreduce:twoshot", 2, (1 << 18) + 3},
                      Case{Coll::kAllReduce, "allreduce:twoshot", 3, 100003},
                      Case{Coll::kAllReduceInPlace, "allreduce:twoshot", 3, 4099},
                      Case{Coll::kAllGather, "allgather:direct", 2, 1001},
                      Case{Coll::kAllGather, "allgather:direct", 3, 65539},
                      Case{Coll::kReduceScatter, "reducescatter:direct", 3, 65537},
                      Case{Coll::kBroadcast, "broadcast:direct", 3, 70001}),
    caseName);

// How many calls of `algo` ("allreduce:twoshot") this communicator ran.
uint64_t runsOf(chorusComm_t comm, const std::string& algo) {
  chorusStats_t st{};
  st.structSize = sizeof st;
  if (chorusCommGetStats(comm, &st) != chorusSuccess) return ~0ull;
  for (int a = 0; a < st.numAlgos; ++a)
    if (algo == st.algos[a].name) return st.algos[a].count;
  return 0;
}

// The tuner prices one-sided reads of chorusMemAlloc buffers as memory copies once every rank
// has said, in an earlier call's headers, that its buffers lie in segments: all-reduce then
// switches from the staged two-shot to the zero-copy one, switches back one call after any
// rank's buffers stop being segments, and never switches while one rank's are not. Every rank
// must pick the same algorithm for every call (a rank that did not would fail the call naming
// both), and every result is exact. The constants (the table's, with the memory rates of a
// calibrated run on the development machine, slow cross-core reads and a last-level cache no
// call outgrows) and the window's sizes are fixed and the mask keeps the two candidates, so
// the picks do not depend on this machine: each wins by 1.8x or more with 1 to 16 cores
// (chorus-topo --tune --cores C --ranks 2|3 [--segments] with this environment).
TEST(RegisteredTuner, LearnsFromEveryRanksHeaders) {
  for (int ranks : {2, 3}) {
    RunOptions opt;
    opt.deadlineSeconds = 90;
    opt.env = {{"CHORUS_TRANSPORT", "shm"},
               {"CHORUS_TUNE", "off"},
               {"CHORUS_COST", "host.membw=93,host.cachebw=139,host.cross=20,host.llc=1073741824"},
               {"CHORUS_SHM_STAGING", "32K"},
               {"CHORUS_SHM_STAGING_ROUND", "256K"},
               {"CHORUS_ALGO", "allreduce:twoshot,allreduce:twoshot_staged"}};
    auto out = runRanks(ranks, [&](chorusComm_t comm, int rank, int n) -> std::string {
      constexpr size_t kCount = 1u << 20;  // 4 MiB of float32
      constexpr size_t kBytes = kCount * sizeof(float);
      void *segIn = nullptr, *segOut = nullptr;
      RANK_OK(chorusMemAlloc(&segIn, kBytes));
      RANK_OK(chorusMemAlloc(&segOut, kBytes));
      std::vector<float> heapIn(kCount), heapOut(kCount);
      uint32_t call = 0;
      // One all-reduce of small integers (exact in any order) from `in` into `out`.
      auto allReduce = [&](float* in, float* outF) -> std::string {
        ++call;
        for (size_t i = 0; i < kCount; i += 4099) in[i] = static_cast<float>((rank + 1) * call);
        for (size_t i = 0; i < kCount; i += 4099) outF[i] = -1;
        RANK_OK(chorusAllReduce(in, outF, kCount, chorusFloat32, chorusSum, comm, nullptr));
        const float expect = static_cast<float>(call * static_cast<uint32_t>(n * (n + 1) / 2));
        for (size_t i = 0; i < kCount; i += 4099)
          RANK_CHECK(outF[i] == expect, "call " + std::to_string(call) + ": element " +
                                            std::to_string(i) + " is " +
                                            std::to_string(outF[i]));
        return "";
      };
      auto expectRuns = [&](uint64_t staged, uint64_t zeroCopy) -> std::string {
        const uint64_t s = runsOf(comm, "allreduce:twoshot_staged");
        const uint64_t z = runsOf(comm, "allreduce:twoshot");
        RANK_CHECK(s == staged && z == zeroCopy,
                   "after call " + std::to_string(call) + ": " + std::to_string(s) +
                       " staged and " + std::to_string(z) + " zero-copy runs, expected " +
                       std::to_string(staged) + " and " + std::to_string(zeroCopy));
        return "";
      };
      auto* si = static_cast<float*>(segIn);
      auto* so = static_cast<float*>(segOut);
      std::string e;
      // Segments on every rank: the first call cannot know, the next ones read zero-copy.
      for (int k = 0; k < 3; ++k)
        if (!(e = allReduce(si, so)).empty()) return e;
      if (!(e = expectRuns(1, 2)).empty()) return e;
      // Ordinary memory everywhere: one call on the old answer, then staged again.
      for (int k = 0; k < 2; ++k)
        if (!(e = allReduce(heapIn.data(), heapOut.data())).empty()) return e;
      if (!(e = expectRuns(2, 3)).empty()) return e;
      // Segments on every rank but the last: staged throughout.
      for (int k = 0; k < 3; ++k) {
        const bool seg = rank != n - 1;
        if (!(e = allReduce(seg ? si : heapIn.data(), seg ? so : heapOut.data())).empty())
          return e;
      }
      if (!(e = expectRuns(5, 3)).empty()) return e;
      RANK_OK(chorusMemFree(segIn));
      RANK_OK(chorusMemFree(segOut));
      return "";
    }, opt);
    EXPECT_EQ(summarize(out), "") << ranks << " ranks";
  }
}

}  // namespace
}  // namespace chorus::test
