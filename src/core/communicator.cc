#include "src/core/communicator.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "algorithms/kernels/reduce.h"
#include "algorithms/registry.h"
#include "src/topology/layout.h"
#include "src/topology/placement.h"
#include "src/tuning/cost_model.h"
#include "src/bootstrap/bootstrap.h"
#include "src/bootstrap/peer_info.h"
#include "src/bootstrap/unique_id.h"
#include "src/base/config.h"
#include "src/base/logging.h"
#include "src/base/socket_util.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"

namespace chorus {
namespace {

using algo::AlgoInfo;
using algo::allAlgorithms;
using algo::defaultAlgorithm;
using algo::Platform;
using algo::findAlgorithm;

constexpr int kNumBuiltinOps = 5;  // chorusSum..chorusAvg
constexpr int kOpAvg = 4;
constexpr Tag kP2PSeq = 0;  // point-to-point schedules carry sequence 0 (see OpIdentity)

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

// Strips a "collective:" prefix from a registry name.
std::string shortAlgoName(const char* name) {
  std::string s = name;
  auto colon = s.find(':');
  return colon == std::string::npos ? s : s.substr(colon + 1);
}

// CHORUS_ALGO: "ring" (every collective that has a ring) or "allreduce:ring,broadcast:chain".
StatusOr<std::map<sched::Coll, std::string>> parseAlgoSpec(const std::string& spec) {
  std::map<sched::Coll, std::string> out;
  if (spec.empty()) return out;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto colon = item.find(':');
    bool matched = false;
    for (const AlgoInfo& a : allAlgorithms()) {
      std::string name = shortAlgoName(a.name);
      if (colon == std::string::npos) {
        if (name == item) {
          out[a.coll] = name;
          matched = true;
        }
      } else if (item.substr(0, colon) == sched::collName(a.coll) &&
                 item.substr(colon + 1) == name) {
        out[a.coll] = name;
        matched = true;
      }
    }
    if (!matched) {
      std::string known;
      for (const AlgoInfo& a : allAlgorithms())
        known += std::string(known.empty() ? "" : ", ") + sched::collName(a.coll) + ":" +
                 shortAlgoName(a.name);
      return invalidArgument("CHORUS_ALGO='" + spec + "': no algorithm matches '" + item +
                             "' (known: " + known + ")");
    }
  }
  return out;
}

// Same-host liveness: /proc/<pid>/stat missing, or the process is a zombie.
bool processDead(int32_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  if (!f) return ::kill(pid, 0) != 0 && errno == ESRCH;
  std::string line;
  std::getline(f, line);
  auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  char state = line[close + 2];
  return state == 'Z' || state == 'X';
}

uint64_t selfPidNamespace() {
  char buf[64] = {};
  ssize_t n = ::readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
  if (n <= 0) return 0;
  // "pid:[4026531836]"
  const char* open = std::strchr(buf, '[');
  return open ? std::strtoull(open + 1, nullptr, 10) : 0;
}

StatusOr<net::SockAddr> chooseListenAddress(const net::SockAddr* root) {
  if (!config::isSet("CHORUS_SOCKET_IFNAME") && root) {
    auto toward = net::localAddressToward(*root);
    if (toward.ok()) return toward;
  }
  CHORUS_ASSIGN_OR_RETURN(auto ifs, net::listInterfaces());
  if (ifs.empty())
    return invalidArgument("no network interface matches CHORUS_SOCKET_IFNAME='" +
                           config::getString("CHORUS_SOCKET_IFNAME") + "'");
  return ifs.front().addr;
}

}  // namespace

// ---- Request -----------------------------------------------------------------------------

bool Request::test(Status* out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_ && out) *out = status_;
  return done_;
}

void Request::finish(Status s) {
  std::lock_guard<std::mutex> lock(mu_);
  status_ = std::move(s);
  done_ = true;
}

// ---- Construction ------------------------------------------------------------------------

Communicator::Communicator(int rank, int nranks) : rank_(rank), nranks_(nranks) {}

