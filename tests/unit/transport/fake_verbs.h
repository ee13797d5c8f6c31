// A fake libibverbs for the ibverbs transport's tests: a verbs table (transports/ibverbs/
// verbs_api.h) whose devices, queue pairs and completion queues live in this process, and
// whose RDMA writes really move bytes between two queue pairs' registered memory.
//
// It checks what hardware would refuse, so a protocol bug fails a test instead of passing:
// state transitions and their attribute masks; that the two ends of a pair name each other
// (queue pair numbers, LID for InfiniBand, GID for RoCE), agree on PSNs and path MTU; that
// every local and remote range lies in a live registration with the right key and access;
// send and receive queue depths (an entry is free once its completion is polled); and that a
// write with immediate finds a posted receive (the transport never relies on RNR retries;
// rnrViolations() counts the times it would have).
//
// Devices fake_0 .. fake_7 have one port each with its own LID and GIDs; their link layer and
// MTU can differ (Options), and bytesWritten() counts what each device's queue pairs wrote, so
// a test can see which NICs a message crossed.
//
// One mutex guards the whole fake: writes are synchronous, done under it by the posting
// thread, completions appear on the peer's queue before ibv_post_send returns.
#pragma once

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdint>
#include <vector>

#include "src/base/verbs_api.h"

namespace chorus::ib::fake {

struct Options {
  bool nullList = false;  ///< get_device_list returns NULL with errno listErrno
  int listErrno = ENOSYS;
  int devices = 1;  ///< fake_0 .. fake_7, one port each, each with its own LID and GIDs
  bool ethernet = false;  ///< RoCE ports instead of InfiniBand
  unsigned roceDevices = 0;  ///< bit d: device d's port is RoCE even without `ethernet`
  bool portActive = true;
  ibv_mtu mtu = IBV_MTU_4096;
  std::vector<ibv_mtu> deviceMtu;  ///< device d's active MTU, where given (else `mtu`)
  uint32_t maxMsg = 1u << 31;  ///< the port's max_msg_sz (small: the transport must chunk)
};

/// Sets the options and makes the fake the transport's verbs (setVerbsForTesting).
void install(const Options& o = Options());
const Options& options();

/// Objects made and not yet destroyed.
struct Live {
  int contexts = 0, pds = 0, mrs = 0, cqs = 0, channels = 0, qps = 0;
};
Live live();

/// Every modify_qp call, in order.
struct ModifyCall {
  uint32_t qpn;
  ibv_qp_attr attr;
  int mask;
};
std::vector<ModifyCall> modifyCalls();

int rnrViolations();
/// Bytes written by RDMA writes posted on queue pairs of device `device` (data, advertisements
/// and control records alike), since the process started.
uint64_t bytesWritten(int device);
int forkInitCalls();

/// The queue pair vanishes from the fabric as if its host died: writes to it fail with
/// IBV_WC_RETRY_EXC_ERR, nothing is flushed on its side.
void unplug(uint32_t qpn);

}  // namespace chorus::ib::fake
