// Splits a child's output stream into lines and tags each with the rank that wrote it.
//
// Kept apart from the process handling so the splitting rules (partial lines, overlong lines)
// are unit-tested without forking anything.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace chorus::run {

class LinePrefixer {
 public:
  // Lines longer than maxLine are emitted in pieces (each with a prefix and a newline) so a
  // child that never writes '\n' cannot make the launcher buffer without bound.
  static constexpr size_t kDefaultMaxLine = 64 * 1024;

  explicit LinePrefixer(std::string prefix, size_t maxLine = kDefaultMaxLine);

  // Consumes bytes read from the child; appends every completed line, prefixed, to *out.
  void feed(std::string_view data, std::string* out);
  // Emits the pending partial line (prefixed, newline added). Call when the stream ends.
  void finish(std::string* out);

  bool hasPartial() const { return !partial_.empty(); }

 private:
  void emit(std::string_view line, std::string* out) const;

  std::string prefix_;
  size_t maxLine_;
  std::string partial_;
};

}  // namespace chorus::run
