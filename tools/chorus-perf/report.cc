#include "tools/chorus-perf/report.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

namespace chorus::perf {
namespace {

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (n < 0) return {};
  return std::string(buf, std::min<size_t>(static_cast<size_t>(n), sizeof(buf) - 1));
}

std::string csvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string fitFloat(double value, int width) {
  for (int decimals = 2; decimals >= 0; --decimals) {
    std::string s = format("%*.*f", width, decimals, value);
    if (static_cast<int>(s.size()) <= width) return s;
  }
  return format("%*.*e", width, width >= 7 ? 1 : 0, value);
}

std::string tableHeader() {
  std::string h;
  h += format("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n",
              "", "", "", "", "");
  h += format("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count",
              "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
              "#wrong");
  h += format("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)",
              "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  return h;
}

std::string rowPreamble(size_t bytes, size_t count, const std::string& type,
                        const std::string& redop, int root) {
  return format("%12zu  %12zu  %8s  %6s  %6d", bytes, count, type.c_str(), redop.c_str(), root);
}

std::string rowHalf(double timeUs, double algBw, double busBw, std::optional<int64_t> wrong) {
  std::string s = "  " + fitFloat(timeUs, 7) + "  " + fitFloat(algBw, 6) + "  " + fitFloat(busBw, 6);
  if (wrong) return s + format("  %5" PRId64, *wrong);
  return s + "    N/A";
}

std::string rowHalfQuant(double timeUs, double algBw, double busBw, std::optional<double> error) {
  std::string s = "  " + fitFloat(timeUs, 7) + "  " + fitFloat(algBw, 6) + "  " + fitFloat(busBw, 6);
  if (!error) return s + "    N/A";
  return s + "  " + fitFloat(*error * 100, 4) + "%";
}

std::string footer(int failedResults, double avgBusBw) {
  std::string f;
  f += format("# %-20s : %d %s\n", "Out of bounds values", failedResults, failedResults ? "FAILED" : "OK");
  f += format("# %-20s : %g \n", "Avg bus bandwidth", avgBusBw);
  f += "#\n";
  return f;
}

std::string writeCsv(const std::string& path, const std::vector<Record>& records) {
  std::ofstream out(path);
  if (!out) return "cannot open " + path + ": " + std::strerror(errno);
  out << "collective,nranks,size,count,type,redop,root,placement,time_us,algbw_gbps,busbw_gbps,wrong,"
         "rel_error\n";
  for (const Record& r : records) {
    out << csvField(r.coll) << ',' << r.nranks << ',' << r.bytes << ',' << r.count << ','
        << csvField(r.type) << ',' << csvField(r.redop) << ',' << r.root << ','
        << (r.inPlace ? "in-place" : "out-of-place") << ',' << format("%.3f", r.timeUs) << ','
        << format("%.6g", r.algBw) << ',' << format("%.6g", r.busBw) << ',';
    if (r.wrong) out << *r.wrong;  // empty field: not checked
    out << ',';
    if (r.relError) out << format("%.6g", *r.relError);  // empty: not quantized
    out << '\n';
  }
  out.flush();
  if (!out) return "cannot write " + path + ": " + std::strerror(errno);
  return {};
}

std::string writeJson(const std::string& path, const RunInfo& info,
                      const std::vector<Record>& records, int failedResults, double avgBusBw) {
  nlohmann::json doc;
  doc["tool"] = "chorus-perf";
  doc["version"] = info.version;
  doc["config"] = {
      {"collective", info.coll},         {"nranks", info.nranks},
      {"min_bytes", info.minBytes},      {"max_bytes", info.maxBytes},
      {"step_factor", info.stepFactor},  {"step_bytes", info.stepBytes},
      {"warmup_iters", info.warmupIters}, {"iters", info.iters},
      {"check", info.check},             {"blocking", info.blocking},
  };
  nlohmann::json results = nlohmann::json::array();
  for (const Record& r : records) {
    nlohmann::json j = {
        {"collective", r.coll}, {"nranks", r.nranks},     {"size", r.bytes},
        {"count", r.count},     {"type", r.type},         {"redop", r.redop},
        {"root", r.root},       {"placement", r.inPlace ? "in-place" : "out-of-place"},
        {"time_us", r.timeUs},  {"algbw_gbps", r.algBw},  {"busbw_gbps", r.busBw},
    };
    j["wrong"] = r.wrong ? nlohmann::json(*r.wrong) : nlohmann::json(nullptr);
    if (r.relError) j["rel_error"] = *r.relError;
    results.push_back(std::move(j));
  }
  doc["results"] = std::move(results);
  doc["out_of_bounds"] = failedResults;
  doc["avg_bus_bandwidth_gbps"] = avgBusBw;
  std::ofstream out(path);
  if (!out) return "cannot open " + path + ": " + std::strerror(errno);
  out << doc.dump(2) << '\n';
  out.flush();
  if (!out) return "cannot write " + path + ": " + std::strerror(errno);
  return {};
}

}  // namespace chorus::perf
