// The rendezvous store's wire protocol as pure functions: bytes in, a parsed message or an error
// out, with no socket and no server state. The server (store.cc) decodes every frame a client
// sends through these, the client decodes every reply through them, and the libFuzzer target
// fuzz/store_protocol_fuzz.cc feeds them arbitrary bytes: what the fuzzer exercises is what runs.
//
// The message layouts are described in store.h. Every decoder checks a length against the bytes
// that remain before it allocates (wire.h's Reader), so an input's size bounds the memory it can
// make us take.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/bootstrap/unique_id.h"

namespace chorus::bootstrap {

enum class StoreOp : uint8_t { kHello = 1, kSet, kGet, kAdd, kExists, kMultiGet, kSetMultiGet };
enum StoreHelloResult : uint8_t { kHelloOk = 0, kHelloWrongSecret = 1, kHelloBadVersion = 2 };

inline constexpr uint32_t kStoreProtocolVersion = 1;
// Largest frame either side accepts (a value, or a whole multiGet reply).
inline constexpr uint64_t kMaxStoreFrame = uint64_t{1} << 30;
// An unauthenticated client may send only this much: the hello is 21 bytes.
inline constexpr uint64_t kMaxHelloFrame = 256;
inline constexpr size_t kMaxStoreKeyBytes = 64 * 1024;
// Every frame starts with its payload's length, a u64.
inline constexpr size_t kStoreFrameHeader = 8;

// The payload length announced by a frame header, or kInvalidArgument naming the length and the
// limit when it is larger than a frame may be (`authed`: the hello has been accepted).
StatusOr<uint64_t> storeFrameLength(const uint8_t header[kStoreFrameHeader], bool authed);

struct StoreHello {
  uint32_t version = 0;
  Secret secret{};
};
// The first frame's payload. kInvalidArgument "did not start with a hello" otherwise.
StatusOr<StoreHello> decodeStoreHello(const uint8_t* data, size_t len);

struct StoreRequest {
  StoreOp op = StoreOp::kGet;
  std::string key;                // set, get, add, setMultiGet
  std::vector<uint8_t> value;     // set, setMultiGet
  int64_t delta = 0;              // add
  std::vector<std::string> keys;  // exists, multiGet, setMultiGet
  bool operator==(const StoreRequest&) const = default;
};
// A request frame's payload (after the hello). kInvalidArgument whose message completes
// "client <addr> ...", e.g. "sent a malformed set", "sent unknown request type 9".
StatusOr<StoreRequest> decodeStoreRequest(const uint8_t* data, size_t len);
// The whole frame (length header included) of `r`; decodeStoreRequest gives `r` back from its
// payload, and every payload decodeStoreRequest accepts is re-encoded to the same bytes.
std::vector<uint8_t> encodeStoreRequest(const StoreRequest& r);
// The hello frame a client sends first.
std::vector<uint8_t> encodeStoreHello(const StoreHello& h);

// Client side. `what` names the store ("store at 1.2.3.4:5") in error messages.
// The answer to the hello: ok, or kInvalidUsage (wrong secret, other version) / kRemoteError.
Status decodeStoreHelloReply(const uint8_t* data, size_t len, const std::string& what);
// A reply frame's payload: the body after the status byte, or the server's error with its code
// (`op` describes the request).
StatusOr<std::vector<uint8_t>> decodeStoreReply(const uint8_t* data, size_t len,
                                                const std::string& op, const std::string& what);
// Bodies of the ok replies; kRemoteError "... sent a malformed reply" when the layout is wrong.
StatusOr<int64_t> decodeStoreAddReply(const std::vector<uint8_t>& body);
StatusOr<std::vector<bool>> decodeStoreExistsReply(const std::vector<uint8_t>& body,
                                                   size_t count);
StatusOr<std::vector<std::vector<uint8_t>>> decodeStoreValuesReply(
    const std::vector<uint8_t>& body, size_t count);

}  // namespace chorus::bootstrap
