#include "tools/chorus-perf/flags.h"

#include <initializer_list>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace chorus::perf {
namespace {

FlagsResult parse(std::initializer_list<const char*> args) {
  std::vector<const char*> argv = {"chorus-perf"};
  argv.insert(argv.end(), args.begin(), args.end());
  return parseFlags(static_cast<int>(argv.size()), argv.data());
}

// A usage error: no options, exit status 2, and a message on stderr containing `mentions`.
void expectUsageError(std::initializer_list<const char*> args, const std::string& mentions) {
  FlagsResult r = parse(args);
  std::string line;
  for (const char* a : args) line += std::string(" ") + a;
  EXPECT_FALSE(r.options.has_value()) << line;
  EXPECT_EQ(r.status, 2) << line;
  EXPECT_NE(r.err.find(mentions), std::string::npos) << line << ": " << r.err;
}

TEST(PerfFlags, DefaultsAreNcclTests) {
  FlagsResult r = parse({});
  ASSERT_TRUE(r.options.has_value()) << r.err;
  const PerfOptions& o = *r.options;
  EXPECT_EQ(o.coll, Coll::kAllReduce);
  EXPECT_EQ(o.minBytes, 32u << 20);
  EXPECT_EQ(o.maxBytes, 32u << 20);
  EXPECT_EQ(o.stepBytes, 1u << 20);
  EXPECT_EQ(o.stepFactor, 1u);
  EXPECT_EQ(o.iters, 20);
  EXPECT_EQ(o.warmupIters, 5);
  EXPECT_TRUE(o.check);
  EXPECT_FALSE(o.blocking);
  EXPECT_FALSE(o.registered);
  EXPECT_EQ(o.ops, std::vector<Op>{Op::kSum});
  EXPECT_EQ(o.types, std::vector<chorusDataType_t>{chorusFloat32});
  EXPECT_EQ(o.root, 0);
  EXPECT_EQ(o.commandLine, "chorus-perf");
}

TEST(PerfFlags, PingPongWithEveryCommonFlag) {
  FlagsResult r = parse({"--coll", "pingpong", "-b", "8", "-e", "4M", "-f", "4", "-n", "2000",
                         "-w", "200", "-c", "1", "-z", "1", "--csv", "out.csv", "--json",
                         "out.json"});
  ASSERT_TRUE(r.options.has_value()) << r.err;
  const PerfOptions& o = *r.options;
  EXPECT_EQ(o.coll, Coll::kPingPong);
  EXPECT_EQ(o.minBytes, 8u);
  EXPECT_EQ(o.maxBytes, 4u << 20);
  EXPECT_EQ(o.stepFactor, 4u);
  EXPECT_EQ(o.iters, 2000);
  EXPECT_EQ(o.warmupIters, 200);
  EXPECT_TRUE(o.check);
  EXPECT_TRUE(o.blocking);
  EXPECT_EQ(o.csvPath, "out.csv");
  EXPECT_EQ(o.jsonPath, "out.json");
  EXPECT_EQ(o.commandLine,
            "chorus-perf --coll pingpong -b 8 -e 4M -f 4 -n 2000 -w 200 -c 1 -z 1 --csv out.csv "
            "--json out.json");
}

TEST(PerfFlags, BlockingAndCheckTakeZeroOrOne) {
  FlagsResult nb = parse({"--coll", "pingpong", "-z", "0", "-c", "0"});
  ASSERT_TRUE(nb.options.has_value()) << nb.err;
  EXPECT_FALSE(nb.options->blocking);
  EXPECT_FALSE(nb.options->check);
  expectUsageError({"--coll", "pingpong", "-z", "2"}, "--blocking");
  expectUsageError({"-c", "2"}, "--check");
  expectUsageError({"-z", "yes"}, "--blocking");
}

TEST(PerfFlags, RegisterTakesZeroOrOne) {
  FlagsResult r = parse({"-R", "1"});
  ASSERT_TRUE(r.options.has_value()) << r.err;
  EXPECT_TRUE(r.options->registered);
  FlagsResult off = parse({"--register", "0"});
  ASSERT_TRUE(off.options.has_value()) << off.err;
  EXPECT_FALSE(off.options->registered);
  expectUsageError({"-R", "2"}, "--register");
}

TEST(PerfFlags, EveryCollectiveByName) {
  for (Coll c : kAllColls) {
    FlagsResult r = parse({"--coll", collName(c)});
    ASSERT_TRUE(r.options.has_value()) << collName(c) << ": " << r.err;
    EXPECT_EQ(r.options->coll, c);
  }
  // nccl-tests' binary names are not collective names here; the message lists the real ones.
  expectUsageError({"--coll", "ping_pong"}, "pingpong");
  expectUsageError({"--coll", "all_reduce"}, "allreduce");
}

TEST(PerfFlags, QuantSpecs) {
  FlagsResult r = parse({"--coll", "reducescatter", "--quant", "int4:128:asym:stochastic=7"});
  ASSERT_TRUE(r.options.has_value()) << r.err;
  ASSERT_TRUE(r.options->quant.has_value());
  EXPECT_EQ(r.options->quant->bits, 4);
  EXPECT_EQ(r.options->quant->groupSize, 128u);
  EXPECT_EQ(r.options->quant->mode, chorusQuantAsymmetric);
  EXPECT_EQ(r.options->quant->rounding, chorusRoundStochastic);
  EXPECT_EQ(r.options->quant->seed, 7u);
  FlagsResult d = parse({"--coll", "allgather", "--quant", "int8", "-d", "bfloat16"});
  ASSERT_TRUE(d.options.has_value()) << d.err;
  EXPECT_EQ(d.options->quant->bits, 8);
  EXPECT_EQ(d.options->quant->groupSize, 256u);
  EXPECT_EQ(d.options->quant->rounding, chorusRoundNearest);
  expectUsageError({"--quant", "int2"}, "int4 or int8");
  expectUsageError({"--quant", "int4:abc"}, "'abc'");
  expectUsageError({"--quant", "int4:0"}, "'0'");
  expectUsageError({"--coll", "broadcast", "--quant", "int4"}, "not broadcast");
  expectUsageError({"--quant", "int4", "-d", "int32"}, "not int32");
  expectUsageError({"--quant", "int4", "-o", "max"}, "not max");
}

TEST(PerfFlags, HelpListsPingPongAndExitsZero) {
  FlagsResult r = parse({"--help"});
  EXPECT_FALSE(r.options.has_value());
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("pingpong"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sendrecv"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "");
  FlagsResult v = parse({"--version"});
  EXPECT_EQ(v.status, 0);
  EXPECT_NE(v.out.find("chorus-perf"), std::string::npos) << v.out;
}

TEST(PerfFlags, SizesAndSteps) {
  FlagsResult r = parse({"-b", "1K", "-e", "1.5M", "-i", "512K"});
  ASSERT_TRUE(r.options.has_value()) << r.err;
  EXPECT_EQ(r.options->minBytes, 1024u);
  EXPECT_EQ(r.options->maxBytes, 1536u << 10);
  EXPECT_EQ(r.options->stepBytes, 512u << 10);
  expectUsageError({"-b", "1MB"}, "not a size");
  expectUsageError({"-b", "64K", "-e", "8"}, "minbytes 65536 > maxbytes 8");
  expectUsageError({"-b", "8", "-e", "64", "-i", "0"}, "-i 0 needs -f 2");
  expectUsageError({"-f", "2", "-i", "1M"}, "excludes");
  expectUsageError({"-n", "0"}, "--iters");
}

TEST(PerfFlags, OperatorsTypesAndNcclTestsCompatibility) {
  FlagsResult r = parse({"-o", "all", "-d", "all", "-r", "2", "-t", "1", "-g", "1"});
  ASSERT_TRUE(r.options.has_value()) << r.err;
  EXPECT_EQ(r.options->ops.size(), 6u);
  EXPECT_EQ(r.options->types.size(), 12u);
  EXPECT_EQ(r.options->root, 2);
  expectUsageError({"-o", "xor"}, "unknown op 'xor'");
  expectUsageError({"-d", "float32"}, "unknown datatype 'float32'");
  expectUsageError({"-t", "2"}, "--nthreads");
  expectUsageError({"--no-such-flag"}, "--no-such-flag");
}

}  // namespace
}  // namespace chorus::perf
