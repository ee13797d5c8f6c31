// One logger for every layer.
//
// CHORUS_DEBUG=WARN|INFO|TRACE sets the level (default WARN), CHORUS_DEBUG_SUBSYS=INIT,TOPO,...
// restricts INFO/TRACE lines to some subsystems (WARN always prints), CHORUS_DEBUG_FILE=path.%r
// writes to a per-rank file (%r = rank, %p = pid, %h = hostname) instead of stderr.
// A disabled line costs one branch: the message is only formatted when it will be printed.
#pragma once

#include <sstream>
#include <string>

namespace chorus::log {

enum class Level : int { kWarn = 0, kInfo = 1, kTrace = 2 };
enum class Subsys : unsigned { kInit = 1, kTopo = 2, kTune = 4, kNet = 8, kColl = 16, kAll = 31 };

bool enabled(Level level, Subsys subsys);
void write(Level level, Subsys subsys, const std::string& text);
// Rank to print in each line's prefix and in %r (set once the communicator knows it).
void setRank(int rank);

class Line {
 public:
  Line(Level level, Subsys subsys) : level_(level), subsys_(subsys) {}
  ~Line() { write(level_, subsys_, out_.str()); }
  template <typename T>
  Line& operator<<(const T& v) {
    out_ << v;
    return *this;
  }

 private:
  Level level_;
  Subsys subsys_;
  std::ostringstream out_;
};

}  // namespace chorus::log

// CHORUS_LOG(INFO, NET) << "connected to rank " << peer;
#define CHORUS_LOG(level, subsys)                                                   \
  if (!::chorus::log::enabled(::chorus::log::k##level, ::chorus::log::k##subsys)) {  \
  } else                                                                             \
    ::chorus::log::Line(::chorus::log::k##level, ::chorus::log::k##subsys)

// Spelling helpers so call sites read CHORUS_LOG(WARN, ...), CHORUS_LOG(INFO, ...).
namespace chorus::log {
inline constexpr Level kWARN = Level::kWarn;
inline constexpr Level kINFO = Level::kInfo;
inline constexpr Level kTRACE = Level::kTrace;
inline constexpr Subsys kINIT = Subsys::kInit;
inline constexpr Subsys kTOPO = Subsys::kTopo;
inline constexpr Subsys kTUNE = Subsys::kTune;
inline constexpr Subsys kNET = Subsys::kNet;
inline constexpr Subsys kCOLL = Subsys::kColl;
}  // namespace chorus::log