Communicator::~Communicator() {
  {
    std::unique_lock<std::mutex> lock(queueMu_);
    stopping_ = true;
    queueCv_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
}

StatusOr<std::unique_ptr<Communicator>> Communicator::create(
    std::unique_ptr<bootstrap::Bootstrap> boot, const bootstrap::JobId& job, int rank,
    int nranks) {
  std::unique_ptr<Communicator> c(new Communicator(rank, nranks));
  log::setRank(rank);
  CHORUS_ASSIGN_OR_RETURN(c->timeoutSeconds_, config::getDouble("CHORUS_TIMEOUT"));
  CHORUS_ASSIGN_OR_RETURN(int64_t spin, config::getInt("CHORUS_SPIN_US"));
  c->spinUs_ = static_cast<int>(spin);
  CHORUS_ASSIGN_OR_RETURN(c->chunkBytes_, config::getBytes("CHORUS_CHUNK_SIZE"));
  if (c->chunkBytes_ < 64) return invalidArgument("CHORUS_CHUNK_SIZE must be at least 64 bytes");
  CHORUS_ASSIGN_OR_RETURN(c->forcedAlgo_, parseAlgoSpec(config::getString("CHORUS_ALGO")));

  uint64_t id = 0;
  for (uint8_t b : job.secret) id = mix(id, b);
  c->commId_ = id;

  CHORUS_ASSIGN_OR_RETURN(c->listenAddr_, chooseListenAddress(&job.root));
  c->transports_.push_back(makeShmTransport(rank, c->commId_));
  c->transports_.push_back(makeTcpTransport(rank, c->commId_, c->listenAddr_));

  PeerInfo self;
  self.rank = rank;
  self.hostId = bootstrap::localHostId();
  self.pid = static_cast<int32_t>(::getpid());
  self.pidNamespace = selfPidNamespace();
  self.hostname = bootstrap::localHostname();
  {
    // Where this rank runs; detection failing soft leaves -1 (unknown), a bad CHORUS_TOPO_FILE
    // fails the creation.
    CHORUS_ASSIGN_OR_RETURN(const topo::System* sys, topo::processSystem());
    self.numa = topo::currentNumaNode(*sys);
    self.nic = topo::nearestNic(*sys, self.numa);
  }
  for (auto& t : c->transports_) {
    EndpointBlob blob;
    CHORUS_RETURN_IF_ERROR(t->listen(&blob));
    self.endpoints[std::string(t->name())] = std::move(blob);
  }
  CHORUS_ASSIGN_OR_RETURN(auto all, boot->allGather(bootstrap::serializePeerInfo(self)));
  c->peers_.resize(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    CHORUS_ASSIGN_OR_RETURN(c->peers_[r], bootstrap::deserializePeerInfo(all[r]));
    if (c->peers_[r].rank != r)
      return invalidUsage("bootstrap: rank " + std::to_string(r) + "'s record claims rank " +
                          std::to_string(c->peers_[r].rank));
  }
  c->boot_ = std::move(boot);
  CHORUS_RETURN_IF_ERROR(c->buildLayout());
  c->conns_.resize(static_cast<size_t>(nranks));
  c->connTransport_.assign(static_cast<size_t>(nranks), -1);

  CHORUS_RETURN_IF_ERROR(c->connectEagerly());

  int local = 0, hosts = 0;
  std::vector<uint64_t> seen;
  for (const PeerInfo& p : c->peers_) {
    if (p.hostId == self.hostId) ++local;
    if (std::find(seen.begin(), seen.end(), p.hostId) == seen.end()) {
      seen.push_back(p.hostId);
      ++hosts;
    }
  }
  // More ranks than cores on this host: a spinning waiter only steals the core from the rank
  // that has work, so block sooner (unless CHORUS_SPIN_US says otherwise).
  long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (cores > 0 && local > cores && !config::isSet("CHORUS_SPIN_US")) {
    c->spinUs_ = 0;
    CHORUS_LOG(INFO, INIT) << local << " ranks on " << cores << " cores: waits do not spin";
  }
  // One-sided algorithms need every pair readable both ways, and every rank must pick the same
  // algorithm: agree on it (one byte through the bootstrap, once).
  bool readable = nranks > 1;
  for (int p = 0; p < nranks; ++p)
    if (p != rank && (!c->conns_[static_cast<size_t>(p)] || !c->conns_[static_cast<size_t>(p)]->canRead()))
      readable = false;
  // The same round carries each rank's core count: the tuner models time-sharing with the
  // smallest, so that every rank predicts, and picks, the same.
  // And the speed of each rank's nearest NIC (Mb/s, 0 unknown): the slowest one is the
  // inter-host bandwidth of the model.
  const uint32_t myCores = cores > 0 ? static_cast<uint32_t>(cores) : 0;
  uint32_t myNicMbps = 0;
  {
    CHORUS_ASSIGN_OR_RETURN(const topo::System* sys, topo::processSystem());
    const std::vector<int> nics = sys->ofType(topo::NodeType::kNic);
    if (self.nic >= 0 && static_cast<size_t>(self.nic) < nics.size())
      myNicMbps = static_cast<uint32_t>(sys->node(nics[static_cast<size_t>(self.nic)]).speedGbps * 1000);
  }
  // And whether shared memory joins this rank to every rank on its host: the tuner's
  // intra-host link class must be the same on every rank, also on a host of one rank.
  bool shmInside = true;
  {
    std::string allowed = config::getString("CHORUS_TRANSPORT");
    if (!allowed.empty() && ("," + allowed + ",").find(",shm,") == std::string::npos)
      shmInside = false;
    Transport* shmTransport = nullptr;
    for (auto& t : c->transports_)
      if (t->name() == "shm") shmTransport = t.get();
    for (const PeerInfo& p : c->peers_)
      if (p.rank != rank && p.hostId == self.hostId &&
          (!shmTransport || !shmTransport->canConnect(self, p).ok))
        shmInside = false;
  }
  std::vector<uint8_t> vote = {
      static_cast<uint8_t>((readable ? 1 : 0) | (shmInside ? 2 : 0))};
  for (int i = 0; i < 4; ++i) vote.push_back(static_cast<uint8_t>(myCores >> (8 * i)));
  for (int i = 0; i < 4; ++i) vote.push_back(static_cast<uint8_t>(myNicMbps >> (8 * i)));
  CHORUS_ASSIGN_OR_RETURN(auto votes, c->boot_->allGather(vote));
  auto word = [](const std::vector<uint8_t>& v, size_t at) {
    uint32_t n = 0;
    for (size_t i = 0; i < 4; ++i) n |= static_cast<uint32_t>(v[at + i]) << (8 * i);
    return n;
  };
  c->oneSided_ = true;
  c->shmInside_ = true;
  c->minCores_ = myCores;
  c->minNicMbps_ = myNicMbps;
  for (const auto& v : votes) {
    if (v.size() != 9) return invalidUsage("bootstrap: a rank sent a malformed capability vote");
    c->oneSided_ = c->oneSided_ && (v[0] & 1) != 0;
    c->shmInside_ = c->shmInside_ && (v[0] & 2) != 0;
    c->minCores_ = std::min(c->minCores_, word(v, 1));
    c->minNicMbps_ = std::min(c->minNicMbps_, word(v, 5));
  }
  CHORUS_RETURN_IF_ERROR(c->setupStaging());
  c->setupCostInput();
  CHORUS_RETURN_IF_ERROR(c->calibrate());
  CHORUS_LOG(INFO, INIT) << "comm " << std::hex << c->commId_ << std::dec << " rank " << rank
                         << "/" << nranks << " on " << self.hostname << ": " << local
                         << " ranks on this host, " << hosts << " hosts; tcp listens on "
                         << c->listenAddr_.toString();
  return c;
}

Status Communicator::splitType(topo::GroupKind kind, int key, std::unique_ptr<Communicator>* out) {
  // Every rank computes every rank's colour from the same layout: the groups are the layout's.
  const topo::SplitSpec spec = layout_->split(kind, rank_);
  return split(spec.color, key, out);
}

void Communicator::setupCostInput() {
  // Every input here was agreed by all ranks at creation (shared memory inside every host, the
  // fewest cores, the slowest NIC), so every rank predicts, and picks, the same algorithm.
  const tune::LinkClass intra = shmInside_ ? tune::LinkClass::kShm : tune::LinkClass::kTcpLoopback;
  costInput_ = tune::costInputFor(*layout_, intra, tune::LinkClass::kEthernet,
                                  static_cast<int>(minCores_));
  costInput_.chunkBytes = chunkBytes_;
  costInput_.interSpeedGbps = minNicMbps_ / 1000.0;
  if (rank_ == 0) {
    CHORUS_LOG(INFO, TUNE) << "cost model: " << layout_->numHosts() << " hosts, "
                           << layout_->maxLocalSize() << " ranks per host, intra-host "
                           << tune::linkClassName(intra) << ", " << costInput_.coresPerHost
                           << " cores";
  }
}

// CHORUS_TUNE=measure: rank 0 ping-pongs with its ring neighbour on its host (the intra-host
// link class) and, on several hosts, with the leader of the next host (the inter-host class),
// fits latency and bandwidth (tune::fitFromPingPong) and hands the constants to every rank
// through the bootstrap, so all ranks predict, and choose, alike. Fixed repetition counts keep
// it short: about 10 ms over shared memory, 30 ms over loopback TCP; by construction under
// 200 ms on links of 1 Gb/s and faster.
Status Communicator::calibrate() {
  const std::string mode = config::getString("CHORUS_TUNE");
  if (mode.empty()) return Status();
  if (mode != "measure")
    return invalidArgument("CHORUS_TUNE='" + mode +
                           "' is not 'measure' (leave it empty for the model's constants)");
  if (nranks_ < 2) return Status();
  const auto started = std::chrono::steady_clock::now();
  struct Probe {
    int peer = -1;
    tune::LinkClass cls = tune::LinkClass::kShm;
  };
  std::vector<Probe> probes;
  const int next = layout_->ringNext(0);
  if (layout_->sameHost(0, next) && next != 0) probes.push_back({next, costInput_.intra});
  if (layout_->numHosts() > 1) probes.push_back({layout_->hostLeader(1), costInput_.inter});
  const uint64_t sizes[] = {8, 4096, 65536, 1 << 20};
  const int reps[] = {100, 50, 20, 4};
  std::vector<std::byte> buf(1 << 20);
  std::vector<double> fitted;  // rank 0: per probe class, latency, bandwidth, step
  for (const Probe& pr : probes) {
    const bool initiator = rank_ == 0;
    if (!initiator && rank_ != pr.peer) continue;
    const int other = initiator ? pr.peer : 0;
    std::vector<std::pair<uint64_t, double>> samples;
    for (size_t s = 0; s < std::size(sizes); ++s) {
      P2POp send{true, buf.data(), sizes[s], DataType::kUint8, other};
      P2POp recv{false, buf.data(), sizes[s], DataType::kUint8, other};
      for (int warm = 0; warm < 2; ++warm) {
        CHORUS_RETURN_IF_ERROR(runP2PNow({initiator ? send : recv}).withContext("CHORUS_TUNE"));
        CHORUS_RETURN_IF_ERROR(runP2PNow({initiator ? recv : send}).withContext("CHORUS_TUNE"));
      }
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < reps[s]; ++i) {
        CHORUS_RETURN_IF_ERROR(runP2PNow({initiator ? send : recv}).withContext("CHORUS_TUNE"));
        CHORUS_RETURN_IF_ERROR(runP2PNow({initiator ? recv : send}).withContext("CHORUS_TUNE"));
      }
      const double us = std::chrono::duration<double, std::micro>(
                            std::chrono::steady_clock::now() - t0).count() / reps[s] / 2;
      samples.push_back({sizes[s], us});
    }
    if (initiator) {
      const tune::LinkConstants k = tune::fitFromPingPong(samples, costModel_.constants(pr.cls));
      fitted.insert(fitted.end(), {static_cast<double>(pr.cls), k.latencyUs, k.bandwidthGBps});
    }
  }
  // Everyone takes rank 0's constants.
  std::vector<uint8_t> mine(fitted.size() * sizeof(double));
  if (!fitted.empty()) std::memcpy(mine.data(), fitted.data(), mine.size());
  CHORUS_ASSIGN_OR_RETURN(auto all, boot_->allGather(rank_ == 0 ? mine : std::vector<uint8_t>()));
  const std::vector<uint8_t>& got = all[0];
  std::vector<double> values(got.size() / sizeof(double));
  if (!values.empty()) std::memcpy(values.data(), got.data(), values.size() * sizeof(double));
  for (size_t i = 0; i + 3 <= values.size(); i += 3) {
    const auto cls = static_cast<tune::LinkClass>(static_cast<int>(values[i]));
    tune::LinkConstants k = costModel_.constants(cls);
    k.latencyUs = values[i + 1];
    k.bandwidthGBps = values[i + 2];
    costModel_.setConstants(cls, k);
    if (rank_ == 0) {
      CHORUS_LOG(INFO, TUNE) << "CHORUS_TUNE=measure: " << tune::linkClassName(cls) << " latency "
                             << k.latencyUs << " us, " << k.bandwidthGBps << " GB/s";
    }
  }
  if (rank_ == 0) {
    CHORUS_LOG(INFO, TUNE) << "CHORUS_TUNE=measure took "
                           << std::chrono::duration<double, std::milli>(
                                  std::chrono::steady_clock::now() - started).count()
                           << " ms";
  }
  return Status();
}

