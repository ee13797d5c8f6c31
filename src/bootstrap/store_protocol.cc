#include "src/bootstrap/store_protocol.h"

#include "src/bootstrap/wire.h"

namespace chorus::bootstrap {
namespace {

std::vector<uint8_t> beginFrame() { return std::vector<uint8_t>(kStoreFrameHeader, 0); }
void finishFrame(std::vector<uint8_t>* frame) {
  wire::storeLe(frame->data(), frame->size() - kStoreFrameHeader, 8);
}

// A u32 count then that many keys, and nothing after them.
bool readKeys(wire::Reader& r, std::vector<std::string>* keys) {
  uint32_t n;
  // Each key takes at least 4 bytes, which bounds `n` before anything is allocated.
  if (!r.u32(&n) || n > r.remaining() / 4) return false;
  keys->resize(n);
  for (auto& k : *keys)
    if (!r.str(&k, kMaxStoreKeyBytes)) return false;
  return r.done();
}

void writeKeys(wire::Writer& w, const std::vector<std::string>& keys) {
  w.u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
}

Status malformedReply() { return remoteError("sent a malformed reply"); }

}  // namespace

StatusOr<uint64_t> storeFrameLength(const uint8_t header[kStoreFrameHeader], bool authed) {
  const uint64_t len = wire::loadLe(header, 8);
  const uint64_t limit = authed ? kMaxStoreFrame : kMaxHelloFrame;
  if (len > limit)
    return invalidArgument("sent a frame of " + std::to_string(len) + " bytes (limit " +
                           std::to_string(limit) + (authed ? "" : " before hello") + ")");
  return len;
}

StatusOr<StoreHello> decodeStoreHello(const uint8_t* data, size_t len) {
  wire::Reader r(data, len);
  uint8_t op;
  StoreHello h;
  if (!r.u8(&op) || op != static_cast<uint8_t>(StoreOp::kHello) || !r.u32(&h.version) ||
      !r.raw(h.secret.data(), h.secret.size()) || !r.done())
    return invalidArgument("did not start with a hello");
  return h;
}

StatusOr<StoreRequest> decodeStoreRequest(const uint8_t* data, size_t len) {
  wire::Reader r(data, len);
  uint8_t rawOp;
  if (!r.u8(&rawOp)) return invalidArgument("sent an empty request");
  StoreRequest q;
  q.op = static_cast<StoreOp>(rawOp);
  switch (q.op) {
    case StoreOp::kSet:
      if (!r.str(&q.key, kMaxStoreKeyBytes)) return invalidArgument("sent a malformed set");
      r.rest(&q.value);
      return q;
    case StoreOp::kGet:
      if (!r.str(&q.key, kMaxStoreKeyBytes) || !r.done())
        return invalidArgument("sent a malformed get");
      return q;
    case StoreOp::kAdd:
      if (!r.str(&q.key, kMaxStoreKeyBytes) || !r.i64(&q.delta) || !r.done())
        return invalidArgument("sent a malformed add");
      return q;
    case StoreOp::kExists:
      if (!readKeys(r, &q.keys)) return invalidArgument("sent a malformed exists");
      return q;
    case StoreOp::kMultiGet:
      if (!readKeys(r, &q.keys)) return invalidArgument("sent a malformed multiGet");
      return q;
    case StoreOp::kSetMultiGet:
      if (!r.str(&q.key, kMaxStoreKeyBytes) || !r.blob(&q.value, kMaxStoreFrame) ||
          !readKeys(r, &q.keys))
        return invalidArgument("sent a malformed setMultiGet");
      return q;
    case StoreOp::kHello:
      return invalidArgument("sent a second hello");
  }
  return invalidArgument("sent unknown request type " + std::to_string(rawOp));
}

std::vector<uint8_t> encodeStoreRequest(const StoreRequest& q) {
  std::vector<uint8_t> frame = beginFrame();
  size_t keyBytes = 0;
  for (const auto& k : q.keys) keyBytes += 4 + k.size();
  frame.reserve(kStoreFrameHeader + 1 + 4 + q.key.size() + 8 + q.value.size() + 4 + keyBytes);
  wire::Writer w(&frame);
  w.u8(static_cast<uint8_t>(q.op));
  switch (q.op) {
    case StoreOp::kSet:
      w.str(q.key);
      w.raw(q.value.data(), q.value.size());
      break;
    case StoreOp::kGet:
      w.str(q.key);
      break;
    case StoreOp::kAdd:
      w.str(q.key);
      w.i64(q.delta);
      break;
    case StoreOp::kExists:
    case StoreOp::kMultiGet:
      writeKeys(w, q.keys);
      break;
    case StoreOp::kSetMultiGet:
      w.str(q.key);
      w.blob(q.value);
      writeKeys(w, q.keys);
      break;
    case StoreOp::kHello:
      break;  // encodeStoreHello
  }
  finishFrame(&frame);
  return frame;
}

std::vector<uint8_t> encodeStoreHello(const StoreHello& h) {
  std::vector<uint8_t> frame = beginFrame();
  wire::Writer w(&frame);
  w.u8(static_cast<uint8_t>(StoreOp::kHello));
  w.u32(h.version);
  w.raw(h.secret.data(), h.secret.size());
  finishFrame(&frame);
  return frame;
}

Status decodeStoreHelloReply(const uint8_t* data, size_t len, const std::string& what) {
  wire::Reader r(data, len);
  uint8_t result = 0;
  if (!r.u8(&result))
    return remoteError(what + " answered the handshake with an empty frame: it is not a chorus "
                              "store, or runs another chorus version");
  switch (result) {
    case kHelloOk:
      return Status();
    case kHelloWrongSecret:
      return invalidUsage(what + " refused the job secret (it serves another job, or the ranks "
                                 "were given different unique ids / CHORUS_JOB_SECRET)");
    case kHelloBadVersion: {
      uint32_t theirs = 0;
      if (!r.u32(&theirs))
        return remoteError(what + " refused our store protocol version without naming its own");
      return invalidUsage(what + " speaks store protocol " + std::to_string(theirs) +
                          ", this rank " + std::to_string(kStoreProtocolVersion) +
                          ": all ranks must run the same chorus version");
    }
    default:
      return remoteError(what + " answered the handshake with code " + std::to_string(result));
  }
}

StatusOr<std::vector<uint8_t>> decodeStoreReply(const uint8_t* data, size_t len,
                                                const std::string& op, const std::string& what) {
  if (len < 1) return remoteError(op + ": the " + what + " sent an empty reply");
  const uint8_t code = data[0];
  if (code != 0) {
    std::string message(reinterpret_cast<const char*>(data) + 1, len - 1);
    Code c = code <= static_cast<uint8_t>(Code::kInProgress) ? static_cast<Code>(code)
                                                             : Code::kRemoteError;
    return Status(c, op + ": " + what + ": " + message);
  }
  return std::vector<uint8_t>(data + 1, data + len);
}

StatusOr<int64_t> decodeStoreAddReply(const std::vector<uint8_t>& body) {
  wire::Reader r(body.data(), body.size());
  int64_t value;
  if (!r.i64(&value) || !r.done()) return malformedReply();
  return value;
}

StatusOr<std::vector<bool>> decodeStoreExistsReply(const std::vector<uint8_t>& body,
                                                   size_t count) {
  wire::Reader r(body.data(), body.size());
  uint32_t n;
  if (!r.u32(&n) || n != count || r.remaining() != n) return malformedReply();
  std::vector<bool> out(n);
  for (uint32_t i = 0; i < n; ++i) {
    uint8_t b = 0;
    r.u8(&b);
    out[i] = b != 0;
  }
  return out;
}

StatusOr<std::vector<std::vector<uint8_t>>> decodeStoreValuesReply(
    const std::vector<uint8_t>& body, size_t count) {
  wire::Reader r(body.data(), body.size());
  uint32_t n;
  // `count` is what the client asked for; the reply must match it before anything is sized.
  if (!r.u32(&n) || n != count || n > r.remaining() / 8) return malformedReply();
  std::vector<std::vector<uint8_t>> out(n);
  for (auto& v : out)
    if (!r.blob(&v, kMaxStoreFrame)) return malformedReply();
  if (!r.done()) return malformedReply();
  return out;
}

}  // namespace chorus::bootstrap
