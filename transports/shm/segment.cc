#include "transports/shm/segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "src/base/logging.h"

namespace chorus::shm {
namespace {

constexpr char kPrefix[] = "chorus-";

uint64_t namespaceInode(const char* path) {
  struct stat st;
  return ::stat(path, &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

}  // namespace

uint64_t ipcNamespace() { return namespaceInode("/proc/self/ns/ipc"); }
uint64_t pidNamespace() { return namespaceInode("/proc/self/ns/pid"); }

std::string segmentName(int creatorPid, uint64_t commId, const std::string& what) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "/%s%" PRIx64 "-%d-%016" PRIx64 "-", kPrefix, pidNamespace(),
                creatorPid, commId);
  return buf + what;
}

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    this->~Segment();
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    name_ = std::move(o.name_);
    linked_ = std::exchange(o.linked_, false);
  }
  return *this;
}

Segment::~Segment() {
  unlink();
  if (data_) ::munmap(data_, bytes_);
  data_ = nullptr;
}

StatusOr<Segment> Segment::create(const std::string& name, size_t bytes) {
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return errnoStatus("shm_open(O_CREAT)", name);
  Segment s;
  s.name_ = name;
  s.linked_ = true;  // from here the destructor removes the name on any failure
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    Status st = errnoStatus("ftruncate", name);
    ::close(fd);
    return st;
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) return errnoStatus("mmap", name, err);
  s.data_ = static_cast<std::byte*>(p);
  s.bytes_ = bytes;
  return s;
}

StatusOr<Segment> Segment::open(const std::string& name, size_t bytes) {
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == ENOENT) return timeoutError("shared-memory segment " + name + " does not exist yet");
    return errnoStatus("shm_open", name);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    Status s = errnoStatus("fstat", name);
    ::close(fd);
    return s;
  }
  // The creator sizes the segment right after creating it: a short file is still being made.
  if (static_cast<size_t>(st.st_size) != bytes) {
    ::close(fd);
    if (st.st_size == 0) return timeoutError("shared-memory segment " + name + " is being created");
    return invalidUsage("shared-memory segment " + name + " has " + std::to_string(st.st_size) +
                        " bytes, expected " + std::to_string(bytes) +
                        " (peers running different chorus versions?)");
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) return errnoStatus("mmap", name, err);
  Segment s;
  s.name_ = name;
  s.data_ = static_cast<std::byte*>(p);
  s.bytes_ = bytes;
  return s;
}

void Segment::unlink() {
  if (!linked_) return;
  linked_ = false;
  if (::shm_unlink(name_.c_str()) != 0 && errno != ENOENT) {
    CHORUS_LOG(WARN, NET) << "shm_unlink(" << name_ << "): " << std::strerror(errno);
  }
}

void Segment::removeName() {
  linked_ = true;
  unlink();
}

int sweepStaleSegments() {
  DIR* dir = ::opendir("/dev/shm");
  if (!dir) return 0;
  char mine[32];
  std::snprintf(mine, sizeof mine, "%" PRIx64 "-", pidNamespace());
  const size_t prefixLen = sizeof(kPrefix) - 1;
  int removed = 0;
  while (dirent* e = ::readdir(dir)) {
    const char* n = e->d_name;
    if (std::strncmp(n, kPrefix, prefixLen) != 0) continue;
    if (std::strncmp(n + prefixLen, mine, std::strlen(mine)) != 0) continue;
    int pid = std::atoi(n + prefixLen + std::strlen(mine));
    if (pid <= 0 || (::kill(pid, 0) == 0 || errno != ESRCH)) continue;
    struct stat st;
    std::string path = std::string("/dev/shm/") + n;
    if (::stat(path.c_str(), &st) != 0 || st.st_uid != ::geteuid()) continue;
    if (::shm_unlink((std::string("/") + n).c_str()) == 0) {
      ++removed;
      CHORUS_LOG(INFO, NET) << "removed stale shared-memory segment /dev/shm/" << n
                            << " (its creator, pid " << pid << ", is gone)";
    }
  }
  ::closedir(dir);
  return removed;
}

}  // namespace chorus::shm
