#include "src/core/calibration.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "algorithms/kernels/reduce.h"
#include "chorus/chorus.h"
#include "src/base/socket_util.h"

namespace chorus::cost {

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kMagic = "chorus-calibration 2";
constexpr const char* kFileName = "calibration";
// Rates outside this range are not a measurement of a CPU (GB/s).
constexpr double kMinRate = 0.05, kMaxRate = 10000;

double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The best (shortest) time in µs of `body` over repetitions, at least one, until `deadline`.
template <typename F>
double bestUs(F&& body, Clock::time_point deadline, int maxReps) {
  double best = 0;
  for (int i = 0; i < maxReps; ++i) {
    const auto t0 = Clock::now();
    body();
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (i == 0 || us < best) best = us;
    if (Clock::now() >= deadline) break;
  }
  return std::max(best, 1e-3);
}

// Traffic rates of one copy, one float32 sum and the two together over buffers of `bytes`.
struct Rates {
  double copy, reduce, mix;
};

Rates measureAt(uint64_t bytes, Clock::time_point deadline, int maxReps) {
  const size_t floats = std::max<size_t>(16, bytes / sizeof(float));
  const size_t n = floats * sizeof(float);
  // Two buffers, not zeroed first (a fill is the only pass before timing; every page is touched
  // by it). Fresh values: nothing the kernels could shortcut. The sum runs in place
  // (out = out + in), as a two-shot round's reduction does.
  // Ordinary 4 KiB pages, as the buffers of most calls: transparent huge pages (tried) make the
  // copies faster than a collective on malloc'd memory sees them (on the development VM 60-80
  // against 25-35 GB/s), at the price of a page fault per 4 KiB here.
  std::unique_ptr<float[]> in(new float[floats]), out(new float[floats]);
  for (size_t i = 0; i < floats; ++i) {
    in.get()[i] = static_cast<float>(i % 251) * 0.5f;
    out.get()[i] = static_cast<float>(i % 127) * 0.25f;
  }
  const double copyUs =
      bestUs([&] { kernels::copy(out.get(), in.get(), n); }, deadline, maxReps);
  const double reduceUs = bestUs(
      [&] {
        kernels::reduce(out.get(), out.get(), in.get(), floats, DataType::kFloat32,
                        ReduceOp::kSum);
      },
      deadline, maxReps);
  // GB/s = bytes / (µs x 10^3).
  const double b = static_cast<double>(n);
  return {2 * b / (copyUs * 1e3), 3 * b / (reduceUs * 1e3), 5 * b / ((copyUs + reduceUs) * 1e3)};
}

std::string firstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string cpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        size_t start = line.find_first_not_of(" \t", colon + 1);
        return start == std::string::npos ? "" : line.substr(start);
      }
    }
  }
  return "unknown";
}

// The directory is ours to trust: a real directory (not a symlink), owned by this user, not
// writable by group or others.
Status checkDir(const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return errnoStatus("lstat", dir);
  if (!S_ISDIR(st.st_mode))
    return invalidArgument("calibration cache " + dir + " is not a directory");
  if (st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return invalidArgument("calibration cache " + dir +
                           " is not a private directory of this user (owner or mode)");
  return Status();
}

bool validRate(double v) { return std::isfinite(v) && v >= kMinRate && v <= kMaxRate; }
// A link term: 0 (not measured) or a plausible time or rate.
bool validTerm(double v) { return v == 0 || (std::isfinite(v) && v >= 1e-4 && v <= 1e6); }

}  // namespace

HostCalibration measureHost(uint64_t dramBytes, uint64_t cacheBytes, double budgetMs) {
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::microseconds(static_cast<int64_t>(budgetMs * 1e3));
  HostCalibration c;
  // Beyond the cache first: a few repetitions of a large buffer; then within it, many of a
  // small one (the first repetition brings it into the cache).
  const Rates dram = measureAt(dramBytes, deadline, 3);
  const Rates cache = measureAt(cacheBytes, deadline, 50);
  c.memBwGBps = std::clamp(dram.mix, kMinRate, kMaxRate);
  c.copyGBps = std::clamp(dram.copy, kMinRate, kMaxRate);
  c.reduceGBps = std::clamp(dram.reduce, kMinRate, kMaxRate);
  // Within the cache cannot be slower than beyond it; a disturbed measurement could say so.
  c.cacheBwGBps = std::clamp(std::max(cache.mix, c.memBwGBps), kMinRate, kMaxRate);
  c.measureMs = msSince(t0);
  c.source = Source::kCalibrated;
  return c;
}

