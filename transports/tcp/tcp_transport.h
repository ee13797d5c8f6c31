// The TCP transport: reaches any peer with an IP route. The fallback every other transport
// is measured against (canConnect score 10).
//
// One nonblocking socket per peer pair. The lower rank dials the higher rank's listening socket
// and introduces itself with a hello (communicator id, both ranks) that the higher rank answers
// with an ack. Hellos are accepted and answered eagerly by whichever connect() call is running,
// and kept until connect() asks for that rank: so both ranks of a pair may call connect() at
// once, and every rank may connect to its peers in any order, without deadlock — each rank only
// waits for a peer that has yet to enter connect().
//
// A dialer whose peer refuses the TCP connection for a second gives up with kRemoteError: the
// peer's listener was up when its endpoint was published, so it has exited. An acceptor cannot
// tell a dead dialer from a slow one and waits out its timeout.
//
// Frames, matching, back-pressure, abort and close semantics: see tcp_connection.h.
//
// Concurrent connect() calls on one transport are safe; they run one at a time. Connections are
// independent of the transport and of each other once made; each must be driven by one thread
// at a time.
//
// One socket per peer. Striping a message over several sockets cannot speed up loopback on the
// 2-core machines this was measured on (a single thread does every copy on each side); revisit
// for real NICs whose single-flow rate is below the link's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "src/base/socket_util.h"
#include "transports/transport.h"

namespace chorus {

/// Creates rank `myRank`'s TCP transport for the communicator identified by `commId` (a random
/// 64-bit id the ranks agree on; connections carrying another id are refused). listen() binds
/// `listenAddr` (port 0 picks an ephemeral port); it must be an address peers can reach, e.g.
/// one returned by net::listInterfaces() or net::localAddressToward(root), not a wildcard.
/// `congestion` names the TCP congestion control its sockets use (TCP_CONGESTION; what
/// net::congestionControl() resolves); "" keeps the system's.
std::unique_ptr<Transport> makeTcpTransport(int myRank, uint64_t commId,
                                            const net::SockAddr& listenAddr,
                                            std::string congestion = "");

}  // namespace chorus
