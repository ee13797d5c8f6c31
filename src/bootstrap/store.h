// The rendezvous store: a small key-value server over TCP through which ranks find each other.
//
// One process of the job (rank 0, or the process that called chorusGetUniqueId) runs a
// StoreServer; every rank connects a StoreClient. The server is one background thread polling
// all clients, so a job of thousands of ranks costs one thread and one fd per rank, and a rank
// waiting for a key costs nothing while it waits: the server parks the request and answers when
// the key is set. Time limits are the clients' business (each request is bounded by the client's
// timeout); the server never gives up on a parked request, it drops it when the client leaves.
//
// Security: the first thing a client sends is the job secret. A wrong secret gets an error reply
// and the connection is closed (the server logs a WARN with the client's address); nothing else
// is read from an unauthenticated client beyond a few hundred bytes, so a port scanner or a
// stray process from another job cannot make the server allocate memory or see any key.
//
// Protocol (all little-endian, see wire.h; encoded and decoded by store_protocol.h): every message is a frame `u64 length, payload`, at
// most 1 GiB. Requests start with a u8 op; replies with a u8 status (a chorus::Code, 0 = ok)
// followed by the result or, on failure, an error message. Clients send one request at a time.
//   hello    u32 version, 16-byte secret          -> u8 0 ok | 1 wrong secret | 2 bad version
//   set      str key, value = rest of frame       -> (empty)
//   get      str key                              -> value = rest of frame (waits for the key)
//   add      str key, i64 delta                   -> i64 new value (counter = 8-byte LE value)
//   exists   u32 n, n x str key                   -> u32 n, n x u8 0/1
//   multiGet u32 n, n x str key                   -> u32 n, n x (u64 length, bytes) (waits)
//   setMultiGet str key, u64 length + value, u32 n, n x str key  -> as multiGet (waits)
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "src/bootstrap/store_protocol.h"
#include "src/bootstrap/unique_id.h"
#include "src/base/socket_util.h"
#include "src/base/status.h"

namespace chorus::bootstrap {

class StoreServer {
 public:
  // Listens on `bindAddr` (port 0 picks a free port) and starts the serving thread.
  static StatusOr<std::shared_ptr<StoreServer>> start(const net::SockAddr& bindAddr,
                                                      const Secret& secret);
  // Stops the thread and closes every connection (replies already queued are flushed first,
  // best effort). In a process forked from the one that started the server (which has no
  // serving thread), it does nothing: the server keeps running in the parent.
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // Returns once every answer the server has computed so far has been handed to the kernel
  // (clients that hung up excepted), or after `seconds`; false on the time limit. A process
  // that serves the store calls it before it may exit: a gather's last arrival answers every
  // rank at once, and the rank in the serving process can get its answer before the others'
  // are written. Does nothing in a forked copy (no serving thread there).
  bool waitAnswersSent(double seconds);

  // The bound address, with the real port.
  net::SockAddr address() const { return address_; }
  const Secret& secret() const { return secret_; }

  class Impl;  // the serving thread's state, private to store.cc

 private:
  StoreServer(net::SockAddr address, const Secret& secret, std::unique_ptr<Impl> impl);

  net::SockAddr address_;
  Secret secret_;
  pid_t ownerPid_;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<std::thread> thread_;
};

// Process-wide registry of servers that must outlive the call that started them:
// chorusGetUniqueId starts a store and returns only the id, so the server is kept here until
// releaseServer() (or process exit). Bootstrap::create also looks here, so a rank living in the
// process that made the id holds the server for as long as its Bootstrap lives, even after the
// registry has let go.
void registerServer(std::shared_ptr<StoreServer> server);
// The registered server listening on `address`, or null.
std::shared_ptr<StoreServer> findServer(const net::SockAddr& address);
// Drops the registry's reference; true if there was one.
bool releaseServer(const net::SockAddr& address);

class StoreClient {
 public:
  // Connects and presents the secret, retrying refused connections until `deadline` (the server
  // may start after the client). A server that refuses the secret gives kInvalidUsage
  // "store at <addr> refused the job secret". Each later request is bounded by timeout()
  // (default CHORUS_TIMEOUT).
  static StatusOr<std::unique_ptr<StoreClient>> connect(const net::SockAddr& address,
                                                        const Secret& secret,
                                                        net::Deadline deadline);
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  // Upper bound of each request, in seconds.
  void setTimeout(double seconds) { timeoutSeconds_ = seconds; }
  double timeout() const { return timeoutSeconds_; }
  const net::SockAddr& address() const { return address_; }

  Status set(const std::string& key, const std::vector<uint8_t>& value);
  // Waits until `key` exists; kTimeout naming the key when it is not set within timeout().
  StatusOr<std::vector<uint8_t>> get(const std::string& key);
  // Atomically adds `delta` to the counter `key` (missing = 0) and returns the new value.
  StatusOr<int64_t> add(const std::string& key, int64_t delta);
  // True when every key exists (does not wait).
  StatusOr<bool> check(const std::vector<std::string>& keys);
  // For each key, whether it exists (does not wait).
  StatusOr<std::vector<bool>> exists(const std::vector<std::string>& keys);
  // Waits until all keys exist and returns their values in order.
  StatusOr<std::vector<std::vector<uint8_t>>> multiGet(const std::vector<std::string>& keys);
  // set(key, value) then multiGet(keys) in one request. This is what makes a store-based
  // barrier safe to leave: once any participant has its answer, the server has received every
  // participant's request and computed every answer, so the process serving the store may stop
  // it (pending answers are flushed) without stranding a rank between its set and its multiGet.
  StatusOr<std::vector<std::vector<uint8_t>>> setAndMultiGet(const std::string& key,
                                                             const std::vector<uint8_t>& value,
                                                             const std::vector<std::string>& keys);

 private:
  StoreClient(net::Fd fd, const net::SockAddr& address);
  // Sends one request and returns the ok reply's body. `op` describes the request for errors.
  StatusOr<std::vector<uint8_t>> call(std::vector<uint8_t> request, const std::string& op,
                                      bool waits);
  Status fail(Status why);
  StatusOr<std::vector<std::vector<uint8_t>>> parseValues(const std::vector<uint8_t>& body,
                                                          size_t count, const std::string& op);

  net::Fd fd_;
  net::SockAddr address_;
  std::string what_;  // "store at 1.2.3.4:5"
  double timeoutSeconds_;
  // After a failed transfer (timeout, closed connection) the stream is out of step with the
  // server, so every later request fails with the first error.
  Status broken_;
};

}  // namespace chorus::bootstrap
