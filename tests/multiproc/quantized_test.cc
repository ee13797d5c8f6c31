// The quantized collectives (chorusReduceScatterQuantized, chorusAllGatherQuantized,
// chorusAllReduceQuantized) in real ranks over shared memory and TCP, flat and as pretend hosts
// (CHORUS_HOST_ID per rank: 2x2, 3x2, hosts of 2, 1 and 3, 4x1), against what they must equal:
//   - the all-gather: exactly D(Q(x_p)) in every slot on every rank (chorusQuantize and
//     chorusDequantize computed locally give the bytes; round to nearest);
//   - the one-hop reduce-scatter: exactly the float32 sum, in rank order, of D(Q(slices));
//   - every algorithm: relative L2 error against the fp64 sum on Gaussian data within the
//     targets (int8 <= 1.1%, int4 <= 19%, group 256), the same bytes on a second run, avg equal
//     to sum / W as float32 division makes it;
// and the statistics: the algorithm that ran, and the bytes that crossed hosts.
#include <chorus/chorus.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/multiproc/harness.h"

namespace chorus::test {
namespace {

std::vector<float> gaussian(uint64_t seed, size_t count) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

// Rank r's input of a test, the same on every rank that regenerates it.
std::vector<float> inputOf(int r, size_t count) { return gaussian(1000 + r, count); }

// D(Q(x)) as the library computes it locally.
std::string roundTrip(const float* x, size_t count, const chorusQuantConfig_t& c, float* out) {
  size_t bytes = 0;
  if (chorusQuantizedSize(count, &c, &bytes) != chorusSuccess) return "chorusQuantizedSize";
  std::vector<unsigned char> q(bytes + 1);
  if (chorusQuantize(x, q.data(), count, chorusFloat32, &c, nullptr) != chorusSuccess)
    return "chorusQuantize";
  if (chorusDequantize(q.data(), out, count, chorusFloat32, &c, nullptr) != chorusSuccess)
    return "chorusDequantize";
  return "";
}

double relativeL2(const std::vector<float>& got, const std::vector<double>& exact) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - exact[i]) * (got[i] - exact[i]);
    den += exact[i] * exact[i];
  }
  return std::sqrt(num / den);
}

struct Layout {
  const char* name;
  std::vector<int> hostOf;  // per rank; empty: one host
};

struct Case {
  const char* transport;
  Layout layout;
  int bits;
  bool hostAware;  // CHORUS_ALGO: the 2-hop / rail algorithms, else the one-hop / flat ones
};

std::string caseName(const testing::TestParamInfo<Case>& info) {
  return std::string(info.param.layout.name) + "_" + info.param.transport + "_int" +
         std::to_string(info.param.bits) + (info.param.hostAware ? "_twohop" : "_direct");
}

RunOptions optionsFor(const Case& c) {
  RunOptions o;
  o.env["CHORUS_TRANSPORT"] = c.transport;
  o.env["CHORUS_ALGO"] = c.hostAware
                             ? "reducescatter:quant_two_hop,allgather:quant_hier,allreduce:quant_two_hop"
                             : "reducescatter:quant_direct,allgather:quant_direct,allreduce:quant_direct";
  const std::vector<int> hosts = c.layout.hostOf;
  if (!hosts.empty())
    o.rankEnv = [hosts](int rank) {
      return std::map<std::string, std::string>{
          {"CHORUS_HOST_ID", "pretend-host-" + std::to_string(hosts[static_cast<size_t>(rank)])}};
    };
  return o;
}

int ranksOf(const Case& c) {
  return c.layout.hostOf.empty() ? 4 : static_cast<int>(c.layout.hostOf.size());
}

class Quantized : public testing::TestWithParam<Case> {};

