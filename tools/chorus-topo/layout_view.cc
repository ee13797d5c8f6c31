#include "tools/chorus-topo/layout_view.h"

#include <cstdio>
#include <sstream>
#include <vector>

namespace chorus::topo_tool {

namespace {

// Beyond this many ranks, trees are summarized instead of listed edge by edge.
constexpr int kMaxListedRanks = 64;

// "0-3 8 10-12": runs of three or more consecutive ranks as ranges.
std::string rankList(const std::vector<int>& ranks) {
  std::ostringstream o;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i) o << " ";
    if (j - i >= 2) {
      o << ranks[i] << "-" << ranks[j];
    } else {
      o << ranks[i];
      if (j > i) o << " " << ranks[j];
    }
    i = j + 1;
  }
  return o.str();
}

std::string plural(int n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// "root 0, depth 3, 2 inter-host edges" and, for small layouts, the edges on the next line.
void describeTree(std::ostringstream& o, const topo::Layout& layout, const topo::Tree& t,
                  const std::string& indent) {
  o << "root " << t.root << ", depth " << t.depth() << ", "
    << plural(layout.crossHostEdges(t), "inter-host edge", "inter-host edges") << "\n";
  if (layout.nranks() == 1) return;
  if (layout.nranks() <= kMaxListedRanks)
    o << indent << t.toString() << "\n";
  else
    o << indent << t.root << "->[" << rankList(t.children[static_cast<size_t>(t.root)])
      << "] ... (edges listed up to " << kMaxListedRanks << " ranks)\n";
}

}  // namespace

int ringHostCrossings(const topo::Layout& layout) {
  const std::vector<int>& ring = layout.ringOrder();
  int crossings = 0;
  for (size_t i = 0; i < ring.size(); ++i)
    if (!layout.sameHost(ring[i], ring[(i + 1) % ring.size()])) ++crossings;
  return crossings;
}

std::string formatLayout(const topo::Layout& layout) {
  std::ostringstream o;
  const int hosts = layout.numHosts();
  o << "Layout: " << plural(layout.nranks(), "rank", "ranks") << " on "
    << plural(hosts, "host", "hosts") << ", ";
  if (layout.uniformHosts())
    o << layout.maxLocalSize() << " per host";
  else
    o << layout.minLocalSize() << "-" << layout.maxLocalSize() << " per host (the last smaller)";
  o << "; NUMA unknown (ranks not bound)\n";
  for (int h = 0; h < hosts; ++h)
    o << "  host " << h << ": ranks " << rankList(layout.hosts()[static_cast<size_t>(h)])
      << "\n";
  if (hosts > 1) {
    std::vector<int> leaders;
    for (int h = 0; h < hosts; ++h) leaders.push_back(layout.hostLeader(h));
    o << "  host leaders: " << rankList(leaders) << "\n";
    o << "  rails (same local rank):";
    for (int local = 0; local < layout.maxLocalSize(); ++local) {
      const int member = layout.hosts()[0][static_cast<size_t>(local)];
      o << " [" << rankList(layout.group(topo::GroupKind::kRail, member)) << "]";
    }
    o << "\n";
  }

  // The ring in runs of one host, a bar at each boundary (the last bar: back to the start).
  const std::vector<int>& ring = layout.ringOrder();
  const int crossings = ringHostCrossings(layout);
  o << "Ring:";
  std::vector<int> run;
  for (size_t i = 0; i < ring.size(); ++i) {
    run.push_back(ring[i]);
    const int next = ring[(i + 1) % ring.size()];
    if (i + 1 == ring.size() || !layout.sameHost(ring[i], next)) {
      o << " " << rankList(run);
      if (!layout.sameHost(ring[i], next)) o << " |";
      run.clear();
    }
  }
  if (hosts == 1)
    o << "  (one host: crosses no host boundary)\n";
  else
    o << "  (back to " << ring.front() << "; crosses "
      << plural(crossings, "host boundary", "host boundaries") << ")\n";

  const topo::Tree tree = layout.tree(0);
  o << "Tree (binary over host leaders, chains inside hosts): ";
  describeTree(o, layout, tree, "  ");
  const auto dbt = layout.doubleBinaryTree();
  o << "Double binary tree (each carries half of an all-reduce):\n";
  for (size_t i = 0; i < dbt.size(); ++i) {
    o << "  tree " << i + 1 << ": ";
    describeTree(o, layout, dbt[i], "    ");
  }
  if (hosts == 1) {
    o << "Inter-host edges: none (one host)\n";
    return o.str();
  }
  o << "Inter-host edges: ring " << crossings << ", tree " << layout.crossHostEdges(tree)
    << ", double binary tree " << layout.crossHostEdges(dbt[0]) << " + "
    << layout.crossHostEdges(dbt[1]) << " (a spanning tree needs at least " << hosts - 1
    << ")\n";
  return o.str();
}

void addLayoutOptions(CLI::App& app, LayoutFlags& flags) {
  flags.app = &app;
  app.add_option("--ranks", flags.ranks,
                 "show the rank layout, ring order and trees of a job of N ranks (with --tune: "
                 "the job to predict for, default 2)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--ranks-per-host", flags.ranksPerHost,
                 "ranks per host, consecutive ranks sharing a host (default: all on one host)")
      ->check(CLI::Range(1, 1 << 20));
}

bool printLayout(const topo::System& /*system*/, const LayoutFlags& flags, int* exitCode) {
  auto given = [&](const char* name) {
    const CLI::Option* o = flags.app ? flags.app->get_option_no_throw(name) : nullptr;
    return o != nullptr && o->count() > 0;
  };
  if (given("--tune") || given("--tune-csv")) return false;
  if (flags.ranks == 0) {
    if (flags.ranksPerHost == 0) return false;
    std::fprintf(stderr, "chorus-topo: --ranks-per-host needs --ranks (or --tune)\n");
    *exitCode = 2;
    return true;
  }
  const int perHost = flags.ranksPerHost > 0 ? flags.ranksPerHost : flags.ranks;
  StatusOr<topo::Layout> layout = topo::Layout::uniform(flags.ranks, perHost);
  if (!layout.ok()) {
    std::fprintf(stderr, "chorus-topo: %s\n", layout.status().message().c_str());
    *exitCode = 2;
    return true;
  }
  std::fputs(formatLayout(*layout).c_str(), stdout);
  return true;
}

}  // namespace chorus::topo_tool
