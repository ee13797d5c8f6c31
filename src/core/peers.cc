#include "src/core/peers.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#include "src/base/config.h"
#include "src/base/logging.h"
#include "src/base/socket_util.h"
#include "src/base/strings.h"

namespace chorus {
namespace {

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

// CHORUS_TRANSPORT: empty allows every kind.
bool allowed(std::string_view name) {
  const std::string list = config::getString("CHORUS_TRANSPORT");
  if (list.empty()) return true;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t end = list.find(',', pos);
    if (end == std::string::npos) end = list.size();
    if (std::string_view(list).substr(pos, end - pos) == name) return true;
    pos = end + 1;
  }
  return false;
}

}  // namespace

PeerIdentity identityOf(const PeerInfo& p) {
  PeerIdentity id;
  id.rank = p.rank;
  id.hostId = p.hostId;
  id.pid = p.pid;
  id.pidNamespace = p.pidNamespace;
  return id;
}

Peers::~Peers() = default;

Status Peers::listenAll(PeerInfo* self) {
  for (auto& t : transports_) {
    std::vector<uint8_t> blob;
    CHORUS_RETURN_IF_ERROR(t->listen(&blob));
    self->endpoints[std::string(t->name())] = std::move(blob);
  }
  return Status();
}

StatusOr<std::unique_ptr<Peers>> Peers::create(const TransportContext& ctx, PeerInfo* self) {
  std::unique_ptr<Peers> p(new Peers());
  p->rank_ = ctx.rank;
  std::string unknown;
  const std::string list = config::getString("CHORUS_TRANSPORT");
  for (const TransportFactory* f : allTransports()) {
    if (!allowed(f->name)) continue;
    if (f->unavailable) {
      if (const char* why = f->unavailable()) {
        CHORUS_LOG(INFO, NET) << f->name << " transport not used: " << why;
        if (!list.empty())
          return invalidArgument("CHORUS_TRANSPORT='" + list + "' asks for " + f->name +
                                 ", which cannot be used here: " + why);
        continue;
      }
    }
    CHORUS_ASSIGN_OR_RETURN(auto t, f->create(ctx));
    p->transports_.push_back(std::move(t));
  }
  if (!list.empty()) {
    // Every named kind must exist (a typo must not silently fall back to another transport).
    size_t pos = 0;
    while (pos <= list.size()) {
      size_t end = list.find(',', pos);
      if (end == std::string::npos) end = list.size();
      const std::string item = list.substr(pos, end - pos);
      pos = end + 1;
      if (item.empty() || findTransport(item)) continue;
      std::string known;
      for (const TransportFactory* f : allTransports())
        appendItem(known, f->name);
      return invalidArgument("CHORUS_TRANSPORT='" + list + "': no transport '" + item +
                             "' in this build (built: " + known + ")");
    }
  }
  if (p->transports_.empty())
    return invalidArgument("CHORUS_TRANSPORT='" + list + "' allows no transport of this build");
  CHORUS_RETURN_IF_ERROR(p->listenAll(self));
  CHORUS_ASSIGN_OR_RETURN(net::SockAddr addr, net::chooseLocalAddress(ctx.root));
  CHORUS_RETURN_IF_ERROR(p->startHeartbeat(ctx.rank, ctx.commId, addr, self));
  return p;
}

StatusOr<std::unique_ptr<Peers>> Peers::createForSplit(const Peers& parent,
                                                       const TransportContext& child,
                                                       PeerInfo* self) {
  std::unique_ptr<Peers> p(new Peers());
  p->rank_ = child.rank;
  p->timeoutSeconds_ = parent.timeoutSeconds_;
  for (const auto& t : parent.transports_) {
    CHORUS_ASSIGN_OR_RETURN(auto c, t->forSplit(child));
    p->transports_.push_back(std::move(c));
  }
  CHORUS_RETURN_IF_ERROR(p->listenAll(self));
  // A split's heartbeats leave where its parent's do (the same interface reaches the same peers).
  net::SockAddr addr;
  if (parent.heartbeat_) {
    addr = parent.heartbeat_->address();
  } else {
    CHORUS_ASSIGN_OR_RETURN(addr, net::chooseLocalAddress(nullptr));
  }
  CHORUS_RETURN_IF_ERROR(p->startHeartbeat(child.rank, child.commId, addr, self));
  return p;
}

