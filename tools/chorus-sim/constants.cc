#include "tools/chorus-sim/constants.h"

#include <cstdio>

#include "src/cost/cost_model.h"

namespace chorus::sim {

namespace {

// Values with no measurement or datasheet behind them yet are marked "assumed": they are
// placeholders to be replaced by sourced values in a commit of their own before any
// published-figure comparison (issue 17), so that they are not fitted to it.
struct Source {
  const char* name;
  const char* unit;
  double Constants::*field;
  const char* source;
};

constexpr Source kSources[] = {
    {"cpu.membw", "GB/s", &Constants::cpuMemGBps,
     "chorus cost model host.membw (src/cost/cost_model.cc, fitted on the 2-core dev machine)"},
    {"gpu.membw", "GB/s", &Constants::gpuMemGBps,
     "H100 SXM HBM3 bandwidth, 3.35 TB/s (NVIDIA H100 datasheet)"},
    {"shm.bw", "GB/s", &Constants::shmGBps, "chorus cost model shm.bw (src/cost/cost_model.cc)"},
    {"shm.latency", "us", &Constants::shmLatencyUs,
     "chorus cost model shm latency + 2 x step overhead (src/cost/cost_model.cc)"},
    {"gpu.message", "us", &Constants::gpuMessageUs, "assumed"},
    {"nic.latency", "us", &Constants::nicLatencyUs, "assumed"},
    {"switch.latency", "us", &Constants::switchLatencyUs, "assumed"},
    {"nic.default", "Gb/s", &Constants::defaultNicGbps,
     "chorus cost model ethernet nominal rate (src/cost/cost_model.cc)"},
    {"reduce.traffic", "x", &Constants::reduceTraffic, "read 2 operands + write 1 (cost model)"},
    {"copy.traffic", "x", &Constants::copyTraffic, "read 1 + write 1 (cost model)"},
};

Constants makeDefaults() {
  const cost::CostModel& m = cost::defaultCostModel();
  const cost::LinkConstants& shm = m.constants(cost::LinkClass::kShm);
  const cost::LinkConstants& eth = m.constants(cost::LinkClass::kEthernet);
  Constants k;
  k.cpuMemGBps = m.host().memBwGBps;
  k.gpuMemGBps = 3350;
  k.shmGBps = shm.bandwidthGBps;
  k.shmLatencyUs = shm.latencyUs + 2 * shm.stepOverheadUs;
  k.gpuMessageUs = 2;
  k.nicLatencyUs = 1;
  k.switchLatencyUs = 0.5;
  k.defaultNicGbps = eth.nominalGbps > 0 ? eth.nominalGbps : 10;
  return k;
}

}  // namespace

const Constants& defaultConstants() {
  static const Constants k = makeDefaults();
  return k;
}

std::string constantsTable(const Constants& k) {
  std::string out;
  char line[256];
  for (const Source& s : kSources) {
    std::snprintf(line, sizeof line, "  %-15s %10.4g %-5s %s\n", s.name, k.*(s.field), s.unit,
                  s.source);
    out += line;
  }
  return out;
}

}  // namespace chorus::sim