// Every quantized collective's numbers, on one layout and transport.
TEST_P(Quantized, MatchTheirDefinitions) {
  const Case c = GetParam();
  const int n = ranksOf(c);
  auto out = runRanks(n, [&](chorusComm_t comm, int rank, int nranks) -> std::string {
    chorusQuantConfig_t cfg = CHORUS_QUANT_CONFIG_INIT;
    cfg.bits = c.bits;
    const double bound = c.bits == 8 ? 0.011 : 0.19;
    const size_t count = 3 * 256 * 4 + 77;  // per rank's slice: a short last group
    const size_t total = count * static_cast<size_t>(nranks);

    // Reduce-scatter: against the fp64 sum, and (one hop) exactly.
    std::vector<std::vector<float>> in(static_cast<size_t>(nranks));
    for (int p = 0; p < nranks; ++p) in[static_cast<size_t>(p)] = inputOf(p, total);
    std::vector<float> rs(count), rs2(count), avg(count);
    const float* mine = in[static_cast<size_t>(rank)].data();
    RANK_OK(chorusReduceScatterQuantized(mine, rs.data(), count, chorusFloat32, chorusSum, &cfg,
                                         comm, nullptr));
    std::vector<double> exact(count, 0.0);
    for (int p = 0; p < nranks; ++p)
      for (size_t i = 0; i < count; ++i)
        exact[i] += in[static_cast<size_t>(p)][static_cast<size_t>(rank) * count + i];
    const double err = relativeL2(rs, exact);
    RANK_CHECK(err <= bound, "reduce-scatter error " + std::to_string(err));
    RANK_OK(chorusReduceScatterQuantized(mine, rs2.data(), count, chorusFloat32, chorusSum, &cfg,
                                         comm, nullptr));
    RANK_CHECK(std::memcmp(rs.data(), rs2.data(), count * 4) == 0, "second run differs");
    RANK_OK(chorusReduceScatterQuantized(mine, avg.data(), count, chorusFloat32, chorusAvg, &cfg,
                                         comm, nullptr));
    for (size_t i = 0; i < count; ++i)
      RANK_CHECK(avg[i] == rs[i] / static_cast<float>(nranks),
                 "avg at " + std::to_string(i) + " is not sum / W");
    chorusStats_t st{};
    st.structSize = sizeof st;
    RANK_OK(chorusCommGetStats(comm, &st));
    std::string ran;
    for (int a = 0; a < st.numAlgos; ++a)
      if (std::strncmp(st.algos[a].name, "reducescatter:", 14) == 0) ran = st.algos[a].name;
    // The 2-hop schedule only where hosts are equal and hold several ranks; elsewhere it builds
    // the one-hop one, and the statistics say so.
    const std::string layout = c.layout.name;
    const bool twoHop = c.hostAware && (layout == "2x2" || layout == "3x2");
    RANK_CHECK(ran == (twoHop ? "reducescatter:quant_two_hop" : "reducescatter:quant_direct"),
               "ran " + ran);
    if (ran == "reducescatter:quant_direct") {
      // The owner sums D(Q(slice)) of every rank in rank order, in float32.
      std::vector<float> sum(count, 0.0f), part(count);
      for (int p = 0; p < nranks; ++p) {
        std::string e = roundTrip(in[static_cast<size_t>(p)].data() + rank * count, count, cfg,
                                  part.data());
        RANK_CHECK(e.empty(), e);
        for (size_t i = 0; i < count; ++i) sum[i] = p == 0 ? part[i] : sum[i] + part[i];
      }
      RANK_CHECK(std::memcmp(sum.data(), rs.data(), count * 4) == 0,
                 "one-hop reduce-scatter is not the float32 sum of the decoded blocks");
    }

    // All-gather: every slot is exactly its owner's D(Q(x)), on every rank.
    std::vector<float> ag(total), want(total);
    RANK_OK(chorusAllGatherQuantized(mine, ag.data(), count, chorusFloat32, &cfg, comm, nullptr));
    for (int p = 0; p < nranks; ++p) {
      std::string e = roundTrip(in[static_cast<size_t>(p)].data(), count, cfg,
                                want.data() + static_cast<size_t>(p) * count);
      RANK_CHECK(e.empty(), e);
    }
    RANK_CHECK(std::memcmp(ag.data(), want.data(), total * 4) == 0,
               "all-gather differs from D(Q(x)) of the owners");

    // All-reduce, in place: against the fp64 sum; the same on every rank (checked through an
    // unquantized all-gather of a checksum-free copy: the whole vectors).
    std::vector<float> ar(in[static_cast<size_t>(rank)].begin(),
                          in[static_cast<size_t>(rank)].begin() + static_cast<long>(count));
    RANK_OK(chorusAllReduceQuantized(ar.data(), ar.data(), count, chorusFloat32, chorusSum, &cfg,
                                     comm, nullptr));
    std::vector<double> arExact(count, 0.0);
    for (int p = 0; p < nranks; ++p)
      for (size_t i = 0; i < count; ++i) arExact[i] += in[static_cast<size_t>(p)][i];
    const double arErr = relativeL2(ar, arExact);
    // Three quantizations on the way: a looser bound than the reduce-scatter's.
    RANK_CHECK(arErr <= (c.bits == 8 ? 0.02 : 0.33), "all-reduce error " + std::to_string(arErr));
    std::vector<float> everyone(total);
    RANK_OK(chorusAllGather(ar.data(), everyone.data(), count, chorusFloat32, comm, nullptr));
    for (int p = 0; p < nranks; ++p)
      RANK_CHECK(std::memcmp(everyone.data() + static_cast<size_t>(p) * count, ar.data(),
                             count * 4) == 0,
                 "rank " + std::to_string(p) + "'s all-reduce result differs");
    return "";
  }, optionsFor(c));
  EXPECT_EQ(summarize(out), "");
}

