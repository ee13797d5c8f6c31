// netns_check: the rank program of the multi-host tests. run_job.sh starts it on every host of
// a network-namespace test bed; it joins the job with chorusCommInitFromEnv and checks, as one
// rank, what the job as a whole must get right.
//
//   netns_check collectives
//     Every collective (all-reduce, broadcast, reduce, all-gather, reduce-scatter, all-to-all)
//     at counts 1, 1023 and 1 MiB + 3 float32 elements, sum, each element compared with a
//     reference computed here from every rank's inputs. Then the traffic: bytes to ranks on
//     other hosts went over tcp and bytes inside the host over shm (never the other way
//     round; with CHORUS_TRANSPORT=ucx, both over ucx), at least as many as the all-to-alls
//     alone had to move, and the host's link (veth<i>: its byte counters, read by the host's
//     first rank before the first collective and after the last) carried at least what the
//     host's ranks say they sent and received across hosts. Prints
//     "PASS rank r ..." and exits 0, or one "FAIL rank r: ..." line per problem and exits 1.
//
//   netns_check kill [--fault F] [--victim-host H] [--mib M]
//     Ranks all-reduce M MiB (default 64) over and over; the first rank of host H (default 1),
//     the victim, brings about fault F while inside one of them:
//       kill      SIGKILL to itself;
//       stop      SIGSTOP to itself (a hung process: its pid and sockets stay; rank 0 kills it
//                 once it has reported, or the job would wait for it);
//       linkdown  `ip link set veth<H> down`: host H is cut off, every process keeps running;
//       drop      an nftables rule in host H's namespace silently drops everything in and out
//                 of veth<H> (a firewall, or a switch that loses packets: nothing is reset).
//     Every rank still running must see its all-reduce fail with chorusRemoteError within 5 s of
//     the fault: it prints "FAULT-OK rank r ... <seconds> s after ..." and exits 0, or
//     "FAIL rank r: ..." and exits 1. The victim stamps the time of the fault and its pid into
//     $CHORUS_NETNS_SCRATCH/killed-at (CLOCK_MONOTONIC, which every namespace shares) just
//     before it.
//
// The layout comes from run_job.sh: CHORUS_NETNS_HOSTS ("2,1,3": ranks per host, contiguous)
// and CHORUS_NETNS_HOST (this rank's host). Inputs are small multiples of 1/4, so sums of a few
// of them are exact in float32 in any order and results compare with ==; outputs are poisoned
// with NaN first, so an element nobody wrote is caught. The inputs depend on a seed:
// CHORUS_NETNS_SEED when set, else one derived from CHORUS_JOB_SECRET (new for every job);
// rank 0 prints it, so a failure can be replayed.
#include <chorus/chorus.h>
#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kUsage = 2;
constexpr double kDetectLimitSeconds = 5.0;

// ---- job layout ---------------------------------------------------------------------------

struct Layout {
  std::vector<int> perHost;  // ranks on each host
  std::vector<int> offset;   // first global rank of each host
  int host = -1;             // this rank's host
  int nranks = 0;

  int hostOf(int rank) const {
    int h = 0;
    while (h + 1 < static_cast<int>(offset.size()) && offset[h + 1] <= rank) ++h;
    return h;
  }
};

const char* envOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

bool readLayout(Layout* l, std::string* why) {
  std::string spec = envOr("CHORUS_NETNS_HOSTS", "");
  std::string host = envOr("CHORUS_NETNS_HOST", "");
  if (spec.empty() || host.empty()) {
    *why = "CHORUS_NETNS_HOSTS and CHORUS_NETNS_HOST are not set (run me with run_job.sh)";
    return false;
  }
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int n = std::atoi(item.c_str());
    if (n <= 0) {
      *why = "CHORUS_NETNS_HOSTS='" + spec + "' is not a list of rank counts";
      return false;
    }
    l->offset.push_back(l->nranks);
    l->perHost.push_back(n);
    l->nranks += n;
  }
  l->host = std::atoi(host.c_str());
  if (l->host < 0 || l->host >= static_cast<int>(l->perHost.size())) {
    *why = "CHORUS_NETNS_HOST=" + host + " is not a host of " + spec;
    return false;
  }
  return true;
}

// ---- inputs and references ------------------------------------------------------------------

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t seedFromEnv() {
  if (const char* s = std::getenv("CHORUS_NETNS_SEED"); s && *s)
    return std::strtoull(s, nullptr, 0);
  uint64_t h = 0x6e65746e73ull;  // any constant: the secret is what varies
  for (char c : std::string(envOr("CHORUS_JOB_SECRET", ""))) h = mix(h ^ static_cast<uint8_t>(c));
  return h;
}

// Element i of `rank`'s input to collective `coll`: one of -31.75, -31.5, ..., 31.75.
float input(uint64_t seed, int coll, int rank, size_t i) {
  uint64_t x =
      mix(seed ^ mix((static_cast<uint64_t>(coll) << 32) | static_cast<uint32_t>(rank)) ^ mix(i));
  return static_cast<float>(static_cast<int>(x % 255) - 127) / 4.0f;
}

void fillInput(std::vector<float>& v, uint64_t seed, int coll, int rank) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = input(seed, coll, rank, i);
}

void poison(std::vector<float>& v) {
  std::fill(v.begin(), v.end(), std::numeric_limits<float>::quiet_NaN());
}

