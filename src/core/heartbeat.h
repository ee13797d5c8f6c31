// Heartbeats: what tells a silent peer from a slow one.
//
// A peer whose process ends is seen at once: its sockets close, or (same host) its pid is gone.
// A peer that falls silent without ending is not — its process stopped (SIGSTOP, a debugger),
// its host or link down, its traffic dropped by a firewall. TCP just waits, and only the
// operation timeout (CHORUS_TIMEOUT, 300 s by default) would end the wait. So each rank of a
// communicator runs one small thread that sends a datagram to every other rank several times
// per CHORUS_HEARTBEAT_TIMEOUT and notes when it last heard from each; a wait on a peer
// (Peers::alive, asked every 100 ms by every wait) fails once that peer has been silent for
// CHORUS_HEARTBEAT_TIMEOUT seconds. A peer that is merely busy (computing, or waiting in a
// later call) keeps beating from its thread, so slowness is never taken for failure.
//
// The datagrams are UDP, sent from and to the address the TCP transport listens on (the same
// interface, so a link that is down or filtered stops them too). Each carries the
// communicator's id and both ranks, and is taken only from the address its sender published:
// stray or forged datagrams are ignored, never trusted beyond "rank r is still there".
//
// Only a peer heard from at least once is judged by its silence. Every rank sends its first
// beat inside start(), before the communicator's creation ends with an all-gather, so every
// peer's first beat is on its way before any rank can use the communicator; a peer never heard
// means the datagrams cannot pass (a firewall that lets TCP through but not UDP), and judging
// it would fail every job there. Such a peer is logged once (WARN) and left to its connection
// and CHORUS_TIMEOUT, as without heartbeats.
//
// A rank whose communicator has failed says so in its beats from then on (with the first line
// of its error), and its peers' waits on it fail at once with that reason: a peer that was never
// connected to it (lazy connections), or that waits for it in a different call, learns of the
// failure without waiting out a timeout.
//
// Cost: one thread and one socket per communicator, and (ranks - 1) datagrams of 32 bytes per
// interval from each rank.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/base/socket_util.h"
#include "src/base/status.h"

namespace chorus {

class Heartbeat {
 public:
  /// Reads CHORUS_HEARTBEAT_TIMEOUT; 0 turns heartbeats off (returns nullptr, no thread).
  /// Binds a UDP socket on `addr` (its port is ignored).
  static StatusOr<std::unique_ptr<Heartbeat>> create(int rank, uint64_t commId,
                                                     const net::SockAddr& addr);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  /// What peers need to reach this rank's heartbeats (net::encodeAddress of the bound socket).
  std::vector<uint8_t> endpoint() const { return net::encodeAddress(bound_); }
  const net::SockAddr& address() const { return bound_; }

  /// Starts the thread: beats go to every rank whose `endpoints[r]` is not empty (a malformed
  /// one is an error naming the rank). Called once.
  Status start(const std::vector<std::vector<uint8_t>>& endpoints);

  /// Non-ok (kRemoteError naming the rank and how long it has been silent) when `peer` has not
  /// been heard from for the timeout.
  Status check(int peer) const;
  /// From now on, beats say this rank's communicator has failed, with `why`'s message (cut to a
  /// few hundred bytes); one goes out at once. The first failure sticks. Peers report it as
  /// kRemoteError, except kInvalidUsage, which stays (as cancel() does on connections).
  void announceFailure(const Status& why);
  double timeoutSeconds() const { return timeoutSeconds_; }
  /// Whether a beat from `peer` has arrived yet (only such peers are judged by silence).
  bool heard(int peer) const {
    return heard_ && peer >= 0 && static_cast<size_t>(peer) < watched_.size() &&
           heard_[static_cast<size_t>(peer)].load();
  }

 private:
  Heartbeat() = default;
  void run();
  void send(uint64_t seq);
  void receive();

  int rank_ = 0;
  uint64_t commId_ = 0;
  double timeoutSeconds_ = 4;
  int intervalMs_ = 500;
  net::SockAddr bound_;
  net::Fd fd_;
  net::Fd wake_;  // eventfd: the destructor's stop signal
  std::vector<bool> watched_;
  std::vector<net::SockAddr> peers_;
  // steady_clock nanoseconds of the last datagram from each rank.
  std::unique_ptr<std::atomic<int64_t>[]> lastSeen_;
  std::unique_ptr<std::atomic<bool>[]> heard_;           // a beat has arrived from the rank
  mutable std::unique_ptr<std::atomic<bool>[]> warned_;  // "never heard" was logged
  int64_t startNs_ = 0;
  // Failures announced by peers (flag, then the reason under mu_), and this rank's own.
  std::unique_ptr<std::atomic<bool>[]> peerFailed_;
  mutable std::mutex mu_;
  std::vector<std::string> peerReason_;
  std::vector<bool> peerUsage_;  // the peer's failure was kInvalidUsage
  std::atomic<bool> failed_{false};
  std::string failure_;  // written once under mu_ before failed_ is set
  bool failureIsUsage_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace chorus
