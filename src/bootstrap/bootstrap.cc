#include "src/bootstrap/bootstrap.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "src/bootstrap/wire.h"
#include "src/base/logging.h"

namespace chorus::bootstrap {
namespace {

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g s", s);
  return buf;
}

double secondsUntil(net::Deadline deadline) {
  return std::max(0.0, std::chrono::duration<double>(deadline - net::Clock::now()).count());
}

// "2, 5-7" for {2, 5, 6, 7}; long lists are cut.
std::string rankList(const std::vector<int>& ranks) {
  constexpr int kMaxRuns = 12;
  std::string s;
  int runs = 0;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (runs == kMaxRuns) {
      s += ", ...";
      break;
    }
    // Appended piece by piece: `"-" + std::to_string(...)` trips GCC 12's -Wrestrict false
    // positive at -O3.
    if (runs) s += ", ";
    s += std::to_string(ranks[i]);
    if (j > i) {
      s += '-';
      s += std::to_string(ranks[j]);
    }
    ++runs;
    i = j + 1;
  }
  return s;
}

std::vector<uint8_t> encodeInt(int64_t v) {
  std::vector<uint8_t> b(8);
  wire::storeLe(b.data(), static_cast<uint64_t>(v), 8);
  return b;
}

}  // namespace

net::SockAddr wildcardAddress(const net::SockAddr& like, uint16_t port) {
  net::SockAddr a;
  if (like.family() == AF_INET6) {
    auto* s = reinterpret_cast<sockaddr_in6*>(&a.storage);
    s->sin6_family = AF_INET6;
    s->sin6_addr = in6addr_any;
    s->sin6_port = htons(port);
    a.len = sizeof(sockaddr_in6);
  } else {
    auto* s = reinterpret_cast<sockaddr_in*>(&a.storage);
    s->sin_family = AF_INET;
    s->sin_addr.s_addr = htonl(INADDR_ANY);
    s->sin_port = htons(port);
    a.len = sizeof(sockaddr_in);
  }
  return a;
}

Bootstrap::Bootstrap(const JobId& job, int rank, int nranks, double timeoutSeconds,
                     std::string scope)
    : job_(job), rank_(rank), nranks_(nranks), timeoutSeconds_(timeoutSeconds),
      scope_(std::move(scope)) {}

Bootstrap::~Bootstrap() {
  if (server_ && !server_->waitAnswersSent(kAnswerSeconds)) {
    CHORUS_LOG(WARN, INIT) << "bootstrap: rank " << rank_ << " leaves the store it serves at "
                           << job_.root.toString() << " with answers unsent after "
                           << seconds(kAnswerSeconds) << " (a rank that does not read them)";
  }
}

StatusOr<std::unique_ptr<Bootstrap>> Bootstrap::create(const JobId& job, int rank, int nranks,
                                                       double timeoutSeconds, bool serveStore,
                                                       const std::string& scope) {
  if (nranks < 1) return invalidArgument("nranks=" + std::to_string(nranks) + " is not >= 1");
  if (rank < 0 || rank >= nranks)
    return invalidArgument("rank " + std::to_string(rank) + " is not in [0, " +
                           std::to_string(nranks) + ")");
  if (!(timeoutSeconds > 0))
    return invalidArgument("bootstrap timeout " + std::to_string(timeoutSeconds) +
                           " s is not > 0");
  std::unique_ptr<Bootstrap> b(new Bootstrap(job, rank, nranks, timeoutSeconds, scope));
  if (nranks == 1) return b;  // nothing to meet: no store needed, none contacted

  net::Deadline deadline = net::deadlineIn(timeoutSeconds);
  if (serveStore && rank == 0) {
    // All interfaces, not the root address itself: the root is a name every rank resolves, and
    // on rank 0's own host it may resolve to another address (Debian maps the hostname to
    // 127.0.1.1) than the one the other hosts reach.
    StatusOr<std::shared_ptr<StoreServer>> server =
        StoreServer::start(wildcardAddress(job.root, job.root.port()), job.secret);
    if (!server.ok())
      return server.status().withContext("rank 0 serves the bootstrap store for root " +
                                         job.root.toString());
    b->server_ = *server;
  } else if (auto registered = findServer(job.root);
             registered && registered->secret() == job.secret) {
    b->server_ = registered;  // made by chorusGetUniqueId in this process: keep it alive
  }
  CHORUS_RETURN_IF_ERROR(b->join(deadline));
  b->client_->setTimeout(timeoutSeconds);
  CHORUS_LOG(INFO, INIT) << "bootstrap: rank " << rank << " of " << nranks
                         << " joined the store at " << job.root.toString()
                         << (b->server_ ? " (served by this process)" : "");
  return b;
}

