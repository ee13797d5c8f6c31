// Byte encoding shared by the bootstrap's formats (unique id, store protocol, PeerInfo).
//
// Everything on the wire is little-endian with explicit widths, so ranks built by different
// compilers or on different architectures agree. Readers never trust a length they read: every
// get checks the bytes that remain first and fails softly (returns false), so a truncated or
// hostile input becomes an error message instead of an out-of-bounds read or a huge allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::bootstrap::wire {

inline void storeLe(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint64_t loadLe(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>* out) : out_(out) {}

  void u8(uint8_t v) { out_->push_back(v); }
  void u16(uint16_t v) { put(v, 2); }
  void u32(uint32_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  void i32(int32_t v) { put(static_cast<uint32_t>(v), 4); }
  void i64(int64_t v) { put(static_cast<uint64_t>(v), 8); }
  void raw(const void* data, size_t len) {
    const auto* p = static_cast<const uint8_t*>(data);
    out_->insert(out_->end(), p, p + len);
  }
  // u32 length, then the bytes.
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  // u64 length, then the bytes.
  void blob(const std::vector<uint8_t>& b) {
    u64(b.size());
    raw(b.data(), b.size());
  }

 private:
  void put(uint64_t v, int bytes) {
    size_t at = out_->size();
    out_->resize(at + bytes);
    storeLe(out_->data() + at, v, bytes);
  }
  std::vector<uint8_t>* out_;
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t len) : p_(data), end_(data + len), begin_(data) {}

  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  size_t offset() const { return static_cast<size_t>(p_ - begin_); }
  bool done() const { return p_ == end_; }

  bool u8(uint8_t* v) { return get(v, 1); }
  bool u16(uint16_t* v) { return get(v, 2); }
  bool u32(uint32_t* v) { return get(v, 4); }
  bool u64(uint64_t* v) { return get(v, 8); }
  bool i32(int32_t* v) {
    uint32_t u;
    if (!get(&u, 4)) return false;
    *v = static_cast<int32_t>(u);
    return true;
  }
  bool i64(int64_t* v) {
    uint64_t u;
    if (!get(&u, 8)) return false;
    *v = static_cast<int64_t>(u);
    return true;
  }
  bool raw(void* out, size_t len) {
    if (remaining() < len) return false;
    std::memcpy(out, p_, len);
    p_ += len;
    return true;
  }
  // A u32-length string of at most `maxLen` bytes.
  bool str(std::string* s, size_t maxLen) {
    uint32_t len;
    if (!u32(&len) || len > maxLen || remaining() < len) return false;
    s->assign(reinterpret_cast<const char*>(p_), len);
    p_ += len;
    return true;
  }
  // A u64-length blob of at most `maxLen` bytes.
  bool blob(std::vector<uint8_t>* b, size_t maxLen) {
    uint64_t len;
    if (!u64(&len) || len > maxLen || remaining() < len) return false;
    b->assign(p_, p_ + len);
    p_ += len;
    return true;
  }
  // Everything that is left.
  void rest(std::vector<uint8_t>* b) {
    b->assign(p_, end_);
    p_ = end_;
  }

 private:
  template <typename T>
  bool get(T* v, int bytes) {
    if (remaining() < static_cast<size_t>(bytes)) return false;
    *v = static_cast<T>(loadLe(p_, bytes));
    p_ += bytes;
    return true;
  }
  const uint8_t* p_;
  const uint8_t* end_;
  const uint8_t* begin_;
};

}  // namespace chorus::bootstrap::wire
