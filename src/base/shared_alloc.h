// Memory the ranks of a host can map: what chorusMemAlloc hands out.
//
// Each allocation is its own anonymous memory file (memfd_create), rounded up to whole pages and
// mapped MAP_SHARED. Its descriptor stays open for the life of the allocation, so a peer on the
// same host maps the same pages through /proc/<pid>/fd/<fd> — the kernel allows that to a
// process allowed to ptrace-read the owner, the same rule cross-memory attach follows. Nothing is
// named in /dev/shm: when the process ends, its descriptors close and the pages go once the last
// peer unmaps them.
//
// A process-wide registry keeps the live segments {base, bytes, fd, id, registrations}. The id
// is never reused within a process, so (pid, fd, id) names one segment even after its fd number
// is recycled; the memory file is called segmentName(id), which a peer checks after opening it.
// Registrations are counted by the API's chorusCommRegister: a segment still registered with a
// communicator cannot be freed.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "src/base/status.h"

namespace chorus::mem {

/// A live segment as a peer needs to reach it, and where a range lies in it.
struct SegmentRef {
  pid_t pid = 0;          ///< the owner's process (getpid() at allocation)
  int fd = -1;            ///< the memory file's descriptor in the owner
  uint64_t id = 0;        ///< unique within the owner's process
  uint64_t bytes = 0;     ///< the segment's mapped length (whole pages)
  uintptr_t base = 0;     ///< its address in the owner
  uint64_t offset = 0;    ///< where the looked-up range starts in it
  uint32_t registrations = 0;
};

/// A new segment of at least `bytes` (> 0) bytes, zero-filled.
StatusOr<void*> allocate(size_t bytes);
/// Frees a segment by its base. Fails without side effects on a pointer allocate() did not
/// return (unknown, interior, already freed) or a segment still registered.
Status release(void* base);
/// The live segment holding all of [p, p + bytes), if any. bytes may be 0.
bool find(const void* p, size_t bytes, SegmentRef* out);
/// Records one registration of the segment at `base` (found with find()); false if it is gone.
bool addRegistration(uintptr_t base);
/// Drops one; false if the segment is gone or has none.
bool removeRegistration(uintptr_t base);
/// Live segments of this process.
size_t liveSegments();
/// The name of segment `id`'s memory file (as readlink shows it, after "/memfd:").
std::string segmentName(uint64_t id);

}  // namespace chorus::mem
