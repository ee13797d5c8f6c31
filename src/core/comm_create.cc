// Creating a communicator: transports and the bootstrap record, the layout, the agreement on
// what selection may rely on, the host window, calibration.
//
// The agreement. Every rank must pick the same algorithm for a call, so everything selection
// reads is agreed once, at creation, in one all-gather of a small vote: whether this rank can
// read every peer one-sidedly, the slowest link class it has to a peer on its host and to one
// on another host, the cores of its host, the speed of its nearest NIC, and whether one
// transport that can make a host window reaches all its peers on one host. The communicator
// takes the conjunction of the booleans, the slowest classes, the fewest cores and the slowest
// NIC; a split runs the same vote among its members (over the parent).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <utility>

#include "src/base/config.h"
#include "src/base/host_id.h"
#include "src/base/logging.h"
#include "src/bootstrap/bootstrap.h"
#include "src/bootstrap/peer_info.h"
#include "src/core/comm_internal.h"
#include "src/core/communicator.h"
#include "src/core/calibration.h"
#include "src/topology/placement.h"
#include "src/tuning/host_machine.h"

namespace chorus {
namespace {

uint64_t selfPidNamespace() {
  char buf[64] = {};
  ssize_t n = ::readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
  if (n <= 0) return 0;
  // "pid:[4026531836]"
  const char* open = std::strchr(buf, '[');
  return open ? std::strtoull(open + 1, nullptr, 10) : 0;
}

// What this host's caches say, for the self-sizing (nothing known when detection failed).
cost::MachineDesc hostMachine(int ranksOnHost) {
  StatusOr<const topo::System*> sys = topo::processSystem();
  return sys.ok() ? tune::machineOf(**sys, ranksOnHost) : cost::MachineDesc{0, 0, ranksOnHost};
}

constexpr uint8_t kReadable = 1, kWindowOk = 2, kHasIntra = 4, kHasInter = 8;

}  // namespace

uint64_t mixId(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

std::vector<uint8_t> Vote::encode() const {
  std::vector<uint8_t> out(kBytes, 0);
  out[0] = flags;
  out[1] = static_cast<uint8_t>(intra);
  out[2] = static_cast<uint8_t>(inter);
  std::memcpy(out.data() + 4, &cores, 4);
  std::memcpy(out.data() + 8, &nicMbps, 4);
  std::memcpy(out.data() + 12, &memBwGBps, 4);
  std::memcpy(out.data() + 16, &cacheBwGBps, 4);
  std::memcpy(out.data() + 20, &cacheKiB, 4);
  std::memcpy(out.data() + 24, &lineNs, 4);
  std::memcpy(out.data() + 28, &handoffUs, 4);
  std::memcpy(out.data() + 32, &tcpLatencyUs, 4);
  std::memcpy(out.data() + 36, &tcpBwGBps, 4);
  std::memcpy(out.data() + 40, &crossCoreGBps, 4);
  std::memcpy(out.data() + 44, &llcKiB, 4);
  return out;
}

StatusOr<Vote> Vote::decode(const std::vector<uint8_t>& in) {
  if (in.size() != kBytes) return invalidUsage("bootstrap: a rank sent a malformed capability vote");
  Vote v;
  v.flags = in[0];
  if (in[1] >= cost::kNumLinkClasses || in[2] >= cost::kNumLinkClasses)
    return invalidUsage("bootstrap: a rank voted for an unknown link class");
  v.intra = static_cast<cost::LinkClass>(in[1]);
  v.inter = static_cast<cost::LinkClass>(in[2]);
  std::memcpy(&v.cores, in.data() + 4, 4);
  std::memcpy(&v.nicMbps, in.data() + 8, 4);
  std::memcpy(&v.memBwGBps, in.data() + 12, 4);
  std::memcpy(&v.cacheBwGBps, in.data() + 16, 4);
  std::memcpy(&v.cacheKiB, in.data() + 20, 4);
  std::memcpy(&v.lineNs, in.data() + 24, 4);
  std::memcpy(&v.handoffUs, in.data() + 28, 4);
  std::memcpy(&v.tcpLatencyUs, in.data() + 32, 4);
  std::memcpy(&v.tcpBwGBps, in.data() + 36, 4);
  std::memcpy(&v.crossCoreGBps, in.data() + 40, 4);
  std::memcpy(&v.llcKiB, in.data() + 44, 4);
  for (float x : {v.memBwGBps, v.cacheBwGBps, v.lineNs, v.crossCoreGBps, v.handoffUs,
                  v.tcpLatencyUs, v.tcpBwGBps})
    if (!std::isfinite(x) || x < 0)
      return invalidUsage("bootstrap: a rank voted for a calibrated term that is not a time or rate");
  return v;
}

Vote Vote::of(const Peers& peers, uint32_t cores, uint32_t nicMbps) {
  Vote v;
  v.cores = cores;
  v.nicMbps = nicMbps;
  bool anyIntra = false, anyInter = false;
  if (peers.everyPeerReadable()) v.flags |= kReadable;
  if (peers.linkClasses(&v.intra, &anyIntra, &v.inter, &anyInter)) {
    if (anyIntra) v.flags |= kHasIntra;
    if (anyInter) v.flags |= kHasInter;
  }
  if (peers.windowTransport()) v.flags |= kWindowOk;
  return v;
}

tune::Agreement Vote::combine(const std::vector<Vote>& votes, uint64_t chunkBytes) {
  tune::Agreement a;
  a.chunkBytes = chunkBytes;
  a.oneSided = votes.size() > 1;
  bool windowOk = votes.size() > 1, anyIntra = false, anyInter = false;
  a.minCores = UINT32_MAX;
  a.minNicMbps = UINT32_MAX;
  for (const Vote& v : votes) {
    a.oneSided = a.oneSided && (v.flags & kReadable);
    windowOk = windowOk && (v.flags & kWindowOk);
    if (v.flags & kHasIntra) {
      a.intra = anyIntra ? cost::slower(a.intra, v.intra) : v.intra;
      anyIntra = true;
    }
    if (v.flags & kHasInter) {
      a.inter = anyInter ? cost::slower(a.inter, v.inter) : v.inter;
      anyInter = true;
    }
    a.minCores = std::min(a.minCores, v.cores);
    a.minNicMbps = std::min(a.minNicMbps, v.nicMbps);
  }
  if (a.minCores == UINT32_MAX) a.minCores = 0;
  if (a.minNicMbps == UINT32_MAX) a.minNicMbps = 0;
  // A window is only a possibility here; setupWindow() makes it and fills the geometry.
  a.window.slotBytes = windowOk ? 1 : 0;
  return a;
}

void Vote::applyHostTerms(const std::vector<Vote>& votes, cost::CostModel* model) {
  // Per term, over the votes that carry it: the lowest rate, or the longest time.
  auto lowest = [](auto acc, auto v) { return v > 0 ? (acc > 0 ? std::min(acc, v) : v) : acc; };
  auto longest = [](float acc, float v) { return std::max(acc, v); };
  cost::HostCalibration c;
  float mem = 0, cache = 0, line = 0, cross = 0, handoff = 0, tcpLat = 0, tcpBw = 0;
  uint32_t kib = 0, llcKiB = 0;
  for (const Vote& v : votes) {
    mem = lowest(mem, v.memBwGBps);
    cache = lowest(cache, v.cacheBwGBps);
    kib = lowest(kib, v.cacheKiB);
    llcKiB = lowest(llcKiB, v.llcKiB);
    line = longest(line, v.lineNs);
    cross = lowest(cross, v.crossCoreGBps);
    handoff = longest(handoff, v.handoffUs);
    tcpLat = longest(tcpLat, v.tcpLatencyUs);
    tcpBw = lowest(tcpBw, v.tcpBwGBps);
  }
  c.memBwGBps = mem;
  c.cacheBwGBps = cache;
  c.links = {.lineNs = line, .crossCoreGBps = cross, .handoffUs = handoff,
             .tcpLatencyUs = tcpLat, .tcpBwGBps = tcpBw};
  cost::applyCalibration(c, static_cast<uint64_t>(kib) << 10, model,
                         static_cast<uint64_t>(llcKiB) << 10);
}

Communicator::Communicator(int rank, int nranks)
    : rank_(rank), nranks_(nranks), queue_([this](const Status& s) { setLastError(s.toString()); }) {}

Communicator::~Communicator() = default;

Status Communicator::readConfig() {
  CHORUS_ASSIGN_OR_RETURN(timeoutSeconds_, config::getDouble("CHORUS_TIMEOUT"));
  CHORUS_ASSIGN_OR_RETURN(int64_t spin, config::getInt("CHORUS_SPIN_US"));
  CHORUS_ASSIGN_OR_RETURN(int64_t yield, config::getInt("CHORUS_YIELD_US"));
  for (auto [name, value] :
       {std::pair{"CHORUS_SPIN_US", spin}, std::pair{"CHORUS_YIELD_US", yield}})
    if (value < 0)
      return invalidArgument(std::string(name) + " must not be negative, got " +
                             std::to_string(value));
  spinUs_ = static_cast<int>(spin);
  yieldUs_ = static_cast<int>(yield);
  CHORUS_ASSIGN_OR_RETURN(chunkBytes_, config::getBytes("CHORUS_CHUNK_SIZE"));
  if (chunkBytes_ < 64) return invalidArgument("CHORUS_CHUNK_SIZE must be at least 64 bytes");
  CHORUS_ASSIGN_OR_RETURN(int64_t cachedPlans, config::getInt("CHORUS_PLAN_CACHE"));
  if (cachedPlans < 1)
    return invalidArgument("CHORUS_PLAN_CACHE must be at least 1 plan, got " +
                           std::to_string(cachedPlans));
  plans_ = PlanCache(static_cast<size_t>(cachedPlans), PlanCache::kDefaultBytes);
  CHORUS_ASSIGN_OR_RETURN(mask_, tune::AlgoMask::parse(config::getString("CHORUS_ALGO")));
  return Status();
}

// Where this rank runs, and how many cores and how fast a NIC its host has. Detection failing
// soft leaves -1 (unknown); a bad CHORUS_TOPO_FILE fails the creation.
StatusOr<HostFacts> hostFacts(PeerInfo* self) {
  HostFacts f;
  CHORUS_ASSIGN_OR_RETURN(const topo::System* sys, topo::processSystem());
  self->numa = topo::currentNumaNode(*sys);
  self->nic = topo::nearestNic(*sys, self->numa);
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  f.cores = cores > 0 ? static_cast<uint32_t>(cores) : 0;
  const std::vector<int> nics = sys->ofType(topo::NodeType::kNic);
  if (self->nic >= 0 && static_cast<size_t>(self->nic) < nics.size())
    f.nicMbps = static_cast<uint32_t>(sys->node(nics[static_cast<size_t>(self->nic)]).speedGbps * 1000);
  return f;
}

StatusOr<std::unique_ptr<Communicator>> Communicator::create(
    std::unique_ptr<bootstrap::Bootstrap> boot, const bootstrap::JobId& job, int rank,
    int nranks, uint64_t salt) {
  std::unique_ptr<Communicator> c(new Communicator(rank, nranks));
  c->job_ = std::make_shared<const bootstrap::JobId>(job);
  log::setRank(rank);
  CHORUS_RETURN_IF_ERROR(c->readConfig());

  uint64_t id = 0;
  for (uint8_t b : job.secret) id = mixId(id, b);
  if (salt != 0) id = mixId(id, salt);
  c->commId_ = id;

  PeerInfo self;
  self.rank = rank;
  self.hostId = localHostId();
  self.pid = static_cast<int32_t>(::getpid());
  self.pidNamespace = selfPidNamespace();
  self.hostname = localHostname();
  CHORUS_ASSIGN_OR_RETURN(HostFacts facts, hostFacts(&self));

  TransportContext ctx;
  ctx.rank = rank;
  ctx.nranks = nranks;
  ctx.commId = c->commId_;
  ctx.self = identityOf(self);
  ctx.root = &job.root;
  CHORUS_ASSIGN_OR_RETURN(c->peers_, Peers::create(ctx, &self));
  c->peers_->setTimeout(c->timeoutSeconds_);

  CHORUS_ASSIGN_OR_RETURN(auto all, boot->allGather(bootstrap::serializePeerInfo(self)));
  std::vector<PeerInfo> records(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    CHORUS_ASSIGN_OR_RETURN(records[static_cast<size_t>(r)],
                            bootstrap::deserializePeerInfo(all[static_cast<size_t>(r)]));
    if (records[static_cast<size_t>(r)].rank != r)
      return invalidUsage("bootstrap: rank " + std::to_string(r) + "'s record claims rank " +
                          std::to_string(records[static_cast<size_t>(r)].rank));
  }
  CHORUS_RETURN_IF_ERROR(c->peers_->setRecords(std::move(records)));
  c->boot_ = std::move(boot);
  CHORUS_RETURN_IF_ERROR(c->buildLayout());
  CHORUS_RETURN_IF_ERROR(c->peers_->connectEagerly());

  Vote mine = Vote::of(*c->peers_, facts.cores, facts.nicMbps);
  CHORUS_RETURN_IF_ERROR(c->selfCalibrate(&mine));
  CHORUS_ASSIGN_OR_RETURN(auto votes, c->boot_->allGather(mine.encode()));
  std::vector<Vote> decoded;
  for (const auto& v : votes) {
    CHORUS_ASSIGN_OR_RETURN(Vote d, Vote::decode(v));
    decoded.push_back(d);
  }
  c->agreed_ = Vote::combine(decoded, c->chunkBytes_);
  Vote::applyHostTerms(decoded, &c->model_);
  CHORUS_RETURN_IF_ERROR(c->setupWindow());
  c->finishSetup();
  CHORUS_RETURN_IF_ERROR(c->calibrate());
  // The user's word over the table and the calibration. Every rank must say the same: a rank
  // that picks another algorithm for a call fails it, naming both ranks' calls.
  if (Status s = c->model_.applyOverrides(config::getString("CHORUS_COST")); !s.ok())
    return s.withContext("CHORUS_COST");
  int local = 0;
  for (int r = 0; r < nranks; ++r) local += c->layout_->sameHost(r, rank) ? 1 : 0;
  CHORUS_LOG(INFO, INIT) << "comm " << std::hex << c->commId_ << std::dec << " rank " << rank
                         << "/" << nranks << " on " << self.hostname << ": " << local
                         << " ranks on this host, " << c->layout_->numHosts() << " hosts";
  return c;
}

Status Communicator::buildLayout() {
  std::vector<topo::RankPlace> places;
  for (int r = 0; r < peers_->size(); ++r) {
    const PeerInfo& p = peers_->record(r);
    places.push_back(topo::RankPlace{p.hostId, p.numa, p.gpu, p.nic, p.hostname});
  }
  auto layout = topo::Layout::make(std::move(places));
  if (!layout.ok()) return layout.status().withContext("rank layout");
  layout_ = std::make_unique<topo::Layout>(std::move(layout).value());
  hostOf_.clear();
  if (layout_->numHosts() > 1)
    for (int r = 0; r < nranks_; ++r) hostOf_.push_back(layout_->hostOf(r));
  if (rank_ == 0) {
    CHORUS_LOG(INFO, TOPO) << "layout: " << layout_->describe();
  }
  return Status();
}

Status Communicator::setupWindow() {
  const bool possible = agreed_.window.slotBytes != 0;
  agreed_.window = {};
  if (!possible || nranks_ < 2) return Status();
  Transport* t = peers_->windowTransport();
  if (!t) return internalError("the ranks agreed on a host window that no transport offers");
  exec::ExecEnv env;
  env.wait.timeoutSeconds = timeoutSeconds_;
  env.wait.deadline = net::deadlineIn(timeoutSeconds_);
  env.wait.checkPeer = [this](int r) { return peers_->alive(r); };
  CHORUS_ASSIGN_OR_RETURN(window_,
                          t->createWindow(rank_, nranks_, identityOf(peers_->record(0)), env.wait,
                                          hostMachine(nranks_)));
  agreed_.window.slotBytes = window_->slotBytes();
  agreed_.window.roundBytes = window_->roundBytes();
  CHORUS_LOG(INFO, INIT) << "all " << nranks_ << " ranks on this host: " << t->name()
                         << " host window with a " << agreed_.window.slotBytes << "-byte slot and "
                         << agreed_.window.roundBytes << "-byte rounds";
  return Status();
}

// After the agreement: the platform selection sees, the executor's environment, and the spin
// policy (more ranks than cores on this host: a spinning waiter only steals the core from the
// rank that has work, so block sooner, unless CHORUS_SPIN_US says otherwise).
void Communicator::finishSetup() {
  platform_ = tune::platformFor(*layout_, agreed_);
  // Whose buffers lie in chorusMemAlloc segments matters where one-sided reads go over shared
  // memory on one host (cost::CostInput::segments); nothing is known before the first call.
  const bool oneHostReads = platform_.oneSided && platform_.cost.hosts == 1 &&
                            platform_.cost.intra == cost::LinkClass::kShm;
  learnSegments_.fill(false);
  for (const algo::AlgoInfo* a : algo::allAlgorithms())
    if (oneHostReads && algo::everyRankHearsEveryRank(*a))
      learnSegments_[static_cast<size_t>(a->coll)] = true;
  segments_.fill(-1);
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  const int local = layout_->localSize(rank_);
  if (cores > 0 && local > cores && !config::isSet("CHORUS_SPIN_US")) {
    spinUs_ = 0;
    CHORUS_LOG(INFO, INIT) << local << " ranks on " << cores << " cores: waits do not spin";
  }
  env_.rank = rank_;
  env_.nranks = nranks_;
  env_.peers = peers_.get();
  env_.window = window_.get();
  queue_.setStartEarly(window_ != nullptr);  // only host-window calls run in parts
  env_.wait.spinUs = spinUs_;
  env_.wait.yieldUs = yieldUs_;
  env_.wait.timeoutSeconds = timeoutSeconds_;
  env_.wait.abortFlag = &aborting_;
  env_.wait.checkPeer = [this](int r) { return peers_->alive(r); };
  if (rank_ == 0) {
    CHORUS_LOG(INFO, TUNE) << "cost model: " << layout_->numHosts() << " hosts, "
                           << layout_->maxLocalSize() << " ranks per host, intra-host "
                           << cost::linkClassName(agreed_.intra) << ", inter-host "
                           << cost::linkClassName(agreed_.inter) << ", "
                           << platform_.cost.coresPerHost << " cores"
                           << (agreed_.oneSided ? ", one-sided" : "")
                           << (window_ ? ", host window" : "");
  }
}

void Communicator::setTimeout(double seconds) {
  std::lock_guard<FutexMutex> exec(queue_.execMutex());
  timeoutSeconds_ = seconds;
  env_.wait.timeoutSeconds = seconds;
  peers_->setTimeout(seconds);
}

namespace {

// CHORUS_TUNE: off, auto (the default, also empty) or measure.
StatusOr<std::string> tuneMode() {
  std::string mode = config::getString("CHORUS_TUNE");
  if (mode.empty()) mode = "auto";
  if (mode != "auto" && mode != "off" && mode != "measure")
    return invalidArgument("CHORUS_TUNE='" + mode + "' is not off, auto or measure");
  return mode;
}

// One calibration per process: every communicator of a process on one host would measure the
// same, and a process making many communicators should not pay each time.
std::mutex gHostCalMutex;
std::optional<cost::HostCalibration> gHostCal;

}  // namespace

// Self-calibration (CHORUS_TUNE unset, auto or measure; not off). The leader of each host (its
// lowest rank) takes the host's memory rates and link terms from the cache file or measures
// them (cost::calibrateHost: once per host and boot; the memory rates 34-150 ms cold on the
// busy development VM, the link probes 10-16 ms, 0.25 ms from the file, docs/performance.md)
// and derives the cache rule from the detected caches (cost::deriveSizes); its vote carries
// them, so the host's other ranks, and every other host, learn them in the agreement's round
// without another bootstrap round. Everyone then takes the slowest host's terms
// (Vote::applyHostTerms): one model on every rank.
Status Communicator::selfCalibrate(Vote* mine) {
  CHORUS_ASSIGN_OR_RETURN(const std::string mode, tuneMode());
  if (mode == "off" || nranks_ < 2 || layout_->hostLeader(layout_->hostOf(rank_)) != rank_)
    return Status();
  const auto started = std::chrono::steady_clock::now();
  std::string note = "this process's earlier calibration";
  cost::HostCalibration cal;
  {
    std::lock_guard<std::mutex> lock(gHostCalMutex);
    if (!gHostCal) gHostCal = cost::calibrateHost(cost::defaultCacheDir(), cost::hostKey(), &note);
    cal = *gHostCal;
  }
  CHORUS_ASSIGN_OR_RETURN(const cost::DerivedSizes sizes,
                          cost::resolveSizes(hostMachine(layout_->localSize(rank_))));
  mine->memBwGBps = static_cast<float>(cal.memBwGBps);
  mine->cacheBwGBps = static_cast<float>(cal.cacheBwGBps);
  mine->cacheKiB = static_cast<uint32_t>(std::min<uint64_t>(sizes.cacheBytes >> 10, UINT32_MAX));
  mine->llcKiB = static_cast<uint32_t>(std::min<uint64_t>(sizes.llcBytes >> 10, UINT32_MAX));
  mine->lineNs = static_cast<float>(cal.links.lineNs);
  mine->crossCoreGBps = static_cast<float>(cal.links.crossCoreGBps);
  mine->handoffUs = static_cast<float>(cal.links.handoffUs);
  mine->tcpLatencyUs = static_cast<float>(cal.links.tcpLatencyUs);
  mine->tcpBwGBps = static_cast<float>(cal.links.tcpBwGBps);
  CHORUS_LOG(INFO, TUNE) << "self-calibration (" << cost::sourceName(cal.source) << "): memory "
                         << cal.memBwGBps << " GB/s beyond the cache (copy " << cal.copyGBps
                         << ", reduce " << cal.reduceGBps << "), " << cal.cacheBwGBps
                         << " GB/s within " << cost::sizeText(sizes.cacheBytes) << " ("
                         << cost::sourceName(sizes.cacheSource) << "); cache line between cores "
                         << cal.links.lineNs << " ns (" << cal.links.crossCoreGBps
                         << " GB/s streaming), core hand-over " << cal.links.handoffUs
                         << " us, loopback TCP " << cal.links.tcpLatencyUs << " us / "
                         << cal.links.tcpBwGBps << " GB/s (0: not measured); " << note << "; "
                         << std::chrono::duration<double, std::milli>(
                                std::chrono::steady_clock::now() - started).count()
                         << " ms";
  return Status();
}

// CHORUS_TUNE=measure: rank 0 ping-pongs with its ring neighbour on its host (the intra-host
// link class) and, on several hosts, with the leader of the next host (the inter-host class),
// fits latency and bandwidth (cost::fitFromPingPong) and hands the constants to every rank
// through the bootstrap, so all ranks predict, and choose, alike. Fixed repetition counts keep
// it short: about 10 ms over shared memory, 30 ms over loopback TCP; by construction under
// 200 ms on links of 1 Gb/s and faster.
Status Communicator::calibrate() {
  CHORUS_ASSIGN_OR_RETURN(const std::string mode, tuneMode());
  if (mode != "measure" || nranks_ < 2) return Status();
  const auto started = std::chrono::steady_clock::now();
  struct Probe {
    int peer = -1;
    cost::LinkClass cls = cost::LinkClass::kShm;
  };
  std::vector<Probe> probes;
  const int next = layout_->ringNext(0);
  if (layout_->sameHost(0, next) && next != 0) probes.push_back({next, agreed_.intra});
  if (layout_->numHosts() > 1) probes.push_back({layout_->hostLeader(1), agreed_.inter});
  const uint64_t sizes[] = {8, 4096, 65536, 1 << 20};
  const int reps[] = {100, 50, 20, 4};
  std::vector<std::byte> buf(1 << 20);
  std::vector<double> fitted;  // rank 0: per probe class, latency, bandwidth
  for (const Probe& pr : probes) {
    const bool initiator = rank_ == 0;
    if (!initiator && rank_ != pr.peer) continue;
    const int other = initiator ? pr.peer : 0;
    std::vector<std::pair<uint64_t, double>> samples;
    for (size_t s = 0; s < std::size(sizes); ++s) {
      P2POp send{true, buf.data(), sizes[s], DataType::kUint8, other};
      P2POp recv{false, buf.data(), sizes[s], DataType::kUint8, other};
      for (int warm = 0; warm < 2; ++warm) {
        CHORUS_RETURN_IF_ERROR(runP2PNow({initiator ? &send : &recv, 1}).withContext("CHORUS_TUNE"));
        CHORUS_RETURN_IF_ERROR(runP2PNow({initiator ? &recv : &send, 1}).withContext("CHORUS_TUNE"));
      }
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < reps[s]; ++i) {
        CHORUS_RETURN_IF_ERROR(runP2PNow({initiator ? &send : &recv, 1}).withContext("CHORUS_TUNE"));
        CHORUS_RETURN_IF_ERROR(runP2PNow({initiator ? &recv : &send, 1}).withContext("CHORUS_TUNE"));
      }
      const double us = std::chrono::duration<double, std::micro>(
                            std::chrono::steady_clock::now() - t0).count() / reps[s] / 2;
      samples.push_back({sizes[s], us});
    }
    if (initiator) {
      const cost::LinkConstants k = cost::fitFromPingPong(samples, model_.constants(pr.cls));
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
    const auto cls = static_cast<cost::LinkClass>(static_cast<int>(values[i]));
    cost::LinkConstants k = model_.constants(cls);
    k.latencyUs = values[i + 1];
    k.bandwidthGBps = values[i + 2];
    model_.setConstants(cls, k);
    if (rank_ == 0) {
      CHORUS_LOG(INFO, TUNE) << "CHORUS_TUNE=measure: " << cost::linkClassName(cls)
                             << " latency " << k.latencyUs << " us, " << k.bandwidthGBps
                             << " GB/s";
    }
  }
  plans_.clear();  // chosen with the old constants
  lastPlan_.reset();
  for (RecentP2P& r : recentP2P_) r.plan.reset();
  if (rank_ == 0) {
    CHORUS_LOG(INFO, TUNE) << "CHORUS_TUNE=measure took "
                           << std::chrono::duration<double, std::milli>(
                                  std::chrono::steady_clock::now() - started).count()
                           << " ms";
  }
  return Status();
}

}  // namespace chorus
