// Bootstrap: how the ranks of a job meet before any transport exists.
//
// Every rank connects to the job's store (JobId: address + secret) and then exchanges small
// blobs (each rank's serialized PeerInfo) with allGather. Two ways to get a store:
//   - chorusGetUniqueId: startJobStore() runs it inside the process that made the id and keeps
//     it in the process-wide registry (store.h) until releaseServer(); a rank in that process
//     also holds it for as long as its Bootstrap lives.
//   - environment bootstrap (env.h): rank 0 passes serveStore=true and serves the store itself,
//     on the root's port on every interface, for as long as its Bootstrap lives.
//
// Rank 0's Bootstrap must therefore outlive the other ranks' use of theirs: end with a barrier
// before destroying it.
//
// Every wait is bounded by the timeout given to create(). A rank that does not arrive makes the
// others fail with kTimeout naming it; a rank given a different nranks than rank 0, or two
// processes claiming one rank, fail with kInvalidUsage.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/bootstrap/store.h"
#include "src/bootstrap/unique_id.h"
#include "src/base/status.h"

namespace chorus::bootstrap {

class Bootstrap {
 public:
  // Joins the job as `rank` of `nranks`. With serveStore, rank 0 starts the store on the root's
  // port before connecting. `scope` prefixes every key, so several Bootstraps can share one
  // store (each scope must be used by exactly the `nranks` ranks given here).
  // A single-rank job needs no store: nothing is started or contacted.
  static StatusOr<std::unique_ptr<Bootstrap>> create(const JobId& job, int rank, int nranks,
                                                     double timeoutSeconds, bool serveStore,
                                                     const std::string& scope = "chorus");
  // In the process that serves the store, first waits (at most kAnswerSeconds) until the
  // answers of the last gather have gone out: this rank got its own, the others' may still be
  // queued, and the process may exit right after (the store dies with it).
  ~Bootstrap();
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;
  static constexpr double kAnswerSeconds = 2.0;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  double timeout() const { return timeoutSeconds_; }

  // Every rank's `mine`, indexed by rank. Collective: all ranks call it the same number of
  // times, in the same order (each call uses keys of its own).
  StatusOr<std::vector<std::vector<uint8_t>>> allGather(const std::vector<uint8_t>& mine);
  // Returns when every rank has entered it.
  Status barrier();

 private:
  Bootstrap(const JobId& job, int rank, int nranks, double timeoutSeconds, std::string scope);
  Status join(net::Deadline deadline);
  StatusOr<std::vector<std::vector<uint8_t>>> gather(const std::vector<uint8_t>& mine,
                                                     const std::string& what);
  // The ranks whose keys are missing, asked on a fresh connection (the timed-out one is
  // unusable): "ranks 2, 5-7 (of 8)", or a note that it could not be determined.
  std::string missingRanks(const std::vector<std::string>& keys);

  JobId job_;
  int rank_;
  int nranks_;
  double timeoutSeconds_;
  std::string scope_;
  uint64_t calls_ = 0;
  // Declared before client_ so that it is destroyed after it.
  std::shared_ptr<StoreServer> server_;
  std::unique_ptr<StoreClient> client_;
};

// For chorusGetUniqueId: a random secret and a store on `bindAddr` (port 0 picks one), or on
// the first interface chosen by CHORUS_SOCKET_IFNAME; the server is registered (store.h).
StatusOr<JobId> startJobStore(const net::SockAddr& bindAddr);
StatusOr<JobId> startJobStore();

// "0.0.0.0:port" or "[::]:port", in the family of `like`.
net::SockAddr wildcardAddress(const net::SockAddr& like, uint16_t port);

}  // namespace chorus::bootstrap
