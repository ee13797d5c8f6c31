#include "src/cost/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>

namespace chorus::cost {

namespace {

// ---- The constants -------------------------------------------------------------------------
//
// Fitted to the 2-core development machine (docs/performance.md, blocking chorus-perf, float32
// sum): shared memory 2 ranks 8 B 0.20 µs, 4 KiB 0.57, 32 KiB 2.7 (staged one-shot), 1 MiB
// ~170 µs and 64 MiB ~13 ms (two-shot); 4 ranks 8 B 2.75 µs, 4 KiB 3.55, 1 MiB ~450 µs, 64 MiB
// ~30 ms; TCP loopback 2 ranks 8 B 17 µs one-shot / 26 µs ring, 1 MiB 200-500 µs, 64 MiB
// 16-30 ms; 4 ranks 8 B 80-100 µs, 32 MiB 30 ms. How they were read off:
//   shm: cross-memory attach copies at ~8 GB/s per rank (two-shot at 1 MiB moves 1 MiB per rank
//        in ~130 µs of its ~170); a process_vm_readv call ~1 µs; a slot message ~0.8 µs of CPU.
//   tcp-loopback: one-shot (1 hop, 4 messages with headers) 17 µs and ring (2 hops, 6 messages)
//        26 µs give 3 µs of CPU per message and 3 µs per hop (with the 2 µs call overhead);
//        large rings stream ~5 GB/s per rank, all of it CPU (kernel copies).
//   host: a core reduces at ~30 GB/s of traffic beyond its L2 (kernels bench: 36-44 GB/s with
//        2 threads) and ~100 GB/s within. The host window: the executor's steps around a
//        staged call ~0.1 µs (bench/compare/window_exchange: the library's call against the
//        bare exchange) and a line transfer between the two cores 56-70 ns at the VM's low
//        floor (bench/compare/line_latency; 166-310 ns at other times: the self-calibration
//        measures it). 4 ranks on 2 cores added ~2.5 µs per wait in the 2026-11-21 tables,
//        the table's 6 hand-overs of 0.42 µs; by 2026-11-28 the same VM measured 10-18 µs for
//        a 4-rank 8 B call and 1.7-3.4 µs per hand-over of a core between two threads by
//        sched_yield, which is what the self-calibration gives a job instead.
// Ethernet, InfiniBand, NVLink and PCIe are textbook values for now (25 GbE kernel TCP, HDR IB
// verbs, A100-class NVLink, PCIe gen4 x16), to be calibrated where such hardware exists.
constexpr LinkConstants kDefaultLinks[kNumLinkClasses] = {
    //  latencyUs  bandwidthGBps  stepOverheadUs  getOverheadUs  cpuShare  nominalGbps
    {1.0, 8.0, 0.8, 1.0, 1.0, 0},     // kShm
    {3.0, 6.0, 2.0, 0.0, 1.0, 0},     // kTcpLoopback
    {10.0, 2.8, 3.0, 0.0, 0.3, 25},   // kEthernet (25 Gb/s, ~90% goodput)
    {1.5, 23.0, 0.3, 0.5, 0.0, 200},  // kInfiniBand (HDR 200 Gb/s)
    {1.0, 200.0, 0.5, 0.5, 0.0, 0},   // kNvlink
    {1.5, 24.0, 0.5, 0.5, 0.0, 0},    // kPcie (gen4 x16)
};
constexpr HostConstants kDefaultHost = {
    /*memBwGBps=*/36, /*cacheBwGBps=*/100, /*cacheBytes=*/512 << 10,
    /*callOverheadUs=*/2, /*stagedCallUs=*/0.1, /*lineUs=*/0.06, /*crossCoreGBps=*/60,
    /*contextSwitchUs=*/0.42, /*llcBytes=*/32 << 20};

constexpr uint64_t kKiB = 1024, kMiB = 1024 * 1024;
constexpr double kInf = std::numeric_limits<double>::infinity();

// µs to move `bytes` at `gbps` (GB/s = 10^3 bytes per µs).
double usFor(double bytes, double gbps) { return gbps > 0 ? bytes / (gbps * 1e3) : kInf; }

}  // namespace

std::string sizeText(uint64_t b) {
  char buf[32];
  if (b >= kMiB && b % kMiB == 0)
    std::snprintf(buf, sizeof buf, "%llu MiB", static_cast<unsigned long long>(b / kMiB));
  else if (b >= kKiB && b % kKiB == 0)
    std::snprintf(buf, sizeof buf, "%llu KiB", static_cast<unsigned long long>(b / kKiB));
  else
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

std::string usText(double us) {
  char buf[32];
  if (us < 10)
    std::snprintf(buf, sizeof buf, "%.2f us", us);
  else if (us < 1e4)
    std::snprintf(buf, sizeof buf, "%.1f us", us);
  else
    std::snprintf(buf, sizeof buf, "%.2f ms", us / 1e3);
  return buf;
}

CostInput normalized(CostInput in) {
  in.nranks = std::max(1, in.nranks);
  in.hosts = std::clamp(in.hosts, 1, in.nranks);
  if (in.hosts == 1) in.ranksPerHost = in.nranks;
  in.ranksPerHost = std::clamp(in.ranksPerHost, 1, in.nranks);
  in.chunkBytes = std::max<uint64_t>(1, in.chunkBytes);
  return in;
}

std::string_view linkClassName(LinkClass c) {
  switch (c) {
    case LinkClass::kShm: return "shm";
    case LinkClass::kTcpLoopback: return "tcp-loopback";
    case LinkClass::kEthernet: return "ethernet";
    case LinkClass::kInfiniBand: return "infiniband";
    case LinkClass::kNvlink: return "nvlink";
    case LinkClass::kPcie: return "pcie";
  }
  return "?";
}

LinkClass slower(LinkClass a, LinkClass b) {
  // By the bandwidth one rank sees, slowest first: what a job planning for every rank must
  // assume when its ranks reach their peers through different links.
  constexpr LinkClass kOrder[] = {LinkClass::kEthernet, LinkClass::kTcpLoopback,
                                  LinkClass::kShm,      LinkClass::kInfiniBand,
                                  LinkClass::kPcie,     LinkClass::kNvlink};
  for (LinkClass c : kOrder)
    if (a == c || b == c) return c;
  return a;
}

StatusOr<LinkClass> parseLinkClass(std::string_view name) {
  for (int i = 0; i < kNumLinkClasses; ++i)
    if (linkClassName(static_cast<LinkClass>(i)) == name) return static_cast<LinkClass>(i);
  if (name == "tcp") return LinkClass::kTcpLoopback;
  if (name == "eth") return LinkClass::kEthernet;
  if (name == "ib") return LinkClass::kInfiniBand;
  return invalidArgument("unknown link class '" + std::string(name) +
                         "' (shm, tcp-loopback, ethernet, infiniband, nvlink, pcie)");
}

std::string Breakdown::toString() const {
  char buf[192];
  std::snprintf(buf, sizeof buf,
                "call %.1f + lat %.1f + msg %.1f + wire %.1f + mem %.1f + get %.1f + wait %.1f "
                "= %.1f us",
                callUs, latencyUs, messageUs, wireUs, memoryUs, oneSidedUs, waitUs, totalUs());
  return buf;
}

CostModel::CostModel() : host_(kDefaultHost) {
  for (int i = 0; i < kNumLinkClasses; ++i) links_[static_cast<size_t>(i)] = kDefaultLinks[i];
}

LinkConstants CostModel::linkAt(LinkClass c, double speedGbps) const {
  LinkConstants k = constants(c);
  if (speedGbps > 0 && k.nominalGbps > 0) k.bandwidthGBps *= speedGbps / k.nominalGbps;
  return k;
}

Status CostModel::applyOverrides(std::string_view spec) {
  CostModel next = *this;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string_view::npos) end = spec.size();
    const std::string item(spec.substr(pos, end - pos));
    pos = end + 1;
    if (item.empty()) continue;
    const size_t dot = item.find('.'), eq = item.find('=');
    if (dot == std::string::npos || eq == std::string::npos || eq < dot)
      return invalidArgument("cost-model override '" + item + "': expected class.field=value");
    const std::string cls = item.substr(0, dot), field = item.substr(dot + 1, eq - dot - 1);
    const std::string text = item.substr(eq + 1);
    char* stop = nullptr;
    const double v = std::strtod(text.c_str(), &stop);
    if (text.empty() || *stop != '\0' || !std::isfinite(v) || v < 0)
      return invalidArgument("cost-model override '" + item + "': '" + text +
                             "' is not a non-negative number");
    auto bad = [&] {
      return invalidArgument("cost-model override '" + item + "': unknown field '" + field +
                             "' of " + cls);
    };
    if (cls == "host") {
      HostConstants& h = next.host_;
      if (field == "membw") h.memBwGBps = v;
      else if (field == "cachebw") h.cacheBwGBps = v;
      else if (field == "cache") h.cacheBytes = static_cast<uint64_t>(v);
      else if (field == "llc") h.llcBytes = static_cast<uint64_t>(v);
      else if (field == "call") h.callOverheadUs = v;
      else if (field == "staged") h.stagedCallUs = v;
      else if (field == "line") h.lineUs = v;
      else if (field == "cross") h.crossCoreGBps = v;
      else if (field == "ctx") h.contextSwitchUs = v;
      else return bad();
      if ((field == "membw" || field == "cachebw" || field == "cross") && v <= 0)
        return invalidArgument("cost-model override '" + item + "': bandwidth must be > 0");
      continue;
    }
    CHORUS_ASSIGN_OR_RETURN(const LinkClass c, parseLinkClass(cls));
    LinkConstants& k = next.links_[static_cast<size_t>(c)];
    if (field == "latency") k.latencyUs = v;
    else if (field == "bw") k.bandwidthGBps = v;
    else if (field == "step") k.stepOverheadUs = v;
    else if (field == "get") k.getOverheadUs = v;
    else if (field == "cpu") k.cpuShare = std::min(v, 1.0);
    else if (field == "nominal") k.nominalGbps = v;
    else return bad();
    if (field == "bw" && v <= 0)
      return invalidArgument("cost-model override '" + item + "': bandwidth must be > 0");
  }
  *this = next;
  return Status::okStatus();
}

