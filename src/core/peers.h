// The communicator's peers: one transport of every registered kind the job allows, the
// bootstrap record of every rank, a connection per peer, and liveness.
//
// Transports come from the registry (transports/transport.h); nothing here names one. Each
// peer is reached through the transport with the best canConnect() score among those it
// published an endpoint for; CHORUS_TRANSPORT (a comma-separated list of kinds) narrows the
// choice. Connections are made eagerly for every pair at creation (CHORUS_CONNECT=eager, the
// default: a failure anywhere then reaches every rank directly) or at a pair's first message
// (lazy).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/bootstrap/peer_info.h"
#include "src/core/heartbeat.h"
#include "src/cost/cost_model.h"
#include "src/exec/executor.h"
#include "transports/transport.h"

namespace chorus {

struct TransportStats {
  std::string name;
  uint64_t sentIntra = 0, recvIntra = 0, sentInter = 0, recvInter = 0;
};

class Peers final : public exec::PeerAccess {
 public:
  /// The transports of a new communicator: every registered kind CHORUS_TRANSPORT allows, each
  /// listening; `self` gets their endpoints.
  static StatusOr<std::unique_ptr<Peers>> create(const TransportContext& ctx, PeerInfo* self);
  /// A split's: each of the parent's transports makes its child (forSplit), listening.
  static StatusOr<std::unique_ptr<Peers>> createForSplit(const Peers& parent,
                                                         const TransportContext& child,
                                                         PeerInfo* self);
  ~Peers() override;

  /// Every rank's record, in rank order (from the bootstrap all-gather), this rank's included.
  /// Starts the heartbeats to every peer that publishes them.
  Status setRecords(std::vector<PeerInfo> records);
  const PeerInfo& record(int rank) const { return records_[static_cast<size_t>(rank)]; }
  int size() const { return static_cast<int>(records_.size()); }
  int rank() const { return rank_; }
  void setTimeout(double seconds) { timeoutSeconds_ = seconds; }

  /// Connects every peer in `peers` not connected yet: higher ranks dialed first, then lower
  /// ones accepted, so no cycle of ranks waiting for each other forms. Bounded by the timeout;
  /// a same-host peer whose process is gone fails it within about a second.
  Status connect(const std::vector<int>& peers) {
    for (int p : peers)  // inline: on every call's path, where all of them are connected
      if (static_cast<size_t>(p) >= conns_.size() || !conns_[static_cast<size_t>(p)])
        return connectMissing(peers);
    return Status();
  }
  /// The same for one peer (a lone point-to-point call's path).
  Status connect(int peer) {
    if (static_cast<size_t>(peer) < conns_.size() && conns_[static_cast<size_t>(peer)])
      return Status();
    return connectMissing({peer});
  }
  /// CHORUS_CONNECT=eager: every peer now; lazy: nothing; auto (the default): eager up to
  /// kEagerMaxRanks ranks, lazy above.
  Status connectEagerly();
  /// Whether CHORUS_CONNECT `mode` connects a communicator of `nranks` eagerly; an error naming
  /// the variable for an unknown mode. Depends on nothing a rank could see differently.
  static StatusOr<bool> eagerFor(const std::string& mode, int nranks);
  /// The largest communicator CHORUS_CONNECT=auto connects eagerly: its n - 1 sockets per rank
  /// then stay within half of Debian's default soft `ulimit -n` (1,024), leaving the rest to
  /// the application. chorus-sim --init puts the end of the full mesh near 1,000 ranks
  /// (docs/simulation.md, "Init at scale").
  static constexpr int kEagerMaxRanks = 512;

  Connection* connection(int peer) override { return conns_[static_cast<size_t>(peer)].get(); }
  /// Non-ok when `peer` is known to have failed: its process is gone (same-host peers: the pid
  /// check needs the same pid namespace), or it has been silent past the heartbeat timeout
  /// (any peer). Other failures are left to the connections.
  Status alive(int peer) override;

  /// The transport that reaches `peer` (the best canConnect score), or nullptr.
  Transport* transportFor(int peer, Reach* reach = nullptr) const;
  /// This rank's view for the agreement at creation: whether every peer's connection can read
  /// its memory; the slowest link class to a peer on this host and on other hosts (nullopt
  /// when there is none).
  bool everyPeerReadable() const;
  bool linkClasses(cost::LinkClass* intra, bool* anyIntra, cost::LinkClass* inter,
                   bool* anyInter) const;
  /// The transport through which every peer is reached, when it is one transport that can
  /// make a host window and every rank shares this host; nullptr otherwise.
  Transport* windowTransport() const;

  void cancelAll(const Status& why);
  /// Tells every peer, through the heartbeats, that this rank's communicator has failed.
  void announceFailure(const Status& why) {
    if (heartbeat_) heartbeat_->announceFailure(why);
  }
  std::vector<TransportStats> stats() const;
  const std::vector<std::unique_ptr<Transport>>& transports() const { return transports_; }

 private:
  Status connectMissing(const std::vector<int>& peers);
  Peers() = default;
  Status listenAll(PeerInfo* self);
  Status startHeartbeat(int rank, uint64_t commId, const net::SockAddr& addr, PeerInfo* self);

  int rank_ = 0;
  double timeoutSeconds_ = 300;
  std::vector<std::unique_ptr<Transport>> transports_;
  std::vector<PeerInfo> records_;
  std::vector<std::unique_ptr<Connection>> conns_;  // by peer rank
  std::vector<int> connTransport_;                  // index into transports_, -1 if none
  std::unique_ptr<Heartbeat> heartbeat_;            // nullptr: heartbeats off
};

/// The identity a transport sees of a bootstrap record.
PeerIdentity identityOf(const PeerInfo& p);

}  // namespace chorus
