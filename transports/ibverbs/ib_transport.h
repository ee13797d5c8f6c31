// The ibverbs transport (experimental): chorus's messages over reliable-connected queue pairs
// of libibverbs, for InfiniBand and RoCE ports, without UCX. libibverbs.so.1 is opened with
// dlopen at run time (verbs_api.h); the build needs only the rdma-core headers.
//
// Not verified on real RDMA hardware: every layer above the verbs calls is tested against a
// fake verbs table (tests/unit/transport/ibverbs_transport_test.cc), nothing below them is.
// Hence canConnect() scores it below tcp and shm: it serves only when CHORUS_TRANSPORT names
// it (or nothing else reaches a peer). It is eligible only where a device has an active port;
// elsewhere unavailable() says why (no library, no device, no active port, a bad setting) and
// CHORUS_TRANSPORT=ibverbs fails with that reason.
//
// Setup. listen() publishes a small header (rank, communicator, link layer) and the address of
// a TCP side channel the transport listens on. For each pair the lower rank dials the higher
// one's side channel; the two exchange QpInfo records (qp_setup.h) and move their queue pairs
// INIT->RTR->RTS so that neither writes before the other can receive; the socket is then
// closed. The higher rank answers on a listener thread of its transport, whatever connect()
// call it is in, so ranks may connect in any order without waiting in a cycle.
//
// One port per rank: of the active ports CHORUS_IB_HCA accepts (NCCL_IB_HCA's syntax), the
// (CHORUS_LOCAL_RANK mod count)-th, so the ranks of a host spread over its NICs. One rank
// using several NICs at once would take one queue pair per NIC per peer and stripe large
// messages over them; not done (the INFO log names the ports left to other ranks).
//
// Fork: with CHORUS_IB_FORK_INIT=1 (the default) the first transport calls ibv_fork_init()
// before it opens a device, so pages registered here stay the parent's after a fork. Even so a
// child must not use the parent's communicators; with 0 the application must not fork while
// chorus has memory registered (kernels from 5.13 on make registered memory fork-safe
// themselves).
//
// Data path and failure semantics: ib_connection.h. Registration: reg_cache.h.
#pragma once

#include "transports/transport.h"

namespace chorus::ib {

/// The score canConnect() gives: below tcp's (10) and shm's, so never chosen by default.
inline constexpr int kIbScore = 2;

}  // namespace chorus::ib
