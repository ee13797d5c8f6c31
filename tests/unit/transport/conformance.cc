// Helpers of the transport conformance suite (conformance.h).
#include "tests/unit/transport/conformance.h"

#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>

#include "src/base/host_id.h"

namespace chorus::conformance {

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

uint64_t randomU64() {
  static std::mutex mu;
  static std::mt19937_64 gen{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  return gen();
}

std::vector<uint8_t> randomBytes(size_t n) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 gen(randomU64());
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t x = gen();
    std::memcpy(&v[i], &x, 8);
  }
  for (; i < n; ++i) v[i] = static_cast<uint8_t>(gen());
  return v;
}

namespace {

uint64_t pidNamespaceInode() {
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

}  // namespace

PeerIdentity identity(int rank) {
  PeerIdentity id;
  id.rank = rank;
  id.hostId = localHostId();
  id.pid = static_cast<int32_t>(::getpid());
  id.pidNamespace = pidNamespaceInode();
  return id;
}

std::vector<std::string> ourShmNames() {
  std::vector<std::string> found;
  const std::string pid = std::to_string(::getpid());
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("chorus-", 0) != 0) continue;
    const size_t a = name.find('-', 7);
    if (a == std::string::npos) continue;
    const size_t b = name.find('-', a + 1);
    if (name.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1) == pid)
      found.push_back(name);
  }
  return found;
}

namespace {

// The loop behind settle() and driveAll(). Connections with an fd are polled between passes;
// with any connection without one, the thread yields instead (it must keep testing).
std::vector<Status> drive(const std::vector<Pending>& ops, double limitSeconds,
                          const std::vector<Connection*>& alsoDrive, bool stopAtFailure) {
  const auto deadline = Clock::now() + seconds(limitSeconds);
  std::vector<std::optional<Status>> result(ops.size());
  size_t left = ops.size();
  while (left > 0) {
    for (Connection* c : alsoDrive) c->progress().ignore();
    std::vector<Connection*> waitingOn(alsoDrive);
    for (size_t i = 0; i < ops.size(); ++i) {
      if (result[i]) continue;
      bool done = false;
      Op op = ops[i].op;
      Status s = ops[i].conn->test(op, &done);
      if (done || !s.ok()) {
        result[i] = s;
        --left;
        if (!s.ok() && stopAtFailure) return {s};
        continue;
      }
      waitingOn.push_back(ops[i].conn);
    }
    if (left == 0) break;
    if (Clock::now() > deadline) break;
    std::sort(waitingOn.begin(), waitingOn.end());
    waitingOn.erase(std::unique(waitingOn.begin(), waitingOn.end()), waitingOn.end());
    std::vector<pollfd> fds;
    bool fdless = false;
    for (Connection* c : waitingOn) {
      pollfd p{-1, 0, 0};
      c->pollInfo(&p.fd, &p.events);
      if (p.fd >= 0)
        fds.push_back(p);
      else
        fdless = true;
    }
    if (fdless)
      std::this_thread::yield();
    else
      ::poll(fds.data(), fds.size(), 5);
  }
  std::vector<Status> out;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (result[i]) {
      out.push_back(*result[i]);
    } else {
      out.push_back(timeoutError("op " + std::to_string(i) + " of " + std::to_string(ops.size()) +
                                 " (on the connection to rank " +
                                 std::to_string(ops[i].conn->peer()) + ") still pending after " +
                                 std::to_string(limitSeconds) + " s"));
    }
  }
  return out;
}

}  // namespace

std::vector<Status> settle(const std::vector<Pending>& ops, double limitSeconds,
                           const std::vector<Connection*>& alsoDrive) {
  return drive(ops, limitSeconds, alsoDrive, false);
}

Status driveAll(const std::vector<Pending>& ops, double limitSeconds) {
  for (const Status& s : drive(ops, limitSeconds, {}, true))
    if (!s.ok()) return s;
  return Status();
}

Status outcome(Connection& c, const StatusOr<Op>& posted, double limitSeconds,
               const std::vector<Connection*>& alsoDrive) {
  if (!posted.ok()) return posted.status();
  return settle({{&c, posted.value()}}, limitSeconds, alsoDrive).front();
}

void expectTransfer(Connection& from, Connection& to, const std::vector<uint8_t>& v, Tag tag) {
  std::vector<uint8_t> got(v.size(), kPoison);
  auto r = to.postRecv(got.data(), got.size(), tag);
  auto s = from.postSend(v.data(), v.size(), tag);
  ASSERT_TRUE(r.ok()) << r.status().toString();
  ASSERT_TRUE(s.ok()) << s.status().toString();
  Status st = driveAll({{&from, *s}, {&to, *r}});
  ASSERT_TRUE(st.ok()) << st.toString();
  EXPECT_TRUE(got == v) << v.size() << " bytes (tag " << tag << ") from rank " << to.peer()
                        << " to rank " << from.peer() << " arrived changed";
}

void PrintTo(const Kind& k, std::ostream* os) { *os << k.factory->name; }

std::vector<Kind> registeredKinds() {
  std::vector<Kind> kinds;
  for (const TransportFactory* f : allTransports()) kinds.push_back({f});
  return kinds;
}

