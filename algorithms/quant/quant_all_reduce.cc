// Quantized all-reduce for plain data parallelism: a quantized reduce-scatter whose owner
// re-quantizes its sum, then a quantized all-gather of those blocks that every rank (the owner
// too) decodes into its output — all ranks end bit-identical.
//
// Slices are cut in whole groups (group-aligned even split of the count's groups; the last
// group may be short), so a slice's groups are the call's groups and no group straddles two
// owners.
//
//   quant_direct   one-hop reduce-scatter + flat all-gather.
//   quant_two_hop  qgZ two-hop reduce-scatter + rail all-gather: H-1 blocks per rank cross
//                  hosts in each half. Not hierarchical: builds quant_direct and is named by it.
// Every value is quantized three times on its way (the input, the host's sum for two_hop or
// nothing for direct, the owner's sum for the all-gather).
//
// Cost: the two halves' terms (quant_reduce_scatter.cc, quant_all_gather.cc) for slices of
// count / n. Tuner: two_hop wherever hosts are equal and hold several ranks each.
#include "algorithms/quant/quant.h"

namespace chorus::algo::quant {
namespace {

// The group-aligned slices of an all-reduce: the count's groups split evenly over the ranks.
std::vector<Block> allReduceSlices(const sched::CollDesc& d, int nranks) {
  const uint64_t g = d.quant->groupSize;
  const uint64_t groups = (d.count + g - 1) / g;
  std::vector<Block> slices;
  for (int p = 0; p < nranks; ++p) {
    const Block gb = evenBlock(groups, nranks, p);
    const uint64_t begin = std::min(d.count, gb.begin * g);
    const uint64_t end = std::min(d.count, (gb.begin + gb.count) * g);
    slices.push_back({begin, end - begin});
  }
  return slices;
}

sched::Schedule build(const sched::CollDesc& d, int rank, int nranks, bool twoHop) {
  QuantBuild b(d, rank, nranks, allReduceSlices(d, nranks), d.count);
  b.s.algo = "quant_direct";
  if (d.inPlace) b.s.outputInInput = 0;
  const Gathered blocks = gatheredBlocks(b);
  // The reduce-scatter's sum lands re-quantized in this rank's gathered block.
  const Sink sink{.requantize = true,
                  .buf = sched::kScratch,
                  .offset = blocks.base + blocks.offsets[static_cast<size_t>(rank)],
                  .stage = 2};
  const HostGroups g = hostGroups(d, nranks);
  if (twoHop && g.hierarchical()) {
    b.s.algo = "quant_two_hop";
    twoHopReduceScatter(b, g, sink);
    railAllGather(b, g, blocks, false);
  } else {
    oneHopReduceScatter(b, sink);
    flatAllGather(b, blocks, false);
  }
  return std::move(b.s);
}

sched::Schedule buildDirect(const sched::CollDesc& d, int rank, int nranks) {
  return build(d, rank, nranks, false);
}

sched::Schedule buildTwoHop(const sched::CollDesc& d, int rank, int nranks) {
  return build(d, rank, nranks, true);
}

cost::Traffic directTraffic(sched::Coll, double bytes, const cost::CostInput& in) {
  cost::Traffic t;
  oneHopTraffic(t, bytes / in.nranks, in);
  flatGatherTraffic(t, bytes / in.nranks, in, false);
  return t;
}

cost::Traffic twoHopTrafficOf(sched::Coll, double bytes, const cost::CostInput& in) {
  cost::Traffic t;
  twoHopTraffic(t, bytes / in.nranks, in);
  railGatherTraffic(t, bytes / in.nranks, in, false);
  return t;
}

}  // namespace

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kAllReduce,
    .name = "quant_direct",
    .description = "quantized: one-hop reduce-scatter, then all-gather of the packed sums",
    .build = &buildDirect,
    .traffic = &directTraffic,
    .quantized = true,
});

CHORUS_REGISTER_ALGORITHM({
    .coll = sched::Coll::kAllReduce,
    .name = "quant_two_hop",
    .description = "quantized: qgZ two-hop reduce-scatter, then rail all-gather",
    .build = &buildTwoHop,
    .traffic = &twoHopTrafficOf,
    .applies = &quantHierApplies,
    .quantized = true,
});

}  // namespace chorus::algo::quant