Status Communicator::buildLayout() {
  std::vector<topo::RankPlace> places;
  for (const PeerInfo& p : peers_)
    places.push_back(topo::RankPlace{p.hostId, p.numa, p.gpu, p.nic, p.hostname});
  auto layout = topo::Layout::make(std::move(places));
  if (!layout.ok()) return layout.status().withContext("rank layout");
  layout_ = std::make_unique<topo::Layout>(std::move(layout).value());
  if (rank_ == 0) {
    CHORUS_LOG(INFO, TOPO) << "layout: " << layout_->describe();
  }
  return Status();
}

// ---- Ordered execution -------------------------------------------------------------------

// Queued operations run in the order they were started, on whichever thread gets to them: the
// progress thread while the caller computes, or the caller itself once it waits (it then runs
// them inline, and the progress thread stands aside, so no completion needs a thread hand-off).
// An operation is popped only while execMu_ is held, which keeps the order.
bool Communicator::runNextQueued() {
  std::pair<std::function<Status()>, std::shared_ptr<Request>> item;
  {
    std::lock_guard<std::mutex> lock(queueMu_);
    if (queue_.empty()) return false;
    item = std::move(queue_.front());
    queue_.pop_front();
  }
  Status s = item.first();
  if (!s.ok()) setLastError(s.toString());
  item.second->finish(std::move(s));
  return true;
}

Status Communicator::runOrdered(std::function<Status()> work) {
  {
    std::lock_guard<std::mutex> exec(execMu_);
    bool idle;
    {
      std::lock_guard<std::mutex> lock(queueMu_);
      idle = queue_.empty();
    }
    // Fast path: nothing queued before us, run here.
    if (idle) return work();
  }
  return waitFor(enqueue(std::move(work)));
}

