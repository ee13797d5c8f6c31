// What the TCP transport puts on the wire. Internal to transports/tcp/.
//
// A connection starts with a handshake: the dialer (the lower rank) sends a Hello naming the
// communicator and both ranks, the acceptor answers with an Ack carrying a verdict. The per-
// communicator id makes a connection from another job, or from an earlier communicator that
// reused the same port, fail loudly instead of mixing its bytes into ours.
//
// After the handshake each direction is a stream of frames: a fixed header followed by `length`
// payload bytes. DATA frames carry user messages; an ABORT frame carries a Status code (in the
// tag field) and its message, and is the last frame its sender writes.
//
// Integers are little-endian on the wire, whatever the host.
#pragma once

#include <endian.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

#include "src/base/socket_util.h"
#include "src/base/status.h"
#include "transports/transport.h"

namespace chorus::tcp {

inline constexpr uint32_t kHelloMagic = 0x43485448;  // "CHTH"
inline constexpr uint32_t kAckMagic = 0x43485441;    // "CHTA"
inline constexpr uint32_t kFrameMagic = 0x43485446;  // "CHTF"
inline constexpr uint32_t kProtocolVersion = 1;

inline constexpr size_t kHelloBytes = 24;
inline constexpr size_t kAckBytes = 8;
// The dialer's last handshake word, sent once it has read an accepting ack. The acceptor reads it
// before handing the connection out: a dialer that gave up before the ack never sends it, while
// one that connected and has since exited normally has — so the two are never confused.
inline constexpr uint32_t kConfirmMagic = 0x43485443;  // "CHTC"
inline constexpr size_t kConfirmBytes = 4;
inline constexpr size_t kFrameHeaderBytes = 24;
// An abort message longer than this is cut; it is a diagnostic, not data.
inline constexpr size_t kMaxAbortMessage = 4096;

enum class FrameType : uint32_t { kData = 1, kAbort = 2 };

enum class AckResult : uint32_t {
  kAccepted = 0,
  kWrongCommunicator = 1,
  kWrongRank = 2,
  kWrongVersion = 3,
};

struct Hello {
  uint32_t version = kProtocolVersion;
  uint64_t commId = 0;
  int32_t fromRank = -1;
  int32_t toRank = -1;
};

struct FrameHeader {
  FrameType type = FrameType::kData;
  uint64_t tag = 0;
  uint64_t length = 0;
};

namespace wire {

inline void put32(uint8_t* p, uint32_t v) {
  v = htole32(v);
  std::memcpy(p, &v, 4);
}
inline void put64(uint8_t* p, uint64_t v) {
  v = htole64(v);
  std::memcpy(p, &v, 8);
}
inline uint32_t get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return le32toh(v);
}
inline uint64_t get64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return le64toh(v);
}

inline void encodeHello(const Hello& h, uint8_t out[kHelloBytes]) {
  put32(out, kHelloMagic);
  put32(out + 4, h.version);
  put64(out + 8, h.commId);
  put32(out + 16, static_cast<uint32_t>(h.fromRank));
  put32(out + 20, static_cast<uint32_t>(h.toRank));
}

// False when the bytes are not a chorus hello at all (a port scanner, another protocol).
inline bool decodeHello(const uint8_t in[kHelloBytes], Hello* h) {
  if (get32(in) != kHelloMagic) return false;
  h->version = get32(in + 4);
  h->commId = get64(in + 8);
  h->fromRank = static_cast<int32_t>(get32(in + 16));
  h->toRank = static_cast<int32_t>(get32(in + 20));
  return true;
}

inline void encodeAck(AckResult r, uint8_t out[kAckBytes]) {
  put32(out, kAckMagic);
  put32(out + 4, static_cast<uint32_t>(r));
}

inline void encodeFrameHeader(const FrameHeader& f, uint8_t out[kFrameHeaderBytes]) {
  put32(out, kFrameMagic);
  put32(out + 4, static_cast<uint32_t>(f.type));
  put64(out + 8, f.tag);
  put64(out + 16, f.length);
}

inline bool decodeFrameHeader(const uint8_t in[kFrameHeaderBytes], FrameHeader* f) {
  if (get32(in) != kFrameMagic) return false;
  uint32_t type = get32(in + 4);
  if (type != static_cast<uint32_t>(FrameType::kData) &&
      type != static_cast<uint32_t>(FrameType::kAbort))
    return false;
  f->type = static_cast<FrameType>(type);
  f->tag = get64(in + 8);
  f->length = get64(in + 16);
  return true;
}

// What the acceptor answers a complete hello, or nullopt when the bytes are not a chorus hello at
// all (the connection is dropped without an answer). Fills `h` whenever the magic is right.
std::optional<AckResult> judgeHello(const uint8_t in[kHelloBytes], uint64_t commId, int myRank,
                                    Hello* h);

}  // namespace wire

// The listen() blob: version, family, port and address of the listening socket.
EndpointBlob encodeEndpoint(const net::SockAddr& addr);
StatusOr<net::SockAddr> decodeEndpoint(const EndpointBlob& blob);

}  // namespace chorus::tcp
