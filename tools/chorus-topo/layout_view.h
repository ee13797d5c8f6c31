// chorus-topo --ranks N --ranks-per-host K: the rank layout, ring order and trees chorus would
// build for a job of N ranks on hosts of K consecutive ranks (topo::Layout::uniform).
//
// NUMA is left unknown, as it is for ranks that are not bound to a node (the usual chorus-run
// job): the ring then follows the hosts and the rank order within each. The output names every
// host with its ranks and the rails, marks each host boundary the ring crosses, and gives the
// tree rooted at 0 and the double binary trees with their depth and inter-host edge counts.
//
// With --tune (tune_view.h) the same two options describe the job the tuner predicts for, and
// this view steps aside.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "src/topology/layout.h"
#include "src/topology/system.h"

namespace chorus::topo_tool {

struct LayoutFlags {
  int ranks = 0;         // --ranks N (0: not asked for)
  int ranksPerHost = 0;  // --ranks-per-host K (0: all ranks on one host)
  // The parser, to see after parsing whether --tune was given (it is registered later, by
  // addTuneOptions()).
  const CLI::App* app = nullptr;
};

void addLayoutOptions(CLI::App& app, LayoutFlags& flags);

// Prints the layout when the flags ask for it and returns true; false when they do not (no
// --ranks, or --tune will use them). Sets *exitCode on failure.
bool printLayout(const topo::System& system, const LayoutFlags& flags, int* exitCode);

// The text printLayout() prints, for a layout of any shape. Trees are listed edge by edge up to
// 64 ranks, summarized beyond.
std::string formatLayout(const topo::Layout& layout);

// Host boundaries crossed by one trip around the layout's ring (the step from the last rank
// back to the first included): 0 on one host, the number of hosts otherwise.
int ringHostCrossings(const topo::Layout& layout);

}  // namespace chorus::topo_tool