// Compares got[i] with want(i) for i < n; "" or a description of the first mismatch.
std::string compare(const float* got, size_t n, const std::function<float(size_t)>& want) {
  size_t bad = 0, first = 0;
  float firstGot = 0, firstWant = 0;
  for (size_t i = 0; i < n; ++i) {
    float w = want(i);
    if (!(got[i] == w)) {
      if (bad++ == 0) {
        first = i;
        firstGot = got[i];
        firstWant = w;
      }
    }
  }
  if (bad == 0) return "";
  std::ostringstream os;
  os << bad << " of " << n << " elements wrong, first at " << first << ": " << firstGot
     << " instead of " << firstWant;
  return os.str();
}

double now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::string callFailure(const char* what, chorusResult_t r, chorusComm_t comm) {
  return std::string(what) + " -> " + chorusGetErrorString(r) + ": " + chorusGetLastError(comm);
}

// ---- collectives mode ---------------------------------------------------------------------

enum Coll { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll, kNumColls };
constexpr const char* kCollNames[] = {"allreduce", "broadcast",     "reduce",
                                      "allgather", "reducescatter", "alltoall"};
constexpr size_t kCounts[] = {1, 1023, (1u << 20) + 3};

class CollectiveCheck {
 public:
  CollectiveCheck(chorusComm_t comm, const Layout& layout, int rank, uint64_t seed)
      : comm_(comm), l_(layout), rank_(rank), n_(layout.nranks), seed_(seed) {}

  // Runs one collective at one count; returns "" or what was wrong. `id` makes the inputs of
  // every run different.
  std::string run(Coll c, size_t count, int id, double* seconds) {
    const size_t n = static_cast<size_t>(n_);
    const int bcastRoot = n_ - 1;
    const int reduceRoot = l_.perHost.size() > 1 ? l_.offset[1] : 0;
    std::vector<float> send, recv;
    chorusResult_t r = chorusSuccess;
    double t0 = now();
    switch (c) {
      case kAllReduce:
        send.resize(count), recv.resize(count);
        fillInput(send, seed_, id, rank_), poison(recv);
        t0 = now();
        r = chorusAllReduce(send.data(), recv.data(), count, chorusFloat32, chorusSum, comm_,
                            nullptr);
        break;
      case kBroadcast:
        send.resize(count), recv.resize(count);
        fillInput(send, seed_, id, rank_), poison(recv);
        t0 = now();
        r = chorusBroadcast(send.data(), recv.data(), count, chorusFloat32, bcastRoot, comm_,
                            nullptr);
        break;
      case kReduce:
        send.resize(count), recv.resize(count);
        fillInput(send, seed_, id, rank_), poison(recv);
        t0 = now();
        r = chorusReduce(send.data(), recv.data(), count, chorusFloat32, chorusSum, reduceRoot,
                         comm_, nullptr);
        break;
      case kAllGather:
        send.resize(count), recv.resize(count * n);
        fillInput(send, seed_, id, rank_), poison(recv);
        t0 = now();
        r = chorusAllGather(send.data(), recv.data(), count, chorusFloat32, comm_, nullptr);
        break;
      case kReduceScatter:
        send.resize(count * n), recv.resize(count);
        fillInput(send, seed_, id, rank_), poison(recv);
        t0 = now();
        r = chorusReduceScatter(send.data(), recv.data(), count, chorusFloat32, chorusSum, comm_,
                                nullptr);
        break;
      case kAllToAll:
        send.resize(count * n), recv.resize(count * n);
        fillInput(send, seed_, id, rank_), poison(recv);
        t0 = now();
        r = chorusAllToAll(send.data(), recv.data(), count, chorusFloat32, comm_, nullptr);
        break;
      case kNumColls:
        break;
    }
    *seconds = now() - t0;
    if (r != chorusSuccess) return callFailure(kCollNames[c], r, comm_);

    auto sumOver = [&](size_t i) {
      float s = 0;
      for (int p = 0; p < n_; ++p) s += input(seed_, id, p, i);
      return s;
    };
    switch (c) {
      case kAllReduce:
        return compare(recv.data(), count, sumOver);
      case kBroadcast:
        return compare(recv.data(), count,
                       [&](size_t i) { return input(seed_, id, bcastRoot, i); });
      case kReduce:
        return rank_ == reduceRoot ? compare(recv.data(), count, sumOver) : "";
      case kAllGather:
        return compare(recv.data(), count * n, [&](size_t i) {
          return input(seed_, id, static_cast<int>(i / count), i % count);
        });
      case kReduceScatter:
        return compare(recv.data(), count,
                       [&](size_t i) { return sumOver(static_cast<size_t>(rank_) * count + i); });
      case kAllToAll:
        // Block p of the output is block `rank` of p's input.
        return compare(recv.data(), count * n, [&](size_t i) {
          return input(seed_, id, static_cast<int>(i / count),
                       static_cast<size_t>(rank_) * count + i % count);
        });
      case kNumColls:
        break;
    }
    return "";
  }

 private:
  chorusComm_t comm_;
  const Layout& l_;
  int rank_, n_;
  uint64_t seed_;
};

// The transports that must carry the bytes: between hosts and inside a host.
struct Carriers {
  std::string across = "tcp", inside = "shm";
};

Carriers expectedCarriers() {
  const char* t = std::getenv("CHORUS_TRANSPORT");
  if (t && std::string(t) == "ucx") return {"ucx", "ucx"};
  return {};
}