// How this library was compiled: its kernels run several times slower unoptimized or under a
// sanitizer, so such a build measures and caches rates of its own (an AddressSanitizer test run
// must not leave its rates to the optimized library's next job).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CHORUS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CHORUS_SANITIZED 1
#endif
#endif
#if defined(CHORUS_SANITIZED)
constexpr const char* kBuildKind = "sanitized";
#elif defined(__OPTIMIZE__)
constexpr const char* kBuildKind = "optimized";
#else
constexpr const char* kBuildKind = "unoptimized";
#endif

std::string hostKey() {
  struct utsname u {};
  const std::string release = ::uname(&u) == 0 ? u.release : "unknown";
  // The TCP link terms are measured with the transport's congestion control.
  StatusOr<std::string> congestion = net::congestionControl();
  const std::string tcp = !congestion.ok()     ? std::string("?")
                          : congestion->empty() ? std::string("system")
                                                : *congestion;
  std::string key = "cpu=" + cpuModelName() + ";kernel=" + release +
                    ";boot=" + firstLine("/proc/sys/kernel/random/boot_id") +
                    ";chorus=" + std::to_string(CHORUS_VERSION_CODE) + ";tcp=" + tcp +
                    ";build=" + kBuildKind;
  // One line: nothing in it may end the line early.
  std::replace(key.begin(), key.end(), '\n', ' ');
  return key;
}

std::string defaultCacheDir() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg && *xdg == '/') return std::string(xdg) + "/chorus";
  return "/tmp/chorus-" + std::to_string(::geteuid());
}

StatusOr<HostCalibration> readCacheFile(const std::string& dir, const std::string& key) {
  CHORUS_RETURN_IF_ERROR(checkDir(dir));
  const std::string path = dir + "/" + kFileName;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return errnoStatus("open", path);
  std::string text;
  char buf[1024];
  ssize_t got;
  while ((got = ::read(fd, buf, sizeof buf)) > 0 && text.size() < 8192)
    text.append(buf, static_cast<size_t>(got));
  ::close(fd);
  std::istringstream in(text);
  std::string line;
  auto bad = [&](const std::string& why) {
    return invalidArgument("calibration cache " + path + ": " + why);
  };
  if (!std::getline(in, line) || line != kMagic) return bad("no '" + std::string(kMagic) + "'");
  if (!std::getline(in, line) || line.rfind("key ", 0) != 0) return bad("no key line");
  if (line.substr(4) != key) return bad("made for another host, boot or version");
  HostCalibration c;
  c.source = Source::kCachedFile;
  struct Field {
    const char* name;
    double* value;
  };
  const Field rates[] = {{"membw", &c.memBwGBps}, {"cachebw", &c.cacheBwGBps},
                         {"copy", &c.copyGBps}, {"reduce", &c.reduceGBps}};
  const Field terms[] = {{"line_ns", &c.links.lineNs}, {"cross_core_bw", &c.links.crossCoreGBps},
                         {"handoff_us", &c.links.handoffUs},
                         {"tcp_latency_us", &c.links.tcpLatencyUs},
                         {"tcp_bw", &c.links.tcpBwGBps}};
  auto field = [&](const Field& f, bool rate) -> Status {
    if (!std::getline(in, line)) return bad(std::string("no ") + f.name + " line");
    const std::string prefix = std::string(f.name) + " ";
    if (line.rfind(prefix, 0) != 0) return bad("expected '" + prefix + "...', got '" + line + "'");
    const std::string num = line.substr(prefix.size());
    char* stop = nullptr;
    *f.value = std::strtod(num.c_str(), &stop);
    if (num.empty() || *stop != '\0' || !(rate ? validRate(*f.value) : validTerm(*f.value)))
      return bad(std::string(f.name) + " '" + num + "' is not " +
                 (rate ? "a rate in GB/s" : "0 or a measured time or rate"));
    return Status();
  };
  for (const Field& f : rates) CHORUS_RETURN_IF_ERROR(field(f, true));
  for (const Field& f : terms) CHORUS_RETURN_IF_ERROR(field(f, false));
  if (std::getline(in, line) && !line.empty()) return bad("trailing '" + line + "'");
  return c;
}

