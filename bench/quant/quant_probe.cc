// quant_probe: the rank program behind bench/quant/*.sh — precision and wire bytes of the
// quantized collectives (chorusReduceScatterQuantized, chorusAllGatherQuantized,
// chorusAllReduceQuantized) as a caller sees them, one launch per layout and algorithm.
//
//   chorus-run -n W --no-prefix quant_probe [--hosts 2,1,3] [--count N] MODE ITEM...
//
// An ITEM is COLL/QUANT: rs, ag or ar, then chorus-perf's --quant spelling
// (int4|int8[:GROUP][:asym][:stochastic=SEED]), e.g. rs/int4:256 or ar/int8:256:stochastic=1.
// --hosts makes pretend hosts of the given sizes out of contiguous ranks (CHORUS_HOST_ID per
// rank, set before the communicator is made); without it the ranks are on this one host, or,
// under tests/netns/run_job.sh, on the network-namespace hosts CHORUS_NETNS_HOSTS describes
// (layout "netns-2+1+3" in the rows).
// Rank 0 prints one CSV line per result, starting with "ROW,"; CHORUS_ALGO picks algorithms.
//
//   error   relative L2 error of one call on N(0,1) inputs against the exact (fp64) result,
//           over every rank's output, the mean signed error, and a digest of every rank's
//           output bytes (equal digests: bit-identical results, e.g. across transports). The count is the reduce-
//           scatter's recvcount (input W*N per rank), the all-gather's sendcount and the
//           all-reduce's count.
//   trials  T calls on fixed inputs; a stochastic config gets seeds 1..T (nearest rounding is
//           the same every time). Prints the error of the mean of the first t results for
//           t = 1, 4, 16, ... (it falls as 1/sqrt(t) only if rounding is unbiased) and the mean
//           signed error over all elements and trials with its standard error (nearest rounding
//           repeats its errors, so there the elements of one call are the samples). --data outlier
//           gives each group one element of 8 and the rest 0.02 + 0.01 N(0,1): below half a
//           code step, so nearest rounding flushes them to 0 and the sums lose them.
//   bytes   per rank, the bytes sent and received inside and across hosts during one call
//           (chorusCommGetStats before and after; consistency headers included).
// Every result names the algorithm that ran (the statistics' per-algorithm counts), which all
// ranks must agree on.
#include <chorus/chorus.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tools/chorus-perf/perf_params.h"

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "quant_probe: %s\n", what.c_str());
  std::exit(1);
}

