// chorus-sim: chorus's own schedules replayed on a machine model (docs/simulation.md).
//
//   chorus-sim --topo tests/data/topologies/dgx-h100-like.xml --hosts 2 --ranks-per-host 8
//              --coll allreduce -b 8 -e 64M -f 4 --algo ring,tree,tuner --csv out.csv
//
// For each algorithm and size: the simulated time, algbw and busbw (nccl-tests definitions),
// ranks, steps and flows simulated (ranks: those of one host when the plans fold by host, see
// scenario.h). For the largest size of each algorithm: the busiest links and the
// critical path. Without --topo the hosts are "flat": every rank has one port at --intra-gbps,
// every host one NIC at --nic-gbps (defaults from the chorus cost model's shm and Ethernet
// constants).
#include <CLI/CLI.hpp>
#include <malloc.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "src/cost/cost_model.h"
#include "src/topology/placement.h"
#include "tools/chorus-sim/constants.h"
#include "tools/chorus-sim/init_model.h"
#include "tools/chorus-sim/machine.h"
#include "tools/chorus-sim/scenario.h"

namespace sim = chorus::sim;

namespace {

std::vector<uint64_t> sizesOf(uint64_t minBytes, uint64_t maxBytes, uint64_t factor) {
  std::vector<uint64_t> sizes;
  for (uint64_t s = minBytes; s <= maxBytes; s *= factor) {
    sizes.push_back(s);
    if (s > maxBytes / factor) break;
  }
  if (sizes.empty() || sizes.back() != maxBytes) sizes.push_back(maxBytes);
  return sizes;
}

std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

void printLinks(const sim::Machine& m, const sim::Result& r, int top) {
  std::vector<int> ids(static_cast<size_t>(m.numResources()));
  std::iota(ids.begin(), ids.end(), 0);
  auto util = [&](int id) {
    const double cap = m.capacity(id);
    return cap < sim::kUnlimited && r.timeUs > 0
               ? r.resourceBytes[static_cast<size_t>(id)] / (cap * r.timeUs)
               : 0.0;
  };
  std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return util(a) > util(b); });
  std::printf("  busiest links (bytes carried / (capacity x time)):\n");
  for (int k = 0; k < top && k < static_cast<int>(ids.size()); ++k) {
    const int id = ids[static_cast<size_t>(k)];
    if (r.resourceBytes[static_cast<size_t>(id)] <= 0) break;
    // A CPU carries CPU microseconds, not bytes.
    const double carried = r.resourceBytes[static_cast<size_t>(id)];
    std::printf("    %-36s %6.1f%%  %12s  busy %s\n", m.resourceName(id).c_str(),
                100 * util(id),
                m.isCpu(id) ? chorus::cost::usText(carried).c_str()
                            : chorus::cost::sizeText(static_cast<uint64_t>(carried)).c_str(),
                chorus::cost::usText(r.resourceBusyUs[static_cast<size_t>(id)]).c_str());
  }
}