Status writeCacheFile(const std::string& dir, const std::string& key, const HostCalibration& c) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return errnoStatus("mkdir", dir);
  CHORUS_RETURN_IF_ERROR(checkDir(dir));
  std::string tmp = dir + "/" + kFileName + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return errnoStatus("mkstemp", tmp);
  char body[768];
  const int len = std::snprintf(
      body, sizeof body,
      "%s\nkey %s\nmembw %.6g\ncachebw %.6g\ncopy %.6g\nreduce %.6g\nline_ns %.6g\n"
      "cross_core_bw %.6g\nhandoff_us %.6g\ntcp_latency_us %.6g\ntcp_bw %.6g\n",
      kMagic, key.c_str(), c.memBwGBps, c.cacheBwGBps, c.copyGBps, c.reduceGBps, c.links.lineNs,
      c.links.crossCoreGBps, c.links.handoffUs, c.links.tcpLatencyUs, c.links.tcpBwGBps);
  Status s;
  if (len <= 0 || static_cast<size_t>(len) >= sizeof body)
    s = invalidArgument("calibration cache: key too long");
  else if (::fchmod(fd, 0600) != 0)
    s = errnoStatus("fchmod", tmp);
  else if (::write(fd, body, static_cast<size_t>(len)) != len)
    s = errnoStatus("write", tmp);
  ::close(fd);
  const std::string path = dir + "/" + kFileName;
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = errnoStatus("rename", path);
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

HostCalibration calibrateHost(const std::string& dir, const std::string& key, std::string* note) {
  StatusOr<HostCalibration> cached = readCacheFile(dir, key);
  if (cached.ok()) {
    *note = "read " + dir + "/" + kFileName;
    return *cached;
  }
  // 4 MiB buffers (8 MiB in all, on 4 KiB pages) exceed one core's share of most last-level
  // caches; 64 KiB fit every L2. Faulting and filling them is most of the cost (what it took on
  // the development VM: docs/performance.md); repetitions stop at the 15 ms budget. The link
  // probes take about 10 ms and give up at 100 ms.
  const auto t0 = Clock::now();
  HostCalibration c = measureHost(4 << 20, 64 << 10, 15);
  c.links = measureLinks(100);
  c.measureMs = msSince(t0);
  const Status w = writeCacheFile(dir, key, c);
  *note = "measured (" + cached.status().message() + "); " +
          (w.ok() ? "written to " + dir + "/" + kFileName : "not cached: " + w.message());
  return c;
}

void applyCalibration(const HostCalibration& c, uint64_t cacheBytes, CostModel* model,
                      uint64_t llcBytes) {
  HostConstants h = model->host();
  if (llcBytes > 0) h.llcBytes = llcBytes;
  if (c.memBwGBps > 0) h.memBwGBps = c.memBwGBps;
  if (c.cacheBwGBps > 0) h.cacheBwGBps = std::max(c.cacheBwGBps, h.memBwGBps);
  if (cacheBytes > 0) h.cacheBytes = cacheBytes;
  if (c.links.lineNs > 0) h.lineUs = c.links.lineNs / 1e3;
  if (c.links.crossCoreGBps > 0) h.crossCoreGBps = c.links.crossCoreGBps;
  if (c.links.handoffUs > 0) h.contextSwitchUs = c.links.handoffUs;
  model->setHost(h);
  LinkConstants tcp = model->constants(LinkClass::kTcpLoopback);
  // The half round trip holds a send's and a receive's CPU time besides the hop (the model's
  // convention, fitFromPingPong()).
  if (c.links.tcpLatencyUs > 0)
    tcp.latencyUs = std::max(0.01, c.links.tcpLatencyUs - 2 * tcp.stepOverheadUs);
  if (c.links.tcpBwGBps > 0) tcp.bandwidthGBps = c.links.tcpBwGBps;
  model->setConstants(LinkClass::kTcpLoopback, tcp);
}

}  // namespace chorus::cost
