#include "src/tuning/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>

#include "algorithms/common/chunking.h"
#include "algorithms/tree/tree.h"
#include "src/topology/layout.h"

namespace chorus::tune {

using sched::Coll;

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
//        2 threads) and ~100 GB/s within; 4 ranks on 2 cores add ~2.5 µs per wait (8 B staged:
//        0.2 -> 2.75 µs).
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
    /*callOverheadUs=*/2, /*stagedCallUs=*/0.2, /*contextSwitchUs=*/2.5};

constexpr uint64_t kKiB = 1024, kMiB = 1024 * 1024;
constexpr double kInf = std::numeric_limits<double>::infinity();

double ceilDiv(double a, double b) { return b > 0 ? std::ceil(a / b) : 0; }

// µs to move `bytes` at `gbps` (GB/s = 10^3 bytes per µs).
double usFor(double bytes, double gbps) { return gbps > 0 ? bytes / (gbps * 1e3) : kInf; }

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

// The input with its counts made consistent: at least one rank and host, ranks per host within
// [1, nranks], one host holding every rank when hosts == 1.
CostInput normalized(CostInput in) {
  in.nranks = std::max(1, in.nranks);
  in.hosts = std::clamp(in.hosts, 1, in.nranks);
  if (in.hosts == 1) in.ranksPerHost = in.nranks;
  in.ranksPerHost = std::clamp(in.ranksPerHost, 1, in.nranks);
  in.chunkBytes = std::max<uint64_t>(1, in.chunkBytes);
  return in;
}

// The ring chunk (algorithms/common/chunking.h, ringChunkElems) in bytes for slices of `slice`.
double ringChunk(double slice, double chunk) {
  const double half = std::ceil(slice / 2);
  return std::min(chunk, std::max(half, static_cast<double>(algo::kMinPipelineChunkBytes)));
}

// Data sent along a ring (or a chain in ring order) on several hosts: each host boundary is
// crossed by one link, so the NIC carries what one link carries.
void ringBytes(Traffic& t, double perLink, const CostInput& in) {
  t.bytesIntra = perLink;
  t.bytesNic = in.hosts > 1 ? perLink : 0;
  // A boundary rank sends across and receives from inside its host (or both across when hosts
  // hold one rank each).
  t.interShare = in.hosts > 1 ? (in.ranksPerHost == 1 ? 1.0 : 0.5) : 0;
}

// Data a rank exchanges with every peer directly: its host's ranks share one NIC.
void directBytes(Traffic& t, double perPeer, const CostInput& in) {
  const double n = in.nranks, r = in.ranksPerHost;
  t.bytesIntra = (r - 1) * perPeer;
  t.bytesNic = r * (n - r) * perPeer;
  t.interShare = n > 1 ? (n - r) / (n - 1) : 0;
}

// Data one rank (a root) exchanges with every other rank.
void rootBytes(Traffic& t, double perPeer, const CostInput& in) {
  const double n = in.nranks, r = in.ranksPerHost;
  t.bytesIntra = (r - 1) * perPeer;
  t.bytesNic = (n - r) * perPeer;
  t.interShare = n > 1 ? (n - r) / (n - 1) : 0;
}

// One notify / wait round with every peer: a hop, n-1 notifies and n-1 waits.
void syncRound(Traffic& t, double n) {
  t.hops += 1;
  t.messages += 2 * (n - 1);
  t.waits += n - 1;
}