// What this rank's transports carried, as read from chorusCommGetStats: across hosts and inside
// the host by the expected carriers, and the bytes a wrong one carried.
enum Traffic {
  kAcrossSent,
  kAcrossRecv,
  kInsideSent,
  kInsideRecv,
  kAcrossCarrierInside,  // the across carrier (when it is not also the inside one) inside
  kInsideCarrierAcross,  // and the other way round
  kOtherBytes,
  kNumTraffic
};

bool readTraffic(chorusComm_t comm, const Carriers& want, uint64_t out[kNumTraffic],
                 std::string* why) {
  chorusStats_t s{};
  s.structSize = sizeof(s);
  chorusResult_t r = chorusCommGetStats(comm, &s);
  if (r != chorusSuccess) {
    *why = callFailure("chorusCommGetStats", r, comm);
    return false;
  }
  std::fill(out, out + kNumTraffic, 0);
  for (int i = 0; i < s.numTransports; ++i) {
    const chorusTransportStats_t& t = s.transports[i];
    const bool across = want.across == t.name, inside = want.inside == t.name;
    const uint64_t intra = t.bytesSentIntraHost + t.bytesRecvIntraHost;
    const uint64_t inter = t.bytesSentInterHost + t.bytesRecvInterHost;
    if (across) out[kAcrossSent] += t.bytesSentInterHost, out[kAcrossRecv] += t.bytesRecvInterHost;
    if (inside) out[kInsideSent] += t.bytesSentIntraHost, out[kInsideRecv] += t.bytesRecvIntraHost;
    if (across && !inside) out[kAcrossCarrierInside] += intra;
    if (inside && !across) out[kInsideCarrierAcross] += inter;
    if (!across && !inside) out[kOtherBytes] += intra + inter;
  }
  return true;
}

// The byte counters of this namespace's one link (the only interface besides lo in its
// /sys/class/net); ok is false, and name says why, outside a test-bed host.
struct LinkBytes {
  bool ok = false;
  std::string name;
  uint64_t tx = 0, rx = 0;
};

LinkBytes readLinkBytes() {
  LinkBytes b;
  std::vector<std::string> links;
  if (DIR* d = ::opendir("/sys/class/net")) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.' && std::strcmp(e->d_name, "lo") != 0) links.emplace_back(e->d_name);
    ::closedir(d);
  }
  if (links.size() != 1) {
    b.name = std::to_string(links.size()) + " interfaces besides lo";
    return b;
  }
  b.name = links[0];
  auto counter = [&](const char* which, uint64_t* v) {
    std::ifstream in("/sys/class/net/" + b.name + "/statistics/" + which);
    return static_cast<bool>(in >> *v);
  };
  b.ok = counter("tx_bytes", &b.tx) && counter("rx_bytes", &b.rx);
  return b;
}

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

// ---- inter-host bytes against each algorithm's formula ----------------------------------------
//
// Bytes one rank sends across hosts in one collective, from the algorithm's prose block, for
// the layouts run_job.sh makes (hosts hold contiguous ranks, so the host-aware ring order is
// rank order). S is the count buffer (all-reduce, broadcast, reduce) and B one rank's block
// (all-gather, reduce-scatter, all-to-all), in bytes; n ranks, H hosts, L ranks per host when
// all hosts hold as many, L_h on rank r's host h.
//   ring all-reduce          2 (n-1)/n S on the rank whose ring successor is on another host
//   ring all-gather/r-scatter  (n-1) B on those ranks
//   hier all-reduce          2 (H-1)/H S/L on every rank (flat ring where hier does not apply)
//   hier all-gather/r-scatter  (H-1) B on every rank
//   hier broadcast           S/L on every rank but those of the last host of the rails' chains
//   hier / pairwise all-to-all (n - L_h) B on every rank
//   chain broadcast/reduce   S on each rank whose chain successor is on another host
//   binomial broadcast/reduce S per tree edge between hosts (parent of v is v minus its lowest
//                            set bit, v numbered from the root), on the sending end
//   one-shot all-reduce      (n - L_h) S
//   recursive doubling       log2(H) S on every rank (n and L powers of two)
//   Rabenseifner             2 (H-1)/H S on every rank (n and L powers of two)
//   double binary tree       nothing from ranks other than the host leaders (lowest rank of
//                            each host); 2 (H-1) S from all leaders together (each tree has H-1
//                            edges between hosts, each carrying its half of S up and down)
// A rank's entry is -1 where the formula gives only the job's total (the tree) or none.
// On top of the payload every schedule sends one consistency header (src/core/executor.h,
// WireHeader, 112 bytes) to each peer it names; the check allows a whole number of them per
// rank, at most one per rank on another host, and prints how many it saw.
constexpr int64_t kHeaderBytes = 112;
struct Formula {
  std::vector<int64_t> perRank;
  int64_t total = -1;  // the job's total, when only that is known
  bool known = false;
};

bool powerOfTwo(int x) { return x > 0 && (x & (x - 1)) == 0; }

