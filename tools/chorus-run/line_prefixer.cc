#include "tools/chorus-run/line_prefixer.h"

#include <utility>

namespace chorus::run {

LinePrefixer::LinePrefixer(std::string prefix, size_t maxLine)
    : prefix_(std::move(prefix)), maxLine_(maxLine == 0 ? 1 : maxLine) {}

void LinePrefixer::emit(std::string_view line, std::string* out) const {
  out->append(prefix_);
  out->append(line);
  out->push_back('\n');
}

void LinePrefixer::feed(std::string_view data, std::string* out) {
  while (!data.empty()) {
    size_t nl = data.find('\n');
    if (nl == std::string_view::npos) {
      partial_.append(data);
      // Split overlong lines at maxLine_ so memory stays bounded.
      while (partial_.size() > maxLine_) {
        emit(std::string_view(partial_).substr(0, maxLine_), out);
        partial_.erase(0, maxLine_);
      }
      return;
    }
    if (partial_.empty()) {
      emit(data.substr(0, nl), out);
    } else {
      partial_.append(data.substr(0, nl));
      emit(partial_, out);
      partial_.clear();
    }
    data.remove_prefix(nl + 1);
  }
}

void LinePrefixer::finish(std::string* out) {
  if (partial_.empty()) return;
  emit(partial_, out);
  partial_.clear();
}

}  // namespace chorus::run
