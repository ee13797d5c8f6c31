// The UCX transport: chorus's messages as UCX tag-matched sends and receives, so that any fabric
// UCX drives (InfiniBand and RoCE through its verbs transports, TCP, shared memory) carries
// them. Selected with CHORUS_TRANSPORT=ucx; UCX_TLS and UCX_NET_DEVICES reach UCX unchanged.
//
// One UCP worker per transport instance (per communicator), on one UCP context per process.
// listen() publishes the worker's address; connect() creates this rank's endpoint to the peer's
// worker, on both ends of a pair, without a handshake (UCX wires the endpoints up on first use).
// Tag layout: ucx_worker.h. Matching, control messages, failures: ucx_connection.h.
//
// The transport is eligible by default only where UCX reports an RDMA-class device, and only
// there does canConnect() score it above chorus's own TCP: over TCP or shared memory UCX does
// what the tcp and shm transports do. CHORUS_TRANSPORT naming ucx makes it eligible anywhere.
#pragma once

#include "transports/transport.h"

namespace chorus::ucx {

/// UCX objects made by chorus in this process and not yet destroyed (for leak checks).
struct Census {
  int contexts = 0;
  int workers = 0;
  int endpoints = 0;
};
Census census();

}  // namespace chorus::ucx