Formula interHostFormula(const std::string& algo, const Layout& l, int root, int64_t S,
                         int64_t B) {
  const int n = l.nranks, H = static_cast<int>(l.perHost.size());
  bool uniform = true;
  for (int h : l.perHost) uniform = uniform && h == l.perHost[0];
  const int L = l.perHost[0];
  const bool hier = uniform && H > 1 && L > 1;
  Formula f;
  f.perRank.assign(static_cast<size_t>(n), 0);
  f.known = true;
  auto each = [&](const std::function<int64_t(int)>& fn) {
    for (int r = 0; r < n; ++r) f.perRank[static_cast<size_t>(r)] = fn(r);
  };
  auto crosses = [&](int a, int b) { return l.hostOf(a) != l.hostOf(b); };
  auto ringSucc = [&](int64_t bytes) {
    each([&](int r) { return crosses(r, (r + 1) % n) ? bytes : 0; });
  };
  auto chain = [&](bool toRoot) {
    // Positions root, root+1, ..., root-1; broadcast sends from p_i to p_i+1, reduce runs
    // root+1 -> ... -> root-1 -> root.
    for (int i = 0; i < n - 1; ++i) {
      const int from = toRoot ? (root + 1 + i) % n : (root + i) % n;
      const int to = toRoot ? (root + 2 + i) % n : (root + i + 1) % n;
      if (crosses(from, to)) f.perRank[static_cast<size_t>(from)] = S;
    }
  };
  auto binomial = [&](bool toRoot) {
    for (int v = 1; v < n; ++v) {
      const int parent = v - (v & -v);
      const int child = (v + root) % n, up = (parent + root) % n;
      if (crosses(child, up)) f.perRank[static_cast<size_t>(toRoot ? child : up)] += S;
    }
  };
  auto localOf = [&](int r) { return l.perHost[static_cast<size_t>(l.hostOf(r))]; };
  if (algo == "allreduce:ring" || (algo == "allreduce:hier" && !hier)) {
    ringSucc(2 * (n - 1) * S / n);
  } else if (algo == "allgather:ring" || algo == "reducescatter:ring" ||
             ((algo == "allgather:hier" || algo == "reducescatter:hier") && !hier)) {
    ringSucc((n - 1) * B);
  } else if (algo == "allreduce:hier") {
    each([&](int) { return 2 * (H - 1) * S / H / L; });
  } else if (algo == "allgather:hier" || algo == "reducescatter:hier") {
    each([&](int) { return (H - 1) * B; });
  } else if (algo == "broadcast:hier" && hier) {
    const int last = (l.hostOf(root) + H - 1) % H;
    each([&](int r) { return l.hostOf(r) == last ? 0 : S / L; });
  } else if (algo == "broadcast:chain" || (algo == "broadcast:hier" && !hier)) {
    chain(false);
  } else if (algo == "reduce:chain") {
    chain(true);
  } else if (algo == "broadcast:binomial") {
    binomial(false);
  } else if (algo == "reduce:binomial") {
    binomial(true);
  } else if (algo == "alltoall:hier" || algo == "alltoall:pairwise") {
    each([&](int r) { return (n - localOf(r)) * B; });
  } else if (algo == "allreduce:oneshot") {
    each([&](int r) { return (n - localOf(r)) * S; });
  } else if (algo == "allreduce:recursive_doubling" && uniform && powerOfTwo(n) &&
             powerOfTwo(L)) {
    int logH = 0;
    while ((1 << logH) < H) ++logH;
    each([&](int) { return logH * S; });
  } else if (algo == "allreduce:rabenseifner" && uniform && powerOfTwo(n) && powerOfTwo(L)) {
    each([&](int) { return 2 * (H - 1) * S / H; });
  } else if (algo == "allreduce:tree") {
    each([&](int r) { return r == l.offset[static_cast<size_t>(l.hostOf(r))] ? -1 : 0; });
    f.total = 2 * (H - 1) * S;
  } else {
    f.known = false;
  }
  return f;
}

// Inter-host bytes over tcp this rank has sent so far, and how often each algorithm ran.
bool sentAcross(chorusComm_t comm, uint64_t* bytes, std::vector<std::pair<std::string, int>>* algos,
                std::string* why) {
  chorusStats_t s{};
  s.structSize = sizeof(s);
  if (chorusResult_t r = chorusCommGetStats(comm, &s); r != chorusSuccess) {
    *why = callFailure("chorusCommGetStats", r, comm);
    return false;
  }
  *bytes = 0;
  for (int i = 0; i < s.numTransports; ++i) *bytes += s.transports[i].bytesSentInterHost;
  algos->clear();
  for (int i = 0; i < s.numAlgos; ++i)
    algos->emplace_back(s.algos[i].name, static_cast<int>(s.algos[i].count));
  return true;
}

