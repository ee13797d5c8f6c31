// The transport conformance suite (transports/transport.h), shared by its three files:
//   conformance_messages_test.cc  connect, send/recv, order, mismatches, progress()/check()
//   conformance_failure_test.cc   cancel, a peer that closes, a peer process that dies
//   conformance_memory_test.cc    one-sided reads, the host window
//
// Every test is parametrised by a registered transport kind (allTransports()), so a new kind is
// tested by registering it: nothing here names one. A kind whose unavailable() gives a reason is
// skipped with it; a test of a feature the kind's caps() lack is skipped saying which.
//
// A test's ranks are transports of the kind made in this process through its factory (one
// communicator id, this process's identity), except where a peer must really die: there it is
// a forked process. connect() runs on one thread per rank, in the communicator's order (dial
// the higher ranks, then accept the lower ones); data ops are driven from the test's thread
// (test() never blocks, so one loop serves both ends of a pair).
//
// Every wait is bounded: data ops by a deadline, blocking calls (connect, createWindow) on
// threads the test waits for with a limit. A thread that outlives its limit is abandoned (it
// owns what it touches) and the test fails instead of hanging the run.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "transports/transport.h"

namespace chorus::conformance {

using Clock = std::chrono::steady_clock;
using ConnPtr = std::unique_ptr<Connection>;

// connect()'s own bound, and how much longer a thread in a blocking call may take before the
// test calls it a hang.
inline constexpr double kConnectSeconds = 10;
inline constexpr auto kHangMargin = std::chrono::seconds(10);
// The bound of a data transfer (1 MiB on a loaded 2-core machine takes milliseconds).
inline constexpr double kOpSeconds = 20;
// The bound within which a failure (cancel, close, death) must reach the peer's ops: far below
// any transport timeout, so "reported" and "noticed only at the timeout" differ.
inline constexpr double kPromptSeconds = 10;
inline constexpr uint8_t kPoison = 0xA5;

Clock::duration seconds(double s);
bool contains(const std::string& s, const std::string& part);
std::vector<uint8_t> randomBytes(size_t n);
uint64_t randomU64();

// This process as the bootstrap would describe it (transport.h, PeerIdentity).
PeerIdentity identity(int rank);
// What a transport of rank `rank` of a communicator made in this process is created with.
TransportContext contextFor(int rank, int nranks, uint64_t commId);

// Names in /dev/shm that this process created ("chorus-<pid namespace>-<pid>-...").
std::vector<std::string> ourShmNames();

// Runs `fn` on a thread of its own and returns its result's future. `fn` must own (by value or
// shared_ptr) everything it touches: when it hangs, the test abandons the thread. Its captures
// are released before the result is published, so nothing it held outlives a finished call.
template <typename F>
std::future<std::invoke_result_t<F&>> onThread(F fn) {
  using R = std::invoke_result_t<F&>;
  std::promise<R> result;
  std::future<R> future = result.get_future();
  std::thread([fn = std::move(fn), result = std::move(result)]() mutable {
    std::optional<F> f(std::move(fn));
    R r = (*f)();
    f.reset();
    result.set_value(std::move(r));
  }).detach();
  return future;
}

// The thread's result, or nullopt (and a test failure) when it has not finished within `limit`.
template <typename R>
std::optional<R> joinWithin(std::future<R>& f, Clock::duration limit, const std::string& what) {
  if (f.wait_for(limit) != std::future_status::ready) {
    ADD_FAILURE() << what << " did not return within "
                  << std::chrono::duration<double>(limit).count() << " s (hang?)";
    return std::nullopt;
  }
  return f.get();
}

// Keeps progressing `c` on a thread of its own until destroyed, as a rank's executor does while
// it waits for its peers: the owner of memory a peer reads (a transport may serve reads from
// the owner's progress; UCX without RDMA does). Nothing else may use `c` meanwhile.
class ProgressOnThread {
 public:
  explicit ProgressOnThread(Connection& c);
  ~ProgressOnThread();
  ProgressOnThread(const ProgressOnThread&) = delete;
  ProgressOnThread& operator=(const ProgressOnThread&) = delete;

 private:
  std::atomic<bool> run_{true};
  std::thread thread_;
};

// One posted op and the connection it belongs to.
struct Pending {
  Connection* conn;
  Op op;
};

// Drives `ops` (test() on each) until each has completed or failed; returns each op's outcome,
// kTimeout for an op still pending after `limitSeconds`. Connections in `alsoDrive` are
// progressed too, for ops the test posted but does not wait for (the far end of a transfer).
std::vector<Status> settle(const std::vector<Pending>& ops, double limitSeconds = kOpSeconds,
                           const std::vector<Connection*>& alsoDrive = {});
// Ok when every op completed; otherwise the first failure, returned as soon as it is seen.
Status driveAll(const std::vector<Pending>& ops, double limitSeconds = kOpSeconds);
// The outcome of one op that may already have failed when it was posted; `alsoDrive` as above.
Status outcome(Connection& c, const StatusOr<Op>& posted, double limitSeconds = kOpSeconds,
               const std::vector<Connection*>& alsoDrive = {});
// Moves `v` from `from` to `to` under `tag` into a poisoned buffer and checks it arrived intact.
void expectTransfer(Connection& from, Connection& to, const std::vector<uint8_t>& v, Tag tag);

// The suites' parameter: one registered kind (its own type, so gtest prints its name).
struct Kind {
  const TransportFactory* factory;
};
void PrintTo(const Kind& k, std::ostream* os);
std::vector<Kind> registeredKinds();
std::string kindName(const ::testing::TestParamInfo<Kind>& info);

// n ranks of one communicator in this process: transports, endpoints, and the connection of
// every rank to every other (c[r][p], null for r == p or before connectAll()).
// Its connections close the way ranks' would: every rank's at once, on a thread per rank (a
// transport's close may wait, bounded, for its peer to progress, which a peer closing in turn
// after it would not do).
struct Group {
  std::vector<std::shared_ptr<Transport>> t;
  std::vector<EndpointBlob> blob;
  std::vector<std::vector<ConnPtr>> c;
  int size() const { return static_cast<int>(t.size()); }
  bool connected() const;
  void closeAll();

  Group() = default;
  Group(Group&&) = default;
  Group& operator=(Group&& o) {
    closeAll();
    t = std::move(o.t);
    blob = std::move(o.blob);
    c = std::move(o.c);
    return *this;
  }
  ~Group() { closeAll(); }
};

class ConformanceTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override;
  void TearDown() override;

  const TransportFactory& kind() const { return *GetParam().factory; }
  TransportContext context(int rank, int nranks, uint64_t commId) const;

  // `n` transports through the factory, listening. Fails the test (returns false) when either
  // step fails.
  bool makeTransports(Group& g, int n, uint64_t commId);
  // canConnect() between every two ranks, then connect() on one thread per rank, all at once.
  bool connectAll(Group& g);
  // A fresh communicator of `n` ranks, connected (check with Group::connected()).
  Group connectedGroup(int n = 2);
};

#define CHORUS_INSTANTIATE_FOR_EVERY_KIND(suite)                                             \
  INSTANTIATE_TEST_SUITE_P(Registered, suite,                                                \
                           ::testing::ValuesIn(::chorus::conformance::registeredKinds()),    \
                           ::chorus::conformance::kindName)

}  // namespace chorus::conformance
