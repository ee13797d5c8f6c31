#include "tools/chorus-topo/tune_view.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <vector>

#include "src/base/config.h"
#include "src/core/calibration.h"
#include "src/tuning/host_machine.h"
#include "tools/chorus-topo/report.h"

namespace chorus::topo_tool {

namespace {

using sched::Coll;

// The collectives of CostModel::decisionTable(), in its order.
constexpr Coll kColls[] = {Coll::kAllReduce,     Coll::kBroadcast, Coll::kReduce,
                           Coll::kAllGather,     Coll::kReduceScatter, Coll::kAllToAll,
                           Coll::kGather,        Coll::kScatter,   Coll::kBarrier};

uint64_t roundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

// minBytes, x factor, ... while <= maxBytes, then maxBytes itself.
std::vector<uint64_t> sizesOf(uint64_t minBytes, uint64_t maxBytes, uint64_t factor) {
  std::vector<uint64_t> sizes;
  for (uint64_t s = std::max<uint64_t>(1, minBytes); s <= maxBytes; s *= factor) {
    sizes.push_back(s);
    if (s > maxBytes / factor) break;
  }
  if (sizes.empty() || sizes.back() != maxBytes) sizes.push_back(maxBytes);
  return sizes;
}

// The CollDesc count, in floats, of an nccl-tests size (the larger buffer of one rank): a
// rank's block for the collectives whose larger buffer holds every rank's, as chorus-perf and
// decisionTable() count it.
uint64_t floatCount(Coll coll, uint64_t size, int nranks) {
  uint64_t bytes = size;
  switch (coll) {
    case Coll::kAllGather:
    case Coll::kReduceScatter:
    case Coll::kAllToAll:
    case Coll::kGather:
    case Coll::kScatter: bytes = size / static_cast<uint64_t>(nranks); break;
    default: break;
  }
  return std::max<uint64_t>(1, bytes / 4);
}

// The fastest NIC of `system` whose link is up and whose speed is known; nullptr when none.
const topo::Node* fastestNic(const topo::System& system) {
  const topo::Node* best = nullptr;
  for (int i : system.ofType(topo::NodeType::kNic)) {
    const topo::Node& n = system.node(i);
    if (n.linkUp && n.speedGbps > 0 && (!best || n.speedGbps > best->speedGbps)) best = &n;
  }
  return best;
}

// The transport a job would use when --transport is not given: shm unless CHORUS_TRANSPORT
// leaves it out (the test the communicator makes).
bool shmByDefault() {
  const std::string allowed = config::getString("CHORUS_TRANSPORT");
  return allowed.empty() || ("," + allowed + ",").find(",shm,") != std::string::npos;
}

int optionInt(const CLI::Option* o, int fallback) {
  return o != nullptr && o->count() > 0 ? o->as<int>() : fallback;
}

}  // namespace

StatusOr<JobModel> modelJob(const topo::Layout& layout, bool shm, int cores, double nicGbps,
                            const cost::DerivedSizes& sizes, const std::string& nicSource) {
  const uint64_t slot = sizes.slotBytes, round = sizes.roundBytes;
  CHORUS_ASSIGN_OR_RETURN(const int64_t cma, config::getInt("CHORUS_SHM_CMA"));
  CHORUS_ASSIGN_OR_RETURN(const uint64_t chunk, config::getBytes("CHORUS_CHUNK_SIZE"));
  if (chunk < 64) return invalidArgument("CHORUS_CHUNK_SIZE must be at least 64 bytes");
  const int n = layout.nranks();
  const bool oneHost = layout.numHosts() == 1;

  // What the ranks of such a job agree on at creation (src/core/comm_create.cc): shared
  // memory's window when every rank is on one host and its slot is not 0 (rounded as the
  // window rounds it), one-sided reads when cross-memory attach may be used, the link classes
  // of the transports that reach the peers.
  tune::Agreement agreed;
  const bool window = shm && oneHost && n >= 2 && slot > 0;
  if (window) agreed.window = {roundUp(std::max<uint64_t>(slot, 64), 64), roundUp(round, 4096)};
  agreed.oneSided = shm && oneHost && n >= 2 && cma != 0;
  agreed.intra = shm ? cost::LinkClass::kShm : cost::LinkClass::kTcpLoopback;
  agreed.inter = cost::LinkClass::kEthernet;
  agreed.minCores = static_cast<uint32_t>(std::max(cores, 0));
  agreed.minNicMbps = static_cast<uint32_t>(nicGbps * 1000);
  // The chunk in whole floats, as a float32 call describes it.
  agreed.chunkBytes = std::max<uint64_t>(4, chunk / 4 * 4);
  JobModel job;
  job.platform = tune::platformFor(layout, agreed);

  std::ostringstream s;
  s << "transport " << (shm ? "shm" : "tcp") << ": intra-host "
    << cost::linkClassName(agreed.intra);
  if (window) {
    s << ", host window: " << formatBytes(agreed.window.slotBytes) << " one-shot slot";
    if (agreed.window.roundBytes) s << " + " << formatBytes(agreed.window.roundBytes) << " rounds";
  } else {
    s << ", no host window";
  }
  s << (agreed.oneSided ? ", one-sided (cross-memory attach)" : ", not one-sided");
  if (!oneHost) {
    s << "; inter-host ethernet at ";
    if (nicGbps > 0)
      s << nicGbps << " Gb/s" << (nicSource.empty() ? "" : " (" + nicSource + ")");
    else
      s << "the nominal "
        << cost::defaultCostModel().constants(cost::LinkClass::kEthernet).nominalGbps << " Gb/s";
  }
  s << "; " << cores << (cores == 1 ? " core" : " cores") << " per host; chunk "
    << formatBytes(agreed.chunkBytes);
  job.summary = s.str();
  return job;
}

std::string tuneCsv(const cost::CostModel& model, const JobModel& job, uint64_t minBytes,
                    uint64_t maxBytes, uint64_t factor) {
  std::ostringstream o;
  o << "coll,nranks,bytes,algorithm,predicted_us\n";
  const int n = job.platform.nranks;
  for (Coll coll : kColls) {
    const std::vector<uint64_t> sizes = coll == Coll::kBarrier
                                            ? std::vector<uint64_t>{0}
                                            : sizesOf(minBytes, maxBytes, factor);
    for (uint64_t size : sizes) {
      sched::CollDesc d;
      d.coll = coll;
      d.elemSize = 4;
      d.count = coll == Coll::kBarrier ? 0 : floatCount(coll, size, n);
      d.chunkBytes = job.platform.cost.chunkBytes;
      d.window = job.platform.window;
      const tune::Choice c = tune::choose(model, d, job.platform);
      if (!c.algo) continue;
      char us[32];
      std::snprintf(us, sizeof us, "%.3f", c.predictedUs);
      o << sched::collName(coll) << "," << n << "," << size << "," << c.algo->name << "," << us
        << "\n";
    }
  }
  return o.str();
}

void addTuneOptions(CLI::App& app, TuneFlags& flags) {
  flags.ranks = app.get_option_no_throw("--ranks");
  flags.ranksPerHost = app.get_option_no_throw("--ranks-per-host");
  app.add_flag("--tune", flags.tune,
               "print the cost model's constants and, per collective and size, the algorithm "
               "the tuner picks with its predicted time and busbw (for --ranks, default 2, and "
               "--ranks-per-host)");
  app.add_flag("--tune-csv", flags.csv,
               "print 'coll,nranks,bytes,algorithm,predicted_us' lines instead of the tables "
               "(implies --tune)");
  app.add_option("--transport", flags.transport,
                 "with --tune: shm or tcp (default: shm, or tcp when CHORUS_TRANSPORT leaves "
                 "shm out)")
      ->check(CLI::IsMember({"shm", "tcp"}));
  app.add_option("--cores", flags.cores,
                 "with --tune: cores per host (default: this machine's online cores)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--nic-gbps", flags.nicGbps,
                 "with --tune: inter-host speed in Gb/s (default: the fastest NIC shown, else "
                 "the nominal Ethernet rate)")
      ->check(CLI::PositiveNumber);
  app.add_option("--min", flags.minBytes, "with --tune: smallest size (default 8)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--max", flags.maxBytes, "with --tune: largest size (default 256M)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--factor", flags.factor, "with --tune: size step factor (default 4)")
      ->check(CLI::Range(2, 1 << 20));
  app.add_option("--constants", flags.constants,
                 "with --tune: override cost-model constants, e.g. "
                 "'shm.latency=0.8,tcp-loopback.bw=3,host.membw=25'");
  app.add_flag("--segments", flags.segments,
               "with --tune: every rank's buffers come from chorusMemAlloc (what a job learns "
               "from its calls' headers): one-sided reads over shared memory are priced as "
               "copies from a mapping");
}

bool printTuning(const topo::System& system, const TuneFlags& flags, int* exitCode) {
  if (!flags.tune && !flags.csv) return false;
  auto fail = [&](const std::string& what, int code) {
    std::fprintf(stderr, "chorus-topo: %s\n", what.c_str());
    *exitCode = code;
    return true;
  };
  const int ranks = optionInt(flags.ranks, 2);
  const int perHost = optionInt(flags.ranksPerHost, ranks);
  if (flags.minBytes < 1 || flags.minBytes > flags.maxBytes)
    return fail("--min must be between 1 and --max", 2);
  StatusOr<topo::Layout> layout = topo::Layout::uniform(ranks, perHost);
  if (!layout.ok()) return fail(layout.status().message(), 2);

  const bool shm = flags.transport.empty() ? shmByDefault() : flags.transport == "shm";
  int cores = flags.cores;
  if (cores == 0) {
    const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
    cores = online > 0 ? static_cast<int>(online) : 0;
  }
  double nicGbps = flags.nicGbps;
  std::string nicSource = "--nic-gbps";
  if (nicGbps == 0) {
    if (const topo::Node* nic = fastestNic(system)) {
      nicGbps = nic->speedGbps;
      nicSource = "the fastest NIC, " + nic->name;
    }
  }
  // The sizes and rates a job on this host would use (src/core/comm_create.cc), from the caches
  // of the System shown and this machine's calibration.
  const cost::MachineDesc machine = tune::machineOf(system, perHost);
  StatusOr<cost::DerivedSizes> sizes = cost::resolveSizes(machine);
  if (!sizes.ok()) return fail(sizes.status().message(), 2);
  StatusOr<JobModel> job = modelJob(*layout, shm, cores, nicGbps, *sizes, nicSource);
  if (!job.ok()) return fail(job.status().message(), 2);
  if (flags.segments) {
    job->platform.cost.segments = true;
    job->summary += "; buffers in chorusMemAlloc segments (--segments)";
  }
  cost::CostModel model = cost::defaultCostModel();
  std::string tune = config::getString("CHORUS_TUNE");
  if (tune.empty()) tune = "auto";
  if (tune != "auto" && tune != "off" && tune != "measure")
    return fail("CHORUS_TUNE='" + tune + "' is not off, auto or measure", 2);
  std::string calNote = "CHORUS_TUNE=off: the table";
  cost::HostCalibration cal;
  if (tune != "off" && ranks > 1) {
    cal = cost::calibrateHost(cost::defaultCacheDir(), cost::hostKey(), &calNote);
    cost::applyCalibration(cal, sizes->cacheBytes, &model, sizes->llcBytes);
  }
  if (Status s = model.applyOverrides(config::getString("CHORUS_COST")); !s.ok())
    return fail("CHORUS_COST: " + s.message(), 2);
  if (Status s = model.applyOverrides(flags.constants); !s.ok()) return fail(s.message(), 2);

  if (flags.csv) {
    std::fputs(tuneCsv(model, *job, flags.minBytes, flags.maxBytes, flags.factor).c_str(),
               stdout);
    return true;
  }
  std::ostringstream o;
  o << "Tuning a job of " << ranks << (ranks == 1 ? " rank" : " ranks") << ", " << perHost
    << " per host: " << job->summary;
  o << "\n";
  for (const char* var : {"CHORUS_ALGO"})
    if (config::isSet(var))
      o << "note: " << var << "=" << config::getString(var)
        << " is set: a job uses it; the table shows the model's own choices\n";
  auto fixed1 = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", v);
    return std::string(buf);
  };
  auto kib = [](uint64_t b) { return b ? cost::sizeText(b) : std::string("unknown"); };
  const bool calibrated = tune != "off" && ranks > 1;
  const std::string rates = calibrated ? std::string(cost::sourceName(cal.source)) : "table";
  const std::string cacheRule =
      calibrated ? std::string(cost::sourceName(sizes->cacheSource)) : "table";
  o << "\nSelf-sizing and calibration (docs/design.md, \"Self-sizing and self-calibration\"):\n"
    << "  caches: L2 " << kib(machine.l2Bytes) << ", L3 " << kib(machine.l3Bytes)
    << " (the kernel's figures; unknown: the table's sizes)\n"
    << "  host window: slot " << cost::sizeText(sizes->slotBytes) << " ("
    << cost::sourceName(sizes->slotSource) << "), round " << cost::sizeText(sizes->roundBytes)
    << " (" << cost::sourceName(sizes->roundSource) << ")\n"
    << "  cost model cache rule: " << cost::sizeText(model.host().cacheBytes) << " ("
    << cacheRule << "); last-level cache " << cost::sizeText(model.host().llcBytes) << " ("
    << (calibrated ? cost::sourceName(sizes->llcSource) : "table")
    << ": zero-copy reads of chorusMemAlloc buffers are priced as copies within it)\n"
    << "  memory rates: " << fixed1(model.host().memBwGBps) << " GB/s beyond the cache, "
    << fixed1(model.host().cacheBwGBps) << " GB/s within (" << rates;
  if (calibrated && cal.source == cost::Source::kCalibrated)
    o << " in " << fixed1(cal.measureMs) << " ms";
  if (calibrated)
    o << "; copy " << fixed1(cal.copyGBps) << ", reduce " << fixed1(cal.reduceGBps) << " GB/s";
  o << ")\n";
  auto term = [&](double v, const char* unit) {
    char buf[48];
    if (v <= 0) return std::string("not measured: table");
    std::snprintf(buf, sizeof buf, "%.3g %s", v, unit);
    return std::string(buf);
  };
  if (calibrated)
    o << "  link terms (" << rates << "): cache line between cores "
      << term(cal.links.lineNs, "ns") << " (" << term(cal.links.crossCoreGBps, "GB/s")
      << " streaming), core hand-over " << term(cal.links.handoffUs, "us") << ", loopback TCP "
      << term(cal.links.tcpLatencyUs, "us") << " half round trip, "
      << term(cal.links.tcpBwGBps, "GB/s") << " each way\n";
  else
    o << "  link terms: table\n";
  o << "  " << calNote << "\n"
    << "  other link constants: table" << (tune == "measure" ? " (a job with CHORUS_TUNE=measure "
                                                               "refits them by ping-pong)" : "")
    << (flags.constants.empty() ? "" : "; --constants overrides what it names") << "\n";
  o << "\nCost model constants" << (flags.constants.empty() ? "" : " (with --constants)")
    << ":\n"
    << model.constantsTable() << "\n"
    << tune::decisionTable(model, job->platform, flags.minBytes, flags.maxBytes, flags.factor);
  std::fputs(o.str().c_str(), stdout);
  return true;
}

}  // namespace chorus::topo_tool
