#include "tools/chorus-topo/report.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <sstream>

namespace chorus::topo_tool {
namespace {

using topo::Node;
using topo::NodeType;
using topo::System;

// Left-aligned columns, two spaces apart, each row indented by two.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string str() const {
    std::vector<size_t> width;
    for (const auto& r : rows_)
      for (size_t i = 0; i < r.size(); ++i) {
        if (width.size() <= i) width.push_back(0);
        width[i] = std::max(width[i], r[i].size());
      }
    std::string out;
    for (const auto& r : rows_) {
      std::string line = " ";
      for (size_t i = 0; i < r.size(); ++i) {
        line += " " + r[i];
        if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 1, ' ');
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
    return out;
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string hex4(unsigned v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%04x", v);
  return buf;
}

std::string pcieText(const Node& n) {
  if (n.pcieGen <= 0 && n.pcieWidth <= 0) return "?";
  return "gen" + (n.pcieGen > 0 ? std::to_string(n.pcieGen) : std::string("?")) + " x" +
         (n.pcieWidth > 0 ? std::to_string(n.pcieWidth) : std::string("?"));
}

std::string idText(const Node& n) {
  if (n.vendor == 0 && n.device == 0) return "-";
  return hex4(n.vendor) + ":" + hex4(n.device);
}

std::string parentText(const System& s, const Node& n) {
  return n.parent >= 0 ? s.node(n.parent).name : "-";
}

// The CPUs a device is close to (those of its CPU node) and its NUMA node.
std::string cpuAffinity(const System& s, int dev) {
  int cpu = s.node(dev).type == NodeType::kCpu ? dev : s.cpuOf(dev);
  return cpu >= 0 ? topo::formatCpuList(s.node(cpu).cpus) : "-";
}
std::string numaAffinity(const System& s, int dev) {
  int numa = s.node(dev).numa;
  if (numa < 0) {
    int cpu = s.cpuOf(dev);
    if (cpu >= 0) numa = s.node(cpu).numa;
  }
  return numa >= 0 ? std::to_string(numa) : "-";
}

std::string speedText(double gbps) {
  if (gbps <= 0) return "?";
  return (gbps == static_cast<double>(static_cast<long long>(gbps)) ? fixed(gbps, 0)
                                                                    : fixed(gbps, 1)) +
         " Gb/s";
}

void section(std::ostringstream& out, const std::string& title) { out << "\n" << title << "\n"; }

}  // namespace

std::string formatBytes(uint64_t bytes) {
  if (bytes == 0) return "-";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1024 && u < 4 && bytes % (uint64_t{1} << (10 * (u + 1))) == 0) {
    v /= 1024;
    ++u;
  }
  return fixed(v, 0) + " " + units[u];
}

std::string pathCell(const System& s, int a, int b) {
  if (a == b) return "X";
  topo::Path p = s.path(a, b);
  if (p.type == topo::PathType::kNvl && p.nodes.size() == 2) {
    for (int li : s.linksOf(a)) {
      const topo::Link& l = s.links()[static_cast<size_t>(li)];
      if (l.type == topo::LinkType::kNvLink && (l.a == b || l.b == b))
        return "NV" + std::to_string(l.count);
    }
  }
  return std::string(topo::pathTypeName(p.type));
}

std::string formatReport(const System& s, const std::string& source,
                         const std::vector<topo::DetectorReport>& detectors) {
  std::ostringstream out;
  char id[32];
  std::snprintf(id, sizeof(id), "%016" PRIx64, s.hostId);
  out << "host: " << (s.hostName.empty() ? "(unnamed)" : s.hostName) << " (id " << id << ")\n";
  out << "source: " << source << "\n";

  if (!detectors.empty()) {
    section(out, "Detectors");
    Table t({"detector", "state", "found"});
    for (const topo::DetectorReport& d : detectors)
      t.add({d.name, std::string(topo::detectorStateName(d.state)), d.detail.empty() ? "-" : d.detail});
    out << t.str();
  }

  std::vector<int> cpus = s.ofType(NodeType::kCpu);
  section(out, "NUMA nodes (" + std::to_string(cpus.size()) + ")");
  if (cpus.empty()) {
    out << "  (none described)\n";
  } else {
    Table t({"NUMA", "node", "CPUs", "cores", "L2", "L3", "CPU list", "vendor / model"});
    for (int c : cpus) {
      const Node& n = s.node(c);
      std::string model = n.cpuVendor;
      if (!n.cpuModel.empty()) model += (model.empty() ? "" : " ") + n.cpuModel;
      t.add({n.numa >= 0 ? std::to_string(n.numa) : "-", n.name, std::to_string(n.cpus.size()),
             n.cores > 0 ? std::to_string(n.cores) : "?", formatBytes(n.l2Bytes),
             formatBytes(n.l3Bytes), n.cpus.empty() ? "-" : topo::formatCpuList(n.cpus),
             model.empty() ? "-" : model});
    }
    out << t.str();
  }

  std::vector<int> switches = s.ofType(NodeType::kPciSwitch);
  if (!switches.empty()) {
    section(out, "PCIe switches (" + std::to_string(switches.size()) + ")");
    Table t({"bus id", "vendor:device", "uplink", "parent", "NUMA"});
    for (int i : switches) {
      const Node& n = s.node(i);
      t.add({n.name, idText(n), pcieText(n), parentText(s, n), numaAffinity(s, i)});
    }
    out << t.str();
  }

  std::vector<int> gpus = s.ofType(NodeType::kGpu);
  section(out, "GPUs (" + std::to_string(gpus.size()) + ")");
  if (gpus.empty()) {
    out << "  (none)\n";
  } else {
    Table t({"", "name", "CUDA", "SM", "vendor:device", "PCIe", "parent", "NUMA", "CPU affinity"});
    for (size_t k = 0; k < gpus.size(); ++k) {
      int i = gpus[k];
      const Node& n = s.node(i);
      t.add({"GPU" + std::to_string(k), n.name, n.cudaDevice >= 0 ? std::to_string(n.cudaDevice) : "?",
             n.computeCapability > 0 ? fixed(n.computeCapability / 10.0, 1) : "?", idText(n),
             pcieText(n), parentText(s, n), numaAffinity(s, i), cpuAffinity(s, i)});
    }
    out << t.str();
  }

  std::vector<int> nvswitches = s.ofType(NodeType::kNvSwitch);
  if (!nvswitches.empty()) {
    section(out, "NVSwitches (" + std::to_string(nvswitches.size()) + ")");
    Table t({"name", "bus id", "NVLinks"});
    for (int i : nvswitches) {
      int links = 0;
      for (int li : s.linksOf(i))
        if (s.links()[static_cast<size_t>(li)].type == topo::LinkType::kNvLink)
          links += s.links()[static_cast<size_t>(li)].count;
      t.add({s.node(i).name, s.node(i).busId.empty() ? "-" : s.node(i).busId, std::to_string(links)});
    }
    out << t.str();
  }

  std::vector<int> nics = s.ofType(NodeType::kNic);
  section(out, "NICs (" + std::to_string(nics.size()) + ")");
  if (nics.empty()) {
    out << "  (none)\n";
  } else {
    Table t({"", "name", "device", "kind", "speed", "state", "bus id", "PCIe", "parent", "NUMA",
             "CPU affinity"});
    for (size_t k = 0; k < nics.size(); ++k) {
      int i = nics[k];
      const Node& n = s.node(i);
      std::string dev = n.netDevice.empty() ? "-" : n.netDevice;
      if (n.port > 0) dev += " port " + std::to_string(n.port);
      bool onPci = n.parent >= 0;
      t.add({"NIC" + std::to_string(k), n.name, dev, std::string(topo::nicKindName(n.nicKind)), speedText(n.speedGbps),
             n.linkUp ? "up" : "down", n.busId.empty() ? "-" : n.busId,
             onPci ? pcieText(n) : "-", onPci ? parentText(s, n) : "(not on PCI)",
             numaAffinity(s, i), cpuAffinity(s, i)});
    }
    out << t.str();
  }

  // The matrix names devices GPU<i> and NIC<i> as the tables above do, so it stays narrow.
  std::vector<int> devs = gpus;
  devs.insert(devs.end(), nics.begin(), nics.end());
  std::vector<std::string> label;
  for (size_t k = 0; k < gpus.size(); ++k) label.push_back("GPU" + std::to_string(k));
  for (size_t k = 0; k < nics.size(); ++k) label.push_back("NIC" + std::to_string(k));
  section(out, "Paths between GPUs and NICs (as `nvidia-smi topo -m`)");
  if (devs.empty()) {
    out << "  (no GPU or NIC)\n";
  } else {
    std::vector<std::string> header{""};
    header.insert(header.end(), label.begin(), label.end());
    header.push_back("CPU affinity");
    header.push_back("NUMA affinity");
    Table t(header);
    for (size_t i = 0; i < devs.size(); ++i) {
      int a = devs[i];
      std::vector<std::string> row{label[i]};
      for (int b : devs) row.push_back(pathCell(s, a, b));
      row.push_back(cpuAffinity(s, a));
      row.push_back(numaAffinity(s, a));
      t.add(row);
    }
    out << t.str();

    section(out, "Bottleneck bandwidth between them (GB/s, one direction)");
    std::vector<std::string> bwHeader{""};
    bwHeader.insert(bwHeader.end(), label.begin(), label.end());
    Table bw(bwHeader);
    for (size_t i = 0; i < devs.size(); ++i) {
      int a = devs[i];
      std::vector<std::string> row{label[i]};
      for (int b : devs) {
        topo::Path p = s.path(a, b);
        bool none = a == b || p.type == topo::PathType::kDis;
        row.push_back(none ? "-" : fixed(p.bandwidthGBps, 1));
      }
      bw.add(row);
    }
    out << bw.str();

    out << "\nLegend:\n"
           "  X    = self\n"
           "  NV#  = a bond of # direct NVLinks\n"
           "  NVL  = NVLink through NVSwitches\n"
           "  NVB  = NVLink through one other GPU\n"
           "  PIX  = at most one PCIe switch between them\n"
           "  PXB  = several PCIe switches, no CPU host bridge\n"
           "  PHB  = through the host bridge of one CPU (same NUMA node)\n"
           "  SYS  = across the CPU interconnect (another NUMA node)\n"
           "  DIS  = no path in this model (an interface not on PCI, or an unknown end)\n";
  }
  return out.str();
}

}  // namespace chorus::topo_tool
