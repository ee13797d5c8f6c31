// Self-calibration of the cost model's memory terms: a short measurement of the executor's own
// copy and reduce kernels, beyond the cache and within it, made by one rank per host at
// communicator creation and cached per host and boot in a file so that repeated jobs pay once.
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
#include "src/cost/machine.h"

namespace chorus::cost {

/// One host's measured memory rates (GB/s of read + written traffic, one core).
struct HostCalibration {
  double memBwGBps = 0;    ///< copy + reduce mix beyond the cache (the model's memBwGBps)
  double cacheBwGBps = 0;  ///< the same mix within the cache (the model's cacheBwGBps)
  double copyGBps = 0;     ///< copy alone beyond the cache (2 x bytes / time), for the record
  double reduceGBps = 0;   ///< float32 sum alone beyond the cache (3 x bytes / time)
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

/// readCacheFile(), else measureHost() with the defaults and writeCacheFile(). Never fails:
/// `note` says what happened to the file ("read", "written", or why neither).
HostCalibration calibrateHost(const std::string& dir, const std::string& key, std::string* note);

}  // namespace chorus::cost
