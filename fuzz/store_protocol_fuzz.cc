// libFuzzer target: the bootstrap store's wire protocol (src/bootstrap/store_protocol.h), the
// decoders the store server runs on every byte a client sends and the client runs on every reply.
//
// The input is read twice. First as the server reads one client's stream: frames (u64 length,
// payload) whose length goes through storeFrameLength, the first payload through
// decodeStoreHello, the others through decodeStoreRequest, stopping where the server would
// disconnect. Then as one reply payload, through every client-side decoder. Properties:
//   - errors are kInvalidArgument (server side) or kInvalidUsage / kRemoteError (client side),
//     with a message;
//   - an accepted request re-encodes (encodeStoreRequest) to exactly the bytes it came from, and
//     decodes again to the same request; an accepted hello likewise;
//   - no key is longer than the limit, and nothing decoded is larger than the input.
// Run with fuzz/run.sh; the corpus is replayed in ctest (fuzz_replay.store_protocol).
#include <cstring>
#include <string>
#include <vector>

#include "fuzz/fuzz_target.h"
#include "src/bootstrap/store_protocol.h"
#include "src/bootstrap/wire.h"

namespace chorus::fuzz {
namespace {

using bootstrap::StoreRequest;

[[noreturn]] void storeFail(const char* what, const std::string& detail = "") {
  fail("store_protocol_fuzz", what, detail);
}

void expectError(const Status& s, Code code, const char* what) {
  if (s.ok()) return;
  if (s.code() != code) storeFail(what, s.toString());
  if (s.message().empty()) storeFail("an error without a message", what);
}

void checkRequest(const StoreRequest& q, const uint8_t* payload, size_t len) {
  if (q.key.size() > bootstrap::kMaxStoreKeyBytes) storeFail("a key above the limit");
  size_t decoded = q.key.size() + q.value.size();
  for (const auto& k : q.keys) {
    if (k.size() > bootstrap::kMaxStoreKeyBytes) storeFail("a key above the limit");
    decoded += k.size();
  }
  if (decoded > len) storeFail("decoded more bytes than the payload holds");

  std::vector<uint8_t> frame = bootstrap::encodeStoreRequest(q);
  if (frame.size() != bootstrap::kStoreFrameHeader + len ||
      bootstrap::wire::loadLe(frame.data(), 8) != len ||
      std::memcmp(frame.data() + bootstrap::kStoreFrameHeader, payload, len) != 0)
    storeFail("an accepted request does not re-encode to its own bytes",
              "op " + std::to_string(static_cast<int>(q.op)) + ", " + std::to_string(len) +
                  " bytes in, " + std::to_string(frame.size()) + " out");
  auto again = bootstrap::decodeStoreRequest(frame.data() + bootstrap::kStoreFrameHeader, len);
  if (!again.ok() || !(*again == q)) storeFail("a re-encoded request decodes differently");
}

void asServer(const uint8_t* data, size_t size) {
  size_t pos = 0;
  bool authed = false;
  while (size - pos >= bootstrap::kStoreFrameHeader) {
    StatusOr<uint64_t> len = bootstrap::storeFrameLength(data + pos, authed);
    if (!len.ok()) {
      expectError(len.status(), Code::kInvalidArgument, "frame length: not an InvalidArgument");
      if (len.status().message().rfind("sent a frame of ", 0) != 0)
        storeFail("a refused frame length is not named", len.status().message());
      return;  // the server disconnects
    }
    if (size - pos - bootstrap::kStoreFrameHeader < *len) return;  // waits for the rest
    const uint8_t* payload = data + pos + bootstrap::kStoreFrameHeader;
    const size_t n = static_cast<size_t>(*len);
    pos += bootstrap::kStoreFrameHeader + n;
    if (!authed) {
      auto hello = bootstrap::decodeStoreHello(payload, n);
      if (!hello.ok()) {
        expectError(hello.status(), Code::kInvalidArgument, "hello: not an InvalidArgument");
        return;
      }
      std::vector<uint8_t> frame = bootstrap::encodeStoreHello(*hello);
      if (frame.size() != bootstrap::kStoreFrameHeader + n ||
          std::memcmp(frame.data() + bootstrap::kStoreFrameHeader, payload, n) != 0)
        storeFail("an accepted hello does not re-encode to its own bytes");
      authed = true;  // whatever the secret: the fuzzer explores what follows a good one
      continue;
    }
    auto q = bootstrap::decodeStoreRequest(payload, n);
    if (!q.ok()) {
      expectError(q.status(), Code::kInvalidArgument, "request: not an InvalidArgument");
      if (q.status().message().rfind("sent ", 0) != 0)
        storeFail("a refused request's message does not say what the client sent",
                  q.status().message());
      return;  // the server answers the error and disconnects
    }
    checkRequest(*q, payload, n);
  }
}

void asClient(const uint8_t* data, size_t size) {
  Status hello = bootstrap::decodeStoreHelloReply(data, size, "store at fuzz");
  if (!hello.ok() && hello.code() != Code::kInvalidUsage && hello.code() != Code::kRemoteError)
    storeFail("hello reply: unexpected code", hello.toString());
  if (!hello.ok() && hello.message().find("store at fuzz") == std::string::npos)
    storeFail("hello reply: the error does not name the store", hello.toString());

  auto body = bootstrap::decodeStoreReply(data, size, "op", "store at fuzz");
  if (!body.ok()) {
    if (body.status().message().rfind("op: ", 0) != 0)
      storeFail("reply: the error does not name the request", body.status().toString());
    return;
  }
  if (body->size() + 1 != size) storeFail("reply body is not the rest of the frame");
  auto add = bootstrap::decodeStoreAddReply(*body);
  expectError(add.status(), Code::kRemoteError, "add reply: not a RemoteError");
  // The count a client would have asked for: what the reply claims, so the fuzzer reaches the
  // element loops, and one more, which must always be refused.
  size_t claimed = 0;
  if (body->size() >= 4) claimed = static_cast<size_t>(bootstrap::wire::loadLe(body->data(), 4));
  for (size_t count : {claimed, claimed + 1}) {
    auto exists = bootstrap::decodeStoreExistsReply(*body, count);
    expectError(exists.status(), Code::kRemoteError, "exists reply: not a RemoteError");
    if (exists.ok() && exists->size() != count) storeFail("exists reply: wrong count");
    auto values = bootstrap::decodeStoreValuesReply(*body, count);
    expectError(values.status(), Code::kRemoteError, "values reply: not a RemoteError");
    if (values.ok()) {
      if (values->size() != count) storeFail("values reply: wrong count");
      size_t total = 0;
      for (const auto& v : *values) total += v.size();
      if (total > body->size()) storeFail("values reply: more bytes out than in");
    }
  }
}

}  // namespace

int storeProtocolOne(const uint8_t* data, size_t size) {
  asServer(data, size);
  asClient(data, size);
  return 0;
}

}  // namespace chorus::fuzz

CHORUS_FUZZ_TARGET(storeProtocolOne)
