#include "memory.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>

namespace train::memory {
namespace {

// A header in front of every block records its size and tag, so a free (which only gets the
// data pointer) and a retag find them. 64 bytes keep the data at libtorch's alignment.
constexpr size_t kHeader = 64;
struct Header {
  size_t bytes;
  int tag;
};

std::mutex mu;
std::array<int64_t, kTags + 1> live{};  // [tag, total]
Peaks maxima;
Phase phase = Phase::kSetup;
bool active = false;
thread_local Tag currentTag = Tag::kOther;

void noteLocked() {
  auto& p = maxima.bytes[int(phase)];
  for (int t = 0; t <= kTags; ++t) p[t] = std::max(p[t], live[t]);
}

void account(int tag, int64_t delta) {
  std::lock_guard<std::mutex> lock(mu);
  live[tag] += delta;
  live[kTags] += delta;
  if (delta > 0) noteLocked();
}

void deleteBlock(void* data) {
  if (!data) return;
  char* base = static_cast<char*>(data) - kHeader;
  auto* h = reinterpret_cast<Header*>(base);
  account(h->tag, -int64_t(h->bytes));
  c10::free_cpu(base);
}

class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) const override {
    if (n == 0) return {nullptr, nullptr, &deleteBlock, c10::Device(c10::DeviceType::CPU)};
    char* base = static_cast<char*>(c10::alloc_cpu(n + kHeader));
    auto* h = reinterpret_cast<Header*>(base);
    h->bytes = n;
    h->tag = int(currentTag);
    account(h->tag, int64_t(n));
    void* data = base + kHeader;
    return {data, data, &deleteBlock, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &deleteBlock; }
};

int64_t readHwm() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

// Writing 5 to clear_refs resets the peak resident set to the current one (Linux >= 4.0).
void resetHwm() {
  int fd = ::open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  if (::write(fd, "5", 1) != 1) {
    // Not fatal: the phase's figure is then the process's peak so far.
  }
  ::close(fd);
}

}  // namespace

const char* phaseName(Phase p) {
  switch (p) {
    case Phase::kSetup: return "setup";
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kEval: return "eval";
  }
  return "?";
}

void install() {
  static CountingAllocator allocator;  // lives as long as the process: tensors may outlive main
  c10::SetCPUAllocator(&allocator, /*priority=*/100);
  std::lock_guard<std::mutex> lock(mu);
  active = true;
  resetHwm();
}

bool installed() { return active; }

TagGuard::TagGuard(Tag tag) : saved_(currentTag) { currentTag = tag; }
TagGuard::~TagGuard() { currentTag = saved_; }

void retag(const torch::Tensor& t, Tag tag) {
  if (!active || !t.defined() || !t.has_storage()) return;
  const c10::DataPtr& dp = t.storage().data_ptr();
  if (dp.get_deleter() != &deleteBlock || !dp.get()) return;
  auto* h = reinterpret_cast<Header*>(static_cast<char*>(dp.get()) - kHeader);
  std::lock_guard<std::mutex> lock(mu);
  if (h->tag == int(tag)) return;
  live[h->tag] -= int64_t(h->bytes);
  live[int(tag)] += int64_t(h->bytes);
  h->tag = int(tag);
  noteLocked();
}

void setPhase(Phase p) {
  if (!active) return;
  const int64_t hwm = readHwm();
  std::lock_guard<std::mutex> lock(mu);
  maxima.rss[int(phase)] = std::max(maxima.rss[int(phase)], hwm);
  phase = p;
  noteLocked();
  resetHwm();
}

Peaks peaks() {
  if (!active) return {};
  const int64_t hwm = readHwm();
  std::lock_guard<std::mutex> lock(mu);
  maxima.rss[int(phase)] = std::max(maxima.rss[int(phase)], hwm);
  return maxima;
}

}  // namespace train::memory
