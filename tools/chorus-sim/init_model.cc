#include "tools/chorus-sim/init_model.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "algorithms/registry.h"
#include "src/bootstrap/store_protocol.h"
#include "src/cost/cost_model.h"
#include "src/exec/plan.h"
#include "src/topology/layout.h"
#include "tools/chorus-sim/scenario.h"

namespace chorus::sim {

namespace {

constexpr const char* kScope = "chorus";  // Bootstrap::create's default scope
// Descriptors a rank holds besides its peers' sockets (store, listeners, heartbeat, stdio, the
// shared-memory transport's): an allowance, not a count.
constexpr uint64_t kOtherFds = 16;

uint64_t frameBytes(const bootstrap::StoreRequest& r) {
  return bootstrap::encodeStoreRequest(r).size();
}

// The largest number of peers (and of those on other hosts) of one rank over the plans of
// `algos`, on a sample of ranks.
Status lazyPeers(const InitSpec& spec, int n, int* peers, int* remote) {
  const int K = spec.ranksPerHost;
  CHORUS_ASSIGN_OR_RETURN(topo::Layout layout, topo::Layout::uniform(n, K));
  *peers = *remote = 0;
  for (int r : {0, K - 1, n / 2, n - 1}) {
    std::set<int> all;
    for (const std::string& full : spec.lazyAlgos) {
      const size_t colon = full.find(':');
      const auto coll = parseColl(full.substr(0, colon));
      const algo::AlgoInfo* info =
          coll && colon != std::string::npos ? algo::findAlgorithm(*coll, full.substr(colon + 1))
                                             : nullptr;
      if (!info) return invalidArgument("--init: unknown algorithm '" + full + "'");
      sched::CollDesc d;
      d.coll = *coll;
      d.elemSize = 4;
      d.count = static_cast<uint64_t>(n) * 1024;  // a size every rank has a slice of
      d.chunkBytes = 256 << 10;
      d.hostOf.resize(static_cast<size_t>(n));
      for (int q = 0; q < n; ++q) d.hostOf[static_cast<size_t>(q)] = layout.hostOf(q);
      CHORUS_ASSIGN_OR_RETURN(auto plan, exec::planAlgorithm(*info, d, r, n, layout.ringOrder()));
      for (const exec::Plan::Peer& p : plan->peers) all.insert(p.rank);
    }
    int far = 0;
    for (int p : all) far += layout.hostOf(p) != layout.hostOf(r) ? 1 : 0;
    *peers = std::max(*peers, static_cast<int>(all.size()));
    *remote = std::max(*remote, far);
  }
  return Status();
}

// Three significant digits: "38.9 KiB", "2.33 MiB"; "13.9 s", "655 ms".
std::string bytesText(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g %s", b, units[u]);
  return buf;
}

std::string timeText(double us) {
  char buf[32];
  if (us >= 1e6) std::snprintf(buf, sizeof buf, "%.3g s", us / 1e6);
  else if (us >= 1e3) std::snprintf(buf, sizeof buf, "%.3g ms", us / 1e3);
  else std::snprintf(buf, sizeof buf, "%.3g us", us);
  return buf;
}

}  // namespace

GatherBytes gatherBytes(int rank, int nranks, uint64_t call, uint64_t valueBytes) {
  // As Bootstrap::gather builds it: key "<scope>/gather/<call>/<rank>", all n keys.
  const std::string prefix = std::string(kScope) + "/gather/" + std::to_string(call) + "/";
  bootstrap::StoreRequest r;
  r.op = bootstrap::StoreOp::kSetMultiGet;
  r.key = prefix + std::to_string(rank);
  r.value.assign(valueBytes, 0);
  for (int q = 0; q < nranks; ++q) r.keys.push_back(prefix + std::to_string(q));
  GatherBytes g;
  g.request = frameBytes(r);
  // store.h: a frame (u64 length), u8 status, u32 n, n x (u64 length, bytes).
  g.reply = bootstrap::kStoreFrameHeader + 1 + 4 +
            static_cast<uint64_t>(nranks) * (8 + valueBytes);
  return g;
}

StatusOr<std::vector<InitRow>> modelInit(const InitSpec& spec, int maxRanks) {
  const int K = spec.ranksPerHost;
  if (K < 1) return invalidArgument("--init: ranks per host must be >= 1");
  if (maxRanks < K || maxRanks > (1 << 20))
    return invalidArgument("--init: up to " + std::to_string(maxRanks) +
                           " ranks is not between the ranks of one host (" + std::to_string(K) +
                           ") and 2^20");
  if (!(spec.storeGbps > 0)) return invalidArgument("--init: the store's NIC speed must be > 0");
  std::vector<InitRow> rows;
  for (int n = 8; n <= maxRanks; n *= 2) {
    if (n < K || n % K != 0) continue;
    InitRow row;
    row.ranks = n;
    const double N = n;
    // Joining: hello (answered by one status byte), claim (add), nranks (set by rank 0, get by
    // the others, answered with 8 bytes); each reply is a frame of status and result.
    double in = 0, out = 0;
    const uint64_t hello = bootstrap::encodeStoreHello({}).size();
    in += N * static_cast<double>(hello);
    out += N * (bootstrap::kStoreFrameHeader + 1);
    bootstrap::StoreRequest add;
    add.op = bootstrap::StoreOp::kAdd;
    add.key = std::string(kScope) + "/claim/0";
    add.delta = 1;
    const double addBase = static_cast<double>(frameBytes(add)) - 1;  // less rank 0's digit
    bootstrap::StoreRequest size;
    size.op = bootstrap::StoreOp::kGet;
    size.key = std::string(kScope) + "/nranks";
    // Ranks' keys differ only in the digits of their number: the sum of those over all ranks.
    double digitSum = 0;
    for (int lo = 0, hi = 10, d = 1; lo < n; lo = hi, hi *= 10, ++d)
      digitSum += static_cast<double>(std::min(n, hi) - lo) * d;
    in += N * addBase + digitSum + N * static_cast<double>(frameBytes(size));
    out += N * (bootstrap::kStoreFrameHeader + 1 + 8) * 2;
    // The two gathers: a rank's request differs from rank 0's by its own key's digits.
    double storedValues = 0;
    for (auto [call, bytes] : {std::pair<uint64_t, uint64_t>{1, spec.recordBytes},
                               std::pair<uint64_t, uint64_t>{2, spec.voteBytes}}) {
      const GatherBytes g = gatherBytes(0, n, call, bytes);
      if (call == 1) {
        row.gatherRequest = g.request;
        row.gatherReply = g.reply;
      }
      in += N * static_cast<double>(g.request - 1) + digitSum;
      out += N * static_cast<double>(g.reply);
      storedValues += N * static_cast<double>(bytes);
    }
    row.storeInBytes = in;
    row.storeOutBytes = out;
    row.storeNicUs = std::max(in, out) * 8 / (spec.storeGbps * 1e3);
    row.storeKeysUs = 2 * N * N * spec.storeKeyNs / 1e3;
    row.storePeakBytes = N * static_cast<double>(row.gatherReply) + storedValues;
    row.eagerSockets = n - K;
    row.eagerDialUs = (N - 1) * spec.dialUs;
    const double buffer =
        static_cast<double>(std::min<uint64_t>(2 * spec.socketBufferBytes, 2 * spec.bufferMax));
    row.eagerBufferBytes = row.eagerSockets * 2 * buffer;  // send and receive
    CHORUS_RETURN_IF_ERROR(lazyPeers(spec, n, &row.lazyPeers, &row.lazySockets));
    const double intervalS =
        std::clamp(spec.heartbeatTimeoutS * 1000 / 8, 20.0, 1000.0) / 1000;  // heartbeat.cc
    row.heartbeatsPerHostS = K * (N - 1) / intervalS;
    rows.push_back(row);
  }
  if (rows.empty())
    return invalidArgument("--init: no power-of-two rank count from 8 to " +
                           std::to_string(maxRanks) + " holds whole hosts of " +
                           std::to_string(K));
  return rows;
}

std::string initTable(const InitSpec& spec, const std::vector<InitRow>& rows) {
  std::string t;
  char line[320];
  std::snprintf(line, sizeof line, "%6s %8s %8s %8s %8s %8s | %5s %4s %8s %8s | %5s | %7s\n",
                "ranks", "gather", "out", "NIC", "keys", "memory", "socks", "fds", "dials",
                "buffers", "lazy", "beats/s");
  t += "       store: a rank's request; both gathers  | eager, per rank              "
       "| rank  | host\n";
  t += line;
  for (const InitRow& r : rows) {
    char lazy[16];
    std::snprintf(lazy, sizeof lazy, "%d/%d", r.lazyPeers, r.lazySockets);
    std::snprintf(line, sizeof line,
                  "%6d %8s %8s %8s %8s %8s | %5d %4s %8s %8s | %5s | %7.0f\n", r.ranks,
                  bytesText(static_cast<double>(r.gatherRequest)).c_str(),
                  bytesText(r.storeOutBytes).c_str(), timeText(r.storeNicUs).c_str(),
                  timeText(r.storeKeysUs).c_str(), bytesText(r.storePeakBytes).c_str(),
                  r.eagerSockets,
                  static_cast<uint64_t>(r.eagerSockets) + kOtherFds > spec.fdLimit ? "over" : "ok",
                  timeText(r.eagerDialUs).c_str(), bytesText(r.eagerBufferBytes).c_str(), lazy,
                  r.heartbeatsPerHostS);
    t += line;
  }
  char notes[800];
  std::snprintf(notes, sizeof notes,
                "gather: one rank's PeerInfo request (record %llu B; votes %llu B)\n"
                "out: bytes the store sends; NIC: at %g Gb/s; keys: at %g ns per key "
                "(assumed)\n"
                "memory: the store's when it answers gather #1\n"
                "dials: %g us each, one after the other; buffers: send + receive per socket,\n"
                "  min(2 x %llu, 2 x %llu) B each, if all fill\n"
                "fds: 'over' when the sockets and %llu others pass a soft limit of %llu\n"
                "beats/s: heartbeats a host receives\n"
                "lazy: peers/sockets per rank for",
                static_cast<unsigned long long>(spec.recordBytes),
                static_cast<unsigned long long>(spec.voteBytes), spec.storeGbps, spec.storeKeyNs,
                spec.dialUs, static_cast<unsigned long long>(spec.socketBufferBytes),
                static_cast<unsigned long long>(spec.bufferMax),
                static_cast<unsigned long long>(kOtherFds),
                static_cast<unsigned long long>(spec.fdLimit));
  t += notes;
  for (const std::string& a : spec.lazyAlgos) t += " " + a;
  t += "\n";
  return t;
}

}  // namespace chorus::sim
