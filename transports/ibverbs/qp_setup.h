// Queue-pair setup: what one end of a connection tells the other (QpInfo, sent over the
// transport's TCP side channel at connect time), and the attributes of the three transitions
// RESET->INIT->RTR->RTS, built as plain values so tests can check every mask and field.
//
// InfiniBand addresses the peer by LID (no GRH); RoCE has no LIDs and addresses it by GID,
// with a global route header carrying the GID index and traffic class. The path MTU is the
// smaller of the two ports' active MTUs.
//
// Internal to transports/ibverbs/.
#pragma once

#include <cstdint>
#include <vector>

#include "src/base/status.h"
#include "transports/ibverbs/ib_device.h"

namespace chorus::ib {

struct QpInfo {
  int32_t rank = -1;
  uint16_t rail = 0;   ///< this queue pair's rail (NIC pair) in the connection
  uint16_t rails = 0;  ///< the connection's rails on this end: both ends must have as many
  uint64_t commId = 0;
  uint16_t lid = 0;
  uint8_t port = 0;
  bool ethernet = false;
  uint8_t mtu = 0;  ///< enum ibv_mtu
  uint32_t qpn = 0;
  uint32_t psn = 0;  ///< 24 bits: the first packet sequence number this end sends
  uint8_t gid[16] = {};
  uint64_t inboxAddr = 0;  ///< where the peer writes advertisements and control records
  uint32_t inboxRkey = 0;
  uint32_t slots = 0;  ///< advertisement slots in the inbox

  static constexpr size_t kWireBytes = 72;
  std::vector<uint8_t> encode() const;
  /// Fails (naming `from`) on a short, foreign or other-version record.
  static StatusOr<QpInfo> decode(const std::vector<uint8_t>& b, const std::string& from);
};

/// One transition: the attributes and the mask of the fields that are set.
struct Transition {
  ibv_qp_attr attr{};
  int mask = 0;
};

Transition initTransition(const Nic& nic);
Transition rtrTransition(const Nic& nic, const QpInfo& local, const QpInfo& remote);
Transition rtsTransition(const Nic& nic, const QpInfo& local);

/// Checks that `remote` can talk to `local`: same link layer, same communicator.
Status compatible(const QpInfo& local, const QpInfo& remote);

}  // namespace chorus::ib
