// The training text: files of a Debian package (by default the collections `fortunes` installs),
// read in sorted name order, tokenized byte by byte over the sorted set of bytes that occur, and
// split into a training part and a held-out tail.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace train {

class Corpus {
 public:
  /// `path` is a file, or a directory whose regular files (symlinks and *.dat skipped) are
  /// concatenated in sorted name order. Throws with the path and the reason.
  static Corpus load(const std::string& path, double holdoutFraction);

  int64_t vocab() const { return static_cast<int64_t>(bytes_.size()); }
  const std::vector<uint8_t>& train() const { return train_; }
  const std::vector<uint8_t>& heldOut() const { return heldOut_; }
  /// Token -> byte; the vocabulary is sorted by byte value.
  char decode(int64_t token) const { return static_cast<char>(bytes_[token]); }
  int64_t encode(char c) const;
  size_t files() const { return files_; }
  size_t totalBytes() const { return train_.size() + heldOut_.size(); }
  /// FNV-1a of the token stream and vocabulary, stored in checkpoints.
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  std::vector<uint8_t> bytes_;    // vocabulary: token -> byte
  std::vector<int> tokenOf_;      // byte -> token or -1
  std::vector<uint8_t> train_, heldOut_;  // token streams
  size_t files_ = 0;
  uint64_t fingerprint_ = 0;
};

}  // namespace train