// Runs every collective once at a count every rank count, host count and tree half divides,
// and compares the bytes each rank sent across hosts with interHostFormula; rank 0 prints one
// "BYTES" line per collective. Returns the failures.
std::vector<std::string> checkInterHostBytes(chorusComm_t comm, const Layout& l, int rank,
                                             uint64_t seed) {
  std::vector<std::string> failures;
  constexpr size_t kCount = 61440;  // 2^12 * 15
  CollectiveCheck check(comm, l, rank, seed);
  const int n = l.nranks;
  const int bcastRoot = n - 1;
  const int reduceRoot = l.perHost.size() > 1 ? l.offset[1] : 0;
  for (int c = 0; c < kNumColls; ++c) {
    uint64_t before = 0, after = 0;
    std::vector<std::pair<std::string, int>> a0, a1;
    std::string why;
    if (!sentAcross(comm, &before, &a0, &why)) return {why};
    double seconds = 0;
    std::string what = check.run(static_cast<Coll>(c), kCount, 1000 + c, &seconds);
    if (!what.empty()) failures.push_back(std::string(kCollNames[c]) + " (bytes run): " + what);
    if (!sentAcross(comm, &after, &a1, &why)) return {why};
    std::string algo = "?";
    for (const auto& [name, count] : a1) {
      int was = 0;
      for (const auto& [name0, count0] : a0)
        if (name0 == name) was = count0;
      if (count > was) algo = name;
    }
    int64_t mine[2] = {static_cast<int64_t>(after - before), 0};
    std::vector<int64_t> all(static_cast<size_t>(2 * n));
    if (chorusResult_t r = chorusAllGather(mine, all.data(), 2, chorusInt64, comm, nullptr);
        r != chorusSuccess)
      return {callFailure("bytes all-gather", r, comm)};
    const int64_t S = static_cast<int64_t>(kCount) * 4;
    const Formula f = interHostFormula(algo, l, c == kBroadcast ? bcastRoot : reduceRoot, S, S);
    std::ostringstream got, want;
    int64_t leaders = 0, headers = 0;
    bool ok = f.known;
    // measured - formula must be k headers, 0 <= k <= ranks on other hosts.
    auto headersFit = [&](int64_t extra, int64_t most) {
      if (extra < 0 || extra % kHeaderBytes != 0 || extra / kHeaderBytes > most) return false;
      headers += extra / kHeaderBytes;
      return true;
    };
    int64_t leaderPeers = 0;
    for (int r = 0; r < n; ++r) {
      const int64_t m = all[static_cast<size_t>(2 * r)];
      const int64_t others = n - l.perHost[static_cast<size_t>(l.hostOf(r))];
      got << (r ? " " : "") << m;
      if (!f.known) continue;
      const int64_t w = f.perRank[static_cast<size_t>(r)];
      want << (r ? " " : "") << (w < 0 ? std::string("*") : std::to_string(w));
      if (w >= 0 && !headersFit(m - w, others)) ok = false;
      if (w < 0) leaders += m, leaderPeers += others;
    }
    if (f.known && f.total >= 0) {
      want << " (* together " << f.total << ")";
      if (!headersFit(leaders - f.total, leaderPeers)) ok = false;
    }
    if (rank == 0)
      std::printf("BYTES %-28s S=%lld B sent across hosts per rank: measured %s | formula %s | %s\n",
                  algo.c_str(), static_cast<long long>(S), got.str().c_str(),
                  f.known ? want.str().c_str() : "none",
                  !f.known ? "no formula"
                  : ok     ? ("match + " + std::to_string(headers) + " headers of 112 B").c_str()
                           : "MISMATCH");
    if (f.known && !ok)
      failures.push_back(std::string(kCollNames[c]) + " with " + algo +
                         ": inter-host bytes per rank " + got.str() + " against the formula's " +
                         want.str() + " (plus up to one 112-byte header per peer on another host)");
  }
  return failures;
}

