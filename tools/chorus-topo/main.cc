// chorus-topo: what chorus knows about a machine.
//
//   chorus-topo                      detect this host and print it
//   chorus-topo --file topo.xml      read an NCCL topology XML or a chorus JSON file instead
//   chorus-topo --root DIR           read a recorded sysfs snapshot (tests/data/sysfs/record.sh)
//   chorus-topo --json               print the System as chorus JSON (json.h) instead
//   chorus-topo --ranks 8 --ranks-per-host 4   the hosts, ring order and trees of such a job
//   chorus-topo --tune [--ranks N] [--transport shm|tcp]   the tuner's algorithm per collective
//                                    and size, with predicted time and busbw (--tune-csv: CSV)
//
// The report lists the detectors and what each found, the NUMA nodes with their CPUs, cores and
// caches, the GPUs and NICs with their PCIe links and CPU/NUMA affinity, and the matrix of path
// types between GPUs and NICs that `nvidia-smi topo -m` users know. CHORUS_DEBUG=INFO adds the
// detectors' log lines; CHORUS_TOPO_DETECT chooses detectors as it does inside the library.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "src/topology/detect.h"
#include "src/topology/json.h"
#include "src/topology/placement.h"
#include "src/topology/system.h"
#include "tools/chorus-topo/layout_view.h"
#include "tools/chorus-topo/report.h"
#include "tools/chorus-topo/tune_view.h"

using chorus::StatusOr;
namespace topo = chorus::topo;

int main(int argc, char** argv) {
  std::string file, root;
  bool json = false, allPci = false;
  chorus::topo_tool::LayoutFlags layoutFlags;
  chorus::topo_tool::TuneFlags tuneFlags;

  CLI::App app{"chorus-topo: the machine as chorus sees it (CPUs, NUMA nodes, GPUs, NICs, paths)."};
  auto* fileOpt = app.add_option("--file", file,
                                 "read an NCCL topology XML or a chorus JSON file instead of detecting");
  app.add_option("--root", root,
                 "detect from a recorded snapshot: DIR/sys and DIR/proc, sysfs detector only "
                 "(see tests/data/sysfs/record.sh)")
      ->check(CLI::ExistingDirectory)
      ->excludes(fileOpt);
  app.add_flag("--json", json, "print the System as chorus JSON instead of the report");
  app.add_flag("--all-pci", allPci, "keep every PCI function, not only GPUs, NICs and switches");
  chorus::topo_tool::addLayoutOptions(app, layoutFlags);
  chorus::topo_tool::addTuneOptions(app, tuneFlags);
  app.footer("CHORUS_TOPO_DETECT=sysfs,^nvml,... chooses detectors; CHORUS_DEBUG=INFO logs them.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; usage errors exit 2, as is customary for command-line tools.
    return app.exit(e) == 0 ? 0 : 2;
  }

  topo::System system;
  std::vector<topo::DetectorReport> detectors;
  std::string source;
  if (!file.empty()) {
    // NCCL XML or chorus JSON, told apart by a leading '<'; XML warnings are logged at WARN.
    StatusOr<topo::System> loaded = topo::loadTopologyFile(file);
    if (!loaded.ok()) {
      std::fprintf(stderr, "chorus-topo: %s\n", loaded.status().message().c_str());
      return 1;
    }
    system = std::move(loaded).value();
    source = "file " + file;
  } else {
    StatusOr<topo::DetectOptions> options = topo::DetectOptions::fromEnv();
    if (!options.ok()) {
      std::fprintf(stderr, "chorus-topo: %s\n", options.status().message().c_str());
      return 2;
    }
    if (!root.empty()) {
      // A snapshot describes another machine: nothing may be asked of this one's hardware.
      options->sysfsRoot = root + "/sys";
      options->procRoot = root + "/proc";
      options->cpuPci = topo::CpuPciSource::kSysfs;
      options->nvml = options->cuda = options->ibverbs = false;
      source = "snapshot " + root;
    } else {
      source = "detected on this host";
    }
    options->allPciDevices = allPci;
    StatusOr<topo::Detection> detected = topo::detectSystemWithReport(*options);
    if (!detected.ok()) {
      std::fprintf(stderr, "chorus-topo: %s\n", detected.status().message().c_str());
      return 1;
    }
    system = std::move(detected->system);
    detectors = std::move(detected->detectors);
  }

  if (json) {
    std::fputs(topo::toJson(system).c_str(), stdout);
    return 0;
  }
  int exitCode = 0;
  if (chorus::topo_tool::printLayout(system, layoutFlags, &exitCode)) return exitCode;
  if (chorus::topo_tool::printTuning(system, tuneFlags, &exitCode)) return exitCode;
  std::fputs(chorus::topo_tool::formatReport(system, source, detectors).c_str(), stdout);
  return 0;
}