Status Peers::startHeartbeat(int rank, uint64_t commId, const net::SockAddr& addr,
                             PeerInfo* self) {
  CHORUS_ASSIGN_OR_RETURN(heartbeat_, Heartbeat::create(rank, commId, addr));
  if (heartbeat_) self->heartbeat = heartbeat_->endpoint();
  return Status();
}

Status Peers::setRecords(std::vector<PeerInfo> records) {
  records_ = std::move(records);
  if (!heartbeat_) return Status();
  std::vector<std::vector<uint8_t>> endpoints;
  for (const PeerInfo& r : records_) endpoints.push_back(r.heartbeat);
  return heartbeat_->start(endpoints);
}

Status Peers::alive(int peer) {
  const PeerInfo& me = records_[static_cast<size_t>(rank_)];
  const PeerInfo& info = records_[static_cast<size_t>(peer)];
  if (info.hostId == me.hostId && info.pidNamespace == me.pidNamespace && info.pid > 0 &&
      processDead(info.pid))
    return remoteError("rank " + std::to_string(peer) + " (pid " + std::to_string(info.pid) +
                       " on this host) has died");
  if (heartbeat_) return heartbeat_->check(peer);
  return Status();
}

Transport* Peers::transportFor(int peer, Reach* reach) const {
  const PeerIdentity me = identityOf(records_[static_cast<size_t>(rank_)]);
  const PeerInfo& them = records_[static_cast<size_t>(peer)];
  Transport* best = nullptr;
  Reach bestReach;
  for (const auto& t : transports_) {
    auto blob = them.endpoints.find(std::string(t->name()));
    if (blob == them.endpoints.end()) continue;
    const Reach r = t->canConnect(me, identityOf(them), blob->second);
    if (r.ok && (!best || r.score > bestReach.score)) {
      best = t.get();
      bestReach = r;
    }
  }
  if (reach) *reach = bestReach;
  return best;
}

bool Peers::everyPeerReadable() const {
  if (size() < 2) return false;
  for (int p = 0; p < size(); ++p) {
    if (p == rank_) continue;
    const Connection* c = conns_[static_cast<size_t>(p)].get();
    if (!c || !c->canRead()) return false;
  }
  return true;
}

bool Peers::linkClasses(cost::LinkClass* intra, bool* anyIntra, cost::LinkClass* inter,
                        bool* anyInter) const {
  *anyIntra = *anyInter = false;
  const PeerInfo& me = records_[static_cast<size_t>(rank_)];
  for (int p = 0; p < size(); ++p) {
    if (p == rank_) continue;
    Reach r;
    if (!transportFor(p, &r)) return false;
    const bool same = records_[static_cast<size_t>(p)].hostId == me.hostId;
    cost::LinkClass& c = same ? *intra : *inter;
    bool& any = same ? *anyIntra : *anyInter;
    c = any ? cost::slower(c, r.link) : r.link;
    any = true;
  }
  return true;
}

Transport* Peers::windowTransport() const {
  if (size() < 2) return nullptr;
  Transport* common = nullptr;
  for (int p = 0; p < size(); ++p) {
    if (p == rank_) continue;
    if (records_[static_cast<size_t>(p)].hostId != records_[static_cast<size_t>(rank_)].hostId)
      return nullptr;
    Transport* t = transportFor(p);
    if (!t || (common && t != common)) return nullptr;
    common = t;
  }
  return common && common->caps().hostWindow ? common : nullptr;
}