int runCollectives(chorusComm_t comm, const Layout& l, int rank) {
  std::vector<std::string> failures;
  auto fail = [&](const std::string& what) { failures.push_back(what); };
  const uint64_t seed = seedFromEnv();
  if (rank == 0)
    std::printf("seed 0x%016llx (CHORUS_NETNS_SEED replays it)\n",
                static_cast<unsigned long long>(seed));
  const int myHost = l.host;
  const int local = l.perHost[static_cast<size_t>(myHost)];

  // This namespace is a host of its own: the host split holds exactly the ranks started here.
  chorusComm_t hostComm = nullptr;
  if (chorusResult_t r = chorusCommSplitType(comm, CHORUS_SPLIT_HOST, rank, &hostComm);
      r != chorusSuccess) {
    fail(callFailure("chorusCommSplitType(HOST)", r, comm));
  } else {
    int size = 0, hostRank = -1;
    chorusCommCount(hostComm, &size);
    chorusCommUserRank(hostComm, &hostRank);
    std::vector<int32_t> members(static_cast<size_t>(size > 0 ? size : 1), -1);
    int32_t me = rank;
    chorusResult_t r2 = chorusAllGather(&me, members.data(), 1, chorusInt32, hostComm, nullptr);
    if (r2 != chorusSuccess) fail(callFailure("host split all-gather", r2, hostComm));
    std::vector<int32_t> want(static_cast<size_t>(local));
    std::iota(want.begin(), want.end(), l.offset[static_cast<size_t>(myHost)]);
    if (size != local || hostRank != rank - l.offset[static_cast<size_t>(myHost)] ||
        members != want) {
      std::ostringstream os;
      os << "the host split has " << size << " ranks (local rank " << hostRank << ", members";
      for (int32_t m : members) os << " " << m;
      os << "), expected ranks " << want.front() << ".." << want.back() << " of host " << myHost;
      fail(os.str());
    }
    chorusCommDestroy(hostComm);
  }

  // The host's link counters before any collective: the host's first rank reads them between
  // two barriers, so no rank of the host has sent a collective's byte yet.
  const bool leader = rank == l.offset[static_cast<size_t>(myHost)];
  LinkBytes linkBefore;
  if (chorusResult_t r = chorusBarrier(comm, nullptr); r != chorusSuccess)
    fail(callFailure("barrier", r, comm));
  if (leader) linkBefore = readLinkBytes();
  if (chorusResult_t r = chorusBarrier(comm, nullptr); r != chorusSuccess)
    fail(callFailure("barrier", r, comm));

  CollectiveCheck check(comm, l, rank, seed);
  int id = 0;
  for (size_t count : kCounts) {
    for (int c = 0; c < kNumColls; ++c) {
      double seconds = 0;
      std::string what = check.run(static_cast<Coll>(c), count, ++id, &seconds);
      if (!what.empty())
        fail(std::string(kCollNames[c]) + " count " + std::to_string(count) + ": " + what);
      if (rank == 0)
        std::printf("%-13s count %8zu: %8.2f ms on rank 0\n", kCollNames[c], count, 1e3 * seconds);
    }
  }

  // Traffic. The all-to-alls alone move, per byte count B = 4 * (sum of counts), B from every
  // rank to every other rank: a host of L ranks in a job of N must send and receive at least
  // L*(N-L)*B across hosts and L*(L-1)*B inside itself, whatever the algorithms.
  const Carriers want = expectedCarriers();
  uint64_t mine[kNumTraffic];
  std::string why;
  if (!readTraffic(comm, want, mine, &why)) {
    fail(why);
  } else {
    std::vector<uint64_t> all(static_cast<size_t>(kNumTraffic) * static_cast<size_t>(l.nranks));
    chorusResult_t r = chorusAllGather(mine, all.data(), kNumTraffic, chorusUint64, comm, nullptr);
    if (r != chorusSuccess) fail(callFailure("traffic all-gather", r, comm));
    std::printf("rank %d host %d traffic: %s across hosts sent %s received %s; %s inside the "
                "host sent %s received %s\n",
                rank, myHost, want.across.c_str(), mib(mine[kAcrossSent]).c_str(),
                mib(mine[kAcrossRecv]).c_str(), want.inside.c_str(),
                mib(mine[kInsideSent]).c_str(), mib(mine[kInsideRecv]).c_str());
    if (mine[kAcrossCarrierInside])
      fail(want.across + " carried " + std::to_string(mine[kAcrossCarrierInside]) +
           " bytes to or from ranks on this host (" + want.inside + " should have)");
    if (mine[kInsideCarrierAcross])
      fail(want.inside + " carried " + std::to_string(mine[kInsideCarrierAcross]) +
           " bytes to or from ranks on other hosts");
    if (mine[kOtherBytes])
      fail("a transport other than " + want.across + " and " + want.inside + " carried bytes");
    uint64_t host[kNumTraffic] = {};
    for (int p = l.offset[static_cast<size_t>(myHost)];
         p < l.offset[static_cast<size_t>(myHost)] + local; ++p)
      for (int k = 0; k < kNumTraffic; ++k)
        host[k] += all[static_cast<size_t>(p * kNumTraffic + k)];
    uint64_t b = 0;
    for (size_t count : kCounts) b += 4 * count;
    const uint64_t across =
        static_cast<uint64_t>(local) * static_cast<uint64_t>(l.nranks - local) * b;
    const uint64_t inside = static_cast<uint64_t>(local) * static_cast<uint64_t>(local - 1) * b;
    if (host[kAcrossSent] < across || host[kAcrossRecv] < across)
      fail("host " + std::to_string(myHost) + " sent " + mib(host[kAcrossSent]) +
           " and received " + mib(host[kAcrossRecv]) + " over " + want.across +
           " across hosts, less than the " + mib(across) + " its all-to-alls need");
    if (host[kInsideSent] < inside || host[kInsideRecv] < inside)
      fail("host " + std::to_string(myHost) + " sent " + mib(host[kInsideSent]) +
           " and received " + mib(host[kInsideRecv]) + " over " + want.inside +
           ", less than the " + mib(inside) + " its all-to-alls need");
    // The bytes really crossed the host's link: its counters grew by at least what the host's
    // ranks sent and received across hosts (headers and the bootstrap only add to them).
    if (leader && linkBefore.ok) {
      const LinkBytes after = readLinkBytes();
      if (!after.ok) {
        fail("cannot read " + after.name + "'s counters any more");
      } else {
        const uint64_t tx = after.tx - linkBefore.tx, rx = after.rx - linkBefore.rx;
        std::printf("host %d link %s: %s out, %s in (its ranks: %s sent, %s received across "
                    "hosts)\n",
                    myHost, after.name.c_str(), mib(tx).c_str(), mib(rx).c_str(),
                    mib(host[kAcrossSent]).c_str(), mib(host[kAcrossRecv]).c_str());
        if (tx < host[kAcrossSent] || rx < host[kAcrossRecv])
          fail("host " + std::to_string(myHost) + "'s link " + after.name + " carried " +
               mib(tx) + " out and " + mib(rx) + " in, less than its ranks sent (" +
               mib(host[kAcrossSent]) + ") and received (" + mib(host[kAcrossRecv]) +
               ") across hosts");
      }
    } else if (leader) {
      std::printf("host %d: no link counters (%s)\n", myHost, linkBefore.name.c_str());
    }
  }

  for (const std::string& f : checkInterHostBytes(comm, l, rank, seed)) fail(f);

  if (rank == 0) {
    chorusStats_t s{};
    s.structSize = sizeof(s);
    if (chorusCommGetStats(comm, &s) == chorusSuccess) {
      std::string algos;
      for (int i = 0; i < s.numAlgos; ++i)
        algos += std::string(" ") + s.algos[i].name + "x" + std::to_string(s.algos[i].count);
      std::printf("algorithms on rank 0:%s\n", algos.c_str());
    }
  }

  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  for (const std::string& f : failures) std::printf("FAIL rank %d: %s\n", rank, f.c_str());
  if (failures.empty())
    std::printf("PASS rank %d of %d, host %d (%s, %d ranks)\n", rank, l.nranks, myHost, hostname,
                local);
  std::fflush(stdout);
  return failures.empty() ? 0 : 1;
}

