#include "src/base/logging.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "src/base/config.h"

namespace chorus::log {
namespace {

struct State {
  std::once_flag once;
  Level level = Level::kWarn;
  unsigned subsys = static_cast<unsigned>(Subsys::kAll);
  std::mutex mu;
  FILE* out = nullptr;
  bool fileOpened = false;
  std::atomic<int> rank{-1};
};

State& state() {
  static State* s = new State();  // never destroyed: usable from atexit paths
  return *s;
}

void init(State& s) {
  std::string lvl = config::getString("CHORUS_DEBUG");
  for (char& c : lvl) c = static_cast<char>(toupper(c));
  if (lvl == "INFO") s.level = Level::kInfo;
  else if (lvl == "TRACE") s.level = Level::kTrace;
  else s.level = Level::kWarn;
  std::string sub = config::getString("CHORUS_DEBUG_SUBSYS");
  for (char& c : sub) c = static_cast<char>(toupper(c));
  if (!sub.empty() && sub != "ALL") {
    unsigned mask = 0;
    if (sub.find("INIT") != std::string::npos) mask |= static_cast<unsigned>(Subsys::kInit);
    if (sub.find("TOPO") != std::string::npos) mask |= static_cast<unsigned>(Subsys::kTopo);
    if (sub.find("TUNE") != std::string::npos) mask |= static_cast<unsigned>(Subsys::kTune);
    if (sub.find("NET") != std::string::npos) mask |= static_cast<unsigned>(Subsys::kNet);
    if (sub.find("COLL") != std::string::npos) mask |= static_cast<unsigned>(Subsys::kColl);
    s.subsys = mask;
  }
}

std::string expandPath(const std::string& pattern, int rank) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[++i];
      if (c == 'r') out += std::to_string(rank);
      else if (c == 'p') out += std::to_string(getpid());
      else if (c == 'h') {
        char host[256] = {};
        gethostname(host, sizeof(host) - 1);
        out += host;
      } else {
        out += '%';
        out += c;
      }
    } else {
      out += pattern[i];
    }
  }
  return out;
}

const char* levelName(Level l) {
  switch (l) {
    case Level::kWarn: return "WARN";
    case Level::kInfo: return "INFO";
    case Level::kTrace: return "TRACE";
  }
  return "?";
}

}  // namespace

bool enabled(Level level, Subsys subsys) {
  State& s = state();
  std::call_once(s.once, [&] { init(s); });
  if (level > s.level) return false;
  if (level == Level::kWarn) return true;
  return (s.subsys & static_cast<unsigned>(subsys)) != 0;
}

void setRank(int rank) { state().rank.store(rank); }

void write(Level level, Subsys, const std::string& text) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.fileOpened) {
    s.fileOpened = true;
    std::string path = config::getString("CHORUS_DEBUG_FILE");
    if (!path.empty()) s.out = std::fopen(expandPath(path, s.rank.load()).c_str(), "a");
  }
  FILE* out = s.out ? s.out : stderr;
  char host[64] = {};
  gethostname(host, sizeof(host) - 1);
  std::fprintf(out, "%s:%d:%d [chorus] %s %s\n", host, getpid(), s.rank.load(), levelName(level),
               text.c_str());
  std::fflush(out);
}

}  // namespace chorus::log