std::string kindName(const ::testing::TestParamInfo<Kind>& info) {
  std::string n = info.param.factory->name;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

bool Group::connected() const {
  if (c.size() != t.size()) return false;
  for (int r = 0; r < size(); ++r)
    for (int p = 0; p < size(); ++p)
      if (r != p && !c[r][p]) return false;
  return !t.empty();
}

ProgressOnThread::ProgressOnThread(Connection& c)
    : thread_([this, &c] {
        while (run_.load()) {
          c.progress().ignore();
          std::this_thread::yield();
        }
      }) {}

ProgressOnThread::~ProgressOnThread() {
  run_.store(false);
  thread_.join();
}

void Group::closeAll() {
  std::vector<std::thread> ranks;
  for (auto& mine : c)
    if (!mine.empty()) ranks.emplace_back([&mine] { mine.clear(); });
  for (auto& th : ranks) th.join();
  c.clear();
}

void ConformanceTest::SetUp() {
  // Loopback only, unless the run says otherwise.
  ::setenv("CHORUS_SOCKET_IFNAME", "lo", 0);
  const TransportFactory& f = kind();
  if (f.unavailable) {
    if (const char* why = f.unavailable()) GTEST_SKIP() << f.name << " is unavailable: " << why;
  }
}

void ConformanceTest::TearDown() {
  // Whatever a test made is gone by now: no segment name may outlive it.
  EXPECT_EQ(ourShmNames(), std::vector<std::string>{}) << "left in /dev/shm";
}

TransportContext contextFor(int rank, int nranks, uint64_t commId) {
  TransportContext ctx;
  ctx.rank = rank;
  ctx.nranks = nranks;
  ctx.commId = commId;
  ctx.self = identity(rank);
  ctx.root = nullptr;
  return ctx;
}

TransportContext ConformanceTest::context(int rank, int nranks, uint64_t commId) const {
  return contextFor(rank, nranks, commId);
}

bool ConformanceTest::makeTransports(Group& g, int n, uint64_t commId) {
  g = Group{};
  g.blob.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    auto t = kind().create(context(r, n, commId));
    EXPECT_TRUE(t.ok()) << kind().name << " create(rank " << r << "): " << t.status().toString();
    if (!t.ok()) return false;
    g.t.push_back(std::move(t).value());
    EXPECT_EQ(g.t.back()->name(), kind().name);
    Status s = g.t.back()->listen(&g.blob[static_cast<size_t>(r)]);
    EXPECT_TRUE(s.ok()) << "listen(rank " << r << "): " << s.toString();
    if (!s.ok()) return false;
  }
  return true;
}

bool ConformanceTest::connectAll(Group& g) {
  const int n = g.size();
  for (int r = 0; r < n; ++r)
    for (int p = 0; p < n; ++p) {
      if (r == p) continue;
      const Reach reach = g.t[r]->canConnect(identity(r), identity(p), g.blob[p]);
      EXPECT_TRUE(reach.ok) << "rank " << r << " cannot reach rank " << p;
      if (!reach.ok) return false;
    }
  struct Made {
    Status status;
    std::vector<ConnPtr> conns;
  };
  std::vector<std::future<Made>> done;
  for (int r = 0; r < n; ++r) {
    done.push_back(onThread([t = g.t[r], blobs = g.blob, r, n] {
      // The communicator's order: dial the higher ranks, then accept the lower ones.
      std::vector<int> order;
      for (int p = r + 1; p < n; ++p) order.push_back(p);
      for (int p = 0; p < r; ++p) order.push_back(p);
      Made m;
      m.conns.resize(static_cast<size_t>(n));
      for (int p : order) {
        auto c = t->connect(p, blobs[static_cast<size_t>(p)], kConnectSeconds);
        if (!c.ok()) {
          m.status = c.status().withContext("connect(rank " + std::to_string(r) + " -> rank " +
                                            std::to_string(p) + ")");
          return m;
        }
        m.conns[static_cast<size_t>(p)] = std::move(c).value();
      }
      return m;
    }));
  }
  g.c.clear();
  g.c.resize(static_cast<size_t>(n));
  bool ok = true;
  for (int r = 0; r < n; ++r) {
    auto m = joinWithin(done[r], seconds(kConnectSeconds * n) + kHangMargin,
                        "connect() of rank " + std::to_string(r));
    if (!m) return false;
    EXPECT_TRUE(m->status.ok()) << m->status.toString();
    ok = ok && m->status.ok();
    g.c[r] = std::move(m->conns);
  }
  if (!ok) return false;
  for (int r = 0; r < n; ++r)
    for (int p = 0; p < n; ++p) {
      if (r == p) continue;
      EXPECT_EQ(g.c[r][p]->peer(), p);
      // Both calls of the pair returned, so both ends have done their part.
      EXPECT_TRUE(g.c[r][p]->connected())
          << "rank " << r << "'s connection to rank " << p
          << ": connected() is false after both ends' connect() returned";
    }
  return true;
}

Group ConformanceTest::connectedGroup(int n) {
  Group g;
  if (makeTransports(g, n, randomU64())) connectAll(g);
  return g;
}

}  // namespace chorus::conformance