std::vector<Case> cases() {
  const Layout layouts[] = {{"flat4", {}},
                            {"2x2", {0, 1, 0, 1}},
                            {"3x2", {0, 1, 2, 0, 1, 2}},
                            {"hosts2_1_3", {0, 0, 1, 2, 2, 2}},
                            {"4x1", {0, 1, 2, 3}}};
  std::vector<Case> out;
  for (const Layout& l : layouts)
    for (const char* t : {"shm", "tcp"})
      for (int bits : {4, 8})
        for (bool hostAware : {false, true}) {
          if (!l.hostOf.empty() && std::string(t) == "shm") continue;  // hosts talk over TCP
          if (l.hostOf.empty() && hostAware) continue;
          out.push_back({t, l, bits, hostAware});
        }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Layouts, Quantized, testing::ValuesIn(cases()), caseName);

// The comparison ring runs when named, and re-quantizes at every hop: its error is larger than
// the one-hop algorithm's on the same data, which the 2-hop one is not (bench/quant has the
// table by W).
TEST(QuantizedRing, RunsWhenNamedWithALargerError) {
  RunOptions o;
  o.env["CHORUS_TRANSPORT"] = "shm";
  o.env["CHORUS_ALGO"] = "reducescatter:quant_ring";
  auto out = runRanks(5, [&](chorusComm_t comm, int rank, int nranks) -> std::string {
    chorusQuantConfig_t cfg = CHORUS_QUANT_CONFIG_INIT;
    const size_t count = 4096 + 3, total = count * static_cast<size_t>(nranks);
    std::vector<std::vector<float>> in;
    for (int p = 0; p < nranks; ++p) in.push_back(inputOf(p, total));
    std::vector<float> got(count);
    RANK_OK(chorusReduceScatterQuantized(in[static_cast<size_t>(rank)].data(), got.data(), count,
                                         chorusFloat32, chorusSum, &cfg, comm, nullptr));
    std::vector<double> exact(count, 0.0);
    for (int p = 0; p < nranks; ++p)
      for (size_t i = 0; i < count; ++i)
        exact[i] += in[static_cast<size_t>(p)][static_cast<size_t>(rank) * count + i];
    const double err = relativeL2(got, exact);
    RANK_CHECK(err > 0.0 && err < 0.03, "ring error " + std::to_string(err));
    chorusStats_t st{};
    st.structSize = sizeof st;
    RANK_OK(chorusCommGetStats(comm, &st));
    bool ring = false;
    for (int a = 0; a < st.numAlgos; ++a)
      ring = ring || std::string(st.algos[a].name) == "reducescatter:quant_ring";
    RANK_CHECK(ring, "quant_ring did not run");
    return "";
  }, o);
  EXPECT_EQ(summarize(out), "");
}