Status Communicator::waitFor(const std::shared_ptr<Request>& req) {
  Status s;
  if (req->test(&s)) return s;
  {
    std::lock_guard<std::mutex> lock(queueMu_);
    ++waiters_;
  }
  while (!req->test(&s)) {
    std::lock_guard<std::mutex> exec(execMu_);  // waits out an operation the worker is running
    if (!runNextQueued()) break;               // nothing queued: ours has finished
  }
  {
    std::lock_guard<std::mutex> lock(queueMu_);
    --waiters_;
    queueCv_.notify_all();
  }
  req->test(&s);
  return s;
}

std::shared_ptr<Request> Communicator::enqueue(std::function<Status()> work) {
  auto req = std::make_shared<Request>();
  std::lock_guard<std::mutex> lock(queueMu_);
  queue_.emplace_back(std::move(work), req);
  if (!worker_.joinable()) worker_ = std::thread([this] { workerLoop(); });
  queueCv_.notify_all();
  return req;
}

void Communicator::workerLoop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(queueMu_);
      // Stand aside while a caller waits: it runs the queue itself.
      queueCv_.wait(lock, [&] { return (stopping_ && waiters_ == 0) || (!queue_.empty() && waiters_ == 0); });
      if (queue_.empty()) return;  // stopping and drained
    }
    std::lock_guard<std::mutex> exec(execMu_);
    runNextQueued();
  }
}

Status Communicator::collective(const CollArgs& args) {
  return runOrdered([this, &args] { return runNow(args); });
}

StatusOr<std::shared_ptr<Request>> Communicator::collectiveAsync(CollArgs args) {
  return enqueue([this, a = std::move(args)] { return runNow(a); });
}

Status Communicator::sendRecv(std::vector<P2POp> ops) {
  return runOrdered([this, &ops] { return runP2PNow(ops); });
}

StatusOr<std::shared_ptr<Request>> Communicator::sendRecvAsync(std::vector<P2POp> ops) {
  return enqueue([this, o = std::move(ops)] { return runP2PNow(o); });
}

// ---- Failure -----------------------------------------------------------------------------

Status Communicator::fail(const Status& why) {
  if (failed_.ok()) {
    failed_ = why;
    CHORUS_LOG(WARN, COLL) << "rank " << rank_ << ": " << why.toString()
                           << "; the communicator is now unusable";
    for (auto& c : conns_)
      if (c) c->cancel(why).ignore();
    if (staging_) staging_->markFailed(why);
  }
  return why;
}

void Communicator::abort(const std::string& why) {
  Status s = remoteError("rank " + std::to_string(rank_) + " aborted the communicator: " + why);
  // May be called from another thread while an operation runs: the flag makes the executor
  // give up within ~100 ms; only then, holding the execution lock, are connections touched.
  aborting_.store(true);
  {
    std::lock_guard<std::mutex> lock(queueMu_);
    for (auto& item : queue_) item.second->finish(s);
    queue_.clear();
  }
  std::lock_guard<std::mutex> exec(execMu_);
  if (failed_.ok()) failed_ = s;
  for (auto& c : conns_)
    if (c) c->cancel(s).ignore();
  if (staging_) staging_->markFailed(s);
}

Status Communicator::checkPeers(const std::vector<int>& peers) {
  const PeerInfo& me = peers_[static_cast<size_t>(rank_)];
  for (int p : peers) {
    const PeerInfo& info = peers_[static_cast<size_t>(p)];
    if (info.hostId != me.hostId || info.pidNamespace != me.pidNamespace || info.pid <= 0) continue;
    if (processDead(info.pid))
      return remoteError("rank " + std::to_string(p) + " (pid " + std::to_string(info.pid) +
                         " on this host) has died");
  }
  return Status();
}

// ---- Connections -------------------------------------------------------------------------

