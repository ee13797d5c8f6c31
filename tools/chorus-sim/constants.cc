#include "tools/chorus-sim/constants.h"

#include <cmath>
#include <cstdio>

#include "src/cost/cost_model.h"

namespace chorus::sim {

namespace {

// Every value names its source. The three latencies were frozen in a commit of their own before
// any comparison with published busbw figures (issue 17), so that they are not fitted to them:
// the GPU message and NIC latencies come from NCCL's own latency model (NVIDIA/nccl,
// src/graph/tuning.cc, table hwLat, ring / Simple protocol: 3.4 us per hop over NVLink, 14 us
// per hop over the network); for the switch no vendor figure was found, and the value chosen
// is said as such.
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
    {"gpu.message", "us", &Constants::gpuMessageUs,
     "NCCL latency model, hwLat NVLink ring Simple, 3.4 us per hop (nccl src/graph/tuning.cc)"},
    {"nic.latency", "us", &Constants::nicLatencyUs,
     "NCCL hwLat network ring Simple 14 us per hop, less gpu.message and switch, halved"},
    {"switch.latency", "us", &Constants::switchLatencyUs,
     "no vendor figure found; upper bound of the 0.15-0.4 us port-to-port quoted for NDR"},
    {"nic.default", "Gb/s", &Constants::defaultNicGbps,
     "chorus cost model ethernet nominal rate (src/cost/cost_model.cc)"},
    {"reduce.traffic", "x", &Constants::reduceTraffic, "read 2 operands + write 1 (cost model)"},
    {"copy.traffic", "x", &Constants::copyTraffic, "read 1 + write 1 (cost model)"},
    {"cpu.quant", "x", &Constants::cpuQuantTraffic,
     "CPU quantization kernels run at half a copy's rate (docs/performance.md; cost model)"},
    {"gpu.quant", "x", &Constants::gpuQuantTraffic,
     "stated, not measured: GPU kernels taken as memory-bound, a copy's rate per byte touched"},
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
  k.gpuMessageUs = 3.4;
  k.switchLatencyUs = 0.5;
  // NCCL's 14 us per network hop covers both GPUs' side, both NICs (with the proxy thread that
  // drives them) and the switch; the GPU side and the switch are counted apart here.
  k.nicLatencyUs = (14 - k.gpuMessageUs - k.switchLatencyUs) / 2;
  k.defaultNicGbps = eth.nominalGbps > 0 ? eth.nominalGbps : 10;
  return k;
}

}  // namespace

const Constants& defaultConstants() {
  static const Constants k = makeDefaults();
  return k;
}

Status setConstant(Constants& k, std::string_view name, double value) {
  std::string known;
  for (const Source& s : kSources) {
    if (name == s.name) {
      if (!(value >= 0) || !std::isfinite(value))
        return invalidArgument("constant " + std::string(name) + ": " + std::to_string(value) +
                               " (must be finite and non-negative)");
      k.*(s.field) = value;
      return Status::okStatus();
    }
    known += (known.empty() ? "" : ", ") + std::string(s.name);
  }
  return invalidArgument("unknown constant '" + std::string(name) + "' (known: " + known + ")");
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