// Trees and hierarchical schedules (algorithms/tree, algorithms/hier): the busiest rank's
// counts, as the schedules built for the layout produce them. `hier` applies on hosts of equal
// size (nranks == hosts * ranksPerHost) with hosts > 1 and ranksPerHost > 1; elsewhere its
// builders build the flat algorithm, and so does this model (see trafficOf).
bool treeOrHierTraffic(Coll coll, std::string_view algo, double N, const CostInput& in,
                       Traffic& t) {
  const double n = in.nranks, c = static_cast<double>(in.chunkBytes);
  const double H = in.hosts, L = in.ranksPerHost;
  const bool multiHost = in.hosts > 1;
  if (algo == "binomial" && (coll == Coll::kBroadcast || coll == Coll::kReduce)) {
    // The root sends (receives) each chunk to (from) its ceil(log2 n) children; the rank
    // 2^(d-1) below it receives one chunk and forwards d-1, as many messages in all.
    const double d = std::ceil(std::log2(n)), C = ceilDiv(N, c);
    t.hops = C > 0 ? d + C - 1 : 0;
    t.messages = d * C;
    t.waits = coll == Coll::kReduce ? d * C : C;
    t.headerPeers = d;
    t.bytesIntra = d * N;
    t.bytesNic = multiHost ? d * N : 0;  // the root's children on other hosts, at worst all
    t.interShare = multiHost ? (n - L) / (n - 1) : 0;
    if (coll == Coll::kReduce) t.reduceBytes = d * N;
    t.workingSet = 2 * N;
    return true;
  }
  const bool halving = algo == "rabenseifner", doubling = algo == "recursive_doubling";
  if ((halving || doubling) && coll == Coll::kAllReduce) {
    // Over p = 2^floor(log2 n) ranks (PowerOfTwoFold in algorithms/tree/tree.h); with n > p
    // the odd ranks of the fold also take in and give back the whole vector (the busiest).
    double p = 1;
    while (p * 2 <= n) p *= 2;
    const double F = n > p ? 1 : 0, steps = std::log2(p);
    double crossing = 0;  // bytes one rank sends across hosts (contiguous hosts of L ranks:
                          // partners at distance >= L are on other hosts)
    if (halving) {
      // Each halving and doubling step sends and receives its window; the chunks of one step
      // stream behind each other, as the ring's do.
      double messages = 0;
      for (double j = 1, w = N / 2; j <= steps; ++j, w /= 2) messages += 4 * ceilDiv(w, c);
      const double C = ceilDiv(N / 2, c);
      t.hops = C > 0 ? 2 * steps + 2 * F + C - 1 : 0;
      t.messages = messages + 2 * F * ceilDiv(N, c);
      t.bytesIntra = 2 * (p - 1) / p * N + F * N;
      t.reduceBytes = (p - 1) / p * N + F * N;
      crossing = std::max(0.0, 2 * (p - L) / p * N);
    } else {
      // log2 p exchanges of the whole vector.
      const double C = ceilDiv(N, c);
      t.hops = C > 0 ? steps + 2 * F + C - 1 : 0;
      t.messages = (2 * steps + 2 * F) * C;
      t.bytesIntra = (steps + F) * N;
      t.reduceBytes = (steps + F) * N;
      crossing = std::max(0.0, steps - std::log2(std::min(L, p))) * N;
    }
    if (!multiHost) crossing = 0;
    t.waits = t.messages / 2;
    t.headerPeers = steps + F;
    t.bytesNic = L * crossing;
    t.interShare = t.bytesIntra > 0 ? crossing / t.bytesIntra : 0;
    t.workingSet = 2 * N;
    return true;
  }
  if (algo == "tree" && coll == Coll::kAllReduce) {
    // Two trees over the host leaders (chains below them) or over all ranks; per tree a rank
    // with k children and a parent moves its half 2k + 2 times per chunk.
    const int m = multiHost ? in.hosts : in.nranks;
    const auto trees = algo::doubleBinaryTree(m);
    const double half = std::ceil(N / 2), C = ceilDiv(half, c);
    const double chain = multiHost && L > 1 ? 1 : 0;  // a leader's intra-host child
    double mostMoves = 0, mostChildren = 0, mostCross = 0, depth = 0;
    for (int v = 0; v < m; ++v) {
      double moves = 0, children = 0, cross = 0;
      for (const algo::NodeTree& tr : trees) {
        const double k = static_cast<double>(tr.children[static_cast<size_t>(v)].size());
        const double up = tr.parent[static_cast<size_t>(v)] >= 0 ? 1 : 0;
        moves += k + chain + up;
        children += k + chain;
        cross += k + up;
        double dv = 0;
        for (int u = v; tr.parent[static_cast<size_t>(u)] >= 0; u = tr.parent[static_cast<size_t>(u)])
          ++dv;
        depth = std::max(depth, dv);
      }
      mostMoves = std::max(mostMoves, moves);
      mostChildren = std::max(mostChildren, children);
      mostCross = std::max(mostCross, cross);
    }
    if (multiHost) mostMoves = std::max(mostMoves, 2 * (1 + chain));  // a chain rank
    depth += multiHost ? L - 1 : 0;
    t.hops = C > 0 ? 2 * depth + C - 1 : 0;
    t.messages = 2 * mostMoves * C;
    t.waits = (mostMoves + 0) * C;
    t.headerPeers = std::min(n - 1, mostMoves);
    t.bytesIntra = mostMoves * half;
    t.bytesNic = multiHost ? mostCross * half : 0;
    t.interShare = multiHost && mostMoves > 0 ? mostCross / mostMoves : 0;
    t.reduceBytes = mostChildren * half;
    t.workingSet = 2 * N;
    return true;
  }
  if (algo != "hier") return false;
  switch (coll) {
    case Coll::kAllReduce: {
      // Reduce-scatter in the host (direct), a ring per rail over H hosts, all-gather in the
      // host; per chunk of the own slice: 2 (L-1) + 2 (H-1) sends and as many receives.
      const double C = ceilDiv(std::ceil(N / L), c);
      t.hops = C > 0 ? 2 * (H - 1) + 2 + C - 1 : 0;
      t.messages = 4 * ((L - 1) + (H - 1)) * C;
      t.waits = 2 * ((L - 1) + (H - 1)) * C;
      t.headerPeers = (L - 1) + std::min(2.0, H - 1);
      t.bytesIntra = 2 * (L - 1) / L * N;
      t.bytesNic = 2 * (H - 1) / H * N;  // L rails of 2 (H-1)/H N/L each
      t.interShare = (H - 1) / ((L - 1) + (H - 1));
      t.reduceBytes = (L - 1) / L * N + (H - 1) / H * N / L;
      t.workingSet = 2 * N;
      return true;
    }
    case Coll::kReduceScatter:
    case Coll::kAllGather: {
      // N is one block; rail partials (reduce-scatter) or rail blocks (all-gather) move inside
      // the host as H blocks per peer, and a ring of H-1 steps runs per rail.
      const bool rs = coll == Coll::kReduceScatter;
      const double C = ceilDiv(N, c);
      t.hops = C > 0 ? (H - 1) + 1 + C - 1 : 0;
      t.messages = 2 * (H * (L - 1) + (H - 1)) * C;
      t.waits = (H * (L - 1) + (H - 1)) * C;
      t.headerPeers = (L - 1) + std::min(2.0, H - 1);
      t.bytesIntra = H * (L - 1) * N;
      t.bytesNic = L * (H - 1) * N;
      t.interShare = (H - 1) / (H * (L - 1) + (H - 1));
      if (rs)
        t.reduceBytes = (H * (L - 1) + (H - 1)) * N;
      else
        t.copyBytes = N;
      t.workingSet = (n + 1 + (rs ? H : 0)) * N;
      return true;
    }
    case Coll::kBroadcast: {
      // Slices of N/L: the root scatters them in its host, each rail chains its slice over the
      // hosts, every host all-gathers. The root sends 2 (L-1) slices per chunk, a chain rank
      // 1 + (L-1) and receives as many.
      const double slice = std::ceil(N / L), C = ceilDiv(slice, c);
      t.hops = C > 0 ? (H - 1) + 2 + C - 1 : 0;
      t.messages = 2 * L * C;
      t.waits = L * C;
      t.headerPeers = (L - 1) + std::min(2.0, H - 1);
      t.bytesIntra = 2 * (L - 1) * slice;
      t.bytesNic = N;  // L rails of N/L
      t.interShare = 1 / L;
      t.fillBytes = (H - 2) * std::min(c, slice);
      t.copyBytes = N;
      t.workingSet = 2 * N;
      return true;
    }
    case Coll::kAllToAll: {
      // N per peer: H (L-1) blocks to and from the host's ranks, L (H-1) to and from the rails.
      const double C = ceilDiv(N, c);
      const double intra = H * (L - 1), inter = L * (H - 1);
      t.hops = C > 0 ? 2 : 0;
      t.messages = 2 * (intra + inter) * C;
      t.waits = (intra + inter) * C;
      t.headerPeers = (L - 1) + 2 * (H - 1);
      t.bytesIntra = intra * N;
      t.bytesNic = L * inter * N;
      t.interShare = inter / (intra + inter);
      t.copyBytes = N;
      t.workingSet = (2 * n + H * L) * N;
      return true;
    }
    default: return false;
  }
}

