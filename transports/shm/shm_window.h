// The shared-memory host window. Internal to transports/shm/ (the rest of chorus sees a
// HostWindow, transports/transport.h).
//
// One POSIX segment per communicator whose ranks all share one host: rank 0 creates it (named
// after its pid and the communicator, mode 0600), every other rank maps it, and the last to
// map it removes the name, so nothing is left in /dev/shm once the communicator exists.
//
// Per rank and per parity of the call number, one cache line and a region:
//
//   line:   signal word (4) | header (24) | pad (4) | first 32 bytes of the region
//   region: slot (CHORUS_SHM_STAGING) + two round areas (CHORUS_SHM_STAGING_ROUND each),
//           starting in the line's last 32 bytes
//
// so a rank that publishes a message of up to 32 bytes and signals writes one cache line, and
// a peer that sees the signal has the header and the data in the same line: a small all-reduce
// costs about one cache-line transfer per peer each way. The signal word holds the call number's
// low 8 bits and the count of signals made in that call (24 bits): a call's first signal
// ("enter") sets the count to 1 with the new call number, later ones raise it. A line holds
// calls of one parity only, and a rank enters call s only once every peer has entered call s-1
// (the executor's protocol), so a peer's line shows call s-2 or call s while we are in call s:
// 8 bits tell them apart with room to spare.
//
// Waiting spins (when ranks do not outnumber cores), yields, then sleeps on the word with a
// futex; the writer wakes only when a waiter has registered (a count per rank, with fences on
// both sides), so the fast path makes no system call. A rank whose communicator fails writes
// its reason into its control block and wakes everyone; waits on it then fail at once.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "transports/shm/segment.h"
#include "transports/transport.h"

namespace chorus::shm {

class ShmWindow final : public HostWindow {
 public:
  /// Collective over all `nranks` ranks (all on this host): rank 0 creates the segment, named
  /// after `rank0Pid` and `commId`, the others map it; the last to map it removes the name.
  static StatusOr<std::unique_ptr<ShmWindow>> create(int rank, int nranks, uint64_t commId,
                                                     int32_t rank0Pid, uint64_t slotBytes,
                                                     uint64_t roundBytes, const WaitPolicy& w);
  ~ShmWindow() override;

  uint64_t slotBytes() const override { return slotBytes_; }
  uint64_t roundBytes() const override { return roundBytes_; }
  std::byte* region(int rank, int parity) const override;
  void enter(uint64_t seq, const WindowHeader& h) override;
  void signal(uint64_t seq, uint32_t k) override;
  bool reached(int rank, uint64_t seq, uint32_t k) const override;
  Status await(int rank, uint64_t seq, uint32_t k, const WaitPolicy& w) override;
  WindowHeader header(int rank, uint64_t seq) const override;
  void markFailed(const Status& why) override;

  struct Line;
  struct RankCtl;

 private:
  ShmWindow() = default;
  RankCtl& ctl(int rank) const { return *ctls_[static_cast<size_t>(rank)]; }
  Line& line(int rank, uint64_t seq) const {
    return *lines_[seq & 1][static_cast<size_t>(rank)];
  }
  void mapRanks();
  void publish(uint64_t seq, uint32_t count);
  Status failureOf(int rank) const;

  Segment seg_;
  int rank_ = 0;
  int nranks_ = 0;
  uint64_t slotBytes_ = 0;
  uint64_t roundBytes_ = 0;
  size_t parityBytes_ = 0;  // one parity's line + region, rounded to cache lines
  size_t rankBytes_ = 0;
  // Where each rank's control block and lines are (computed once: the per-call path is a load).
  std::vector<RankCtl*> ctls_;
  std::vector<Line*> lines_[2];
};

}  // namespace chorus::shm