Status Communicator::ensureConnected(const std::vector<int>& peers) {
  // Dial the higher ranks first (completes through the listen backlog), then accept the lower
  // ones: no cycle of ranks waiting for each other can form.
  std::vector<int> todo;
  for (int p : peers)
    if (!conns_[static_cast<size_t>(p)]) todo.push_back(p);
  if (todo.empty()) return Status();  // the per-call path: nothing to set up
  std::stable_sort(todo.begin(), todo.end(), [&](int a, int b) {
    bool da = a > rank_, db = b > rank_;
    if (da != db) return da;
    return a < b;
  });
  std::string allowed = config::getString("CHORUS_TRANSPORT");
  auto deadline = net::deadlineIn(timeoutSeconds_);
  std::vector<int> made;
  for (int p : todo) {
    const PeerInfo& me = peers_[static_cast<size_t>(rank_)];
    const PeerInfo& them = peers_[static_cast<size_t>(p)];
    int best = -1;
    Reach bestReach;
    for (size_t t = 0; t < transports_.size(); ++t) {
      std::string name(transports_[t]->name());
      if (!allowed.empty() && ("," + allowed + ",").find("," + name + ",") == std::string::npos)
        continue;
      if (!them.endpoints.count(name)) continue;
      Reach r = transports_[t]->canConnect(me, them);
      if (r.ok && (best < 0 || r.score > bestReach.score)) {
        best = static_cast<int>(t);
        bestReach = r;
      }
    }
    if (best < 0)
      return invalidArgument("no transport can reach rank " + std::to_string(p) +
                             (allowed.empty() ? "" : " with CHORUS_TRANSPORT='" + allowed + "'"));
    // Connect in slices of a second: between slices, a peer on this host whose process is gone
    // fails the call now instead of at the timeout.
    Transport& t = *transports_[static_cast<size_t>(best)];
    const EndpointBlob& blob = them.endpoints.at(std::string(t.name()));
    StatusOr<std::unique_ptr<Connection>> conn = timeoutError("not attempted");
    while (true) {
      double left = std::chrono::duration<double>(deadline - net::Clock::now()).count();
      conn = t.connect(p, blob, std::clamp(left, 0.001, 1.0));
      if (conn.ok() || conn.status().code() != Code::kTimeout || left <= 1.0) break;
      CHORUS_RETURN_IF_ERROR(checkPeers({p}).withContext("connecting to rank " + std::to_string(p)));
    }
    if (!conn.ok()) {
      Status dead = checkPeers({p});
      if (!dead.ok()) return dead;
      return conn.status().withContext("connecting rank " + std::to_string(rank_) + " to rank " +
                                       std::to_string(p));
    }
    conns_[static_cast<size_t>(p)] = std::move(conn).value();
    connTransport_[static_cast<size_t>(p)] = best;
    made.push_back(p);
    CHORUS_LOG(INFO, NET) << "rank " << rank_ << " -> rank " << p << " via "
                          << transports_[static_cast<size_t>(best)]->name()
                          << (them.hostId == me.hostId ? " (same host)" : " (other host)");
  }
  // Connections whose peer has yet to finish its side (a shared-memory segment it has not
  // mapped): wait, so that no rank leaves setup — and possibly exits — before its peers found it.
  auto pause = std::chrono::microseconds(20);
  auto lastCheck = net::Clock::now();
  for (int p : made) {
    while (!conns_[static_cast<size_t>(p)]->connected()) {
      auto now = net::Clock::now();
      if (now >= deadline)
        return timeoutError("connecting rank " + std::to_string(rank_) + " to rank " +
                            std::to_string(p) + ": it did not complete its side within " +
                            std::to_string(timeoutSeconds_) + " s");
      if (now - lastCheck > std::chrono::milliseconds(100)) {
        lastCheck = now;
        CHORUS_RETURN_IF_ERROR(checkPeers({p}).withContext("connecting to rank " + std::to_string(p)));
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }
  return Status();
}

Status Communicator::connectEagerly() {
  std::string mode = config::getString("CHORUS_CONNECT");
  if (mode == "lazy") return Status();
  if (mode != "eager")
    return invalidArgument("CHORUS_CONNECT='" + mode + "' is neither 'eager' nor 'lazy'");
  std::vector<int> all;
  for (int p = 0; p < nranks_; ++p)
    if (p != rank_) all.push_back(p);
  return ensureConnected(all);
}

HostStaging::WaitEnv Communicator::stagingEnv() {
  HostStaging::WaitEnv env;
  env.spinUs = spinUs_;
  env.timeoutSeconds = timeoutSeconds_;
  env.abortFlag = &aborting_;
  env.checkPeers = [this](const std::vector<int>& p) { return checkPeers(p); };
  return env;
}

Status Communicator::setupStaging() {
  CHORUS_ASSIGN_OR_RETURN(uint64_t slot, config::getBytes("CHORUS_SHM_STAGING"));
  CHORUS_ASSIGN_OR_RETURN(uint64_t round, config::getBytes("CHORUS_SHM_STAGING_ROUND"));
  if (nranks_ < 2 || slot == 0) return Status();
  std::string allowed = config::getString("CHORUS_TRANSPORT");
  if (!allowed.empty() && ("," + allowed + ",").find(",shm,") == std::string::npos)
    return Status();
  Transport* shmTransport = nullptr;
  for (auto& t : transports_)
    if (t->name() == "shm") shmTransport = t.get();
  if (!shmTransport) return Status();
  const PeerInfo& me = peers_[static_cast<size_t>(rank_)];
  for (const PeerInfo& p : peers_)
    if (p.rank != rank_ && !shmTransport->canConnect(me, p).ok) return Status();
  stagingEnv_ = stagingEnv();
  CHORUS_ASSIGN_OR_RETURN(staging_, HostStaging::create(rank_, nranks_, commId_, peers_[0].pid,
                                                        slot, round, stagingEnv_));
  CHORUS_LOG(INFO, INIT) << "all " << nranks_ << " ranks on this host: all-reduces up to "
                         << staging_->slotBytes() << " B run one-shot through a shared staging "
                         << "segment, larger ones "
                         << (round ? "two-shot through it in rounds of " +
                                         std::to_string(staging_->roundBytes()) + " B"
                                   : std::string("by schedules"));
  return Status();
}

// ---- Schedules ---------------------------------------------------------------------------

std::string_view Communicator::chooseAlgorithm(const sched::CollDesc& d) {
  auto forced = forcedAlgo_.find(d.coll);
  if (forced != forcedAlgo_.end()) return forced->second;
  const uint64_t bytes = d.count * d.elemSize;
  const auto key = std::make_pair(static_cast<int>(d.coll), bytes);
  auto it = tunerChoices_.find(key);
  if (it != tunerChoices_.end()) return it->second;
  Platform p;
  p.nranks = nranks_;
  p.oneSided = oneSided_;
  p.stagingBytes = staging_ ? staging_->slotBytes() : 0;
  p.stagedTwoShot = staging_ && staging_->roundBytes() > 0;
  tune::CostInput in = costInput_;
  in.roundBytes = staging_ ? staging_->roundBytes() : 0;
  const tune::Choice c = costModel_.choose(d.coll, d, p, in);
  const AlgoInfo* a = c.algo ? c.algo : defaultAlgorithm(d.coll, d, p);
  if (!a) return std::string_view();
  CHORUS_LOG(INFO, TUNE) << sched::collName(d.coll) << " " << bytes << " B on " << nranks_
                         << " ranks: " << a->name << " (" << c.why << ")";
  if (tunerChoices_.size() > 4096) tunerChoices_.clear();
  tunerChoices_[key] = a->name;
  return a->name;
}

// Algorithms number ranks 0..n-1 and step to rank+1. Where the layout's ring order differs from
// the rank numbering (several hosts with interleaved ranks, NUMA groups), collectives whose data
// layout does not depend on the rank (all-reduce, broadcast, reduce) are built for the rank's
// position in that order and their peers renumbered back, so each host boundary is crossed once
// per ring. All-gather and reduce-scatter place data by rank and keep the numbering.
sched::Schedule Communicator::buildInRingOrder(const AlgoInfo& algo, const sched::CollDesc& d) const {
  const std::vector<int>& order = layout_->ringOrder();
  bool identity = true;
  for (int i = 0; i < nranks_; ++i) identity = identity && order[static_cast<size_t>(i)] == i;
  // All-reduce, broadcast and reduce place nothing by rank: their schedules only need their
  // peers renumbered. The ring all-gather and reduce-scatter also index one buffer by rank (the
  // output's blocks, the input's blocks): built for ring positions, their block offsets are
  // renumbered too. (The hierarchical ones read the hosts from hostOf and need neither; the
  // one-sided ones run on one host, where the order only groups NUMA nodes.)
  const bool positional = d.coll == sched::Coll::kAllReduce || d.coll == sched::Coll::kBroadcast ||
                          d.coll == sched::Coll::kReduce;
  const bool blocked = (d.coll == sched::Coll::kAllGather || d.coll == sched::Coll::kReduceScatter) &&
                       shortAlgoName(algo.name) == "ring";
  if (identity || !(positional || blocked)) return algo::makeSchedule(algo, d, rank_, nranks_);
  std::vector<int> pos(static_cast<size_t>(nranks_));
  for (int i = 0; i < nranks_; ++i) pos[static_cast<size_t>(order[static_cast<size_t>(i)])] = i;
  sched::CollDesc v = d;
  if (d.coll == sched::Coll::kBroadcast || d.coll == sched::Coll::kReduce)
    v.root = pos[static_cast<size_t>(d.root)];
  if (!d.hostOf.empty())
    for (int i = 0; i < nranks_; ++i)
      v.hostOf[static_cast<size_t>(i)] = d.hostOf[static_cast<size_t>(order[static_cast<size_t>(i)])];
  sched::Schedule s = algo::makeSchedule(algo, v, pos[static_cast<size_t>(rank_)], nranks_);
  for (sched::Step& st : s.steps)
    if (st.peer >= 0) st.peer = order[static_cast<size_t>(st.peer)];
  for (int& p : s.peers) p = order[static_cast<size_t>(p)];
  if (blocked) {
    // Block k of the rank-indexed buffer (position k's) is rank order[k]'s. Ring steps never
    // straddle blocks, so each range moves whole.
    const sched::BufId indexed =
        d.coll == sched::Coll::kAllGather ? sched::kOutput : sched::kInput;
    const uint64_t block = d.count * d.elemSize;
    auto move = [&](sched::Range& r) {
      if (r.buf != indexed || block == 0 || r.bytes == 0) return;
      const uint64_t k = r.offset / block, within = r.offset % block;
      r.offset = static_cast<uint64_t>(order[static_cast<size_t>(k)]) * block + within;
    };
    for (sched::Step& st : s.steps) move(st.a), move(st.b), move(st.dst);
    const int64_t mine = static_cast<int64_t>(static_cast<uint64_t>(rank_) * block);
    if (s.inputInOutput >= 0) s.inputInOutput = mine;
    if (s.outputInInput >= 0) s.outputInInput = mine;
  }
  return s;
}

StatusOr<std::shared_ptr<const sched::Schedule>> Communicator::scheduleFor(
    const sched::CollDesc& d, std::string* algoName) {
  bool cacheable = d.coll != sched::Coll::kAllToAllv;
  CacheKey key{d.coll, d.count, d.elemSize, d.root, d.inPlace};
  if (cacheable) {
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      *algoName = it->second.second;
      return it->second.first;
    }
  }
  auto forced = forcedAlgo_.find(d.coll);
  const AlgoInfo* algo = findAlgorithm(d.coll, chooseAlgorithm(d));
  if (!algo)
    return internalError(std::string("no algorithm for ") + sched::collName(d.coll));
  auto s = std::make_shared<sched::Schedule>(buildInRingOrder(*algo, d));
  *algoName = std::string(sched::collName(d.coll)) + ":" + shortAlgoName(algo->name);
  CHORUS_LOG(INFO, TUNE) << *algoName << " for " << sched::collName(d.coll) << " count "
                         << d.count << " x " << d.elemSize << " B on " << nranks_ << " ranks ("
                         << (forced != forcedAlgo_.end() ? "forced by CHORUS_ALGO" : "tuner")
                         << "): " << s->steps.size() << " steps";
  if (cacheable) {
    if (cache_.size() > 512) cache_.clear();
    cache_[key] = {s, *algoName};
  }
  return std::shared_ptr<const sched::Schedule>(s);
}

Status Communicator::runSchedule(const sched::Schedule& s, std::vector<std::byte*> buffers,
                                 DataType dtype, ReduceOp op, const OpIdentity& id) {
  CHORUS_RETURN_IF_ERROR(ensureConnected(s.peers).withContext(describeCall(id, s.algo.c_str())));
  ExecEnv env;
  env.rank = rank_;
  env.connection = [this](int p) { return conns_[static_cast<size_t>(p)].get(); };
  env.checkPeers = [this](const std::vector<int>& p) { return checkPeers(p); };
  env.timeoutSeconds = timeoutSeconds_;
  env.deadline = net::deadlineIn(timeoutSeconds_);
  env.spinUs = spinUs_;
  env.abortFlag = &aborting_;
  return executor_.run(s, std::move(buffers), dtype, op, id, env);
}

Status Communicator::runNow(const CollArgs& a) {
  if (!failed_.ok())
    return Status(failed_.code(), "the communicator failed earlier and cannot be used: " +
                                      failed_.message());
  const size_t elem = dataTypeSize(a.dtype);
  sched::CollDesc d;
  d.coll = a.coll;
  d.count = a.count;
  d.elemSize = elem;
  d.root = a.root;
  d.chunkBytes = std::max<uint64_t>(elem, chunkBytes_ / elem * elem);
  if (layout_->numHosts() > 1) {
    // Host-aware builders (algorithms/hier, the double tree) group ranks by host.
    d.hostOf.resize(static_cast<size_t>(nranks_));
    for (int r = 0; r < nranks_; ++r) d.hostOf[static_cast<size_t>(r)] = layout_->hostOf(r);
  }
  d.sendCounts = a.sendCounts;
  d.sendDispls = a.sendDispls;
  d.recvCounts = a.recvCounts;
  d.recvDispls = a.recvDispls;

  const std::byte* send = static_cast<const std::byte*>(a.send);
  std::byte* recv = static_cast<std::byte*>(a.recv);
  switch (a.coll) {
    case sched::Coll::kAllReduce:
    case sched::Coll::kBroadcast:
    case sched::Coll::kReduce:
    case sched::Coll::kAllToAll: d.inPlace = send == recv && send; break;
    case sched::Coll::kAllGather:
      d.inPlace = recv && send == recv + static_cast<uint64_t>(rank_) * a.count * elem;
      break;
    case sched::Coll::kReduceScatter:
      d.inPlace = send && recv == send + static_cast<uint64_t>(rank_) * a.count * elem;
      break;
    default: d.inPlace = false;
  }

  // PreMulSum: scale this rank's input once, then sum. Avg: sum, then divide.
  int userOp = a.userOp;
  ReduceOp op = ReduceOp::kSum;
  std::unique_ptr<std::byte[]> scaled;
  if (userOp >= 0 && userOp < kNumBuiltinOps && userOp != kOpAvg) {
    op = static_cast<ReduceOp>(userOp);
  } else if (userOp >= kNumBuiltinOps) {
    auto it = preMulOps_.find(userOp);
    if (it == preMulOps_.end())
      return invalidArgument("reduction op " + std::to_string(userOp) + " was destroyed");
    uint64_t inCount = a.count;
    if (a.coll == sched::Coll::kReduceScatter) inCount *= static_cast<uint64_t>(nranks_);
    scaled.reset(new std::byte[std::max<uint64_t>(inCount * elem, 1)]);
    kernels::scale(scaled.get(), send, inCount, a.dtype, it->second.scalar.data());
    send = scaled.get();
    d.inPlace = false;  // the scaled copy is the input now
  }

  OpIdentity id;
  id.coll = a.coll;
  id.count = a.coll == sched::Coll::kAllToAllv ? 0 : a.count;
  id.dtype = a.dtype;
  id.userOp = userOp;
  id.root = a.root;
  // The tuner picks one-shot for everything that fits a staging slot (the cheapest in its model,
  // so that decision is taken here without asking it: the path of an 8-byte all-reduce is a few
  // hundred nanoseconds) and two-shot above, which runs through the staging segment when it has
  // round areas; CHORUS_ALGO may choose otherwise.
  const uint64_t bytes = a.count * elem;
  if (staging_ && a.coll == sched::Coll::kAllReduce && bytes <= staging_->slotBytes() &&
      (forcedAlgo_.empty() || chooseAlgorithm(d) == "oneshot")) {
    // The one-shot all-reduce through the host's staging segment: no schedule, no messages.
    id.seq = ++collSeq_;
    Status st = staging_->allReduce(id, send, recv, a.count, a.dtype, op, stagingEnv_);
    if (!st.ok()) return fail(st);
    ++algoCounts_["allreduce:oneshot"];
  } else if (staging_ && a.coll == sched::Coll::kAllReduce && staging_->roundBytes() > 0 &&
             bytes > staging_->slotBytes() && chooseAlgorithm(d) == "twoshot") {
    id.seq = ++collSeq_;
    Status st = staging_->twoShot(id, send, recv, a.count, a.dtype, op, stagingEnv_);
    if (!st.ok()) return fail(st);
    ++algoCounts_["allreduce:twoshot-staged"];
  } else if (staging_ && a.coll == sched::Coll::kAllGather && staging_->roundBytes() > 0 &&
             chooseAlgorithm(d) == "direct") {
    // The direct all-gather with the staging segment as the exposure (no system call).
    id.seq = ++collSeq_;
    Status st = staging_->allGather(id, send, recv, a.count, elem, stagingEnv_);
    if (!st.ok()) return fail(st);
    ++algoCounts_["allgather:direct-staged"];
  } else {
    std::string algoName;
    CHORUS_ASSIGN_OR_RETURN(auto schedule, scheduleFor(d, &algoName));
    id.seq = ++collSeq_;
    if (staging_) {
      Status st = staging_->announce(id, stagingEnv_);
      if (!st.ok()) return fail(st);
    }
    std::vector<std::byte*> buffers = {const_cast<std::byte*>(send), recv, nullptr};
    Status st = runSchedule(*schedule, std::move(buffers), a.dtype, op, id);
    if (!st.ok()) return fail(st);
    ++algoCounts_[algoName];
  }

  if (userOp == kOpAvg) {
    uint64_t outCount = a.count;
    bool hasOutput = a.coll != sched::Coll::kReduce || a.root == rank_;
    if (hasOutput && outCount > 0)
      kernels::divide(recv, recv, outCount, a.dtype, static_cast<uint64_t>(nranks_));
  }
  return Status();
}

Status Communicator::runP2PNow(const std::vector<P2POp>& ops) {
  if (!failed_.ok())
    return Status(failed_.code(), "the communicator failed earlier and cannot be used: " +
                                      failed_.message());
  // One schedule for the whole group: each op's buffer is a user buffer of its own; FIFO order
  // per peer and direction is the order of the calls, as in NCCL.
  sched::Schedule s;
  s.algo = "p2p";
  std::vector<std::byte*> buffers = {nullptr, nullptr, nullptr};
  for (const P2POp& op : ops) {
    auto id = static_cast<sched::BufId>(buffers.size());
    buffers.push_back(static_cast<std::byte*>(const_cast<void*>(op.buf)));
    sched::Range r{id, 0, op.count * dataTypeSize(op.dtype)};
    if (op.peer == rank_) continue;  // self-pairs are copied below
    if (op.isSend) s.send(op.peer, r);
    else s.recv(op.peer, r);
  }
  // Self send/recv pairs (allowed in NCCL within a group): match in order, copy locally.
  std::vector<size_t> selfSends, selfRecvs;
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].peer == rank_) (ops[i].isSend ? selfSends : selfRecvs).push_back(i);
  if (selfSends.size() != selfRecvs.size())
    return invalidUsage("rank " + std::to_string(rank_) + " posted " +
                        std::to_string(selfSends.size()) + " sends to itself but " +
                        std::to_string(selfRecvs.size()) + " receives from itself");
  for (size_t k = 0; k < selfSends.size(); ++k) {
    const P2POp& snd = ops[selfSends[k]];
    const P2POp& rcv = ops[selfRecvs[k]];
    uint64_t sb = snd.count * dataTypeSize(snd.dtype), rb = rcv.count * dataTypeSize(rcv.dtype);
    if (sb != rb)
      return invalidUsage("rank " + std::to_string(rank_) + " sends " + std::to_string(sb) +
                          " bytes to itself but receives " + std::to_string(rb));
    s.copy({static_cast<sched::BufId>(selfSends[k] + 3), 0, sb},
           {static_cast<sched::BufId>(selfRecvs[k] + 3), 0, rb});
  }
  s.finalize();
  OpIdentity id;
  id.coll = sched::Coll::kSendRecv;
  id.seq = kP2PSeq;
  id.dtype = ops.empty() ? DataType::kUint8 : ops.front().dtype;
  Status st = runSchedule(s, std::move(buffers), id.dtype, ReduceOp::kSum, id);
  if (!st.ok()) return fail(st);
  ++algoCounts_["sendrecv:p2p"];
  return Status();
}