Traffic trafficOf(Coll coll, std::string_view algo, uint64_t bytesIn, const CostInput& in) {
  if (algo == "hier") {
    // Where the hierarchical builders do not apply they build the flat algorithm.
    const bool applies = in.hosts > 1 && in.ranksPerHost > 1 &&
                         in.hosts * in.ranksPerHost == in.nranks;
    if (!applies || in.nranks == 1) {
      const char* flat = coll == Coll::kBroadcast ? "chain"
                         : coll == Coll::kAllToAll ? "pairwise"
                                                   : "ring";
      return trafficOf(coll, flat, bytesIn, in);
    }
  }
  Traffic t;
  const double N = static_cast<double>(bytesIn), n = in.nranks, c = in.chunkBytes;
  if (in.nranks == 1) {
    // Every algorithm degenerates to a local copy (or nothing, in place).
    if (coll != Coll::kBarrier) t.copyBytes = N;
    t.workingSet = 2 * N;
    return t;
  }
  if (treeOrHierTraffic(coll, algo, N, in, t)) {
    t.waits += t.headerPeers;
    return t;
  }
  const bool ring = algo == "ring", oneshot = algo == "oneshot", twoshot = algo == "twoshot",
             direct = algo == "direct", chain = algo == "chain", pairwise = algo == "pairwise",
             linear = algo == "linear", dissemination = algo == "dissemination";
  switch (coll) {
    case Coll::kAllReduce:
      if (ring) {
        const double slice = std::ceil(N / n), R = ceilDiv(slice, ringChunk(slice, c));
        t.hops = R > 0 ? 2 * (n - 1) + R - 1 : 0;
        t.messages = 4 * (n - 1) * R;
        t.waits = 2 * (n - 1) * R;
        t.headerPeers = std::min(2.0, n - 1);
        ringBytes(t, 2 * (n - 1) / n * N, in);
        t.reduceBytes = (n - 1) / n * N;
        t.workingSet = 2 * N;
      } else if (oneshot && in.hosts == 1 && in.stagingBytes > 0 &&
                 bytesIn <= in.stagingBytes) {
        t.staged = true;
        t.copyBytes = N;
        t.reduceBytes = (n - 1) * N;
        t.waits = 1;
        t.workingSet = (n + 1) * N;
      } else if (oneshot) {
        t.hops = 1;
        t.messages = 2 * (n - 1);
        t.waits = n - 1;
        t.headerPeers = n - 1;
        directBytes(t, N, in);
        t.reduceBytes = (n - 1) * N;
        t.workingSet = (n + 1) * N;
      } else if (twoshot && in.hosts == 1 && in.roundBytes > 0 && bytesIn > in.stagingBytes) {
        // Through the staging segment (src/core/host_staging.h): copy in, reduce the own slice
        // of every round, copy the others' slices out; two waits per round. Rounds are small,
        // so from DRAM each input byte is read once and each output byte written once; the rest
        // stays in the caches: a working set of about an eighth of the message fits the model's
        // cache rate up to 8 MiB, as measured.
        // (Not t.staged: its call costs what a schedule's does, several waits on peers.)
        const double R = ceilDiv(N, static_cast<double>(in.roundBytes));
        t.copyBytes = N;
        t.reduceBytes = (n - 1) / n * N;
        t.waits = 2 * R + 1;
        t.workingSet = N / 8;
      } else if (twoshot) {
        const double slice = std::ceil(N / n), R = ceilDiv(slice, c);
        t.headerPeers = n - 1;
        t.getBytes = 2 * (n - 1) / n * N;
        t.gets = 2 * (n - 1) * R;
        t.reduceBytes = (n - 1) / n * N;
        syncRound(t, n);
        syncRound(t, n);
        t.workingSet = 2 * N;
      } else {
        return Traffic{};
      }
      break;
    case Coll::kReduceScatter:
    case Coll::kAllGather: {
      const bool rs = coll == Coll::kReduceScatter;
      if (ring) {
        const double R = ceilDiv(N, ringChunk(N, c));
        t.hops = R > 0 ? (n - 1) + R - 1 : 0;
        t.messages = 2 * (n - 1) * R;
        t.waits = (n - 1) * R;
        t.headerPeers = std::min(2.0, n - 1);
        ringBytes(t, (n - 1) * N, in);
      } else if (direct && !rs && in.hosts == 1 && in.roundBytes > 0) {
        // Through the staging segment's rounds (src/core/host_staging.h): copy the own part
        // in, the others' parts out, one wait per peer and round.
        const double R = ceilDiv(N, static_cast<double>(in.roundBytes));
        t.copyBytes = (n + 1) * N;
        t.waits = 2 * R + 1;
        t.workingSet = N / 8;
        break;
      } else if (direct) {
        t.headerPeers = n - 1;
        t.getBytes = (n - 1) * N;
        t.gets = (n - 1) * ceilDiv(N, c);
        syncRound(t, n);
      } else {
        return Traffic{};
      }
      if (rs)
        t.reduceBytes = (n - 1) * N;
      else
        t.copyBytes = N;  // the rank's own block
      t.workingSet = (n + 1) * N;
      break;
    }
    case Coll::kBroadcast:
    case Coll::kReduce: {
      const bool reduce = coll == Coll::kReduce;
      const double C = ceilDiv(N, c);
      if (chain) {
        // The busiest rank is one in the middle: it receives and forwards every chunk.
        t.hops = C > 0 ? n - 2 + C : 0;
        t.messages = (n > 2 ? 2 : 1) * C;
        t.waits = C;
        t.headerPeers = std::min(2.0, n - 1);
        ringBytes(t, N, in);
        t.fillBytes = (n - 2) * std::min(c, N);
        if (reduce) t.reduceBytes = N;
        t.workingSet = 2 * N;
      } else if (direct && !reduce) {
        // Non-roots read the whole message from the root; the root waits for their notifies.
        t.headerPeers = n - 1;
        t.getBytes = N;
        t.gets = C;
        t.hops = 1;
        t.messages = n - 1;
        t.waits = n - 1;
        t.workingSet = N;
      } else if (direct) {
        // The root: reduces its slice from every input, then reads every other slice.
        const double slice = std::ceil(N / n);
        t.headerPeers = n - 1;
        t.getBytes = 2 * (n - 1) / n * N;
        t.gets = 2 * (n - 1) * ceilDiv(slice, c);
        t.reduceBytes = (n - 1) / n * N;
        // Two hops (every slice ready -> the root; the root done reading -> everyone), on the
        // root n-1 waits and n-1 notifies.
        t.hops = 2;
        t.messages = 2 * (n - 1);
        t.waits = n - 1;
        t.workingSet = 2 * N;
      } else {
        return Traffic{};
      }
      break;
    }
    case Coll::kAllToAll:
    case Coll::kAllToAllv: {
      const double C = ceilDiv(N, c);
      if (pairwise) {
        // Every step is independent but for FIFO order per peer: the executor overlaps them.
        t.hops = C > 0 ? 1 : 0;
        t.messages = 2 * (n - 1) * C;
        t.waits = (n - 1) * C;
        t.headerPeers = n - 1;
        directBytes(t, N, in);
      } else if (direct && coll == Coll::kAllToAll) {
        t.headerPeers = n - 1;
        t.getBytes = (n - 1) * N;
        t.gets = (n - 1) * C;
        syncRound(t, n);
      } else {
        return Traffic{};
      }
      t.copyBytes = N;
      t.workingSet = 2 * n * N;
      break;
    }
    case Coll::kGather:
    case Coll::kScatter: {
      const double C = ceilDiv(N, c);
      if (linear) {
        // The root: n-1 blocks in (or out), received (sent) side by side.
        t.hops = C > 0 ? 1 : 0;
        t.messages = (n - 1) * C;
        t.waits = coll == Coll::kGather ? (n - 1) * C : 0;
        t.headerPeers = n - 1;
        rootBytes(t, N, in);
      } else if (direct && coll == Coll::kGather) {
        t.headerPeers = n - 1;
        t.getBytes = (n - 1) * N;
        t.gets = (n - 1) * C;
        t.hops = 1;
        t.messages = n - 1;
      } else if (direct) {
        // A non-root reads its block from the root; the root waits for n-1 notifies.
        t.headerPeers = n - 1;
        t.getBytes = N;
        t.gets = C;
        t.hops = 1;
        t.messages = n - 1;
        t.waits = n - 1;
      } else {
        return Traffic{};
      }
      t.copyBytes = N;
      t.workingSet = (n + 1) * N;
      break;
    }
    case Coll::kBarrier:
      if (!dissemination) return Traffic{};
      t.hops = std::ceil(std::log2(n));
      t.messages = 2 * t.hops;
      t.waits = t.hops;
      t.headerPeers = std::min(2 * t.hops, n - 1);
      directBytes(t, 0, in);
      t.bytesIntra = t.bytesNic = t.hops;  // one-byte tokens
      break;
    case Coll::kSendRecv:
      return Traffic{};
  }
  t.waits += t.headerPeers;
  return t;
}

