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
// closed. With several NICs per rank the records are one per rail, and both ends must have as
// many rails. The higher rank answers on a listener thread of its transport, whatever
// connect() call it is in, so ranks may connect in any order without waiting in a cycle.
//
// Ports: of the active ports CHORUS_IB_HCA accepts (NCCL_IB_HCA's syntax), a rank takes
// CHORUS_IB_NICS_PER_RANK = n consecutive ones (in a ring) from the (CHORUS_LOCAL_RANK * n)-th
// on, so the ranks of a host share its NICs out. The default n = 1 is one NIC per rank, as
// NCCL gives each GPU its nearest NIC: with a rank per GPU and a NIC per GPU, striping would
// only make ranks share NICs. A rank's NICs must agree in link layer and active MTU (else a
// clear error), since one message's pieces cross all of them. Each connection has one rail
// (queue pair) per NIC; messages from CHORUS_IB_STRIPE_MIN_BYTES (default 512 KiB: a piece
// costs an advertisement and a completion of its own, which small messages do not repay) are
// striped over them, smaller ones take the NICs in turn (ib_connection.h).
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
