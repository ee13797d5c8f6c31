// POSIX shared-memory segments of the shm transport, and their names. Internal to transports/shm/.
//
// A segment is created by one process (mode 0600, O_EXCL) and opened by the others that need it;
// the last of them to map it unlinks the name, so a segment lives in /dev/shm only while its
// ranks are connecting. A job that crashes in that window leaves a name behind: every name
// carries its creator's pid and pid namespace, and sweepStaleSegments() removes the names whose
// creator is gone (run at every shm transport's creation, and by chorus-run after a failed job).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "src/base/status.h"

namespace chorus::shm {

// "/chorus-<pidns>-<pid>-<commId>-<what>": unique per creator process, communicator and use.
std::string segmentName(int creatorPid, uint64_t commId, const std::string& what);

class Segment {
 public:
  Segment() = default;
  Segment(Segment&& o) noexcept { *this = std::move(o); }
  Segment& operator=(Segment&& o) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  // Creates and maps a zero-filled segment of `bytes`; fails if the name exists.
  static StatusOr<Segment> create(const std::string& name, size_t bytes);
  // Opens and maps an existing segment. kTimeout (not an error yet) when the name does not
  // exist; kSystemError for anything else, kInvalidUsage when its size is not `bytes`.
  static StatusOr<Segment> open(const std::string& name, size_t bytes);

  // Removes the name if this object created it (the mapping stays valid). Idempotent.
  void unlink();
  // Removes the name whoever created it: the last process to map a segment calls this.
  void removeName();

  std::byte* data() const { return data_; }
  size_t size() const { return bytes_; }
  const std::string& name() const { return name_; }
  bool mapped() const { return data_ != nullptr; }

 private:
  std::byte* data_ = nullptr;
  size_t bytes_ = 0;
  std::string name_;
  bool linked_ = false;  // this object still owes an unlink (only the creator, until unlink())
};

// Unlinks /dev/shm/chorus-* segments of this pid namespace whose creator process no longer exists
// and that belong to this user. Returns how many it removed.
int sweepStaleSegments();

// Inodes of this process's IPC and PID namespaces (0 when unknown).
uint64_t ipcNamespace();
uint64_t pidNamespace();

}  // namespace chorus::shm