// ---- Split -------------------------------------------------------------------------------

Status Communicator::split(int color, int key, std::unique_ptr<Communicator>* out) {
  out->reset();
  return runOrdered([&]() -> Status {
    if (!failed_.ok())
      return Status(failed_.code(), "the communicator failed earlier and cannot be used: " +
                                        failed_.message());
    uint64_t seq = ++splitSeq_;
    // Members listen where the parent listens: the same interface reaches the same peers.
    net::SockAddr addr = listenAddr_;
    addr.setPort(0);
    std::unique_ptr<Transport> childTcp;
    EndpointBlob blob;
    uint64_t childId = mix(mix(commId_, seq), static_cast<uint64_t>(static_cast<int64_t>(color)));
    // The child's rank is not known yet; the transport learns it below.
    struct Record {
      int32_t color;
      int32_t key;
      uint32_t blobLen;
      uint8_t blob[244];
    };
    static_assert(sizeof(Record) == 256);
    Record mine{};
    mine.color = color;
    mine.key = key;
    // Two-phase: first agree on membership, then each member opens its listener with its new
    // rank. Phase 1: colors and keys.
    std::vector<Record> all(static_cast<size_t>(nranks_));
    CollArgs ag;
    ag.coll = sched::Coll::kAllGather;
    ag.send = &mine;
    ag.recv = all.data();
    ag.count = sizeof(Record);
    ag.dtype = DataType::kUint8;
    CHORUS_RETURN_IF_ERROR(runNow(ag));
    std::vector<int> members;
    for (int r = 0; r < nranks_; ++r)
      if (all[static_cast<size_t>(r)].color == color && color >= 0) members.push_back(r);
    std::stable_sort(members.begin(), members.end(), [&](int x, int y) {
      return all[static_cast<size_t>(x)].key < all[static_cast<size_t>(y)].key;
    });
    int newRank = -1;
    for (size_t i = 0; i < members.size(); ++i)
      if (members[i] == rank_) newRank = static_cast<int>(i);
    if (color >= 0) {
      childTcp = makeTcpTransport(newRank, childId, addr);
      CHORUS_RETURN_IF_ERROR(childTcp->listen(&blob));
      if (blob.size() > sizeof(mine.blob))
        return internalError("tcp endpoint blob of " + std::to_string(blob.size()) +
                             " bytes does not fit the split record");
      mine.blobLen = static_cast<uint32_t>(blob.size());
      std::memcpy(mine.blob, blob.data(), blob.size());
    }
    // Phase 2: endpoints.
    ag.send = &mine;
    CHORUS_RETURN_IF_ERROR(runNow(ag));
    if (color < 0) return Status();

    std::unique_ptr<Communicator> child(new Communicator(newRank, static_cast<int>(members.size())));
    child->commId_ = childId;
    child->listenAddr_ = listenAddr_;
    child->timeoutSeconds_ = timeoutSeconds_;
    child->spinUs_ = spinUs_;
    child->chunkBytes_ = chunkBytes_;
    child->forcedAlgo_ = forcedAlgo_;
    child->oneSided_ = oneSided_;  // the parent's pairs are the child's pairs
    child->minCores_ = minCores_;
    child->minNicMbps_ = minNicMbps_;
    child->shmInside_ = shmInside_;
    // The shm endpoint (pid, namespaces) is the process's own, so the parent's record serves.
    child->transports_.push_back(makeShmTransport(newRank, childId));
    child->transports_.push_back(std::move(childTcp));
    for (size_t i = 0; i < members.size(); ++i) {
      PeerInfo p = peers_[static_cast<size_t>(members[i])];
      const Record& rec = all[static_cast<size_t>(members[i])];
      p.rank = static_cast<int>(i);
      auto shmBlob = p.endpoints.find("shm");
      EndpointBlob shm = shmBlob == p.endpoints.end() ? EndpointBlob() : shmBlob->second;
      p.endpoints.clear();
      if (!shm.empty()) p.endpoints["shm"] = std::move(shm);
      p.endpoints["tcp"] = EndpointBlob(rec.blob, rec.blob + rec.blobLen);
      child->peers_.push_back(std::move(p));
    }
    CHORUS_RETURN_IF_ERROR(child->buildLayout());
    child->conns_.resize(members.size());
    child->connTransport_.assign(members.size(), -1);
    CHORUS_RETURN_IF_ERROR(child->connectEagerly().withContext("split"));
    CHORUS_RETURN_IF_ERROR(child->setupStaging().withContext("split"));
    child->setupCostInput();
    CHORUS_LOG(INFO, INIT) << "split: rank " << rank_ << " -> rank " << newRank << "/"
                           << members.size() << " (color " << color << ", key " << key << ")";
    *out = std::move(child);
    return Status();
  });
}