void ok(chorusResult_t r, const char* what, chorusComm_t comm = nullptr) {
  if (r != chorusSuccess)
    die(std::string(what) + ": " + chorusGetErrorString(r) + ": " + chorusGetLastError(comm));
}

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Rank r's input element j: standard normal from hashed uniforms, so any rank can compute any
// rank's element without generating the rest.
float gaussian(uint64_t seed, int r, uint64_t j) {
  const uint64_t h1 = mix(seed ^ (static_cast<uint64_t>(r) << 44) ^ (j << 1));
  const uint64_t h2 = mix(h1 ^ 0x5851f42d4c957f2dULL);
  const double u1 = (static_cast<double>(h1 >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
  const double u2 = static_cast<double>(h2 >> 11) * 0x1.0p-53;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

enum class Coll { kRs, kAg, kAr };

struct Item {
  Coll coll;
  std::string text;  // as given, e.g. "rs/int4:256"
  std::string quant;
  chorusQuantConfig_t config;
};

Item parseItem(const std::string& s) {
  const size_t slash = s.find('/');
  if (slash == std::string::npos) die("item '" + s + "' is not COLL/QUANT");
  const std::string c = s.substr(0, slash);
  Item it{};
  if (c == "rs") {
    it.coll = Coll::kRs;
  } else if (c == "ag") {
    it.coll = Coll::kAg;
  } else if (c == "ar") {
    it.coll = Coll::kAr;
  } else {
    die("item '" + s + "': the collective is rs, ag or ar");
  }
  it.text = s;
  it.quant = s.substr(slash + 1);
  std::string why;
  auto q = chorus::perf::parseQuant(it.quant, &why);
  if (!q) die(why);
  it.config = *q;
  return it;
}

const char* collName(Coll c) {
  return c == Coll::kRs ? "reducescatter" : c == Coll::kAg ? "allgather" : "allreduce";
}

struct Job {
  chorusComm_t comm = nullptr;
  int rank = 0, n = 1;
  std::vector<int> hostOf;  // per rank; empty: one host
  std::string layout;       // "flat", the --hosts text, or "netns-" and the netns layout
  uint64_t count = 0;

  // Sends of one element count in the call's layout.
  uint64_t inputCount(Coll c) const { return c == Coll::kRs ? count * n : count; }
  uint64_t outputCount(Coll c) const { return c == Coll::kAg ? count * n : count; }

  void run(const Item& it, const float* in, float* out) const {
    chorusResult_t r = chorusSuccess;
    switch (it.coll) {
      case Coll::kRs:
        r = chorusReduceScatterQuantized(in, out, count, chorusFloat32, chorusSum, &it.config, comm,
                                         nullptr);
        break;
      case Coll::kAg:
        r = chorusAllGatherQuantized(in, out, count, chorusFloat32, &it.config, comm, nullptr);
        break;
      case Coll::kAr:
        r = chorusAllReduceQuantized(in, out, count, chorusFloat32, chorusSum, &it.config, comm,
                                     nullptr);
        break;
    }
    ok(r, it.text.c_str(), comm);
  }

  // Input element j of rank r for a generator g(r, j); the exact result of output element i.
  double exact(Coll c, const std::function<float(int, uint64_t)>& g, uint64_t i) const {
    if (c == Coll::kAg) return g(static_cast<int>(i / count), i % count);
    const uint64_t j = c == Coll::kRs ? static_cast<uint64_t>(rank) * count + i : i;
    double s = 0;
    for (int p = 0; p < n; ++p) s += g(p, j);
    return s;
  }

  std::vector<double> sum(std::vector<double> v) const {
    ok(chorusAllReduce(v.data(), v.data(), v.size(), chorusFloat64, chorusSum, comm, nullptr),
       "chorusAllReduce", comm);
    return v;
  }

  /// Every rank's 64-bit value summed modulo 2^64 (a digest of all ranks' digests).
  uint64_t sumU64(uint64_t v) const {
    ok(chorusAllReduce(&v, &v, 1, chorusUint64, chorusSum, comm, nullptr), "chorusAllReduce",
       comm);
    return v;
  }

  chorusStats_t stats() const {
    chorusStats_t st{};
    st.structSize = sizeof st;
    ok(chorusCommGetStats(comm, &st), "chorusCommGetStats", comm);
    return st;
  }

  // The algorithm whose count for the collective grew between two snapshots; the same on every
  // rank, or "MIXED".
  std::string ran(Coll c, const chorusStats_t& before, const chorusStats_t& after) const {
    const std::string prefix = std::string(collName(c)) + ":";
    std::string name = "?";
    for (int a = 0; a < after.numAlgos; ++a) {
      const std::string nm(after.algos[a].name, strnlen(after.algos[a].name, sizeof after.algos[a].name));
      if (nm.rfind(prefix, 0) != 0) continue;
      uint64_t was = 0;
      for (int b = 0; b < before.numAlgos; ++b)
        if (std::strncmp(before.algos[b].name, after.algos[a].name, sizeof after.algos[a].name) == 0)
          was = before.algos[b].count;
      if (after.algos[a].count > was) name = nm.substr(prefix.size());
    }
    int64_t h[2] = {static_cast<int64_t>(std::hash<std::string>{}(name) >> 1), 0};
    h[1] = -h[0];
    ok(chorusAllReduce(h, h, 1, chorusInt64, chorusMax, comm, nullptr), "chorusAllReduce", comm);
    ok(chorusAllReduce(h + 1, h + 1, 1, chorusInt64, chorusMax, comm, nullptr), "chorusAllReduce",
       comm);
    return h[0] == -h[1] ? name : "MIXED";
  }

  void row(const std::string& text) const {
    if (rank == 0) std::printf("ROW,%s\n", text.c_str());
    std::fflush(stdout);
  }

  // kind,layout,W,coll,quant,asked,ran,count: the columns every row starts with. "asked" is
  // the collective's entry in CHORUS_ALGO ("tuned" when it names none).
  std::string prefix(const char* kind, const Item& it, const std::string& algo) const {
    return std::string(kind) + "," + layout + "," + std::to_string(n) + "," + collName(it.coll) +
           "," + it.quant + "," + asked(it.coll) + "," + algo + "," + std::to_string(count);
  }

  static std::string asked(Coll c) {
    const char* env = std::getenv("CHORUS_ALGO");
    const std::string mask = env ? env : "", key = std::string(collName(c)) + ":";
    for (size_t pos = 0; pos < mask.size();) {
      const size_t comma = std::min(mask.find(',', pos), mask.size());
      const std::string entry = mask.substr(pos, comma - pos);
      if (entry.rfind(key, 0) == 0) return entry.substr(key.size());
      pos = comma + 1;
    }
    return "tuned";
  }
};

// FNV-1a over a rank's output bytes, mixed with the rank, so that the sum over ranks changes
// when any rank's output does.
uint64_t outputDigest(const std::vector<float>& out, int rank) {
  uint64_t h = 0xcbf29ce484222325ULL;
  const auto* p = reinterpret_cast<const unsigned char*>(out.data());
  for (size_t i = 0; i < out.size() * sizeof(float); ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return mix(h ^ static_cast<uint64_t>(rank));
}

std::string hex(uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

std::string fmt(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

// ---- error ---------------------------------------------------------------------------------

void errorMode(const Job& job, const std::vector<Item>& items, uint64_t dataSeed) {
  // Inputs and exact results per collective, made once: every config sees the same data.
  std::map<Coll, std::vector<float>> inputs;
  std::map<Coll, std::vector<double>> exacts;
  auto g = [&](int r, uint64_t j) { return gaussian(dataSeed, r, j); };
  for (const Item& it : items) {
    if (inputs.count(it.coll)) continue;
    std::vector<float>& in = inputs[it.coll];
    in.resize(job.inputCount(it.coll));
    for (uint64_t j = 0; j < in.size(); ++j) in[j] = g(job.rank, j);
    std::vector<double>& ex = exacts[it.coll];
    ex.resize(job.outputCount(it.coll));
    for (uint64_t i = 0; i < ex.size(); ++i) ex[i] = job.exact(it.coll, g, i);
  }
  for (const Item& it : items) {
    const std::vector<double>& ex = exacts[it.coll];
    std::vector<float> out(ex.size(), NAN);
    const chorusStats_t before = job.stats();
    job.run(it, inputs[it.coll].data(), out.data());
    const chorusStats_t after = job.stats();
    const std::string algo = job.ran(it.coll, before, after);
    std::vector<double> s(4, 0.0);  // squared error, squared exact, signed error, elements
    for (size_t i = 0; i < ex.size(); ++i) {
      const double d = out[i] - ex[i];
      s[0] += d * d;
      s[1] += ex[i] * ex[i];
      s[2] += d;
    }
    s[3] = static_cast<double>(ex.size());
    // The all-gather's and all-reduce's outputs are the same on every rank: count one rank's.
    if (it.coll != Coll::kRs && job.rank != 0) s.assign(4, 0.0);
    s = job.sum(s);
    const uint64_t digest = job.sumU64(outputDigest(out, job.rank));
    // ...,rel_l2,mean_signed_error,elements,digest of every rank's output bytes
    job.row(job.prefix("error", it, algo) + "," + fmt(std::sqrt(s[0] / s[1])) + "," +
            fmt(s[2] / s[3]) + "," + fmt(s[3]) + "," + hex(digest));
  }
}

// ---- trials --------------------------------------------------------------------------------

void trialsMode(const Job& job, const std::vector<Item>& items, uint64_t dataSeed, int trials,
                const std::string& data) {
  for (const Item& it : items) {
    const uint64_t group = it.config.groupSize;
    std::function<float(int, uint64_t)> g = [&](int r, uint64_t j) { return gaussian(dataSeed, r, j); };
    if (data == "outlier")
      g = [&, group](int r, uint64_t j) {
        return j % group == 0 ? 8.0f : 0.02f + 0.01f * gaussian(dataSeed, r, j);
      };
    std::vector<float> in(job.inputCount(it.coll)), out(job.outputCount(it.coll));
    for (uint64_t j = 0; j < in.size(); ++j) in[j] = g(job.rank, j);
    std::vector<double> ex(out.size()), mean(out.size(), 0.0);
    for (uint64_t i = 0; i < ex.size(); ++i) ex[i] = job.exact(it.coll, g, i);
    const bool counts = it.coll == Coll::kRs || job.rank == 0;  // see errorMode
    double signedSum = 0, squares = 0, singleRel = 0, exactSq = 0, exactSum = 0;
    for (double e : ex) {
      exactSq += e * e;
      exactSum += e;
    }
    if (!counts) exactSq = exactSum = 0;
    const std::vector<double> totals = job.sum({exactSq, exactSum, counts ? double(ex.size()) : 0.0});
    std::string algo;
    Item t = it;
    for (int k = 1; k <= trials; ++k) {
      if (it.config.rounding == chorusRoundStochastic) t.config.seed = static_cast<uint64_t>(k);
      const chorusStats_t before = job.stats();
      job.run(t, in.data(), out.data());
      const chorusStats_t after = job.stats();
      if (k == 1) algo = job.ran(it.coll, before, after);
      double sq = 0, sg = 0;
      for (size_t i = 0; i < ex.size(); ++i) {
        const double d = out[i] - ex[i];
        sq += d * d;
        sg += d;
        mean[i] += out[i];
      }
      if (!counts) sq = sg = 0;
      signedSum += sg;
      squares += sq;
      singleRel += std::sqrt(job.sum({sq})[0] / totals[0]);
      if ((k & (k - 1)) == 0 && __builtin_ctz(static_cast<unsigned>(k)) % 2 == 0) {  // 1, 4, 16..
        double m = 0;  // the error of the mean of the first k results
        for (size_t i = 0; i < ex.size(); ++i) {
          const double d = mean[i] / k - ex[i];
          m += d * d;
        }
        if (!counts) m = 0;
        // ...,data,k,rel_l2_of_mean,mean_single_rel_l2
        job.row(job.prefix("trial", it, algo) + "," + data + "," + std::to_string(k) + "," +
                fmt(std::sqrt(job.sum({m})[0] / totals[0])) + "," + fmt(singleRel / k));
      }
    }
    const std::vector<double> s = job.sum({signedSum, squares});
    const double samples = totals[2] * trials;
    const double meanErr = s[0] / samples;
    const double var = s[1] / samples - meanErr * meanErr;
    // Nearest rounding repeats the same errors in every call: only the elements are samples.
    const bool random = it.config.rounding == chorusRoundStochastic;
    const double se = std::sqrt(var / (random ? samples : totals[2]));
    // ...,data,trials,mean_signed_error,std_error,z,mean_exact,samples
    job.row(job.prefix("bias", it, algo) + "," + data + "," + std::to_string(trials) + "," +
            fmt(meanErr) + "," + fmt(se) + "," + fmt(se > 0 ? meanErr / se : 0.0) + "," +
            fmt(totals[1] / totals[2]) + "," + fmt(samples));
  }
}

// ---- bytes ---------------------------------------------------------------------------------

void bytesMode(const Job& job, const std::vector<Item>& items) {
  for (const Item& it : items) {
    std::vector<float> in(job.inputCount(it.coll)), out(job.outputCount(it.coll));
    for (uint64_t j = 0; j < in.size(); ++j) in[j] = gaussian(7, job.rank, j);
    const chorusStats_t before = job.stats();
    job.run(it, in.data(), out.data());
    const chorusStats_t after = job.stats();
    const std::string algo = job.ran(it.coll, before, after);
    uint64_t mine[4] = {0, 0, 0, 0};  // sent intra, sent inter, received intra, received inter
    for (int t = 0; t < after.numTransports; ++t) {
      const chorusTransportStats_t& a = after.transports[t];
      chorusTransportStats_t b{};
      for (int u = 0; u < before.numTransports; ++u)
        if (std::strncmp(before.transports[u].name, a.name, sizeof a.name) == 0) b = before.transports[u];
      mine[0] += a.bytesSentIntraHost - b.bytesSentIntraHost;
      mine[1] += a.bytesSentInterHost - b.bytesSentInterHost;
      mine[2] += a.bytesRecvIntraHost - b.bytesRecvIntraHost;
      mine[3] += a.bytesRecvInterHost - b.bytesRecvInterHost;
    }
    std::vector<uint64_t> all(4 * static_cast<size_t>(job.n));
    ok(chorusAllGather(mine, all.data(), 4, chorusUint64, job.comm, nullptr), "chorusAllGather",
       job.comm);
    for (int r = 0; r < job.n; ++r) {
      const uint64_t* v = &all[4 * static_cast<size_t>(r)];
      // ...,rank,host,sent_intra,sent_inter,recv_intra,recv_inter
      job.row(job.prefix("bytes", it, algo) + "," + std::to_string(r) + "," +
              std::to_string(job.hostOf.empty() ? 0 : job.hostOf[static_cast<size_t>(r)]) + "," +
              std::to_string(v[0]) + "," + std::to_string(v[1]) + "," + std::to_string(v[2]) +
              "," + std::to_string(v[3]));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"quant_probe: precision and wire bytes of chorus's quantized collectives"};
  std::string hosts, mode, data = "gaussian";
  uint64_t count = 131072, dataSeed = 1;
  int trials = 64;
  std::vector<std::string> itemTexts;
  app.add_option("--hosts", hosts, "pretend hosts: sizes of contiguous rank groups, e.g. 2,1,3");
  app.add_option("--count", count, "recvcount (rs), sendcount (ag) or count (ar)")->capture_default_str();
  app.add_option("--data-seed", dataSeed, "seed of the inputs")->capture_default_str();
  app.add_option("--trials", trials, "trials: calls per item")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--data", data, "trials: gaussian or outlier")
      ->check(CLI::IsMember({"gaussian", "outlier"}))->capture_default_str();
  app.add_option("mode", mode, "error, trials or bytes")
      ->required()->check(CLI::IsMember({"error", "trials", "bytes"}));
  app.add_option("items", itemTexts, "COLL/QUANT, e.g. rs/int4:256 ag/int8:256")->required();
  CLI11_PARSE(app, argc, argv);

  Job job;
  job.count = count;
  // Real hosts: under tests/netns/run_job.sh every rank sees the layout in CHORUS_NETNS_HOSTS
  // (contiguous ranks per host, as --hosts describes pretend ones); rows say "netns-2+1+3".
  const char* netnsHosts = std::getenv("CHORUS_NETNS_HOSTS");
  const bool netns = hosts.empty() && netnsHosts != nullptr && *netnsHosts != '\0';
  if (netns) hosts = netnsHosts;
  job.layout = hosts.empty() ? "flat" : (netns ? "netns-" : "") + hosts;
  std::replace(job.layout.begin(), job.layout.end(), ',', '+');  // no commas in a CSV field
  const char* rankText = std::getenv("CHORUS_RANK");
  if (!hosts.empty()) {
    if (!rankText) die("--hosts needs CHORUS_RANK (run under chorus-run)");
    const int me = std::atoi(rankText);
    int h = 0;
    for (size_t pos = 0; pos <= hosts.size(); ++h) {
      const size_t comma = std::min(hosts.find(',', pos), hosts.size());
      const int size = std::atoi(hosts.substr(pos, comma - pos).c_str());
      if (size < 1) die("--hosts '" + hosts + "': sizes are positive integers");
      job.hostOf.insert(job.hostOf.end(), static_cast<size_t>(size), h);
      pos = comma + 1;
    }
    if (!netns && me < static_cast<int>(job.hostOf.size()))
      setenv("CHORUS_HOST_ID", ("quant-probe-host-" + std::to_string(job.hostOf[static_cast<size_t>(me)])).c_str(), 1);
  }
  std::vector<Item> items;
  for (const std::string& s : itemTexts) items.push_back(parseItem(s));

  ok(chorusCommInitFromEnv(&job.comm), "chorusCommInitFromEnv");
  ok(chorusCommUserRank(job.comm, &job.rank), "chorusCommUserRank", job.comm);
  ok(chorusCommCount(job.comm, &job.n), "chorusCommCount", job.comm);
  if (!job.hostOf.empty() && static_cast<int>(job.hostOf.size()) != job.n)
    die("--hosts '" + hosts + "' has " + std::to_string(job.hostOf.size()) + " ranks, the job " +
        std::to_string(job.n));

  if (mode == "error") errorMode(job, items, dataSeed);
  if (mode == "trials") trialsMode(job, items, dataSeed, trials, data);
  if (mode == "bytes") bytesMode(job, items);

  ok(chorusBarrier(job.comm, nullptr), "chorusBarrier", job.comm);
  ok(chorusCommDestroy(job.comm), "chorusCommDestroy");
  return 0;
}