// Stochastic rounding: the same bytes for the same seed (blocking or not), other bytes for
// another seed.
TEST(QuantizedStochastic, SameSeedSameBytes) {
  auto out = runRanks(3, [&](chorusComm_t comm, int rank, int nranks) -> std::string {
    chorusQuantConfig_t cfg = CHORUS_QUANT_CONFIG_INIT;
    cfg.bits = 4;
    cfg.rounding = chorusRoundStochastic;
    cfg.seed = 7;
    const size_t count = 2048;
    std::vector<float> x = inputOf(rank, count * static_cast<size_t>(nranks));
    std::vector<float> a(count), b(count), c(count);
    RANK_OK(chorusReduceScatterQuantized(x.data(), a.data(), count, chorusFloat32, chorusSum, &cfg,
                                         comm, nullptr));
    // The nonblocking form gives the same bytes.
    chorusRequest_t req = nullptr;
    RANK_OK(chorusIReduceScatterQuantized(x.data(), b.data(), count, chorusFloat32, chorusSum,
                                          &cfg, comm, nullptr, &req));
    RANK_OK(chorusWait(&req));
    cfg.seed = 8;
    RANK_OK(chorusReduceScatterQuantized(x.data(), c.data(), count, chorusFloat32, chorusSum, &cfg,
                                         comm, nullptr));
    RANK_CHECK(std::memcmp(a.data(), b.data(), count * 4) == 0, "seed 7 twice differs");
    RANK_CHECK(std::memcmp(a.data(), c.data(), count * 4) != 0, "seeds 7 and 8 agree");
    return "";
  });
  EXPECT_EQ(summarize(out), "");
}

// One rank: the result still passes through quantization (the same semantics at every size).
TEST(QuantizedOneRank, ResultIsTheRoundTrip) {
  auto out = runRanks(1, [&](chorusComm_t comm, int rank, int) -> std::string {
    chorusQuantConfig_t cfg = CHORUS_QUANT_CONFIG_INIT;
    cfg.bits = 4;
    const size_t count = 1000;
    std::vector<float> x = inputOf(0, count), got(count), want(count);
    RANK_OK(chorusReduceScatterQuantized(x.data(), got.data(), count, chorusFloat32, chorusSum,
                                         &cfg, comm, nullptr));
    std::string e = roundTrip(x.data(), count, cfg, want.data());
    RANK_CHECK(e.empty(), e);
    RANK_CHECK(std::memcmp(got.data(), want.data(), count * 4) == 0, "not D(Q(x))");
    return "";
  });
  EXPECT_EQ(summarize(out), "");
}

// Bad arguments: each refused with chorusInvalidArgument and a message naming what is wrong.
TEST(QuantizedArguments, AreRefusedWithAMessage) {
  auto out = runRanks(2, [&](chorusComm_t comm, int rank, int) -> std::string {
    std::vector<float> a(2048, 1.0f), b(2048);
    std::vector<int32_t> ints(2048);
    chorusQuantConfig_t good = CHORUS_QUANT_CONFIG_INIT;
    auto expect = [&](chorusResult_t r, const char* needle) -> std::string {
      if (r != chorusInvalidArgument)
        return std::string("expected chorusInvalidArgument for '") + needle + "', got " +
               chorusGetErrorString(r);
      const std::string msg = chorusGetLastError(comm);
      if (msg.find(needle) == std::string::npos)
        return "message '" + msg + "' does not name '" + needle + "'";
      return "";
    };
    std::string e;
    chorusQuantConfig_t bad = good;
#define EXPECT_REFUSED(call, needle) \
  if (!(e = expect(call, needle)).empty()) return "rank " + std::to_string(rank) + ": " + e
    EXPECT_REFUSED(chorusReduceScatterQuantized(a.data(), b.data(), 1024, chorusFloat32,
                                                chorusSum, nullptr, comm, nullptr),
                   "config is NULL");
    bad.bits = 5;
    EXPECT_REFUSED(chorusAllGatherQuantized(a.data(), b.data(), 1024, chorusFloat32, &bad, comm,
                                            nullptr),
                   "config->bits is 5");
    bad = good;
    bad.groupSize = 0;
    EXPECT_REFUSED(chorusAllReduceQuantized(a.data(), b.data(), 1024, chorusFloat32, chorusSum,
                                            &bad, comm, nullptr),
                   "groupSize is 0");
    bad = good;
    bad.groupSize = 2000;
    EXPECT_REFUSED(chorusAllReduceQuantized(a.data(), b.data(), 1024, chorusFloat32, chorusSum,
                                            &bad, comm, nullptr),
                   "larger than count 1024");
    EXPECT_REFUSED(chorusReduceScatterQuantized(ints.data(), ints.data(), 1024, chorusInt32,
                                                chorusSum, &good, comm, nullptr),
                   "cannot be quantized");
    EXPECT_REFUSED(chorusReduceScatterQuantized(a.data(), b.data(), 1024, chorusFloat32,
                                                chorusMax, &good, comm, nullptr),
                   "chorusSum or chorusAvg");
    EXPECT_REFUSED(chorusAllGatherQuantized(nullptr, b.data(), 1024, chorusFloat32, &good, comm,
                                            nullptr),
                   "sendbuff is NULL");
    EXPECT_REFUSED(chorusIAllReduceQuantized(a.data(), b.data(), 1024, chorusFloat32, chorusSum,
                                             &good, comm, nullptr, nullptr),
                   "request is NULL");
#undef EXPECT_REFUSED
    // The communicator is still usable.
    RANK_OK(chorusAllReduceQuantized(a.data(), b.data(), 1024, chorusFloat32, chorusSum, &good,
                                     comm, nullptr));
    RANK_CHECK(std::fabs(b[0] - 2.0f) < 1e-2f, "1 + 1 gave " + std::to_string(b[0]));
    return "";
  });
  EXPECT_EQ(summarize(out), "");
}

