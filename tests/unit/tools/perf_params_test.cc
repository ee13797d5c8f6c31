#include "tools/chorus-perf/perf_params.h"

#include <gtest/gtest.h>

namespace chorus::perf {
namespace {

TEST(PerfParams, ParsesSizesWithBinarySuffixes) {
  EXPECT_EQ(parseSize("0"), 0u);
  EXPECT_EQ(parseSize("8"), 8u);
  EXPECT_EQ(parseSize("1K"), 1024u);
  EXPECT_EQ(parseSize("64k"), 65536u);
  EXPECT_EQ(parseSize("1M"), 1048576u);
  EXPECT_EQ(parseSize("256M"), 256u << 20);
  EXPECT_EQ(parseSize("2G"), 2ull << 30);
  EXPECT_EQ(parseSize("1T"), 1ull << 40);
  EXPECT_EQ(parseSize("1.5M"), 1572864u);
  EXPECT_EQ(parseSize("0.5K"), 512u);
}

TEST(PerfParams, RejectsMalformedSizes) {
  for (const char* bad : {"", "K", "-1", "+8", "1.5", "0.3K", "1e3", "1 M", "1MB", "abc", "1..2",
                          "99999999999999999999G"}) {
    EXPECT_FALSE(parseSize(bad).has_value()) << bad;
  }
}

TEST(PerfParams, SizeSeriesByFactorAndByStep) {
  EXPECT_EQ(sizeSeries(8, 1 << 20, 4, 0),
            (std::vector<uint64_t>{8, 32, 128, 512, 2048, 8192, 32768, 131072, 524288}));
  EXPECT_EQ(sizeSeries(8, 128, 2, 0), (std::vector<uint64_t>{8, 16, 32, 64, 128}));
  EXPECT_EQ(sizeSeries(100, 400, 1, 100), (std::vector<uint64_t>{100, 200, 300, 400}));
  EXPECT_EQ(sizeSeries(32 << 20, 32 << 20, 1, 1 << 20), (std::vector<uint64_t>{32 << 20}));
  // No progress possible: one size, not an endless loop.
  EXPECT_EQ(sizeSeries(0, 1024, 2, 0), (std::vector<uint64_t>{0}));
  EXPECT_EQ(sizeSeries(5, 10, 1, 0), (std::vector<uint64_t>{5}));
  // No overflow at the top of the range.
  EXPECT_EQ(sizeSeries(1ull << 62, ~0ull, 4, 0).size(), 1u);
}

TEST(PerfParams, BusBandwidthFactors) {
  EXPECT_DOUBLE_EQ(busBwFactor(Coll::kAllReduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(busBwFactor(Coll::kAllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(busBwFactor(Coll::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(busBwFactor(Coll::kAllReduce, 8), 1.75);
  for (Coll c : {Coll::kAllGather, Coll::kReduceScatter, Coll::kAllToAll}) {
    EXPECT_DOUBLE_EQ(busBwFactor(c, 1), 0.0);
    EXPECT_DOUBLE_EQ(busBwFactor(c, 4), 0.75);
    EXPECT_DOUBLE_EQ(busBwFactor(c, 3), 2.0 / 3.0);
  }
  for (Coll c :
       {Coll::kBroadcast, Coll::kReduce, Coll::kSendRecv, Coll::kPingPong, Coll::kStream}) {
    EXPECT_DOUBLE_EQ(busBwFactor(c, 1), 1.0);
    EXPECT_DOUBLE_EQ(busBwFactor(c, 7), 1.0);
  }
}

TEST(PerfParams, BandwidthIsBytesPerNanosecond) {
  Bandwidth bw = bandwidth(Coll::kAllReduce, 1000000000, 0.5, 4);
  EXPECT_DOUBLE_EQ(bw.algBw, 2.0);
  EXPECT_DOUBLE_EQ(bw.busBw, 3.0);
  EXPECT_DOUBLE_EQ(bandwidth(Coll::kAllReduce, 8, 0, 2).algBw, 0.0);
}

TEST(PerfParams, GeometryOfElementwiseCollectives) {
  for (Coll c : {Coll::kAllReduce, Coll::kBroadcast, Coll::kReduce, Coll::kSendRecv,
                 Coll::kPingPong, Coll::kStream}) {
    CollGeometry g = collGeometry(c, 1 << 20, 4, 3);
    EXPECT_EQ(g.count, 262144u);
    EXPECT_EQ(g.sendCount, 262144u);
    EXPECT_EQ(g.recvCount, 262144u);
    EXPECT_EQ(g.bytes(4), 1u << 20);
    EXPECT_EQ(g.sendInPlaceOffset, 0u);
    EXPECT_EQ(g.recvInPlaceOffset, 0u);
  }
  // Sizes that are not a multiple of the type size round down to whole elements.
  EXPECT_EQ(collGeometry(Coll::kAllReduce, 10, 4, 2).count, 2u);
  EXPECT_EQ(collGeometry(Coll::kAllReduce, 10, 4, 2).bytes(4), 8u);
}

TEST(PerfParams, GeometryOfAllGather) {
  // 1 MiB of floats over 3 ranks: 87381 per rank, rounded down to a multiple of 4 (16 bytes).
  CollGeometry g = collGeometry(Coll::kAllGather, 1 << 20, 4, 3);
  EXPECT_EQ(g.count, 87380u);
  EXPECT_EQ(g.sendCount, 87380u);
  EXPECT_EQ(g.recvCount, 3u * 87380u);
  EXPECT_EQ(g.bytes(4), 3u * 87380u * 4u);  // size = total received
  EXPECT_EQ(g.sendInPlaceOffset, 87380u);   // sendbuff = recvbuff + rank*count
  EXPECT_EQ(g.recvInPlaceOffset, 0u);
  // Too small to give every rank a 16-byte block: count 0, as nccl-tests.
  EXPECT_EQ(collGeometry(Coll::kAllGather, 8, 4, 2).count, 0u);
  EXPECT_EQ(collGeometry(Coll::kAllGather, 128, 4, 2).count, 16u);
  EXPECT_EQ(collGeometry(Coll::kAllGather, 128, 8, 2).bytes(8), 128u);
}

TEST(PerfParams, GeometryOfReduceScatterAndAllToAll) {
  CollGeometry rs = collGeometry(Coll::kReduceScatter, 4096, 2, 4);
  EXPECT_EQ(rs.count, 512u);
  EXPECT_EQ(rs.sendCount, 2048u);
  EXPECT_EQ(rs.recvCount, 512u);
  EXPECT_EQ(rs.bytes(2), 4096u);  // size = total sent
  EXPECT_EQ(rs.sendInPlaceOffset, 0u);
  EXPECT_EQ(rs.recvInPlaceOffset, 512u);  // recvbuff = sendbuff + rank*count

  CollGeometry a2a = collGeometry(Coll::kAllToAll, 4096, 1, 3);
  EXPECT_EQ(a2a.count, 1360u);  // 1365 per peer, rounded down to 16 bytes
  EXPECT_EQ(a2a.sendCount, 3u * 1360u);
  EXPECT_EQ(a2a.recvCount, 3u * 1360u);
  EXPECT_EQ(a2a.bytes(1), 3u * 1360u);
}

TEST(PerfParams, GeometryWithOneRank) {
  CollGeometry g = collGeometry(Coll::kAllGather, 64, 4, 1);
  EXPECT_EQ(g.count, 16u);
  EXPECT_EQ(g.recvCount, 16u);
}

TEST(PerfParams, NamesRoundTrip) {
  for (Coll c : kAllColls) EXPECT_EQ(parseColl(collName(c)), c);
  EXPECT_FALSE(parseColl("all_reduce").has_value());
  for (chorusDataType_t t : kAllTypes) {
    auto parsed = parseTypes(typeName(t));
    ASSERT_TRUE(parsed.has_value()) << typeName(t);
    EXPECT_EQ(parsed->size(), 1u);
    EXPECT_EQ(parsed->front(), t);
    EXPECT_GT(typeSize(t), 0u);
  }
  EXPECT_EQ(parseTypes("all")->size(), 12u);
  EXPECT_FALSE(parseTypes("float32").has_value());
  EXPECT_EQ(typeSize(chorusBfloat16), 2u);
  EXPECT_EQ(typeSize(chorusFloat8e5m2), 1u);
  EXPECT_EQ(typeSize(chorusUint64), 8u);
  for (Op op : kAllReduceOps) EXPECT_EQ(parseOps(opName(op))->front(), op);
  EXPECT_EQ(parseOps("mulsum")->front(), Op::kPreMulSum);
  EXPECT_EQ(parseOps("all")->size(), 6u);
  EXPECT_FALSE(parseOps("none").has_value());
  EXPECT_EQ(builtinOp(Op::kMax), chorusMax);
  EXPECT_EQ(builtinOp(Op::kAvg), chorusAvg);
}

TEST(PerfParams, CollectiveTraits) {
  EXPECT_TRUE(collReduces(Coll::kAllReduce));
  EXPECT_TRUE(collReduces(Coll::kReduceScatter));
  EXPECT_TRUE(collReduces(Coll::kReduce));
  EXPECT_FALSE(collReduces(Coll::kAllGather));
  EXPECT_TRUE(collRooted(Coll::kBroadcast));
  EXPECT_TRUE(collRooted(Coll::kReduce));
  EXPECT_FALSE(collRooted(Coll::kAllReduce));
  EXPECT_FALSE(collHasInPlace(Coll::kAllToAll));
  EXPECT_FALSE(collHasInPlace(Coll::kSendRecv));
  EXPECT_TRUE(collHasInPlace(Coll::kAllGather));
  EXPECT_FALSE(collReduces(Coll::kPingPong));
  EXPECT_FALSE(collRooted(Coll::kPingPong));
  EXPECT_FALSE(collHasInPlace(Coll::kPingPong));
  EXPECT_FALSE(collReduces(Coll::kStream));
  EXPECT_FALSE(collRooted(Coll::kStream));
  EXPECT_FALSE(collHasInPlace(Coll::kStream));
}

TEST(PerfParams, PingPongReportsOneWay) {
  EXPECT_EQ(legsPerCall(Coll::kPingPong), 2);
  for (Coll c : kAllColls) {
    if (c != Coll::kPingPong && c != Coll::kStream) {
      EXPECT_EQ(legsPerCall(c), 1) << collName(c);
    }
  }
  // 8 B in a 10 us round trip: 5 us one way, 1.6 MB/s.
  double oneWay = 10e-6 / legsPerCall(Coll::kPingPong);
  Bandwidth bw = bandwidth(Coll::kPingPong, 8, oneWay, 2);
  EXPECT_DOUBLE_EQ(bw.algBw, 8 / 5e-6 / 1e9);
  EXPECT_DOUBLE_EQ(bw.busBw, bw.algBw);
}

TEST(PerfParams, StreamReportsPerMessage) {
  EXPECT_EQ(legsPerCall(Coll::kStream), kStreamWindow);
  EXPECT_EQ(parseColl("stream"), Coll::kStream);
  EXPECT_STREQ(collName(Coll::kStream), "stream");
  // A window of 64 messages of 1 MiB in 64 ms: 1 ms per message, 1.048576 GB/s.
  double perMessage = 64e-3 / legsPerCall(Coll::kStream);
  Bandwidth bw = bandwidth(Coll::kStream, 1 << 20, perMessage, 2);
  EXPECT_DOUBLE_EQ(bw.algBw, (1 << 20) / 1e-3 / 1e9);
  EXPECT_DOUBLE_EQ(bw.busBw, bw.algBw);
}

TEST(PerfParams, PingPongNeedsTwoRanks) {
  for (Coll c : {Coll::kPingPong, Coll::kStream}) {
    EXPECT_EQ(rankCountError(c, 2), "");
    for (int n : {1, 3, 4}) {
      std::string why = rankCountError(c, n);
      EXPECT_NE(why.find(std::string(collName(c)) + " needs exactly 2 ranks, not " +
                         std::to_string(n)),
                std::string::npos)
          << why;
    }
  }
  for (Coll c : kAllColls) {
    if (c == Coll::kPingPong || c == Coll::kStream) continue;
    for (int n : {1, 2, 3, 7}) {
      EXPECT_EQ(rankCountError(c, n), "") << collName(c) << " " << n;
    }
  }
}

}  // namespace
}  // namespace chorus::perf
