#include "src/base/host_id.h"
#include "src/topology/placement.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <sstream>

#include "src/base/config.h"
#include "src/base/logging.h"
#include "src/topology/detect.h"
#include "src/topology/json.h"
#include "src/topology/nccl_xml.h"

namespace chorus::topo {
namespace {

std::string expandName(std::string pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'h') {
      out += localHostname();
      ++i;
    } else if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'p') {
      out += std::to_string(::getpid());
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

StatusOr<System> buildSystem() {
  const std::string file = config::getString("CHORUS_TOPO_FILE");
  System sys;
  if (!file.empty()) {
    auto loaded = loadTopologyFile(file);
    if (!loaded.ok()) return loaded.status().withContext("CHORUS_TOPO_FILE");
    sys = std::move(loaded).value();
    CHORUS_LOG(INFO, TOPO) << "topology loaded from " << file << ": " << sys.nodes().size()
                           << " devices";
  } else {
    CHORUS_ASSIGN_OR_RETURN(DetectOptions opts, DetectOptions::fromEnv());
    // Not the CUDA runtime inside the library unless asked for: initializing it in every rank
    // starts the driver there (and breaks a later fork). NVML gives the GPUs without it.
    if (config::getString("CHORUS_TOPO_DETECT").find("cuda") == std::string::npos)
      opts.cuda = false;
    CHORUS_ASSIGN_OR_RETURN(sys, detectSystem(opts));
  }
  const std::string dump = config::getString("CHORUS_TOPO_DUMP_FILE");
  if (!dump.empty()) {
    const std::string path = expandName(dump);
    std::ofstream out(path);
    out << toJson(sys);
    if (!out)
      return systemError("CHORUS_TOPO_DUMP_FILE: cannot write the topology to " + path);
    CHORUS_LOG(INFO, TOPO) << "topology written to " << path;
  }
  return sys;
}

}  // namespace

StatusOr<System> loadTopologyFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalidArgument("cannot open topology file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '<') {
    std::vector<std::string> warnings;
    auto sys = importNcclXml(text, &warnings);
    for (const std::string& w : warnings) CHORUS_LOG(WARN, TOPO) << path << ": " << w;
    if (!sys.ok()) return sys.status().withContext(path);
    return sys;
  }
  auto sys = fromJson(text);
  if (!sys.ok()) return sys.status().withContext(path);
  return sys;
}

StatusOr<const System*> processSystem() {
  static std::once_flag once;
  static StatusOr<System>* result = nullptr;
  std::call_once(once, [] { result = new StatusOr<System>(buildSystem()); });
  if (!result->ok()) return result->status();
  return &result->value();
}

int currentNumaNode(const System& system) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return -1;
  int node = -1;
  bool any = false;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    int found = -1;
    for (int c : system.ofType(NodeType::kCpu)) {
      const Node& n = system.node(c);
      if (std::find(n.cpus.begin(), n.cpus.end(), cpu) != n.cpus.end()) {
        found = n.numa;
        break;
      }
    }
    if (found < 0) return -1;
    if (any && found != node) return -1;
    node = found;
    any = true;
  }
  return node;
}

int nearestNic(const System& system, int numa) {
  const std::vector<int> nics = system.ofType(NodeType::kNic);
  int from = -1;
  for (int c : system.ofType(NodeType::kCpu))
    if (system.node(c).numa == numa) from = c;
  int best = -1;
  Path bestPath;
  for (size_t i = 0; i < nics.size(); ++i) {
    if (!system.node(nics[i]).linkUp) continue;
    Path p = from >= 0 ? system.path(from, nics[i]) : Path{PathType::kSys, 0, 0, {}};
    if (best < 0 || p.type < bestPath.type ||
        (p.type == bestPath.type && p.bandwidthGBps > bestPath.bandwidthGBps)) {
      best = static_cast<int>(i);
      bestPath = p;
    }
  }
  return best;
}

}  // namespace chorus::topo