Breakdown CostModel::explain(const Traffic& t, const CostInput& raw) const {
  Breakdown b;
  const CostInput in = normalized(raw);
  const LinkConstants li = linkAt(in.intra, 0), lx = linkAt(in.inter, in.interSpeedGbps);
  // Time-sharing: ranks beyond the host's cores queue for them.
  const double share =
      in.coresPerHost > 0
          ? std::max(1.0, std::ceil(static_cast<double>(in.ranksPerHost) / in.coresPerHost))
          : 1.0;
  const bool multiHost = in.hosts > 1;

  b.callUs = share * (t.staged ? std::max(1.0, t.waits) * host_.stagedCallUs
                               : host_.callOverheadUs) +
             t.lineTransfers * host_.lineUs;
  b.latencyUs = t.hops * (multiHost ? lx.latencyUs : li.latencyUs);
  const double messages = t.messages + 2 * t.headerPeers;
  const double perMessage = multiHost ? (1 - t.interShare) * li.stepOverheadUs +
                                            t.interShare * lx.stepOverheadUs
                                      : li.stepOverheadUs;
  b.messageUs = share * messages * perMessage;
  auto stretched = [&](const LinkConstants& k) { return 1 + k.cpuShare * (share - 1); };
  const double intraWire = usFor(t.bytesIntra, li.bandwidthGBps) * stretched(li);
  const double nicWire = t.bytesNic > 0 ? usFor(t.bytesNic, lx.bandwidthGBps) * stretched(lx) : 0;
  b.wireUs = std::max(t.bytesIntra > 0 ? intraWire : 0, nicWire);
  if (t.fillBytes > 0) {
    const LinkConstants& slow = multiHost && lx.bandwidthGBps < li.bandwidthGBps ? lx : li;
    b.wireUs += usFor(t.fillBytes, slow.bandwidthGBps) * stretched(slow);
  }
  const double memBw =
      t.workingSet <= static_cast<double>(host_.cacheBytes) ? host_.cacheBwGBps : host_.memBwGBps;
  // Quantization kernels touch the element bytes and the packed bytes and run at about half a
  // copy's rate (docs/performance.md, quantization kernels): priced as twice the bytes touched.
  const double quantTouched = t.quantBytes * (1 + (in.packedRatio > 0 ? in.packedRatio : 1));
  b.memoryUs = share * (usFor(2 * t.copyBytes + 3 * t.reduceBytes + 2 * quantTouched, memBw) +
                        (t.windowBytes > 0 ? usFor(t.windowBytes, host_.crossCoreGBps) : 0));
  // One-sided reads go through the intra-host link; on several hosts the cross-host share of
  // them streams through the NIC like messages.
  if (t.getBytes > 0 || t.gets > 0) {
    const double interShare =
        multiHost ? (in.nranks - in.ranksPerHost) / static_cast<double>(in.nranks - 1) : 0;
    const double intraGet = usFor((1 - interShare) * t.getBytes, li.bandwidthGBps);
    const double nicGet = usFor(interShare * t.getBytes * in.ranksPerHost, lx.bandwidthGBps);
    b.oneSidedUs = share * (intraGet + t.gets * li.getOverheadUs) + nicGet;
    // From a segment's mapping a read is a copy, with no system call or pinning per call —
    // while the host's working set stays within half its last-level cache (the other half
    // for everything else, as the window's rounds are sized). Beyond it the reads and writes
    // of the zero-copy path go to DRAM (a two-shot moves about 3.5 N per rank there, where
    // the staged path's cache-sized rounds move 2 N), which the model's memory rate does not
    // tell apart (it is measured within the L3); measured there, the zero-copy two-shot took
    // 1.3-1.4x the staged one's time (docs/performance.md), so those reads keep the
    // cross-memory-attach price, which ranks them below it.
    if (in.segments && !multiHost && in.intra == LinkClass::kShm &&
        2 * t.workingSet * in.ranksPerHost <= static_cast<double>(host_.llcBytes))
      b.oneSidedUs = share * usFor(2 * t.getBytes, memBw);
  }
  b.waitUs = share > 1 ? t.waits * 3 * share * host_.contextSwitchUs : 0;
  return b;
}