// ---- Stats, ops, errors ------------------------------------------------------------------

CommStats Communicator::stats() {
  std::lock_guard<std::mutex> exec(execMu_);
  CommStats s;
  for (auto& t : transports_) s.transports.push_back({std::string(t->name())});
  const PeerInfo& me = peers_[static_cast<size_t>(rank_)];
  for (size_t p = 0; p < conns_.size(); ++p) {
    if (!conns_[p]) continue;
    ConnStats cs = conns_[p]->stats();
    TransportStats& ts = s.transports[static_cast<size_t>(connTransport_[p])];
    if (peers_[p].hostId == me.hostId) {
      ts.sentIntra += cs.bytesSent;
      ts.recvIntra += cs.bytesRecv;
    } else {
      ts.sentInter += cs.bytesSent;
      ts.recvInter += cs.bytesRecv;
    }
  }
  s.algos = algoCounts_;
  return s;
}

StatusOr<int> Communicator::createPreMulSum(const void* scalar, DataType dtype) {
  PreMul p{dtype, {}};
  std::memcpy(p.scalar.data(), scalar, dataTypeSize(dtype));
  int op = nextOp_++;
  preMulOps_[op] = p;
  return op;
}

Status Communicator::destroyRedOp(int op) {
  if (op < kNumBuiltinOps) return invalidArgument("built-in reduction op " + std::to_string(op) +
                                                  " cannot be destroyed");
  if (!preMulOps_.erase(op))
    return invalidArgument("reduction op " + std::to_string(op) +
                           " was not created on this communicator (or was destroyed)");
  return Status();
}

bool Communicator::isValidOp(int op, DataType dtype, std::string* why) const {
  if (op >= 0 && op < kNumBuiltinOps) return true;
  auto it = preMulOps_.find(op);
  if (it == preMulOps_.end()) {
    *why = "op " + std::to_string(op) + " is neither a built-in op nor a PreMulSum op of this "
           "communicator";
    return false;
  }
  if (it->second.dtype != dtype) {
    *why = std::string("PreMulSum op ") + std::to_string(op) + " was created for " +
           dataTypeName(it->second.dtype) + ", not " + dataTypeName(dtype);
    return false;
  }
  return true;
}

void Communicator::setLastError(const std::string& msg) {
  std::lock_guard<std::mutex> lock(errMu_);
  lastError_ = msg;
}

const char* Communicator::lastError() {
  std::lock_guard<std::mutex> lock(errMu_);
  return lastError_.c_str();
}

}  // namespace chorus
