// Self-calibration of the cost model's memory and link terms: a short measurement of the
// executor's own copy and reduce kernels, beyond the cache and within it, and of what a cache
// line between two CPUs, a CPU shared by two waiters and a loopback TCP connection cost, made
// by one rank per host at communicator creation and cached per host and boot in a file so that
// repeated jobs pay once.
//
// The model prices a call's memory traffic as (2 x copied + 3 x reduced bytes) / rate, the rate
// being HostConstants::cacheBwGBps for working sets within cacheBytes and memBwGBps beyond. The
// measurement runs exactly that mix (one copy and one float32 sum of the same bytes) and
// divides its traffic, 5 x bytes, by the time: the rates mean what the model uses them for.
//
// The cache file (one per host and user): `<dir>/calibration`, dir $XDG_RUNTIME_DIR/chorus or,
// without XDG_RUNTIME_DIR, /tmp/chorus-<uid>; the directory is made 0700 and used only when it
// is a real directory owned by this user that nobody else may write; the file is written 0600
// through a temporary file and rename. Its key line names the CPU model, the kernel release, the
// boot id, the chorus version and the kind of build (optimized, unoptimized, sanitized: their
// kernels run at different speeds): another CPU, a kernel or chorus upgrade, a reboot or a
// library built another way makes it stale. A file that does not parse, holds a value out of
// range or another key is ignored and rewritten; a directory that cannot be written costs a
// measurement per job, never an error.
//
// It lives with the communicator (src/core/) because it runs the executor's kernels, which the
// cost vocabulary may not include; it fills the cost model's terms, hence its namespace.
#pragma once

#include <string>

#include "src/base/status.h"
#include "src/cost/cost_model.h"
#include "src/cost/machine.h"

namespace chorus::cost {

/// One host's link terms, measured by two threads of the measuring process (measureLinks);
/// 0 where a term could not be measured (one allowed CPU, no loopback TCP, out of time): the
/// cost model keeps its table value for it.
struct LinkCalibration {
  /// One-way transfer of a written cache line between the first two CPUs this process may run
  /// on (a counter handed back and forth; median of batches), ns: the host window's unit cost.
  double lineNs = 0;
  /// The rate at which a thread on the second CPU reads 64 KiB just written by one on the
  /// first (median of rounds), GB/s: a rank reading a peer's area of the host window.
  double crossCoreGBps = 0;
  /// One hand-over of a CPU between two threads pinned to it that wait by sched_yield, as
  /// ranks on a shared core do (median of batches), µs.
  double handoffUs = 0;
  /// Loopback TCP (TCP_NODELAY) between threads on the two CPUs: half a round trip of 8 B, µs,
  /// and the rate of each direction while both stream 4 MiB at once, GB/s.
  double tcpLatencyUs = 0;
  double tcpBwGBps = 0;
};

/// Measures the link terms within `budgetMs` (each probe gives up, reporting 0, when the
/// deadline passes). About 10 ms on the development VM.
LinkCalibration measureLinks(double budgetMs);

/// One host's measured memory rates (GB/s of read + written traffic, one core) and link terms.
struct HostCalibration {
  double memBwGBps = 0;    ///< copy + reduce mix beyond the cache (the model's memBwGBps)
  double cacheBwGBps = 0;  ///< the same mix within the cache (the model's cacheBwGBps)
  double copyGBps = 0;     ///< copy alone beyond the cache (2 x bytes / time), for the record
  double reduceGBps = 0;   ///< float32 sum alone beyond the cache (3 x bytes / time)
  LinkCalibration links;
  double measureMs = 0;    ///< how long the measurement took (when this process measured)
  Source source = Source::kCalibrated;  ///< kCalibrated or kCachedFile
};

/// The sizes the measurement uses: buffers of `dramBytes` for the rate beyond the cache and
/// of `cacheBytes` within it; it stops repeating once `budgetMs` has passed (each size runs at
/// least once). Rates are positive and finite.
HostCalibration measureHost(uint64_t dramBytes, uint64_t cacheBytes, double budgetMs);

/// "cpu=<model name>;kernel=<release>;boot=<boot id>;chorus=<version code>" of this host.
std::string hostKey();

/// $XDG_RUNTIME_DIR/chorus, else /tmp/chorus-<uid>.
std::string defaultCacheDir();

/// The calibration stored in `dir` under `key`; an error (kSystemError or kInvalidArgument, naming
/// what is wrong: no file, unsafe directory, bad line, other key) when it cannot be used.
StatusOr<HostCalibration> readCacheFile(const std::string& dir, const std::string& key);

/// Stores `c` under `key` in `dir` (made 0700 when missing); an error names the call and path.
Status writeCacheFile(const std::string& dir, const std::string& key, const HostCalibration& c);

/// readCacheFile(), else measureHost() and measureLinks() with the defaults and
/// writeCacheFile(). Never fails: `note` says what happened to the file ("read", "written", or
/// why neither).
HostCalibration calibrateHost(const std::string& dir, const std::string& key, std::string* note);

/// `model` with `c`'s terms in place of the table's (docs/design.md, "Self-sizing and
/// self-calibration", says how each term is used): the memory rates, the cache rule
/// `cacheBytes`, and each measured link term (a 0 keeps the model's value).
void applyCalibration(const HostCalibration& c, uint64_t cacheBytes, CostModel* model,
                      uint64_t llcBytes = 0);

}  // namespace chorus::cost
