// The executor runs quantization steps: the hand-written quantized reduce-scatters of
// tests/support/quant_schedules.h, on real connections of every registered transport kind with
// one executor per rank on its own thread, give byte for byte what the kernels give when called
// directly in the same order. A plan whose blocks do not fit the call's config, or a call
// without one, fails with an internal error instead of touching memory.
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "algorithms/kernels/float_formats.h"
#include "algorithms/kernels/quantize.h"
#include "src/exec/executor.h"
#include "src/exec/plan.h"
#include "tests/support/quant_schedules.h"
#include "tests/unit/transport/conformance.h"

namespace chorus::conformance {
namespace {

using Bytes = std::vector<unsigned char>;
using Builder = std::function<sched::Schedule(const sched::CollDesc&, int, int)>;

class ExecutorQuantized : public ConformanceTest {};

// The connections of one rank of a Group.
class GroupPeers : public exec::PeerAccess {
 public:
  GroupPeers(std::shared_ptr<Group> g, int rank) : g_(std::move(g)), rank_(rank) {}
  Connection* connection(int peer) override { return g_->c[rank_][peer].get(); }
  Status alive(int) override { return Status(); }

 private:
  std::shared_ptr<Group> g_;
  int rank_;
};

// N(0, 1) elements of type t.
Bytes gaussianElements(DataType t, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  Bytes b(count * dataTypeSize(t));
  for (size_t i = 0; i < count; ++i) {
    const float x = normal(rng);
    if (t == DataType::kFloat32) {
      std::memcpy(b.data() + 4 * i, &x, 4);
    } else {
      const uint16_t h = t == DataType::kBfloat16 ? kernels::floatToBfloat16Bits(x)
                                                  : kernels::floatToHalfBits(x);
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
  }
  return b;
}

sched::CollDesc reduceScatter(uint64_t count, size_t elemSize, const kernels::QuantConfig& c) {
  sched::CollDesc d;
  d.coll = sched::Coll::kReduceScatter;
  d.count = count;
  d.elemSize = elemSize;
  d.quant = c;
  return d;
}

// One run of a reduce-scatter plan on this rank's buffers, with `config` as the call's.
Status runPlan(const exec::Plan& plan, Bytes& input, Bytes& output, const sched::CollDesc& d,
               DataType t, const kernels::QuantConfig* config, const exec::ExecEnv& env) {
  exec::OpIdentity id;
  id.coll = sched::Coll::kReduceScatter;
  id.seq = 1;
  id.count = d.count;
  id.dtype = t;
  id.userOp = 0;
  id.quant = config;
  exec::Bindings bind;
  bind.buf = {reinterpret_cast<std::byte*>(input.data()),
              reinterpret_cast<std::byte*>(output.data()), nullptr, nullptr};
  bind.bytes = {input.size(), output.size(), 0, 0};
  exec::Executor executor;
  return executor.run(plan, bind, t, ReduceOp::kSum, id, env);
}

// Runs rank r's plan of `build` on one thread per rank; returns each rank's status and output.
struct RankResult {
  Status status;
  Bytes output;
};

std::vector<RankResult> runRanks(const std::shared_ptr<Group>& g, const sched::CollDesc& d,
                                 DataType t, const kernels::QuantConfig& runConfig,
                                 const Builder& build, const std::vector<Bytes>& inputs) {
  const int n = g->size();
  std::vector<std::future<RankResult>> futures;
  for (int r = 0; r < n; ++r) {
    sched::Schedule s = build(d, r, n);
    s.finalize();
    std::string name = "reducescatter:" + s.algo;
    auto plan = exec::prepare(std::move(s), std::move(name), 0, false, r, n);
    EXPECT_TRUE(plan.ok()) << plan.status().toString();
    if (!plan.ok()) return {};
    auto input = std::make_shared<Bytes>(inputs[static_cast<size_t>(r)]);
    futures.push_back(onThread([g, r, n, d, t, runConfig, input, plan = plan.value()] {
      RankResult result;
      result.output.assign(d.count * d.elemSize, 0xa5);
      GroupPeers peers(g, r);
      exec::ExecEnv env;
      env.rank = r;
      env.nranks = n;
      env.peers = &peers;
      env.wait.timeoutSeconds = kOpSeconds;
      env.wait.deadline = Clock::now() + seconds(kOpSeconds);
      result.status = runPlan(*plan, *input, result.output, d, t, &runConfig, env);
      return result;
    }));
  }
  std::vector<RankResult> results;
  for (auto& f : futures) {
    auto r = joinWithin(f, seconds(kOpSeconds) + kHangMargin, "a rank's executor");
    results.push_back(r ? std::move(*r) : RankResult{timeoutError("hung"), {}});
  }
  return results;
}

// Quantized block of slice `slice` of an input, as the schedules' quantize steps make it.
Bytes sliceBlock(const Bytes& input, DataType t, const kernels::QuantConfig& c, uint64_t count,
                 int slice) {
  Bytes q(kernels::quantizedSize(count, c));
  const size_t e = dataTypeSize(t);
  kernels::quantize(q.data(), input.data() + slice * count * e, count, t, c, slice * count);
  return q;
}

Bytes decoded(DataType t, const std::vector<Bytes>& blocks, uint64_t count,
              const kernels::QuantConfig& c) {
  std::vector<const void*> srcs;
  for (const Bytes& b : blocks) srcs.push_back(b.data());
  Bytes out(count * dataTypeSize(t));
  kernels::dequantizeReduce(out.data(), t, srcs.data(), srcs.size(), count, c);
  return out;
}

TEST_P(ExecutorQuantized, OneHopReduceScatterGivesTheKernelsBytes) {
  const int n = 3;
  auto g = std::make_shared<Group>(connectedGroup(n));
  ASSERT_TRUE(g->connected());
  const kernels::QuantConfig c{.bits = 4, .groupSize = 32};
  const sched::CollDesc d = reduceScatter(1000, 4, c);  // 31 groups and a short one
  std::vector<Bytes> inputs;
  for (int r = 0; r < n; ++r) {
    inputs.push_back(gaussianElements(DataType::kFloat32, n * d.count, r));
  }
  const auto results = runRanks(g, d, DataType::kFloat32, c,
                                sched::examples::quantizedReduceScatter, inputs);
  ASSERT_EQ(results.size(), size_t(n));
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(results[r].status.ok()) << "rank " << r << ": " << results[r].status.toString();
    std::vector<Bytes> blocks;
    for (int p = 0; p < n; ++p) {
      blocks.push_back(sliceBlock(inputs[p], DataType::kFloat32, c, d.count, r));
    }
    EXPECT_EQ(results[r].output, decoded(DataType::kFloat32, blocks, d.count, c)) << "rank " << r;
  }
}

// bfloat16, int8 asymmetric with stochastic rounding: the requantize of each host's blocks uses
// the stream index of the destination's slice, as the schedule says.
TEST_P(ExecutorQuantized, TwoHopReduceScatterGivesTheKernelsBytes) {
  const int hosts = 2, perHost = 2, n = hosts * perHost;
  auto g = std::make_shared<Group>(connectedGroup(n));
  ASSERT_TRUE(g->connected());
  const kernels::QuantConfig c{
      .bits = 8, .groupSize = 64, .asymmetric = true, .stochastic = true, .seed = 11};
  const sched::CollDesc d = reduceScatter(777, 2, c);
  const DataType t = DataType::kBfloat16;
  std::vector<Bytes> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(gaussianElements(t, n * d.count, 10 + r));
  const Builder twoHop = [](const sched::CollDesc& x, int r, int nr) {
    return sched::examples::twoHopQuantizedReduceScatter(x, r, nr, perHost);
  };
  const auto results = runRanks(g, d, t, c, twoHop, inputs);
  ASSERT_EQ(results.size(), size_t(n));
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(results[r].status.ok()) << "rank " << r << ": " << results[r].status.toString();
    std::vector<Bytes> perHostBlocks;
    for (int h = 0; h < hosts; ++h) {
      std::vector<Bytes> local;
      std::vector<const void*> srcs;
      for (int k = 0; k < perHost; ++k) {
        local.push_back(sliceBlock(inputs[h * perHost + k], t, c, d.count, r));
      }
      for (const Bytes& b : local) srcs.push_back(b.data());
      Bytes requantized(kernels::quantizedSize(d.count, c));
      kernels::dequantizeReduceQuantize(requantized.data(), srcs.data(), srcs.size(), d.count, c,
                                        uint64_t(r) * d.count);
      perHostBlocks.push_back(std::move(requantized));
    }
    EXPECT_EQ(results[r].output, decoded(t, perHostBlocks, d.count, c)) << "rank " << r;
  }
}

CHORUS_INSTANTIATE_FOR_EVERY_KIND(ExecutorQuantized);

// One rank, no connections: the plan runs in program order. A config whose blocks have another
// size than the plan's, or none at all, is an internal error and leaves the output alone.
TEST(ExecutorQuantizedAlone, ConfigThatDoesNotFitThePlanIsRefused) {
  const kernels::QuantConfig built{.bits = 4, .groupSize = 8};
  const sched::CollDesc d = reduceScatter(40, 4, built);
  sched::Schedule s = sched::examples::quantizedReduceScatter(d, 0, 1);
  s.finalize();
  auto plan = exec::prepare(std::move(s), "reducescatter:quantized_direct", 0, false, 0, 1);
  ASSERT_TRUE(plan.ok()) << plan.status().toString();
  ASSERT_TRUE(plan.value()->sequential);
  Bytes input = gaussianElements(DataType::kFloat32, d.count, 3);
  auto run = [&](const kernels::QuantConfig* config, Bytes& output) {
    return runPlan(*plan.value(), input, output, d, DataType::kFloat32, config, exec::ExecEnv{});
  };
  Bytes output(d.count * 4, 0xa5);
  ASSERT_TRUE(run(&built, output).ok());
  const Bytes block = sliceBlock(input, DataType::kFloat32, built, d.count, 0);
  EXPECT_EQ(output, decoded(DataType::kFloat32, {block}, d.count, built));

  const kernels::QuantConfig other{.bits = 4, .groupSize = 16};  // 40 elements: 32 bytes, not 40
  Bytes untouched(d.count * 4, 0xa5);
  Status st = run(&other, untouched);
  EXPECT_EQ(st.code(), Code::kInternal) << st.toString();
  EXPECT_TRUE(contains(st.message(), "this call's quantization config needs")) << st.toString();
  EXPECT_EQ(untouched, Bytes(d.count * 4, 0xa5));
  st = run(nullptr, untouched);
  EXPECT_EQ(st.code(), Code::kInternal) << st.toString();
  EXPECT_TRUE(contains(st.message(), "not quantized")) << st.toString();
}

}  // namespace
}  // namespace chorus::conformance
