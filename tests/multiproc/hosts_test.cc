// Rank layout across hosts, with real processes: ranks started with different CHORUS_HOST_IDs
// are laid out as separate hosts (shared memory inside a host, TCP between hosts), the ring
// follows the hosts, and chorusCommSplitType groups the ranks of each host.
#include <chorus/chorus.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/multiproc/harness.h"

namespace chorus::test {
namespace {

struct HostCase {
  int hosts;
  int perHost;
};

// Ranks are dealt to hosts round-robin (rank r on host r % hosts), so the rank numbering
// alternates between hosts: a ring in rank order would cross a host boundary at every step.
void runHostCase(const HostCase& hc) {
  const int n = hc.hosts * hc.perHost;
  const int port = freeLoopbackPort();
  ASSERT_GT(port, 0);
  auto out = runRanks(n, [&](chorusComm_t, int rank, int nranks) -> std::string {
    const int host = rank % hc.hosts;
    setenv("CHORUS_HOST_ID", ("pretend-host-" + std::to_string(host)).c_str(), 1);
    setenv("CHORUS_ROOT", ("127.0.0.1:" + std::to_string(port)).c_str(), 1);
    setenv("CHORUS_RANK", std::to_string(rank).c_str(), 1);
    setenv("CHORUS_NRANKS", std::to_string(nranks).c_str(), 1);
    setenv("CHORUS_JOB_SECRET", "00112233445566778899aabbccddeeff", 1);
    setenv("CHORUS_ALGO", "allreduce:ring,allgather:ring,reducescatter:ring", 1);
    chorusComm_t comm = nullptr;
    RANK_OK(chorusCommInitFromEnv(&comm));

    // The host split: the ranks of this rank's pretend host, in rank order.
    chorusComm_t local = nullptr;
    RANK_OK(chorusCommSplitType(comm, CHORUS_SPLIT_HOST, rank, &local));
    int localSize = 0, localRank = -1;
    RANK_OK(chorusCommCount(local, &localSize));
    RANK_OK(chorusCommUserRank(local, &localRank));
    RANK_CHECK(localSize == hc.perHost, "host split has " + std::to_string(localSize) +
                                            " ranks, expected " + std::to_string(hc.perHost));
    RANK_CHECK(localRank == rank / hc.hosts, "local rank " + std::to_string(localRank));
    std::vector<int32_t> members(static_cast<size_t>(localSize));
    int32_t me = rank;
    RANK_OK(chorusAllGather(&me, members.data(), 1, chorusInt32, local, nullptr));
    for (int32_t m : members)
      RANK_CHECK(m % hc.hosts == host, "rank " + std::to_string(m) + " is not on host " +
                                           std::to_string(host));
    RANK_OK(chorusCommDestroy(local));

    // A ring all-reduce: correct, and each rank sends to one ring neighbour only. In the
    // host-aware ring exactly one rank per host (the last of the host) sends across hosts.
    const size_t count = 1 << 18;
    std::vector<float> a(count, static_cast<float>(rank + 1)), b(count);
    RANK_OK(chorusAllReduce(a.data(), b.data(), count, chorusFloat32, chorusSum, comm, nullptr));
    const float want = static_cast<float>(nranks * (nranks + 1) / 2);
    for (size_t i = 0; i < count; i += 4099)
      RANK_CHECK(b[i] == want, "allreduce result " + std::to_string(b[i]));
    chorusStats_t s{};
    s.structSize = sizeof(s);
    RANK_OK(chorusCommGetStats(comm, &s));
    uint64_t inter = 0, intra = 0;
    for (int i = 0; i < s.numTransports; ++i) {
      inter += s.transports[i].bytesSentInterHost;
      intra += s.transports[i].bytesSentIntraHost;
    }
    const bool lastOfHost = rank / hc.hosts == hc.perHost - 1;
    int32_t crossing = inter > count ? 1 : 0;
    if (lastOfHost) {
      RANK_CHECK(inter > count && intra < 4096,
                 "the last rank of a host sends across hosts only: inter " +
                     std::to_string(inter) + " intra " + std::to_string(intra));
    } else {
      RANK_CHECK(inter < 4096 && intra > count,
                 "other ranks send inside their host only: inter " + std::to_string(inter) +
                     " intra " + std::to_string(intra));
    }
    int32_t crossings = 0;
    RANK_OK(chorusAllReduce(&crossing, &crossings, 1, chorusInt32, chorusSum, comm, nullptr));
    RANK_CHECK(crossings == hc.hosts, "the ring crosses host boundaries " +
                                          std::to_string(crossings) + " times, expected " +
                                          std::to_string(hc.hosts));

    // The ring all-gather and reduce-scatter place blocks by rank but run in the same ring
    // order: right blocks in the right places, and again only the last rank of a host sends
    // across hosts.
    auto sentSince = [&](uint64_t* interBefore, uint64_t* intraBefore) {
      chorusStats_t t{};
      t.structSize = sizeof(t);
      uint64_t i = 0, j = 0;
      if (chorusCommGetStats(comm, &t) == chorusSuccess)
        for (int k = 0; k < t.numTransports; ++k)
          i += t.transports[k].bytesSentInterHost, j += t.transports[k].bytesSentIntraHost;
      const std::pair<uint64_t, uint64_t> d{i - *interBefore, j - *intraBefore};
      *interBefore = i, *intraBefore = j;
      return d;
    };
    uint64_t i0 = 0, j0 = 0;
    sentSince(&i0, &j0);
    const size_t blk = 1 << 16;
    std::vector<float> mine(blk), all(blk * static_cast<size_t>(nranks));
    for (size_t i = 0; i < blk; ++i) mine[i] = static_cast<float>(rank * 1000 + static_cast<int>(i % 997));
    RANK_OK(chorusAllGather(mine.data(), all.data(), blk, chorusFloat32, comm, nullptr));
    for (int q = 0; q < nranks; ++q)
      for (size_t i = 0; i < blk; i += 1013)
        RANK_CHECK(all[static_cast<size_t>(q) * blk + i] ==
                       static_cast<float>(q * 1000 + static_cast<int>(i % 997)),
                   "all-gather block " + std::to_string(q) + " element " + std::to_string(i));
    auto [agInter, agIntra] = sentSince(&i0, &j0);
    std::vector<float> parts(blk * static_cast<size_t>(nranks)), sum(blk);
    for (size_t i = 0; i < parts.size(); ++i) parts[i] = static_cast<float>((rank + 1) * static_cast<int>(i / blk + 1));
    RANK_OK(chorusReduceScatter(parts.data(), sum.data(), blk, chorusFloat32, chorusSum, comm, nullptr));
    for (size_t i = 0; i < blk; i += 1013)
      RANK_CHECK(sum[i] == static_cast<float>(nranks * (nranks + 1) / 2 * (rank + 1)),
                 "reduce-scatter element " + std::to_string(i) + " = " + std::to_string(sum[i]));
    auto [rsInter, rsIntra] = sentSince(&i0, &j0);
    // In place (NCCL's convention: the input is the rank's own block of the output, and the
    // reduce-scatter's output its own block of the input).
    std::vector<float> inPlace(blk * static_cast<size_t>(nranks), -1.0f);
    std::copy(mine.begin(), mine.end(), inPlace.begin() + static_cast<std::ptrdiff_t>(rank * blk));
    RANK_OK(chorusAllGather(inPlace.data() + rank * blk, inPlace.data(), blk, chorusFloat32, comm,
                            nullptr));
    RANK_CHECK(inPlace == all, "in-place all-gather differs from the out-of-place one");
    RANK_OK(chorusReduceScatter(parts.data(), parts.data() + rank * blk, blk, chorusFloat32,
                                chorusSum, comm, nullptr));
    RANK_CHECK(std::equal(sum.begin(), sum.end(), parts.begin() + static_cast<std::ptrdiff_t>(rank * blk)),
               "in-place reduce-scatter differs from the out-of-place one");
    for (auto [what, x, y] : {std::tuple{"all-gather", agInter, agIntra},
                              std::tuple{"reduce-scatter", rsInter, rsIntra}}) {
      if (lastOfHost)
        RANK_CHECK(x > blk && y < 4096, std::string(what) + ": the last rank of a host sends "
                   "across hosts only: inter " + std::to_string(x) + " intra " + std::to_string(y));
      else
        RANK_CHECK(x < 4096 && y > blk, std::string(what) + ": other ranks send inside their "
                   "host only: inter " + std::to_string(x) + " intra " + std::to_string(y));
    }
    RANK_OK(chorusCommDestroy(comm));
    return "";
  }, {.deadlineSeconds = 90, .initComm = false});
  EXPECT_EQ(summarize(out), "");
}

TEST(Layout, TwoHostsOfTwoGetAHostAwareRing) { runHostCase({2, 2}); }
TEST(Layout, ThreeHostsOfTwoGetAHostAwareRing) { runHostCase({3, 2}); }

// Hosts of different sizes, one of them a single rank with no shared-memory peer: the tuner
// must still pick the same algorithm on every rank (its inputs are agreed at creation), so
// every collective completes with the right result whatever the size.
TEST(Layout, UnevenHostsAgreeOnEveryAlgorithm) {
  const int hostOfRank[] = {0, 0, 1, 2, 2, 2};
  const int n = 6;
  const int port = freeLoopbackPort();
  ASSERT_GT(port, 0);
  auto out = runRanks(n, [&](chorusComm_t, int rank, int nranks) -> std::string {
    setenv("CHORUS_HOST_ID", ("uneven-host-" + std::to_string(hostOfRank[rank])).c_str(), 1);
    setenv("CHORUS_ROOT", ("127.0.0.1:" + std::to_string(port)).c_str(), 1);
    setenv("CHORUS_RANK", std::to_string(rank).c_str(), 1);
    setenv("CHORUS_NRANKS", std::to_string(nranks).c_str(), 1);
    setenv("CHORUS_JOB_SECRET", "ffeeddccbbaa99887766554433221100", 1);
    chorusComm_t comm = nullptr;
    RANK_OK(chorusCommInitFromEnv(&comm));
    for (size_t count : {size_t{1}, size_t{1023}, size_t{1} << 14, (size_t{1} << 18) + 3}) {
      std::vector<float> a(count, static_cast<float>(rank + 1)), b(count, -1.f);
      RANK_OK(chorusAllReduce(a.data(), b.data(), count, chorusFloat32, chorusSum, comm, nullptr));
      for (size_t i = 0; i < count; i += 997)
        RANK_CHECK(b[i] == 21.f, "allreduce of " + std::to_string(count) + ": " + std::to_string(b[i]));
      std::vector<float> g(count * static_cast<size_t>(nranks), -1.f);
      RANK_OK(chorusAllGather(a.data(), g.data(), count, chorusFloat32, comm, nullptr));
      for (int q = 0; q < nranks; ++q)
        RANK_CHECK(g[static_cast<size_t>(q) * count] == static_cast<float>(q + 1),
                   "allgather block " + std::to_string(q));
      RANK_OK(chorusBroadcast(a.data(), b.data(), count, chorusFloat32, 3, comm, nullptr));
      RANK_CHECK(b[count - 1] == 4.f, "broadcast from rank 3");
    }
    RANK_OK(chorusCommDestroy(comm));
    return "";
  }, {.deadlineSeconds = 120, .initComm = false});
  EXPECT_EQ(summarize(out), "");
}

TEST(Layout, SplitTypeRefusesUnknownTypes) {
  auto out = runRanks(2, [](chorusComm_t comm, int rank, int) -> std::string {
    chorusComm_t c = nullptr;
    RANK_CHECK(chorusCommSplitType(comm, 7, 0, &c) == chorusInvalidArgument,
               "type 7 must be refused");
    std::string msg = chorusGetLastError(comm);
    RANK_CHECK(msg.find("CHORUS_SPLIT_HOST") != std::string::npos, "message: " + msg);
    // Every rank is on this host and its NUMA node (one node here, or unbound: a group each).
    RANK_OK(chorusCommSplitType(comm, CHORUS_SPLIT_HOST, 0, &c));
    int size = 0;
    RANK_OK(chorusCommCount(c, &size));
    RANK_CHECK(size == 2, "host split of one host has every rank");
    RANK_OK(chorusCommDestroy(c));
    return "";
  }, {.deadlineSeconds = 30});
  EXPECT_EQ(summarize(out), "");
}

}  // namespace
}  // namespace chorus::test