std::string CostModel::constantsTable() const {
  std::ostringstream o;
  char line[256];
  std::snprintf(line, sizeof line, "%-13s %10s %9s %9s %9s %6s %8s\n", "# link", "latency_us",
                "bw_GB/s", "step_us", "get_us", "cpu", "nominal");
  o << line;
  for (int i = 0; i < kNumLinkClasses; ++i) {
    const LinkConstants& k = links_[static_cast<size_t>(i)];
    std::snprintf(line, sizeof line, "%-13s %10.2f %9.2f %9.2f %9.2f %6.2f %8.0f\n",
                  std::string(linkClassName(static_cast<LinkClass>(i))).c_str(), k.latencyUs,
                  k.bandwidthGBps, k.stepOverheadUs, k.getOverheadUs, k.cpuShare, k.nominalGbps);
    o << line;
  }
  std::snprintf(line, sizeof line,
                "# host: membw %.1f GB/s, cache bw %.1f GB/s within %s, call %.2f us, staged "
                "call %.2f us, line %.3f us (%.1f GB/s across cores), context switch %.2f us, "
                "last-level cache %s\n",
                host_.memBwGBps, host_.cacheBwGBps, sizeText(host_.cacheBytes).c_str(),
                host_.callOverheadUs, host_.stagedCallUs, host_.lineUs, host_.crossCoreGBps,
                host_.contextSwitchUs, sizeText(host_.llcBytes).c_str());
  o << line;
  return o.str();
}