bool registered(Coll coll, std::string_view algo) {
  return algo::findAlgorithm(coll, algo) != nullptr;
}

// nccl-tests' bus bandwidth factor for `coll` on n ranks.
double busFactor(Coll coll, int nranks) {
  const double n = nranks;
  switch (coll) {
    case Coll::kAllReduce: return 2 * (n - 1) / n;
    case Coll::kAllGather:
    case Coll::kReduceScatter:
    case Coll::kAllToAll:
    case Coll::kAllToAllv:
    case Coll::kGather:
    case Coll::kScatter: return (n - 1) / n;
    default: return 1;
  }
}

// Bytes of the CollDesc count for an nccl-tests size (the larger buffer).
uint64_t descBytes(Coll coll, uint64_t size, int nranks) {
  switch (coll) {
    case Coll::kAllGather:
    case Coll::kReduceScatter:
    case Coll::kAllToAll:
    case Coll::kAllToAllv:
    case Coll::kGather:
    case Coll::kScatter: return size / static_cast<uint64_t>(nranks);
    default: return size;
  }
}

}  // namespace

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

StatusOr<LinkClass> parseLinkClass(std::string_view name) {
  for (int i = 0; i < kNumLinkClasses; ++i)
    if (linkClassName(static_cast<LinkClass>(i)) == name) return static_cast<LinkClass>(i);
  if (name == "tcp") return LinkClass::kTcpLoopback;
  if (name == "eth") return LinkClass::kEthernet;
  if (name == "ib") return LinkClass::kInfiniBand;
  return invalidArgument("unknown link class '" + std::string(name) +
                         "' (shm, tcp-loopback, ethernet, infiniband, nvlink, pcie)");
}

