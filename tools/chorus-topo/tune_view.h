// chorus-topo --tune: for each collective, the algorithm the tuner picks per message size, with
// the predicted time and bus bandwidth, for a job of --ranks N on hosts of --ranks-per-host K
// (default: 2 ranks on one host).
//
// The prediction is only worth reading if it is the one a real job makes, so the Platform is
// built by tune::platformFor() from the agreement a job of that shape reaches at creation
// (src/core/comm_create.cc), from the same CHORUS_* variables:
//   - shm (the default; CHORUS_TRANSPORT without "shm" means tcp): ranks of one host talk over
//     shared memory; all on one host, they have the host window (CHORUS_SHM_STAGING slot,
//     CHORUS_SHM_STAGING_ROUND rounds, rounded as the window rounds them); one-sided algorithms
//     run when CHORUS_SHM_CMA is 1 and every rank shares the host;
//   - tcp: TCP loopback between ranks of a host, no window, nothing one-sided;
//   - several hosts: Ethernet between them at --nic-gbps (default: the fastest NIC of the
//     System shown, detected or from --file; the class's nominal rate when none has a speed);
//   - time-sharing over --cores (default: this machine's online cores, as the library counts
//     them); the pipelining chunk is CHORUS_CHUNK_SIZE.
// CHORUS_ALGO and CHORUS_TUNE=measure change what a job does; the output says so when they are
// set, and shows the model's choice regardless.
//
// --tune-csv prints "coll,nranks,bytes,algorithm,predicted_us" lines instead (bytes: the
// nccl-tests size, i.e. chorus-perf's size column; algorithm as in the table), for scripts such
// as bench/tune_check.sh.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "algorithms/registry.h"
#include "src/base/status.h"
#include "src/topology/layout.h"
#include "src/topology/system.h"
#include "src/cost/cost_model.h"
#include "src/cost/machine.h"
#include "src/tuning/tuner.h"

namespace chorus::topo_tool {

struct TuneFlags {
  bool tune = false;         // --tune
  bool csv = false;          // --tune-csv (implies --tune)
  std::string transport;     // --transport shm|tcp ("": from CHORUS_TRANSPORT, else shm)
  int cores = 0;             // --cores (0: this machine's online cores)
  double nicGbps = 0;        // --nic-gbps (0: the fastest NIC of the System, else nominal)
  uint64_t minBytes = 8;     // --min
  uint64_t maxBytes = 256ull << 20;  // --max
  uint64_t factor = 4;       // --factor
  std::string constants;     // --constants: CostModel::applyOverrides() syntax
  bool segments = false;     // --segments: every rank's buffers in chorusMemAlloc segments
  // layout_view's --ranks and --ranks-per-host, read after parsing (nullptr: not registered).
  const CLI::Option* ranks = nullptr;
  const CLI::Option* ranksPerHost = nullptr;
};

void addTuneOptions(CLI::App& app, TuneFlags& flags);

// Prints the tuner's choices when the flags ask for it and returns true; false when they do
// not. Sets *exitCode on failure.
bool printTuning(const topo::System& system, const TuneFlags& flags, int* exitCode);

// What the tuner of a real job sees: the Platform the communicator would build.
struct JobModel {
  algo::Platform platform;  // its `cost` is the CostInput of the job
  std::string summary;      // one line: transport, window, one-sided, cores, NIC speed
};

// The model of a job laid out as `layout`, over shared memory (`shm`) or TCP, with `cores`
// cores per host and `nicGbps` between hosts (0: the class's nominal rate; `nicSource` says where
// a non-zero one came from, for the summary), its host window sized as `sizes` says. Reads the
// CHORUS_* variables named at the top; a malformed one is an InvalidArgument naming it.
StatusOr<JobModel> modelJob(const topo::Layout& layout, bool shm, int cores, double nicGbps,
                            const cost::DerivedSizes& sizes, const std::string& nicSource = "");

// The --tune-csv lines (with a header line) for sizes minBytes, x factor, ... up to maxBytes,
// maxBytes included, as CostModel::decisionTable() lists them.
std::string tuneCsv(const cost::CostModel& model, const JobModel& job, uint64_t minBytes,
                    uint64_t maxBytes, uint64_t factor);

}  // namespace chorus::topo_tool
