// The shared-memory transport: reaches peers on the same host (same host id and IPC namespace),
// and wins over TCP there (canConnect score 20).
//
// Each pair of ranks shares one segment with a ring per direction (see shm_connection.h). The
// lower rank creates it, named after its pid, the communicator and the pair, and does not wait:
// the higher rank opens it (waiting, bounded, until it exists), maps it and unlinks the name at
// once. So both ranks of a pair can call connect() in any order without deadlock, and the name
// disappears from /dev/shm as soon as both have mapped it.
//
// At connect each side checks that process_vm_readv can read the other (ptrace permission,
// Yama, seccomp may forbid it). When it cannot, large messages are copied through the slots and
// one-sided reads are unavailable; INFO says so once. CHORUS_SHM_CMA=0 forces that path.
#pragma once

#include <cstdint>
#include <memory>

#include "transports/transport.h"

namespace chorus {

std::unique_ptr<Transport> makeShmTransport(int myRank, uint64_t commId);

}  // namespace chorus