CostInput costInputFor(const topo::Layout& layout, LinkClass intra, LinkClass inter,
                       int coresPerHost) {
  CostInput in;
  in.nranks = layout.nranks();
  in.hosts = layout.numHosts();
  in.ranksPerHost = layout.maxLocalSize();
  in.intra = intra;
  in.inter = inter;
  in.coresPerHost = coresPerHost;
  return in;
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
      else if (field == "call") h.callOverheadUs = v;
      else if (field == "staged") h.stagedCallUs = v;
      else if (field == "ctx") h.contextSwitchUs = v;
      else return bad();
      if ((field == "membw" || field == "cachebw") && v <= 0)
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

Traffic CostModel::traffic(Coll coll, std::string_view algo, uint64_t bytes,
                           const CostInput& in) const {
  if (!registered(coll, algo)) return Traffic{};
  const algo::AlgoInfo* a = algo::findAlgorithm(coll, algo);
  return trafficOf(coll, a->name, bytes, normalized(in));
}

Breakdown CostModel::explain(Coll coll, std::string_view algo, uint64_t bytes,
                             const CostInput& raw) const {
  Breakdown b;
  if (!registered(coll, algo)) {
    b.callUs = kInf;
    return b;
  }
  const CostInput in = normalized(raw);
  const Traffic t = traffic(coll, algo, bytes, in);
  const LinkConstants li = linkAt(in.intra, 0), lx = linkAt(in.inter, in.interSpeedGbps);
  // Time-sharing: ranks beyond the host's cores queue for them.
  const double share =
      in.coresPerHost > 0
          ? std::max(1.0, std::ceil(static_cast<double>(in.ranksPerHost) / in.coresPerHost))
          : 1.0;
  const bool multiHost = in.hosts > 1;

  b.callUs = share * (t.staged ? host_.stagedCallUs : host_.callOverheadUs);
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
  b.memoryUs = share * usFor(2 * t.copyBytes + 3 * t.reduceBytes, memBw);
  // One-sided reads go through the intra-host link; on several hosts the cross-host share of
  // them streams through the NIC like messages.
  if (t.getBytes > 0 || t.gets > 0) {
    const double interShare =
        multiHost ? (in.nranks - in.ranksPerHost) / static_cast<double>(in.nranks - 1) : 0;
    const double intraGet = usFor((1 - interShare) * t.getBytes, li.bandwidthGBps);
    const double nicGet = usFor(interShare * t.getBytes * in.ranksPerHost, lx.bandwidthGBps);
    b.oneSidedUs = share * (intraGet + t.gets * li.getOverheadUs) + nicGet;
  }
  b.waitUs = share > 1 ? t.waits * host_.contextSwitchUs : 0;
  return b;
}

double CostModel::predictUs(Coll coll, std::string_view algo, uint64_t bytes,
                            const CostInput& in) const {
  if (!registered(coll, algo)) return kInf;
  return explain(coll, algo, bytes, in).totalUs();
}

bool needsOneSided(const algo::AlgoInfo& a) {
  // Probed on both ranks of a 2-rank call (a root may only be read from, never read).
  sched::CollDesc d;
  d.coll = a.coll;
  d.count = 4;
  d.sendCounts = d.recvCounts = {4, 4};
  d.sendDispls = d.recvDispls = {0, 4};
  for (int rank = 0; rank < 2; ++rank)
    if (a.build(d, rank, 2).needsOneSided()) return true;
  return false;
}

namespace {

// needsOneSided() per registry entry, computed once.
bool oneSidedAt(const algo::AlgoInfo& a) {
  static const std::vector<bool> cache = [] {
    std::vector<bool> v;
    for (const algo::AlgoInfo& e : algo::allAlgorithms()) v.push_back(needsOneSided(e));
    return v;
  }();
  const auto all = algo::allAlgorithms();
  return cache[static_cast<size_t>(&a - all.data())];
}

struct Candidate {
  const algo::AlgoInfo* algo;
  double us;
  bool staged;
};

std::string candidateName(const Candidate& c) {
  return std::string(c.algo->name) + (c.staged ? "(staged)" : "");
}

}  // namespace

Choice CostModel::choose(Coll coll, const sched::CollDesc& d, const algo::Platform& p,
                         const CostInput& raw) const {
  Choice out;
  CostInput in = raw;
  in.nranks = p.nranks;
  in.stagingBytes = p.stagingBytes;
  if (!p.stagedTwoShot) in.roundBytes = 0;
  in.chunkBytes = std::max<uint64_t>(1, d.chunkBytes);
  in = normalized(in);
  uint64_t bytes = d.count * d.elemSize;
  if (coll == Coll::kAllToAllv && !d.sendCounts.empty()) {
    uint64_t total = 0;
    for (uint64_t c : d.sendCounts) total += c;
    bytes = total / d.sendCounts.size() * d.elemSize;
  }

  std::vector<Candidate> eligible;
  std::string skipped;
  for (const algo::AlgoInfo& a : algo::allAlgorithms()) {
    if (a.coll != coll) continue;
    const bool stagedTwoShot =
        in.hosts == 1 && in.roundBytes > 0 &&
        ((coll == Coll::kAllReduce && std::string_view(a.name) == "twoshot" &&
          bytes > in.stagingBytes) ||
         (coll == Coll::kAllGather && std::string_view(a.name) == "direct"));
    if (oneSidedAt(a) && !p.oneSided && in.nranks > 1 && !stagedTwoShot) {
      skipped += std::string(skipped.empty() ? "" : ", ") + a.name;
      continue;
    }
    const bool staged = coll == Coll::kAllReduce && std::string_view(a.name) == "oneshot" &&
                        in.hosts == 1 && in.stagingBytes > 0 && bytes <= in.stagingBytes;
    eligible.push_back({&a, predictUs(coll, a.name, bytes, in), staged});
  }
  if (eligible.empty()) {
    out.why = std::string("no algorithm for ") + sched::collName(coll);
    return out;
  }
  // Stable: on equal predictions the registry's order decides.
  std::stable_sort(eligible.begin(), eligible.end(),
                   [](const Candidate& a, const Candidate& b) { return a.us < b.us; });
  out.algo = eligible.front().algo;
  out.predictedUs = eligible.front().us;
  std::ostringstream why;
  why << "cost model, " << sizeText(bytes) << " on " << in.nranks << " ranks / " << in.hosts
      << (in.hosts == 1 ? " host" : " hosts") << ": ";
  for (size_t i = 0; i < eligible.size(); ++i)
    why << (i ? " < " : "") << candidateName(eligible[i]) << " " << usText(eligible[i].us);
  if (!skipped.empty()) why << "; not one-sided capable: " << skipped;
  out.why = why.str();
  return out;
}

std::string CostModel::decisionTable(const algo::Platform& p, const CostInput& raw,
                                     uint64_t minBytes, uint64_t maxBytes,
                                     uint64_t factor) const {
  CostInput in = raw;
  in.nranks = p.nranks;
  in = normalized(in);
  factor = std::max<uint64_t>(2, factor);
  minBytes = std::max<uint64_t>(1, minBytes);
  std::vector<uint64_t> sizes;
  for (uint64_t s = minBytes; s <= maxBytes; s *= factor) {
    sizes.push_back(s);
    if (s > maxBytes / factor) break;
  }
  if (sizes.empty() || sizes.back() != maxBytes) sizes.push_back(maxBytes);

  const double share =
      in.coresPerHost > 0
          ? std::max(1.0, std::ceil(static_cast<double>(in.ranksPerHost) / in.coresPerHost))
          : 1.0;
  std::ostringstream o;
  o << "# tuner: " << in.nranks << " ranks on " << in.hosts
    << (in.hosts == 1 ? " host" : " hosts") << " (" << in.ranksPerHost << " per host";
  if (in.coresPerHost > 0) o << ", " << in.coresPerHost << " cores";
  if (share > 1) o << ": time-shared x" << share;
  o << "), intra " << linkClassName(in.intra);
  if (in.hosts > 1) {
    o << ", inter " << linkClassName(in.inter);
    if (in.interSpeedGbps > 0) o << " " << in.interSpeedGbps << " Gb/s";
  }
  o << (p.oneSided ? ", one-sided" : "") << ", staging "
    << (p.stagingBytes ? sizeText(p.stagingBytes) : std::string("none")) << ", chunk "
    << sizeText(in.chunkBytes) << "\n";
  o << "# size: nccl-tests size (the larger buffer, float32); busbw with nccl-tests factors\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-14s %10s  %-16s %12s %11s  %s\n", "# collective", "size",
                "algorithm", "predicted", "busbw GB/s", "runner-up");
  o << line;
  const Coll colls[] = {Coll::kAllReduce,  Coll::kBroadcast, Coll::kReduce,
                        Coll::kAllGather,  Coll::kReduceScatter, Coll::kAllToAll,
                        Coll::kGather,     Coll::kScatter,   Coll::kBarrier};
  for (Coll coll : colls) {
    const std::vector<uint64_t> rows = coll == Coll::kBarrier ? std::vector<uint64_t>{0} : sizes;
    for (uint64_t size : rows) {
      sched::CollDesc d;
      d.coll = coll;
      d.elemSize = 4;
      d.count = std::max<uint64_t>(1, descBytes(coll, size, in.nranks) / d.elemSize);
      if (coll == Coll::kBarrier) d.count = 0;
      d.chunkBytes = in.chunkBytes;
      const Choice c = choose(coll, d, p, in);
      if (!c.algo) continue;
      const uint64_t bytes = d.count * d.elemSize;
      const std::string_view name = c.algo->name;
      const bool staged =
          coll == Coll::kAllReduce && in.hosts == 1 &&
          ((name == "oneshot" && p.stagingBytes > 0 && bytes <= p.stagingBytes) ||
           (name == "twoshot" && p.stagedTwoShot && in.roundBytes > 0 && bytes > p.stagingBytes));
      // The runner-up: the second entry of the why text's ordering, recomputed.
      std::string runnerUp = "-";
      double best = kInf;
      for (const algo::AlgoInfo& a : algo::allAlgorithms()) {
        if (a.coll != coll || &a == c.algo || (oneSidedAt(a) && !p.oneSided)) continue;
        CostInput ci = in;
        ci.stagingBytes = p.stagingBytes;
        const double us = predictUs(coll, a.name, bytes, ci);
        if (us < best) {
          best = us;
          runnerUp = std::string(a.name) + " " + usText(us);
        }
      }
      const double busbw = c.predictedUs > 0 && size > 0
                               ? static_cast<double>(size) / (c.predictedUs * 1e3) *
                                     busFactor(coll, in.nranks)
                               : 0;
      std::snprintf(line, sizeof line, "%-14s %10s  %-16s %12s %11.3g  %s\n",
                    sched::collName(coll), coll == Coll::kBarrier ? "-" : sizeText(size).c_str(),
                    (std::string(c.algo->name) + (staged ? "(staged)" : "")).c_str(),
                    usText(c.predictedUs).c_str(), busbw, runnerUp.c_str());
      o << line;
    }
  }
  return o.str();
}

std::string CostModel::constantsTable() const {
  std::ostringstream o;
  char line[200];
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
                "call %.2f us, context switch %.2f us\n",
                host_.memBwGBps, host_.cacheBwGBps, sizeText(host_.cacheBytes).c_str(),
                host_.callOverheadUs, host_.stagedCallUs, host_.contextSwitchUs);
  o << line;
  return o.str();
}

const CostModel& defaultCostModel() {
  static const CostModel model;
  return model;
}

double predictUs(Coll coll, std::string_view algo, uint64_t bytes, const CostInput& in) {
  return defaultCostModel().predictUs(coll, algo, bytes, in);
}

Choice choose(Coll coll, const sched::CollDesc& d, const algo::Platform& p, const CostInput& in) {
  return defaultCostModel().choose(coll, d, p, in);
}

std::string decisionTable(const algo::Platform& p, const CostInput& in) {
  return defaultCostModel().decisionTable(p, in);
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

}  // namespace chorus::tune