// Ranks that pass different configs fail with both configs named, on every rank that exchanges
// with the one that differs — never a hang or a silently wrong result.
TEST(QuantizedArguments, MismatchedConfigsFailNamingBoth) {
  auto out = runRanks(3, [&](chorusComm_t comm, int rank, int) -> std::string {
    chorusQuantConfig_t cfg = CHORUS_QUANT_CONFIG_INIT;
    if (rank == 1) cfg.groupSize = 128;
    std::vector<float> a(3 * 1024, 1.0f), b(1024);
    const chorusResult_t r = chorusReduceScatterQuantized(a.data(), b.data(), 1024, chorusFloat32,
                                                          chorusSum, &cfg, comm, nullptr);
    RANK_CHECK(r == chorusInvalidUsage,
               std::string("expected chorusInvalidUsage, got ") + chorusGetErrorString(r));
    const std::string msg = chorusGetLastError(comm);
    RANK_CHECK(msg.find("int8:128") != std::string::npos &&
                   msg.find("int8:256") != std::string::npos,
               "message does not name both configs: " + msg);
    return "";
  });
  EXPECT_EQ(summarize(out), "");
}

// hpZ: the secondary weight shards live on the host; gathering them never crosses hosts.
TEST(QuantizedHpZ, HostLocalGatherSendsNothingAcrossHosts) {
  RunOptions o;
  o.env["CHORUS_TRANSPORT"] = "tcp";
  o.rankEnv = [](int rank) {
    return std::map<std::string, std::string>{
        {"CHORUS_HOST_ID", "pretend-host-" + std::to_string(rank / 2)}};
  };
  auto out = runRanks(4, [&](chorusComm_t comm, int rank, int) -> std::string {
    chorusComm_t host = nullptr;
    RANK_OK(chorusCommSplitType(comm, CHORUS_SPLIT_HOST, rank, &host));
    int local = 0;
    RANK_OK(chorusCommCount(host, &local));
    RANK_CHECK(local == 2, "host has " + std::to_string(local) + " ranks");
    chorusQuantConfig_t cfg = CHORUS_QUANT_CONFIG_INIT;
    const size_t shard = 4096;
    std::vector<float> mine = inputOf(rank, shard), all(2 * shard);
    RANK_OK(chorusAllGatherQuantized(mine.data(), all.data(), shard, chorusFloat32, &cfg, host,
                                     nullptr));
    chorusStats_t st{};
    st.structSize = sizeof st;
    RANK_OK(chorusCommGetStats(host, &st));
    uint64_t inter = 0, intra = 0;
    for (int t = 0; t < st.numTransports; ++t) {
      inter += st.transports[t].bytesSentInterHost + st.transports[t].bytesRecvInterHost;
      intra += st.transports[t].bytesSentIntraHost;
    }
    RANK_CHECK(inter == 0, std::to_string(inter) + " bytes crossed hosts");
    RANK_CHECK(intra > 0, "nothing was sent inside the host");
    RANK_OK(chorusCommDestroy(host));
    return "";
  }, o);
  EXPECT_EQ(summarize(out), "");
}

}  // namespace
}  // namespace chorus::test