void printPath(const sim::Result& r) {
  const auto& p = r.criticalPath;
  std::map<std::string, int> kinds;
  for (const sim::PathStep& s : p) kinds[chorus::sched::stepKindName(s.kind)]++;
  std::printf("  critical path: %zu steps (", p.size());
  bool first = true;
  for (const auto& [k, c] : kinds) {
    std::printf("%s%d %s", first ? "" : ", ", c, k.c_str());
    first = false;
  }
  std::printf(")\n");
  auto line = [](const sim::PathStep& s) {
    std::printf("    %10.3f -> %10.3f us  rank %d step %u %s", s.startUs, s.endUs, s.rank, s.step,
                chorus::sched::stepKindName(s.kind));
    if (s.peer >= 0) std::printf(" peer %d", s.peer);
    std::printf(" %llu B\n", static_cast<unsigned long long>(s.bytes));
  };
  const size_t show = 4;
  for (size_t i = 0; i < p.size(); ++i) {
    if (i == show && p.size() > 2 * show) {
      std::printf("    ... %zu more ...\n", p.size() - 2 * show);
      i = p.size() - show;
    }
    line(p[i]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // An every-rank run builds thousands of plans one after another, each freed once the engine
  // has read it: let freed memory stay in the process for the next plan (no trimming of the
  // heap, no mapping of its own per large block) instead of returning it to the kernel and
  // faulting it in again page by page (at 16,384 ranks that doubled the page faults).
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's ceiling on 64-bit
  std::string topoFile, collName = "allreduce", algos = "tuner", csvFile;
  int hosts = 1, perHost = 0, root = 0, topLinks = 6, dumpRank = -1;
  uint64_t minBytes = 8, maxBytes = 64ull << 20, factor = 4, chunk = 256 << 10;
  double nicGbps = 0, intraGBps = 0, intraUs = 0, interUs = 0, memGBps = -1;
  std::string netKind = "switch";
  std::vector<std::string> overrides;
  uint32_t quantBits = 0;
  uint64_t quantGroup = 256;
  int hostsPerLeaf = 0;
  double oversub = 1;
  double nicBurstUs = 0, nicBurstMin = 64 << 10;
  double msgUs = 0, msgGBps = 0, callUs = 0, shmMsgUs = -1, shmMsgGBps = -1;
  std::string burstStart = "empty";
  int cores = 0, machineCores = 0;
  bool oneSided = false, showConstants = false, quiet = false, noFold = false, noShare = false;
  uint64_t maxSteps = sim::Case{}.maxSteps;

  CLI::App app{"chorus-sim: chorus's registered schedules replayed by a discrete-event "
               "simulation on a machine model"};
  app.add_option("--topo", topoFile, "host topology: NCCL XML or chorus JSON (default: flat "
                                     "hosts from the cost model's constants)")
      ->check(CLI::ExistingFile);
  app.add_option("--hosts", hosts, "number of hosts (default 1)")->check(CLI::Range(1, 1 << 20));
  app.add_option("-n,--ranks-per-host", perHost,
                 "ranks per host (default: the topology's GPUs, else 2)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("-c,--coll", collName,
                 "allreduce, broadcast, reduce, allgather, reducescatter, alltoall, gather, "
                 "scatter, barrier");
  app.add_option("-b,--minbytes", minBytes, "smallest size (default 8)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("-e,--maxbytes", maxBytes, "largest size (default 64M)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("-f,--stepfactor", factor, "size factor (default 4)")
      ->check(CLI::Range(2, 1 << 20));
  app.add_option("-a,--algo", algos,
                 "algorithm names, comma-separated; 'tuner' is the tuner's choice (default)");
  app.add_option("--chunk", chunk, "pipelining chunk, CHORUS_CHUNK_SIZE (default 256K)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("-r,--root", root, "root of rooted collectives (default 0)");
  app.add_flag("--one-sided", oneSided, "every pair of ranks can read the other's memory");
  app.add_option("--nic-gbps", nicGbps, "every NIC at this speed, Gb/s")
      ->check(CLI::PositiveNumber);
  app.add_option("--net", netKind,
                 "network between the NICs: switch (one non-blocking switch, default), fattree "
                 "(leaves of --hosts-per-leaf hosts under a spine), rails (NIC i of every host "
                 "on rail leaf i)")
      ->check(CLI::IsMember({"switch", "fattree", "rails"}));
  app.add_option("--hosts-per-leaf", hostsPerLeaf,
                 "fattree / rails: hosts under one leaf switch (default: all)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--oversub", oversub,
                 "fattree / rails: a leaf's downlink / uplink bandwidth (default 1)")
      ->check(CLI::Range(1.0, 1e6));
  app.add_option("--nic-burst-us", nicBurstUs,
                 "emulated NICs (tc tbf): a token bucket of this many us of the NIC's rate on "
                 "each direction, which lets a NIC that was idle send that much at once "
                 "(tests/netns/hosts.sh: 4000; default 0, a physical link)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--nic-burst-min", nicBurstMin,
                 "with --nic-burst-us: the bucket's smallest size, bytes (default 64K)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--nic-burst-start", burstStart,
                 "with --nic-burst-us: the buckets at the call's start, calls back to back: "
                 "empty (default: calls that saturate the links), full (calls that load no link "
                 "above its rate), steady (full, unless a link carried more than its rate x the "
                 "call's time: then empty)")
      ->check(CLI::IsMember({"empty", "full", "steady"}));
  app.add_option("--intra-gbps", intraGBps, "flat hosts: per-rank port, GB/s")
      ->check(CLI::PositiveNumber);
  app.add_option("--intra-us", intraUs, "flat hosts: latency of a message in a host, us")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--inter-us", interUs, "flat hosts: latency of a message between hosts, us")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--mem-gbps", memGBps, "flat hosts: a rank's memory rate, GB/s (0: free)")
      ->check(CLI::NonNegativeNumber);
  // The CPU of flat hosts (docs/simulation.md, "The CPU"): three non-negative costs.
  const struct {
    const char* name;
    double* value;
    const char* help;
  } cpuCosts[] = {
      {"--msg-us", &msgUs,
       "flat hosts: CPU time per message a rank sends or receives, us (syscall, wake-up; "
       "default 0: none)"},
      {"--msg-gbps", &msgGBps,
       "flat hosts: CPU copy rate of a message's bytes through the socket stack at each end, "
       "GB/s (B bytes cost B / rate of the sender's and the receiver's CPU; default 0: free)"},
      {"--call-us", &callUs, "flat hosts: CPU time per collective call per rank, us (default 0: "
                             "none)"}};
  for (const auto& c : cpuCosts)
    app.add_option(c.name, *c.value, c.help)->check(CLI::NonNegativeNumber);
  app.add_option("--shm-msg-us", shmMsgUs,
                 "flat hosts: --msg-us for a message between ranks of one host (shared memory; "
                 "default: --msg-us)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--shm-msg-gbps", shmMsgGBps,
                 "flat hosts: --msg-gbps for a message between ranks of one host (0: free; "
                 "default: --msg-gbps)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--machine-cores", machineCores,
                 "flat hosts: CPUs that every rank of every host shares for the CPU costs, on "
                 "top of --cores (hosts that are network namespaces of one machine, as in "
                 "tests/netns; no folding by host; default 0: none)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--cores", cores,
                 "flat hosts: CPUs per host its ranks share for the CPU costs above (default 0: "
                 "one per rank, no sharing)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--csv", csvFile, "also write one CSV line per algorithm and size to this file");
  app.add_option("--links", topLinks, "busiest links to list (default 6, 0: none)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_flag("--no-fold", noFold,
               "simulate every rank even where the plans are the same up to a host shift");
  app.add_flag("--no-share", noShare,
               "every rank simulated: build every rank's plan, even where a local rank's plans "
               "are the same on every host up to the host shift (same results, more time)");
  app.add_option("--max-steps", maxSteps,
                 "refuse every-rank simulations estimated above this many steps (default 64M)");
  app.add_option("--dump-rank", dumpRank,
                 "list this rank's plan (steps, peers, bytes, dependencies) at the largest size")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("-q,--quiet", quiet, "only the table: no links, no critical path");
  app.add_option("--quant-bits", quantBits,
                 "quantized call (qgZ / qwZ: quant_* algorithms): 4 or 8 bits (default: none; "
                 "a quant_* algorithm alone gets int8)")
      ->check(CLI::IsMember({4, 8}));
  app.add_option("--quant-group", quantGroup, "quantized call: elements per scale (default 256)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
  app.add_option("--set", overrides,
                 "what-if: override a constant for this run, name=value (repeatable; names as "
                 "--constants lists them; 0 for a rate means unlimited)");
  app.add_flag("--constants", showConstants, "print the device and link constants and exit");
  bool vsModel = false;
  app.add_flag("--vs-model", vsModel,
               "also print the cost model's prediction for each row (what the tuner uses)");
  bool init = false;
  int initMax = 16384;
  sim::InitSpec initSpec;
  app.add_flag("--init", init,
               "model communicator creation (bootstrap store, eager vs lazy connections) for 8 "
               "to --init-max ranks, -n per host (default 8), and exit");
  app.add_option("--init-max", initMax, "--init: largest rank count (default 16384)")
      ->check(CLI::Range(8, 1 << 20));
  app.add_option("--store-gbps", initSpec.storeGbps,
                 "--init: the store host's NIC, Gb/s (default 25)")
      ->check(CLI::PositiveNumber);
  app.add_option("--record-bytes", initSpec.recordBytes,
                 "--init: a serialized PeerInfo, bytes (default 134, measured here)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  sim::Constants k = sim::defaultConstants();
  std::string overridden;
  for (const std::string& o : overrides) {
    const size_t eq = o.find('=');
    double value = -1;
    try {
      if (eq != std::string::npos) value = std::stod(o.substr(eq + 1));
    } catch (const std::exception&) {
      value = -1;
    }
    const chorus::Status s = eq == std::string::npos
                                 ? chorus::invalidArgument("--set " + o + ": expected name=value")
                                 : sim::setConstant(k, o.substr(0, eq), value);
    if (!s.ok()) {
      std::fprintf(stderr, "chorus-sim: %s\n", s.message().c_str());
      return 2;
    }
    overridden += (overridden.empty() ? "" : ", ") + o;
  }
  if (init) {
    if (perHost > 0) initSpec.ranksPerHost = perHost;
    auto rows = sim::modelInit(initSpec, initMax);
    if (!rows.ok()) {
      std::fprintf(stderr, "chorus-sim: %s\n", rows.status().message().c_str());
      return 1;
    }
    std::printf("%s", sim::initTable(initSpec, *rows).c_str());
    return 0;
  }
  if (showConstants) {
    std::printf("%s", sim::constantsTable(k).c_str());
    return 0;
  }
  auto fail = [](const std::string& what, int code) {
    std::fprintf(stderr, "chorus-sim: %s\n", what.c_str());
    return code;
  };
  const std::optional<chorus::sched::Coll> coll = sim::parseColl(collName);
  if (!coll) return fail("unknown collective '" + collName + "'", 2);
  if (minBytes < 1 || minBytes > maxBytes) return fail("-b must be between 1 and -e", 2);
  const std::vector<std::string> algoList = splitList(algos);
  if (algoList.empty()) return fail("--algo names no algorithm", 2);

  chorus::StatusOr<sim::Machine> machine = chorus::invalidArgument("no machine");
  const bool cpuModel = msgUs > 0 || msgGBps > 0 || callUs > 0 || cores > 0 || shmMsgUs > 0 ||
                        shmMsgGBps > 0 || machineCores > 0;
  if (cpuModel && !topoFile.empty())
    return fail("--msg-us, --msg-gbps, --call-us, --shm-msg-us, --shm-msg-gbps, --cores and "
                "--machine-cores are for flat hosts (no --topo)",
                2);
  if (!topoFile.empty()) {
    chorus::StatusOr<chorus::topo::System> sys = chorus::topo::loadTopologyFile(topoFile);
    if (!sys.ok()) return fail(sys.status().message(), 1);
    if (perHost == 0) {
      const size_t gpus = sys->ofType(chorus::topo::NodeType::kGpu).size();
      perHost = gpus > 0 ? static_cast<int>(gpus) : 2;
    }
    machine = sim::Machine::fromSystem(*sys, hosts, perHost, k, nicGbps);
  } else {
    sim::FlatSpec f;
    f.hosts = hosts;
    f.ranksPerHost = perHost > 0 ? perHost : 2;
    f.intraGBps = intraGBps > 0 ? intraGBps : k.shmGBps;
    f.intraLatencyUs = intraUs > 0 ? intraUs : k.shmLatencyUs;
    f.nicGBps = (nicGbps > 0 ? nicGbps : k.defaultNicGbps) / 8;
    f.interLatencyUs = interUs > 0 ? interUs : 2 * k.nicLatencyUs + k.switchLatencyUs;
    f.memGBps = memGBps >= 0 ? memGBps : k.cpuMemGBps;
    f.cpu = cpuModel;
    f.cores = cores;
    f.machineCores = machineCores;
    machine = sim::Machine::flat(f);
  }
  if (!machine.ok()) return fail(machine.status().message(), 1);
  sim::NetSpec net;
  net.kind = netKind == "fattree" ? sim::NetSpec::Kind::kFatTree
             : netKind == "rails" ? sim::NetSpec::Kind::kRails
                                  : sim::NetSpec::Kind::kSwitch;
  net.hostsPerLeaf = hostsPerLeaf;
  net.oversub = oversub;
  if (chorus::Status s = machine->setNetwork(net, k.switchLatencyUs); !s.ok())
    return fail(s.message(), 1);
  if (chorus::Status s = machine->setNicBurst(nicBurstUs, static_cast<double>(nicBurstMin));
      !s.ok())
    return fail(s.message(), 1);

  std::FILE* csv = nullptr;
  if (!csvFile.empty()) {
    csv = std::fopen(csvFile.c_str(), "w");
    if (!csv) return fail("cannot write " + csvFile, 1);
    std::fprintf(csv, "coll,nranks,hosts,ranks_per_host,bytes,algorithm,time_us,algbw_GBps,"
                      "busbw_GBps,simulated_ranks,fold,steps,flows\n");
  }
  std::printf("# chorus-sim: %s, %s, %d ranks\n", machine->summary().c_str(), collName.c_str(),
              machine->nranks());
  if (!overridden.empty())
    std::printf("# what-if: constants overridden (not the frozen table): %s\n",
                overridden.c_str());
  if (net.kind != sim::NetSpec::Kind::kSwitch)
    std::printf("# network: %s, %d host(s) per leaf, oversubscription %g\n", netKind.c_str(),
                hostsPerLeaf > 0 ? std::min(hostsPerLeaf, hosts) : hosts, oversub);
  const std::vector<uint64_t> sizes = *coll == chorus::sched::Coll::kBarrier
                                          ? std::vector<uint64_t>{0}
                                          : sizesOf(minBytes, maxBytes, factor);
  int status = 0;
  for (const std::string& a : algoList) {
    sim::Outcome lastOut;
    bool any = false;
    for (uint64_t size : sizes) {
      sim::Case c;
      c.coll = *coll;
      c.sizeBytes = size;
      c.algo = a;
      c.chunkBytes = chunk;
      c.root = root;
      c.oneSided = oneSided;
      c.fold = !noFold;
      c.share = !noShare;
      c.maxSteps = maxSteps;
      c.dumpRank = size == sizes.back() ? dumpRank : -1;
      if (quantBits > 0) c.quant = chorus::kernels::QuantConfig{.bits = quantBits,
                                                                 .groupSize = quantGroup};
      sim::EngineOptions eo;
      eo.reduceTraffic = k.reduceTraffic;
      eo.copyTraffic = k.copyTraffic;
      eo.quantTraffic = machine->gpuRanks() ? k.gpuQuantTraffic : k.cpuQuantTraffic;
      eo.msgUs = msgUs;
      eo.msgBytesPerUs = msgGBps * 1000;
      eo.callUs = callUs;
      eo.shmMsgUs = shmMsgUs;
      eo.shmMsgBytesPerUs = shmMsgGBps < 0 ? -1 : shmMsgGBps * 1000;
      eo.buckets = burstStart == "full"     ? sim::BucketStart::kFull
                   : burstStart == "steady" ? sim::BucketStart::kSteady
                                            : sim::BucketStart::kEmpty;
      chorus::StatusOr<sim::Outcome> out = sim::runCase(*machine, c, eo);
      if (!out.ok()) {
        std::fprintf(stderr, "chorus-sim: %s\n", out.status().message().c_str());
        status = 1;
        break;
      }
      if (!any)
        std::printf("\n%12s  %-24s %14s %10s %10s %7s %12s %10s\n", "size", "algorithm", "time",
                    "algbw GB/s", "busbw GB/s", "ranks", "steps", "flows");
      std::printf("%12s  %-24s %14s %10.3f %10.3f %7d %12llu %10llu\n",
                  chorus::cost::sizeText(size).c_str(), out->algo.c_str(),
                  chorus::cost::usText(out->timeUs).c_str(), out->algbwGBps, out->busbwGBps,
                  out->simulatedRanks, static_cast<unsigned long long>(out->steps),
                  static_cast<unsigned long long>(out->result.flows));
      if (vsModel)
        std::printf("%12s  cost model %s, simulated / model %.2f\n", "",
                    chorus::cost::usText(out->modelUs).c_str(),
                    out->modelUs > 0 ? out->timeUs / out->modelUs : 0.0);
      if (csv)
        std::fprintf(csv, "%s,%d,%d,%d,%llu,%s,%.6f,%.6f,%.6f,%d,%s,%llu,%llu\n",
                     collName.c_str(), machine->nranks(), machine->hosts(),
                     machine->ranksPerHost(), static_cast<unsigned long long>(size),
                     out->algo.c_str(), out->timeUs, out->algbwGBps, out->busbwGBps,
                     out->simulatedRanks, sim::foldName(out->fold),
                     static_cast<unsigned long long>(out->steps),
                     static_cast<unsigned long long>(out->result.flows));
      lastOut = std::move(out).value();
      any = true;
    }
    if (any) std::printf("  at %s: %s\n", chorus::cost::sizeText(sizes.back()).c_str(),
                         lastOut.foldNote.c_str());
    if (any && !lastOut.plan.empty())
      std::printf("  plan of rank %d:\n%s", dumpRank, lastOut.plan.c_str());
    if (any && !quiet) {
      if (topLinks > 0) printLinks(*machine, lastOut.result, topLinks);
      printPath(lastOut.result);
    }
  }
  if (csv) std::fclose(csv);
  return status;
}
