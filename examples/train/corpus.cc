#include "corpus.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace train {
namespace fs = std::filesystem;

namespace {

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    throw std::runtime_error("--data: cannot open " + p.string() + ": " + std::strerror(errno));
  }
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error("--data: read error on " + p.string());
  return s;
}

}  // namespace

Corpus Corpus::load(const std::string& path, double holdoutFraction) {
  if (!(holdoutFraction > 0.0 && holdoutFraction < 0.5)) {
    throw std::invalid_argument("--holdout must be in (0, 0.5)");
  }
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (ec) {
    throw std::runtime_error("--data: " + path + ": " + ec.message() +
                             " (the default corpus comes with Debian's `fortunes` package)");
  }
  std::vector<fs::path> files;
  if (fs::is_directory(st)) {
    for (const auto& e : fs::directory_iterator(path)) {
      if (e.is_symlink() || !e.is_regular_file()) continue;
      if (e.path().extension() == ".dat") continue;  // strfile's index, binary
      files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  std::string text;
  for (const auto& f : files) text += readFile(f);
  if (text.size() < 4096) {
    throw std::runtime_error("--data: " + path + " holds only " + std::to_string(text.size()) +
                             " bytes; need at least 4096");
  }
  Corpus c;
  c.files_ = files.size();
  bool seen[256] = {};
  for (unsigned char ch : text) seen[ch] = true;
  c.tokenOf_.assign(256, -1);
  for (int b = 0; b < 256; ++b) {
    if (seen[b]) {
      c.tokenOf_[b] = static_cast<int>(c.bytes_.size());
      c.bytes_.push_back(static_cast<uint8_t>(b));
    }
  }
  std::vector<uint8_t> tokens(text.size());
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < text.size(); ++i) {
    tokens[i] = static_cast<uint8_t>(c.tokenOf_[static_cast<unsigned char>(text[i])]);
    h = (h ^ tokens[i]) * 1099511628211ULL;
  }
  for (uint8_t b : c.bytes_) h = (h ^ b) * 1099511628211ULL;
  c.fingerprint_ = h;
  size_t cut = text.size() - static_cast<size_t>(text.size() * holdoutFraction);
  c.train_.assign(tokens.begin(), tokens.begin() + cut);
  c.heldOut_.assign(tokens.begin() + cut, tokens.end());
  return c;
}

int64_t Corpus::encode(char ch) const {
  int t = tokenOf_[static_cast<unsigned char>(ch)];
  return t < 0 ? 0 : t;
}

}  // namespace train