// ---- kill mode ----------------------------------------------------------------------------

std::string stampPath() {
  const char* dir = std::getenv("CHORUS_NETNS_SCRATCH");
  return dir && *dir ? std::string(dir) + "/killed-at" : "";
}

enum class Fault { kKill, kStop, kLinkDown, kDrop };

bool parseFault(const std::string& name, Fault* f) {
  if (name == "kill") *f = Fault::kKill;
  else if (name == "stop") *f = Fault::kStop;
  else if (name == "linkdown") *f = Fault::kLinkDown;
  else if (name == "drop") *f = Fault::kDrop;
  else return false;
  return true;
}

// The victim's fault thread: waits until the main thread is inside an all-reduce and `delay`
// has passed, stamps the time and its pid, and brings the fault about. False (with a FAIL line
// printed) when the fault could not be made.
bool faultLater(Fault fault, double delay, const std::atomic<bool>* inside,
                const std::atomic<bool>* over, int rank, int count, int host) {
  std::this_thread::sleep_for(std::chrono::duration<double>(delay));
  while (!inside->load()) {
    if (over->load()) return false;  // the all-reduces ended first: no fault
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const std::string path = stampPath();
  const double t = now();
  {
    std::ofstream f(path + ".tmp");
    f.precision(17);
    f << t << " " << ::getpid() << "\n";
  }
  std::rename((path + ".tmp").c_str(), path.c_str());
  const std::string link = "veth" + std::to_string(host);
  const char* what = fault == Fault::kKill     ? "SIGKILL to myself"
                     : fault == Fault::kStop   ? "SIGSTOP to myself"
                     : fault == Fault::kLinkDown ? "taking my host's link down"
                                                 : "dropping my host's traffic";
  std::printf("VICTIM rank %d: %s inside an all-reduce of %d floats\n", rank, what, count);
  std::fflush(stdout);
  std::string command;
  switch (fault) {
    case Fault::kKill: std::raise(SIGKILL); return false;
    case Fault::kStop: std::raise(SIGSTOP); return false;
    case Fault::kLinkDown: command = "ip link set dev " + link + " down"; break;
    case Fault::kDrop:
      command = "nft -f - <<'EOF'\n"
                "table inet chorus_fault {\n"
                "  chain in { type filter hook input priority 0; iifname \"" + link + "\" drop; }\n"
                "  chain out { type filter hook output priority 0; oifname \"" + link + "\" drop; }\n"
                "}\nEOF";
      break;
  }
  const int rc = std::system(command.c_str());
  if (rc != 0) {
    std::printf("FAIL rank %d: '%s' failed (status %d)\n", rank, command.c_str(), rc);
    std::fflush(stdout);
    return false;
  }
  return true;
}

int runKill(chorusComm_t comm, const Layout& l, int rank, int victimHost, int mibs, Fault fault) {
  if (stampPath().empty()) {
    std::printf("FAIL rank %d: CHORUS_NETNS_SCRATCH is not set (run me with run_job.sh)\n", rank);
    return 1;
  }
  if (victimHost < 0 || victimHost >= static_cast<int>(l.perHost.size())) {
    std::printf("FAIL rank %d: no host %d to kill a rank on\n", rank, victimHost);
    return 1;
  }
  const int victim = l.offset[static_cast<size_t>(victimHost)];
  const size_t count = static_cast<size_t>(mibs) << 18;  // floats
  std::vector<float> send(count), recv(count);
  fillInput(send, seedFromEnv(), 0, rank);
  chorusCommSetTimeout(comm, 30);

  // One all-reduce to learn how long one takes; the slowest rank's time counts.
  double t0 = now();
  chorusResult_t r =
      chorusAllReduce(send.data(), recv.data(), count, chorusFloat32, chorusSum, comm, nullptr);
  double took = now() - t0, slowest = 0;
  if (r == chorusSuccess)
    r = chorusAllReduce(&took, &slowest, 1, chorusFloat64, chorusMax, comm, nullptr);
  if (r == chorusSuccess) r = chorusBarrier(comm, nullptr);
  if (r != chorusSuccess) {
    std::printf("FAIL rank %d: before the kill: %s\n", rank,
                callFailure("warm-up", r, comm).c_str());
    return 1;
  }
  if (rank == 0)
    std::printf("a %d MiB all-reduce takes %.3f s; rank %d (host %d) dies %.3f s into the next\n",
                mibs, slowest, victim, victimHost, 0.4 * slowest);
  std::fflush(stdout);

  std::atomic<bool> inside{false};
  std::thread killer;
  std::atomic<bool> faultMade{false}, over{false};
  if (rank == victim)
    killer = std::thread([&, delay = 0.4 * slowest] {
      faultMade.store(
          faultLater(fault, delay, &inside, &over, rank, static_cast<int>(count), l.host));
    });
  // Only a killed or stopped victim stops running; after a cut link or dropped traffic it is
  // one of the ranks that must notice.
  const bool victimRuns = fault == Fault::kLinkDown || fault == Fault::kDrop;
  constexpr int kMaxCalls = 50;
  int call = 0;
  double failedAt = 0;
  for (call = 1; call <= kMaxCalls; ++call) {
    inside.store(true);
    r = chorusAllReduce(send.data(), recv.data(), count, chorusFloat32, chorusSum, comm, nullptr);
    failedAt = now();
    inside.store(false);
    if (r != chorusSuccess) break;
  }
  over.store(true);
  if (rank == victim) killer.join();
  if (rank == victim && (!victimRuns || !faultMade.load())) {
    // Not reached when the kill or stop worked.
    if (!victimRuns)
      std::printf("FAIL rank %d: the victim is still running after %d all-reduces\n", rank,
                  kMaxCalls);
    return 1;
  }
  if (r == chorusSuccess) {
    std::printf("FAIL rank %d: %d all-reduces succeeded after rank %d was to die\n", rank,
                kMaxCalls, victim);
    return 1;
  }
  const std::string message = chorusGetLastError(comm);
  double killedAt = 0;
  long victimPid = 0;
  for (int i = 0; i < 200 && killedAt == 0; ++i) {
    std::ifstream f(stampPath());
    if (!(f >> killedAt >> victimPid)) {
      killedAt = 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  // A stopped victim never ends by itself; rank 0 ends it once the failure is seen (the other
  // ranks have measured theirs by then or are measuring it against the stamp, not the kill).
  if (fault == Fault::kStop && rank == 0 && victimPid > 0) ::kill(static_cast<pid_t>(victimPid), SIGKILL);
  chorusCommAbort(comm);
  if (killedAt == 0) {
    std::printf("FAIL rank %d: all-reduce %d failed (%s: %s) but rank %d left no time of death\n",
                rank, call, chorusGetErrorString(r), message.c_str(), victim);
    return 1;
  }
  const double delay = failedAt - killedAt;
  // A failure before the death (delay < 0) has another cause than the kill.
  const char* wrong = r != chorusRemoteError        ? " (expected chorusRemoteError)"
                      : delay < 0                   ? " (before the fault: something else failed)"
                      : delay > kDetectLimitSeconds ? " (limit 5 s)"
                                                    : nullptr;
  const bool ok = wrong == nullptr;
  std::printf(
      "%s rank %d host %d: all-reduce %d failed with %s %.3f s after the fault of rank %d%s: %s\n",
      ok ? "FAULT-OK" : "FAIL", rank, l.host, call, chorusGetErrorString(r), delay, victim,
      ok ? "" : wrong, message.c_str());
  std::fflush(stdout);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  int victimHost = 1, mibs = 64;
  Fault fault = Fault::kKill;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--fault" && i + 1 < argc && parseFault(argv[i + 1], &fault)) {
      ++i;
    } else if (a == "--victim-host" && i + 1 < argc) {
      victimHost = std::atoi(argv[++i]);
    } else if (a == "--mib" && i + 1 < argc) {
      mibs = std::atoi(argv[++i]);
    } else {
      mode = "";
      break;
    }
  }
  if (mode != "collectives" && mode != "kill") {
    std::fprintf(stderr,
                 "usage: netns_check collectives | kill [--fault kill|stop|linkdown|drop] "
                 "[--victim-host H] [--mib M]\n");
    return kUsage;
  }
  Layout layout;
  std::string why;
  if (!readLayout(&layout, &why)) {
    std::fprintf(stderr, "netns_check: %s\n", why.c_str());
    return kUsage;
  }
  if (mode == "kill") {
    // chorus-run answers a dead rank by sending SIGTERM to the others on its host. The ranks of
    // this test must instead find out for themselves (that is what it measures), so they
    // ignore it; chorus-run's SIGKILL after --kill-grace still ends them.
    std::signal(SIGTERM, SIG_IGN);
  }
  chorusComm_t comm = nullptr;
  chorusResult_t r = chorusCommInitFromEnv(&comm);
  const char* rankText = std::getenv("CHORUS_RANK");
  int rank = rankText ? std::atoi(rankText) : -1;
  if (r != chorusSuccess) {
    std::printf("FAIL rank %d: chorusCommInitFromEnv -> %s: %s\n", rank, chorusGetErrorString(r),
                chorusGetLastError(nullptr));
    return 1;
  }
  int nranks = 0;
  chorusCommUserRank(comm, &rank);
  chorusCommCount(comm, &nranks);
  if (nranks != layout.nranks || layout.hostOf(rank) != layout.host) {
    std::printf(
        "FAIL rank %d: the communicator has %d ranks, this rank on host %d; "
        "CHORUS_NETNS_HOSTS says %d ranks, rank %d on host %d\n",
        rank, nranks, layout.host, layout.nranks, rank, layout.hostOf(rank));
    return 1;
  }
  chorusCommSetTimeout(comm, 60);
  int rc = mode == "collectives" ? runCollectives(comm, layout, rank)
                                 : runKill(comm, layout, rank, victimHost, mibs, fault);
  if (mode == "collectives") {
    r = chorusCommDestroy(comm);
    if (r != chorusSuccess && rc == 0) {
      std::printf("FAIL rank %d: %s\n", rank, callFailure("chorusCommDestroy", r, nullptr).c_str());
      rc = 1;
    }
  }
  return rc;
}