const CostModel& defaultCostModel() {
  static const CostModel* model = new CostModel();  // never destroyed (see registry.cc)
  return *model;
}

LinkConstants fitFromPingPong(const std::vector<std::pair<uint64_t, double>>& samples,
                              const LinkConstants& prior) {
  LinkConstants out = prior;
  // Weighted sums for t = a + b x with weights 1/t^2 (relative error).
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin;
  for (const auto& [bytes, us] : samples) {
    if (!(us > 0) || !std::isfinite(us)) continue;  // a failed or absurd sample
    const double x = static_cast<double>(bytes), w = 1 / (us * us);
    sw += w;
    sx += w * x;
    sy += w * us;
    sxx += w * x * x;
    sxy += w * x * us;
    xmin = std::min(xmin, x);
    xmax = std::max(xmax, x);
  }
  if (sw == 0) return out;
  double intercept, perByte;
  const double det = sw * sxx - sx * sx;
  if (xmax > xmin && det > 0) {
    perByte = (sw * sxy - sx * sy) / det;
    intercept = (sy - perByte * sx) / sw;
    if (perByte <= 0) {
      // Noise made larger messages no slower: the bandwidth is beyond what the sizes resolve.
      perByte = 1 / (2000 * 1e3);
      intercept = (sy - perByte * sx) / sw;
    }
  } else {
    perByte = 1 / (std::max(prior.bandwidthGBps, 1e-3) * 1e3);
    intercept = (sy - perByte * sx) / sw;
  }
  out.bandwidthGBps = std::clamp(1 / (perByte * 1e3), 1e-3, 2000.0);
  out.latencyUs = std::clamp(intercept - 2 * prior.stepOverheadUs, 0.01, 1e4);
  return out;
}

}  // namespace chorus::cost
