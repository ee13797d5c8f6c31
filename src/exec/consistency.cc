#include "src/exec/consistency.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "algorithms/kernels/quantize.h"
#include "transports/transport.h"

namespace chorus::exec {
namespace {

const char* opName(int userOp) {
  switch (userOp) {
    case -1: return "none";
    case 0: return "sum";
    case 1: return "prod";
    case 2: return "max";
    case 3: return "min";
    case 4: return "avg";
    default: return "premulsum";
  }
}

}  // namespace

uint8_t wireOp(int userOp) {
  return static_cast<uint8_t>(userOp < 0 ? 0xff : std::min(userOp, 0xfe));
}

std::string describeCall(const OpIdentity& id, const char* algo) {
  std::string s = sched::collName(id.coll);
  if (id.coll == sched::Coll::kSendRecv) return s;
  s += "(count=" + std::to_string(id.count) + ", " + dataTypeName(id.dtype);
  if (id.userOp != -1) s += std::string(", ") + opName(id.userOp);
  if (id.root >= 0) s += ", root=" + std::to_string(id.root);
  if (id.quant) s += ", " + kernels::quantConfigText(*id.quant);
  s += ") #" + std::to_string(id.seq);
  if (algo && *algo) s += std::string(" [") + algo + "]";
  return s;
}

WireHeader makeConsistencyHeader(const OpIdentity& id, const char* algo, uint64_t bytesTo,
                                 uint64_t bytesFrom, uint32_t msgsTo, uint32_t msgsFrom) {
  WireHeader h;
  h.magic = kHeaderMagic;
  h.version = kHeaderVersion;
  h.coll = static_cast<uint8_t>(id.coll);
  h.dtype = static_cast<uint8_t>(id.dtype);
  h.op = wireOp(id.userOp);
  h.flags = id.segments > 0 ? kHeaderInSegments : 0;
  h.root = id.root;
  h.seq = id.seq;
  h.count = id.count;
  h.bytesToPeer = bytesTo;
  h.bytesFromPeer = bytesFrom;
  h.msgsToPeer = msgsTo;
  h.msgsFromPeer = msgsFrom;
  std::snprintf(h.algo, sizeof(h.algo), "%s", algo ? algo : "");
  const kernels::QuantWords qw = id.quant ? kernels::quantWords(*id.quant) : kernels::QuantWords{};
  h.quantShape = qw.shape;
  h.quantSeed = qw.seed;
  return h;
}

Status checkConsistencyHeader(const WireHeader& a, const WireHeader& b, int rank, int peer,
                              const OpIdentity& id, const char* algo) {
  // Formatted only when an error needs it: this runs on every call's hot path.
  auto call = [&] { return describeCall(id, algo); };
  if (b.magic != kHeaderMagic || b.version != kHeaderVersion)
    return invalidUsage(call() + ": rank " + std::to_string(peer) +
                        " sent a malformed operation header (another chorus version, or "
                        "ranks are running different operations)");
  const bool same = a.coll == b.coll && a.seq == b.seq && a.count == b.count &&
                    a.dtype == b.dtype && a.op == b.op && a.root == b.root &&
                    a.quantShape == b.quantShape && a.quantSeed == b.quantSeed &&
                    std::strncmp(a.algo, b.algo, sizeof(a.algo)) == 0;
  if (!same) {
    OpIdentity other;
    other.coll = static_cast<sched::Coll>(b.coll);
    other.seq = b.seq;
    other.count = b.count;
    other.dtype = static_cast<DataType>(b.dtype);
    other.userOp = b.op == 0xff ? -1 : b.op;
    other.root = b.root;
    kernels::QuantConfig otherQuant;
    if (b.quantShape != 0) {
      otherQuant = kernels::quantFromWords({b.quantShape, b.quantSeed});
      other.quant = &otherQuant;
    }
    char algoB[sizeof(b.algo) + 1] = {};
    std::memcpy(algoB, b.algo, sizeof(b.algo));
    return invalidUsage("rank " + std::to_string(rank) + " called " + call() + " but rank " +
                        std::to_string(peer) + " called " + describeCall(other, algoB));
  }
  if (a.bytesToPeer != b.bytesFromPeer || a.msgsToPeer != b.msgsFromPeer ||
      a.bytesFromPeer != b.bytesToPeer || a.msgsFromPeer != b.msgsToPeer)
    return invalidUsage(call() + ": rank " + std::to_string(rank) + " sends " +
                        std::to_string(a.bytesToPeer) + " bytes in " +
                        std::to_string(a.msgsToPeer) + " messages to rank " +
                        std::to_string(peer) + ", which expects " +
                        std::to_string(b.bytesFromPeer) + " bytes in " +
                        std::to_string(b.msgsFromPeer) + "; it sends " +
                        std::to_string(b.bytesToPeer) + " bytes in " +
                        std::to_string(b.msgsToPeer) + " messages, rank " +
                        std::to_string(rank) + " expects " + std::to_string(a.bytesFromPeer) +
                        " in " + std::to_string(a.msgsFromPeer));
  return Status();
}

}  // namespace chorus::exec