Status Peers::connectMissing(const std::vector<int>& peers) {
  if (conns_.size() != records_.size()) {
    conns_.resize(records_.size());
    connTransport_.assign(records_.size(), -1);
  }
  // Dial the higher ranks first (completes through the listen backlog), then accept the lower
  // ones: no cycle of ranks waiting for each other can form.
  std::vector<int> todo;
  for (int p : peers)
    if (!conns_[static_cast<size_t>(p)]) todo.push_back(p);
  if (todo.empty()) return Status();  // the per-call path: nothing to set up
  std::stable_sort(todo.begin(), todo.end(), [&](int a, int b) {
    const bool da = a > rank_, db = b > rank_;
    if (da != db) return da;
    return a < b;
  });
  auto deadline = net::deadlineIn(timeoutSeconds_);
  std::vector<int> made;
  for (int p : todo) {
    const PeerInfo& them = records_[static_cast<size_t>(p)];
    Transport* t = transportFor(p);
    if (!t) {
      const std::string list = config::getString("CHORUS_TRANSPORT");
      std::string why = "no transport can reach rank " + std::to_string(p);
      if (!list.empty()) why.append(" with CHORUS_TRANSPORT='").append(list).append("'");
      return invalidArgument(why);
    }
    // Connect in slices of 200 ms: between slices, a peer known to have failed (a same-host
    // process gone, or silent or failed by its heartbeats) fails the call now instead of at the
    // timeout.
    constexpr double kSliceSeconds = 0.2;
    const std::vector<uint8_t>& blob = them.endpoints.at(std::string(t->name()));
    StatusOr<std::unique_ptr<Connection>> conn = timeoutError("not attempted");
    while (true) {
      const double left = std::chrono::duration<double>(deadline - net::Clock::now()).count();
      conn = t->connect(p, blob, std::clamp(left, 0.001, kSliceSeconds));
      if (conn.ok() || conn.status().code() != Code::kTimeout || left <= kSliceSeconds) break;
      CHORUS_RETURN_IF_ERROR(alive(p).withContext("connecting to rank " + std::to_string(p)));
    }
    if (!conn.ok()) {
      Status dead = alive(p);
      if (!dead.ok()) return dead;
      return conn.status().withContext("connecting rank " + std::to_string(rank_) + " to rank " +
                                       std::to_string(p));
    }
    conns_[static_cast<size_t>(p)] = std::move(conn).value();
    for (size_t k = 0; k < transports_.size(); ++k)
      if (transports_[k].get() == t) connTransport_[static_cast<size_t>(p)] = static_cast<int>(k);
    made.push_back(p);
    CHORUS_LOG(INFO, NET) << "rank " << rank_ << " -> rank " << p << " via " << t->name()
                          << (them.hostId == records_[static_cast<size_t>(rank_)].hostId
                                  ? " (same host)"
                                  : " (other host)");
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
        CHORUS_RETURN_IF_ERROR(alive(p).withContext("connecting to rank " + std::to_string(p)));
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }
  return Status();
}

StatusOr<bool> Peers::eagerFor(const std::string& mode, int nranks) {
  if (mode == "eager") return true;
  if (mode == "lazy") return false;
  if (mode == "auto") return nranks <= kEagerMaxRanks;
  return invalidArgument("CHORUS_CONNECT='" + mode + "' is not 'eager', 'lazy' or 'auto'");
}

Status Peers::connectEagerly() {
  CHORUS_ASSIGN_OR_RETURN(const bool eager,
                          eagerFor(config::getString("CHORUS_CONNECT"), size()));
  if (conns_.size() != records_.size()) {
    conns_.resize(records_.size());
    connTransport_.assign(records_.size(), -1);
  }
  if (!eager) return Status();
  std::vector<int> all;
  for (int p = 0; p < size(); ++p)
    if (p != rank_) all.push_back(p);
  return connect(all);
}

void Peers::cancelAll(const Status& why) {
  for (auto& c : conns_)
    if (c) c->cancel(why).ignore();
}

std::vector<TransportStats> Peers::stats() const {
  std::vector<TransportStats> out;
  for (const auto& t : transports_) out.push_back({std::string(t->name())});
  const PeerInfo& me = records_[static_cast<size_t>(rank_)];
  for (size_t p = 0; p < conns_.size(); ++p) {
    if (!conns_[p]) continue;
    const ConnStats cs = conns_[p]->stats();
    TransportStats& ts = out[static_cast<size_t>(connTransport_[p])];
    if (records_[p].hostId == me.hostId) {
      ts.sentIntra += cs.bytesSent;
      ts.recvIntra += cs.bytesRecv;
    } else {
      ts.sentInter += cs.bytesSent;
      ts.recvInter += cs.bytesRecv;
    }
  }
  return out;
}

}  // namespace chorus