Status Bootstrap::join(net::Deadline deadline) {
  StatusOr<std::unique_ptr<StoreClient>> client =
      StoreClient::connect(job_.root, job_.secret, deadline);
  if (!client.ok()) {
    const Status& s = client.status();
    if (s.code() == Code::kTimeout)
      return timeoutError("rank " + std::to_string(rank_) +
                          " could not reach the bootstrap store at " + job_.root.toString() +
                          " within " + seconds(timeoutSeconds_) +
                          " (is the process serving it running, and is the address reachable "
                          "from this host?): " + s.message());
    return s.withContext("rank " + std::to_string(rank_) + " joining the job");
  }
  client_ = std::move(*client);
  client_->setTimeout(std::max(secondsUntil(deadline), 1e-3));

  // Two processes given the same rank would otherwise overwrite each other's keys and hang or
  // mix data; the first claim wins, the second is told.
  StatusOr<int64_t> claims = client_->add(scope_ + "/claim/" + std::to_string(rank_), 1);
  if (!claims.ok()) return claims.status().withContext("rank " + std::to_string(rank_));
  if (*claims > 1)
    return invalidUsage("rank " + std::to_string(rank_) +
                        " joined the job twice: two processes were given this rank (or ranks of "
                        "another job with the same id and scope)");

  // Agreeing on the size early turns a mistyped nranks into an error instead of a timeout.
  std::string key = scope_ + "/nranks";
  if (rank_ == 0) return client_->set(key, encodeInt(nranks_));
  StatusOr<std::vector<uint8_t>> theirs = client_->get(key);
  if (!theirs.ok()) {
    if (theirs.status().code() == Code::kTimeout)
      return timeoutError("rank " + std::to_string(rank_) + " timed out after " +
                          seconds(timeoutSeconds_) + " waiting for rank 0 to join the job at " +
                          job_.root.toString() + ": rank 0 never arrived");
    return theirs.status().withContext("rank " + std::to_string(rank_));
  }
  if (theirs->size() != 8)
    return remoteError("rank 0 published a malformed job size (" +
                       std::to_string(theirs->size()) + " bytes)");
  int64_t rootNranks = static_cast<int64_t>(wire::loadLe(theirs->data(), 8));
  if (rootNranks != nranks_)
    return invalidUsage("rank " + std::to_string(rank_) + " was started with nranks=" +
                        std::to_string(nranks_) + ", rank 0 with nranks=" +
                        std::to_string(rootNranks));
  return Status();
}

StatusOr<std::vector<std::vector<uint8_t>>> Bootstrap::allGather(const std::vector<uint8_t>& mine) {
  return gather(mine, "allGather");
}

Status Bootstrap::barrier() { return gather({}, "barrier").status(); }

StatusOr<std::vector<std::vector<uint8_t>>> Bootstrap::gather(const std::vector<uint8_t>& mine,
                                                              const std::string& what) {
  uint64_t call = ++calls_;
  if (nranks_ == 1) return std::vector<std::vector<uint8_t>>{mine};
  // One key per rank and call: a barrier doubles as a gather of nothing, so a timeout can name
  // exactly which ranks did not arrive (a counter could only say how many).
  std::string prefix = scope_ + "/gather/" + std::to_string(call) + "/";
  std::vector<std::string> keys(nranks_);
  for (int r = 0; r < nranks_; ++r) keys[r] = prefix + std::to_string(r);
  std::string where = "bootstrap " + what + " #" + std::to_string(call) + " on rank " +
                      std::to_string(rank_);
  // One request, not a set and then a multiGet: see StoreClient::setAndMultiGet for why rank 0
  // may then stop the store as soon as its own barrier returns.
  StatusOr<std::vector<std::vector<uint8_t>>> all = client_->setAndMultiGet(keys[rank_], mine, keys);
  if (!all.ok()) {
    if (all.status().code() == Code::kTimeout)
      return timeoutError(where + " timed out after " + seconds(timeoutSeconds_) + ": " +
                          missingRanks(keys));
    return all.status().withContext(where);
  }
  return all;
}

std::string Bootstrap::missingRanks(const std::vector<std::string>& keys) {
  // Short: this only improves an error message that is already certain.
  constexpr double kProbeSeconds = 2.0;
  StatusOr<std::unique_ptr<StoreClient>> probe =
      StoreClient::connect(job_.root, job_.secret, net::deadlineIn(kProbeSeconds));
  if (!probe.ok()) return "other ranks did not arrive (could not ask the store which)";
  (*probe)->setTimeout(kProbeSeconds);
  StatusOr<std::vector<bool>> present = (*probe)->exists(keys);
  if (!present.ok()) return "other ranks did not arrive (could not ask the store which)";
  std::vector<int> missing;
  for (int r = 0; r < nranks_; ++r)
    if (!(*present)[r]) missing.push_back(r);
  if (missing.empty()) return "all ranks arrived, but too late";
  return std::string(missing.size() == 1 ? "rank " : "ranks ") + rankList(missing) + " (of " +
         std::to_string(nranks_) + ") never arrived";
}

StatusOr<JobId> startJobStore(const net::SockAddr& bindAddr) {
  JobId job;
  CHORUS_ASSIGN_OR_RETURN(job.secret, randomSecret());
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<StoreServer> server,
                          StoreServer::start(bindAddr, job.secret));
  job.root = server->address();
  registerServer(std::move(server));
  return job;
}

StatusOr<JobId> startJobStore() {
  CHORUS_ASSIGN_OR_RETURN(std::vector<net::Interface> ifs, net::listInterfaces());
  if (ifs.empty())
    return systemError("no network interface to serve the bootstrap store on (check "
                       "CHORUS_SOCKET_IFNAME)");
  net::SockAddr addr = ifs.front().addr;
  addr.setPort(0);
  return startJobStore(addr);
}

}  // namespace chorus::bootstrap
