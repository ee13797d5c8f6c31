// The nccl-tests table and chorus-perf's machine-readable records.
//
// The text layout is nccl-tests' column for column, so scripts written for nccl-tests output
// (grep for the footer, split rows on whitespace) read ours unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace chorus::perf {

// One (size, placement) result.
struct Record {
  std::string coll;
  int nranks = 0;
  size_t bytes = 0;
  size_t count = 0;
  std::string type;
  std::string redop;
  int root = -1;
  bool inPlace = false;
  double timeUs = 0;
  double algBw = 0;
  double busBw = 0;
  std::optional<int64_t> wrong;  // nullopt: not checked (N/A)
  std::optional<double> relError;  // --quant: relative L2 error against the exact result
};

// The run's parameters, echoed in the header and the JSON file.
struct RunInfo {
  std::string coll;
  int nranks = 0;
  uint64_t minBytes = 0;
  uint64_t maxBytes = 0;
  uint64_t stepFactor = 1;
  uint64_t stepBytes = 0;
  int warmupIters = 0;
  int iters = 0;
  bool check = true;
  bool blocking = false;
  std::string version;
};

// `value` in exactly `width` characters, with as many decimals (2, 1, 0) as fit.
std::string fitFloat(double value, int width);

std::string tableHeader();  // the three lines above the rows
std::string rowPreamble(size_t bytes, size_t count, const std::string& type,
                        const std::string& redop, int root);
std::string rowHalf(double timeUs, double algBw, double busBw, std::optional<int64_t> wrong);
// --quant: the last column is the relative error in percent (5 characters, e.g. "0.70%").
std::string rowHalfQuant(double timeUs, double algBw, double busBw, std::optional<double> error);
std::string footer(int failedResults, double avgBusBw);

// Write the records; return an error message, or "" on success.
std::string writeCsv(const std::string& path, const std::vector<Record>& records);
std::string writeJson(const std::string& path, const RunInfo& info,
                      const std::vector<Record>& records, int failedResults, double avgBusBw);

}  // namespace chorus::perf
