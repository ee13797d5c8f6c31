#include "src/bootstrap/store.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cerrno>
#include <cstdio>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "src/bootstrap/store_protocol.h"
#include "src/bootstrap/wire.h"
#include "src/base/config.h"
#include "src/base/logging.h"
#include "src/base/thread_name.h"

namespace chorus::bootstrap {
namespace {

using Op = StoreOp;
constexpr size_t kFrameHeader = kStoreFrameHeader;
// Bytes read from one client per wake-up, so one client streaming a large value cannot starve
// the others.
constexpr size_t kReadBudget = 4 << 20;
constexpr int kListenBacklog = 4096;

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g s", s);
  return buf;
}

std::string quoted(const std::string& key) {
  constexpr size_t kShown = 80;
  if (key.size() <= kShown) return "'" + key + "'";
  return "'" + key.substr(0, kShown) + "...'";
}

// A frame with its length still to be patched: replies are built in place so the body is
// copied once.
std::vector<uint8_t> beginFrame() { return std::vector<uint8_t>(kFrameHeader, 0); }
void finishFrame(std::vector<uint8_t>* frame) {
  wire::storeLe(frame->data(), frame->size() - kFrameHeader, 8);
}

// Reads a reply body of `len` bytes, growing the buffer only as the bytes come (1 MiB at a
// time): whatever answers at the store's address (the secret authenticates clients, not the
// store) can announce up to 1 GiB, and must not make a rank allocate what it does not send.
Status recvBody(int fd, uint64_t len, net::Deadline deadline, const std::string& what,
                std::vector<uint8_t>* body) {
  constexpr uint64_t kStep = 1 << 20;
  body->clear();
  while (body->size() < len) {
    const size_t at = body->size();
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kStep, len - at));
    body->resize(at + n);
    CHORUS_RETURN_IF_ERROR(net::recvAll(fd, body->data() + at, n, deadline, what));
  }
  return Status();
}

}  // namespace

// ---- Server --------------------------------------------------------------------------------

class StoreServer::Impl {
 public:
  Impl(net::Fd listenFd, net::Fd wakeFd, const Secret& secret, std::string name)
      : listen_(std::move(listenFd)), wake_(std::move(wakeFd)), secret_(secret),
        name_(std::move(name)) {}

  void run();
  void stop() {
    stop_.store(true);
    wakeUp();
  }
  // Another thread's request: answered by the serving thread once no computed answer is left
  // unsent (checked after each round of events, so answers of the round that woke the asker
  // are counted).
  bool waitAnswersSent(std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(sentMu_);
    const uint64_t ticket = ++sentAsked_;
    wakeUp();
    return sentCv_.wait_for(lock, limit, [&] { return sentUpTo_ >= ticket || finished_; });
  }

 private:
  struct Client {
    net::Fd fd;
    std::string peer;
    bool authed = false;
    bool closing = false;  // dropped as soon as `out` is flushed
    std::vector<uint8_t> in;
    size_t inPos = 0;
    std::vector<uint8_t> out;
    size_t outPos = 0;
    // A request waiting for keys; parked == 0 when none. Only one at a time: the client is
    // synchronous, and further input is not read until the reply is sent.
    uint64_t parked = 0;
    Op parkedOp = Op::kGet;
    std::vector<std::string> parkedKeys;
    size_t missing = 0;
  };
  struct Waiter {
    uint64_t client;
    uint64_t request;
  };

  void wakeUp() {
    uint64_t one = 1;
    // A full eventfd counter still wakes the poll, so a failed write needs no handling.
    ssize_t n = ::write(wake_.get(), &one, sizeof(one));
    (void)n;
  }
  void answerSentRequests();
  void acceptAll();
  // Each returns false when the client must be dropped.
  bool onEvents(Client& c, short revents);
  bool readSome(Client& c);
  bool processFrames(uint64_t id, Client& c);
  bool handleRequest(uint64_t id, Client& c, const uint8_t* data, size_t len);
  bool handleHello(Client& c, const uint8_t* data, size_t len);
  bool flush(Client& c);
  void drop(uint64_t id);
  void drainReady();
  void flushAllBeforeClosing();

  void park(uint64_t id, Client& c, Op op, std::vector<std::string> keys);
  void keyCreated(const std::string& key);
  void completeParked(Client& c);

  void reply(Client& c, std::vector<uint8_t> frame);
  void replyError(Client& c, Code code, const std::string& message);
  bool malformed(Client& c, const std::string& why);

  net::Fd listen_;
  net::Fd wake_;
  Secret secret_;
  std::string name_;
  std::atomic<bool> stop_{false};
  std::mutex sentMu_;  // waitAnswersSent()
  std::condition_variable sentCv_;
  uint64_t sentAsked_ = 0;
  uint64_t sentUpTo_ = 0;
  bool finished_ = false;  // the thread has ended: nothing more will be sent

  uint64_t nextClient_ = 1;
  uint64_t nextRequest_ = 1;
  std::map<uint64_t, std::unique_ptr<Client>> clients_;
  std::unordered_map<std::string, std::vector<uint8_t>> data_;
  std::unordered_map<std::string, std::vector<Waiter>> waiters_;
  std::vector<uint64_t> ready_;  // clients whose parked request can now be answered
  bool warnedFdLimit_ = false;
};

void StoreServer::Impl::run() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  while (!stop_.load()) {
    fds.clear();
    ids.clear();
    fds.push_back({wake_.get(), POLLIN, 0});
    fds.push_back({listen_.get(), POLLIN, 0});
    for (auto& [id, c] : clients_) {
      short ev = 0;
      if (c->closing) {
        ev = POLLOUT;
      } else {
        // While parked, only a hang-up matters: input is left unread until the reply is out.
        ev = c->parked ? POLLRDHUP : POLLIN;
        if (c->outPos < c->out.size()) ev |= POLLOUT;
      }
      fds.push_back({c->fd.get(), ev, 0});
      ids.push_back(id);
    }
    int n = ::poll(fds.data(), fds.size(), -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      CHORUS_LOG(WARN, INIT) << name_ << ": poll failed: " << errnoStatus("poll", name_).message();
      ::usleep(10000);
      continue;
    }
    if (fds[0].revents) {
      uint64_t v;
      ssize_t r = ::read(wake_.get(), &v, sizeof(v));
      (void)r;
      if (stop_.load()) break;
    }
    if (fds[1].revents) acceptAll();
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      uint64_t id = ids[i - 2];
      auto it = clients_.find(id);
      if (it == clients_.end()) continue;
      if (!onEvents(*it->second, fds[i].revents)) drop(id);
      else if (!processFrames(id, *it->second)) drop(id);
      drainReady();
    }
    answerSentRequests();
  }
  flushAllBeforeClosing();
  clients_.clear();
  std::lock_guard<std::mutex> lock(sentMu_);
  finished_ = true;
  sentCv_.notify_all();
}

void StoreServer::Impl::answerSentRequests() {
  std::lock_guard<std::mutex> lock(sentMu_);
  if (sentUpTo_ == sentAsked_) return;
  for (auto& [id, c] : clients_)
    if (c->outPos < c->out.size()) return;  // polled for POLLOUT: we come back here
  sentUpTo_ = sentAsked_;
  sentCv_.notify_all();
}

void StoreServer::Impl::flushAllBeforeClosing() {
  // Answers already computed (a barrier's last arrival answers everyone at once) must reach the
  // ranks before the sockets close, or the process serving the store could not leave right
  // after its own barrier. Bounded: a client that does not read is abandoned.
  constexpr auto kFlushTime = std::chrono::seconds(2);
  auto deadline = std::chrono::steady_clock::now() + kFlushTime;
  std::vector<pollfd> fds;
  std::vector<Client*> pending;
  for (;;) {
    fds.clear();
    pending.clear();
    for (auto& [id, c] : clients_) {
      if (c->outPos < c->out.size() && flush(*c) && c->outPos < c->out.size()) {
        fds.push_back({c->fd.get(), POLLOUT, 0});
        pending.push_back(c.get());
      }
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (fds.empty() || left.count() <= 0) return;
    if (::poll(fds.data(), fds.size(), static_cast<int>(left.count()) + 1) < 0 && errno != EINTR)
      return;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents & (POLLERR | POLLHUP)) {  // gone: nothing more to deliver
        pending[i]->out.clear();
        pending[i]->outPos = 0;
      }
    }
  }
}

void StoreServer::Impl::acceptAll() {
  for (;;) {
    net::SockAddr peer;
    peer.len = sizeof(peer.storage);
    int fd = ::accept4(listen_.get(), reinterpret_cast<sockaddr*>(&peer.storage), &peer.len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        // The connection stays in the backlog and poll would report it again at once; back off
        // instead of spinning, and say why ranks may be slow to connect.
        if (!warnedFdLimit_) {
          CHORUS_LOG(WARN, INIT) << name_ << ": out of file descriptors accepting clients ("
                                 << clients_.size() << " connected); raise `ulimit -n`";
        }
        warnedFdLimit_ = true;
        ::usleep(50000);
      }
      return;
    }
    net::setNoDelay(fd).ignore();  // latency of small replies; not needed for correctness
    auto c = std::make_unique<Client>();
    c->fd.reset(fd);
    c->peer = peer.toString();
    clients_.emplace(nextClient_++, std::move(c));
  }
}

bool StoreServer::Impl::onEvents(Client& c, short revents) {
  if (revents & POLLOUT) {
    if (!flush(c)) return false;
  }
  if (revents & POLLERR) return false;
  if (c.closing) return true;
  if (c.parked) {
    // A parked client has nothing more to say; a hang-up means it gave up (its own timeout).
    return !(revents & (POLLRDHUP | POLLHUP));
  }
  if (revents & (POLLIN | POLLHUP)) return readSome(c);
  return true;
}

bool StoreServer::Impl::readSome(Client& c) {
  // Before the hello is accepted, no more than one hello-sized frame is ever buffered.
  size_t budget = c.authed ? kReadBudget : kFrameHeader + kMaxHelloFrame - c.in.size();
  while (budget > 0) {
    size_t chunk = std::min<size_t>(64 * 1024, budget);
    size_t at = c.in.size();
    c.in.resize(at + chunk);
    ssize_t n = ::recv(c.fd.get(), c.in.data() + at, chunk, MSG_DONTWAIT);
    if (n > 0) {
      c.in.resize(at + static_cast<size_t>(n));
      budget -= static_cast<size_t>(n);
      if (static_cast<size_t>(n) < chunk) return true;
      continue;
    }
    c.in.resize(at);
    if (n == 0) return false;  // closed, possibly mid-request: nothing to answer
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
    return false;  // ECONNRESET and friends
  }
  return true;
}

bool StoreServer::Impl::processFrames(uint64_t id, Client& c) {
  while (!c.parked && !c.closing) {
    size_t avail = c.in.size() - c.inPos;
    if (avail < kFrameHeader) break;
    StatusOr<uint64_t> framed = storeFrameLength(c.in.data() + c.inPos, c.authed);
    if (!framed.ok()) {
      CHORUS_LOG(WARN, INIT) << name_ << ": client " << c.peer << " "
                             << framed.status().message() << "; disconnected";
      return false;
    }
    const uint64_t len = *framed;
    if (avail - kFrameHeader < len) break;
    const uint8_t* payload = c.in.data() + c.inPos + kFrameHeader;
    c.inPos += kFrameHeader + static_cast<size_t>(len);
    if (!handleRequest(id, c, payload, static_cast<size_t>(len))) return false;
  }
  // Compact: consumed bytes go, so a long-lived client's buffer does not grow.
  if (c.inPos == c.in.size()) {
    c.in.clear();
    c.inPos = 0;
  } else if (c.inPos > 0 && c.inPos >= c.in.size() / 2) {
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(c.inPos));
    c.inPos = 0;
  }
  return flush(c);
}

bool StoreServer::Impl::handleHello(Client& c, const uint8_t* data, size_t len) {
  StatusOr<StoreHello> hello = decodeStoreHello(data, len);
  if (!hello.ok()) return malformed(c, hello.status().message());
  const uint32_t version = hello->version;
  const Secret& secret = hello->secret;
  std::vector<uint8_t> frame = beginFrame();
  wire::Writer w(&frame);
  if (version != kStoreProtocolVersion) {
    CHORUS_LOG(WARN, INIT) << name_ << ": client " << c.peer << " speaks store protocol "
                           << version << ", this server " << kStoreProtocolVersion
                           << "; disconnected";
    w.u8(kHelloBadVersion);
    w.u32(kStoreProtocolVersion);
    c.closing = true;
  } else {
    // Constant-time comparison: the reply's timing says nothing about how much was right.
    uint8_t diff = 0;
    for (size_t i = 0; i < secret.size(); ++i) diff |= secret[i] ^ secret_[i];
    if (diff != 0) {
      CHORUS_LOG(WARN, INIT) << name_ << ": client " << c.peer
                             << " presented a wrong job secret; disconnected";
      w.u8(kHelloWrongSecret);
      c.closing = true;
    } else {
      w.u8(kHelloOk);
      c.authed = true;
    }
  }
  reply(c, std::move(frame));
  return true;
}

bool StoreServer::Impl::handleRequest(uint64_t id, Client& c, const uint8_t* data, size_t len) {
  if (!c.authed) return handleHello(c, data, len);
  StatusOr<StoreRequest> decoded = decodeStoreRequest(data, len);
  if (!decoded.ok()) return malformed(c, decoded.status().message());
  StoreRequest& q = *decoded;
  const Op op = q.op;
  switch (op) {
    case Op::kSet: {
      auto [it, created] = data_.insert_or_assign(std::move(q.key), std::move(q.value));
      if (created) keyCreated(it->first);
      std::vector<uint8_t> frame = beginFrame();
      frame.push_back(0);
      reply(c, std::move(frame));
      return true;
    }
    case Op::kGet: {
      park(id, c, op, {std::move(q.key)});
      return true;
    }
    case Op::kAdd: {
      std::string& key = q.key;
      const int64_t delta = q.delta;
      auto it = data_.find(key);
      uint64_t value = 0;
      if (it != data_.end()) {
        if (it->second.size() != 8) {
          replyError(c, Code::kInvalidUsage,
                     "add to key " + quoted(key) + ", which holds " +
                         std::to_string(it->second.size()) +
                         " bytes set by set(), not an 8-byte counter");
          return true;
        }
        value = wire::loadLe(it->second.data(), 8);
      }
      value += static_cast<uint64_t>(delta);  // wraps like two's complement, without UB
      std::vector<uint8_t> stored(8);
      wire::storeLe(stored.data(), value, 8);
      bool created = it == data_.end();
      auto [pos, ignored] = data_.insert_or_assign(std::move(key), std::move(stored));
      (void)ignored;
      if (created) keyCreated(pos->first);
      std::vector<uint8_t> frame = beginFrame();
      wire::Writer w(&frame);
      w.u8(0);
      w.u64(value);
      reply(c, std::move(frame));
      return true;
    }
    case Op::kExists: {
      const std::vector<std::string>& keys = q.keys;
      std::vector<uint8_t> frame = beginFrame();
      wire::Writer w(&frame);
      w.u8(0);
      w.u32(static_cast<uint32_t>(keys.size()));
      for (const auto& k : keys) w.u8(data_.count(k) ? 1 : 0);
      reply(c, std::move(frame));
      return true;
    }
    case Op::kMultiGet: {
      park(id, c, op, std::move(q.keys));
      return true;
    }
    case Op::kSetMultiGet: {
      auto [it, created] = data_.insert_or_assign(std::move(q.key), std::move(q.value));
      if (created) keyCreated(it->first);
      park(id, c, Op::kMultiGet, std::move(q.keys));
      return true;
    }
    case Op::kHello:
      break;  // decodeStoreRequest refuses it
  }
  return malformed(c, "sent request type " + std::to_string(static_cast<int>(op)) +
                          ", which the decoder should have refused");
}

void StoreServer::Impl::park(uint64_t id, Client& c, Op op, std::vector<std::string> keys) {
  c.parked = nextRequest_++;
  c.parkedOp = op;
  c.parkedKeys = std::move(keys);
  c.missing = 0;
  for (const auto& k : c.parkedKeys) {
    if (data_.count(k)) continue;
    ++c.missing;
    waiters_[k].push_back({id, c.parked});
  }
  if (c.missing == 0) completeParked(c);
}

void StoreServer::Impl::keyCreated(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  std::vector<Waiter> list = std::move(it->second);
  waiters_.erase(it);
  for (const Waiter& w : list) {
    auto c = clients_.find(w.client);
    if (c == clients_.end() || c->second->parked != w.request) continue;
    // Not answered here: we may be in the middle of another client's request, and answering
    // lets this client's next buffered request run, which could recurse. drainReady() does it.
    if (--c->second->missing == 0) ready_.push_back(w.client);
  }
}

void StoreServer::Impl::drainReady() {
  while (!ready_.empty()) {
    uint64_t id = ready_.back();
    ready_.pop_back();
    auto it = clients_.find(id);
    if (it == clients_.end()) continue;
    Client& c = *it->second;
    if (!c.parked || c.missing != 0) continue;
    completeParked(c);
    if (!processFrames(id, c)) drop(id);
  }
}

void StoreServer::Impl::completeParked(Client& c) {
  std::vector<uint8_t> frame = beginFrame();
  wire::Writer w(&frame);
  if (c.parkedOp == Op::kGet) {
    const auto& v = data_.at(c.parkedKeys[0]);
    w.u8(0);
    w.raw(v.data(), v.size());
  } else {
    uint64_t total = 1 + 4;
    for (const auto& k : c.parkedKeys) total += 8 + data_.at(k).size();
    if (total > kMaxStoreFrame) {
      c.parked = 0;
      replyError(c, Code::kInvalidUsage,
                 "multiGet of " + std::to_string(c.parkedKeys.size()) + " keys would return " +
                     std::to_string(total) + " bytes, more than the 1 GiB frame limit");
      c.parkedKeys.clear();
      return;
    }
    frame.reserve(kFrameHeader + total);
    w.u8(0);
    w.u32(static_cast<uint32_t>(c.parkedKeys.size()));
    for (const auto& k : c.parkedKeys) w.blob(data_.at(k));
  }
  c.parked = 0;
  c.parkedKeys.clear();
  reply(c, std::move(frame));
}

void StoreServer::Impl::reply(Client& c, std::vector<uint8_t> frame) {
  finishFrame(&frame);
  if (c.outPos == c.out.size()) {
    c.out = std::move(frame);
    c.outPos = 0;
  } else {
    c.out.insert(c.out.end(), frame.begin(), frame.end());
  }
}

void StoreServer::Impl::replyError(Client& c, Code code, const std::string& message) {
  std::vector<uint8_t> frame = beginFrame();
  wire::Writer w(&frame);
  w.u8(static_cast<uint8_t>(code));
  w.raw(message.data(), message.size());
  reply(c, std::move(frame));
}

bool StoreServer::Impl::malformed(Client& c, const std::string& why) {
  CHORUS_LOG(WARN, INIT) << name_ << ": client " << c.peer << " " << why << "; disconnected";
  replyError(c, Code::kInvalidUsage, "malformed request: client " + why);
  c.closing = true;
  return true;
}

bool StoreServer::Impl::flush(Client& c) {
  while (c.outPos < c.out.size()) {
    ssize_t n = ::send(c.fd.get(), c.out.data() + c.outPos, c.out.size() - c.outPos,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.outPos += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;  // EPIPE, ECONNRESET: the client is gone
  }
  c.out.clear();
  c.outPos = 0;
  return !c.closing;
}

void StoreServer::Impl::drop(uint64_t id) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  Client& c = *it->second;
  if (c.parked) {
    // Forget its waits so keys that are never set do not accumulate dead waiters.
    for (const auto& k : c.parkedKeys) {
      auto w = waiters_.find(k);
      if (w == waiters_.end()) continue;
      std::erase_if(w->second, [&](const Waiter& x) { return x.client == id; });
      if (w->second.empty()) waiters_.erase(w);
    }
  }
  clients_.erase(it);
}

StoreServer::StoreServer(net::SockAddr address, const Secret& secret, std::unique_ptr<Impl> impl)
    : address_(address), secret_(secret), ownerPid_(::getpid()), impl_(std::move(impl)) {}

StatusOr<std::shared_ptr<StoreServer>> StoreServer::start(const net::SockAddr& bindAddr,
                                                          const Secret& secret) {
  net::SockAddr bound;
  StatusOr<int> lfd = net::listenOn(bindAddr, kListenBacklog, &bound);
  if (!lfd.ok())
    return lfd.status().withContext("starting the bootstrap store on " + bindAddr.toString());
  net::Fd listenFd(*lfd);
  int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (efd < 0) return errnoStatus("eventfd", "bootstrap store");
  auto impl = std::make_unique<Impl>(std::move(listenFd), net::Fd(efd), secret,
                                     "store at " + bound.toString());
  std::shared_ptr<StoreServer> server(new StoreServer(bound, secret, std::move(impl)));
  server->thread_ = std::make_unique<std::thread>([p = server->impl_.get()] {
    nameThisThread("chorus-store");
    p->run();
  });
  CHORUS_LOG(INFO, INIT) << "bootstrap store listening on " << bound.toString();
  return server;
}

bool StoreServer::waitAnswersSent(double seconds) {
  if (::getpid() != ownerPid_ || !impl_) return true;  // a forked copy serves nothing
  return impl_->waitAnswersSent(std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
}

StoreServer::~StoreServer() {
  if (::getpid() != ownerPid_) {
    // A forked child (ranks forked after chorusGetUniqueId) holds a copy of a server whose
    // thread lives only in the parent: joining it is undefined, stopping it would signal the
    // parent's eventfd, and its state may have been copied mid-update. Leak the copy.
    (void)thread_.release();
    (void)impl_.release();
    return;
  }
  impl_->stop();
  thread_->join();
}

// ---- Registry ------------------------------------------------------------------------------

namespace {
std::mutex& registryMutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, std::shared_ptr<StoreServer>>& registry() {
  // Leaked on purpose: servers still registered at exit are not stopped by a static destructor
  // that may run after the logger or the thread's other dependencies are gone.
  static auto* r = new std::map<std::string, std::shared_ptr<StoreServer>>();
  return *r;
}
}  // namespace

void registerServer(std::shared_ptr<StoreServer> server) {
  std::lock_guard<std::mutex> lock(registryMutex());
  std::string key = server->address().toString();
  registry()[key] = std::move(server);
}

std::shared_ptr<StoreServer> findServer(const net::SockAddr& address) {
  std::lock_guard<std::mutex> lock(registryMutex());
  auto it = registry().find(address.toString());
  return it == registry().end() ? nullptr : it->second;
}

bool releaseServer(const net::SockAddr& address) {
  std::shared_ptr<StoreServer> last;  // destroyed (thread joined) outside the lock
  std::lock_guard<std::mutex> lock(registryMutex());
  auto it = registry().find(address.toString());
  if (it == registry().end()) return false;
  last = std::move(it->second);
  registry().erase(it);
  return true;
}

// ---- Client --------------------------------------------------------------------------------

StoreClient::StoreClient(net::Fd fd, const net::SockAddr& address)
    : fd_(std::move(fd)), address_(address), what_("store at " + address.toString()) {
  StatusOr<double> t = config::getDouble("CHORUS_TIMEOUT");
  timeoutSeconds_ = t.ok() && *t > 0 ? *t : 300.0;
}

StatusOr<std::unique_ptr<StoreClient>> StoreClient::connect(const net::SockAddr& address,
                                                            const Secret& secret,
                                                            net::Deadline deadline) {
  std::string what = "store at " + address.toString();
  StatusOr<int> fd = net::connectTo(address, deadline);
  if (!fd.ok()) return fd.status().withContext("connecting to the bootstrap " + what);
  std::unique_ptr<StoreClient> client(new StoreClient(net::Fd(*fd), address));

  std::vector<uint8_t> hello = encodeStoreHello(StoreHello{kStoreProtocolVersion, secret});
  CHORUS_RETURN_IF_ERROR(net::sendAll(client->fd_.get(), hello.data(), hello.size(), deadline, what)
                             .withContext("handshake"));
  uint8_t header[kFrameHeader];
  CHORUS_RETURN_IF_ERROR(
      net::recvAll(client->fd_.get(), header, sizeof(header), deadline, what)
          .withContext("handshake"));
  uint64_t len = wire::loadLe(header, 8);
  if (len < 1 || len > kMaxHelloFrame)
    return remoteError(what + " answered the handshake with a frame of " + std::to_string(len) +
                       " bytes: it is not a chorus store, or runs another chorus version");
  std::vector<uint8_t> body(len);
  CHORUS_RETURN_IF_ERROR(net::recvAll(client->fd_.get(), body.data(), body.size(), deadline, what)
                             .withContext("handshake"));
  CHORUS_RETURN_IF_ERROR(decodeStoreHelloReply(body.data(), body.size(), what));
  return client;
}

Status StoreClient::fail(Status why) {
  broken_ = why;
  // Closing tells the server to drop a request it may still have parked for us.
  fd_.reset();
  return why;
}

StatusOr<std::vector<uint8_t>> StoreClient::call(std::vector<uint8_t> request,
                                                 const std::string& op, bool waits) {
  if (!broken_.ok())
    return Status(broken_.code(), op + ": the connection to the " + what_ +
                                      " is unusable after an earlier failure: " +
                                      broken_.message());
  net::Deadline deadline = net::deadlineIn(timeoutSeconds_);
  finishFrame(&request);
  Status s = net::sendAll(fd_.get(), request.data(), request.size(), deadline, what_);
  if (!s.ok()) return fail(s.withContext(op));
  uint8_t header[kFrameHeader];
  s = net::recvAll(fd_.get(), header, sizeof(header), deadline, what_);
  if (s.code() == Code::kTimeout && waits)
    return fail(timeoutError(op + " on the " + what_ + " timed out after " +
                             seconds(timeoutSeconds_) + ": the key was never set"));
  if (!s.ok()) return fail(s.withContext(op));
  uint64_t len = wire::loadLe(header, 8);
  if (len < 1 || len > kMaxStoreFrame)
    return fail(remoteError(op + ": the " + what_ + " sent a malformed reply (a frame of " +
                            std::to_string(len) + " bytes)"));
  std::vector<uint8_t> body;
  s = recvBody(fd_.get(), len, deadline, what_, &body);
  if (!s.ok()) return fail(s.withContext(op));
  return decodeStoreReply(body.data(), body.size(), op, what_);
}

namespace {
Status checkKeys(const std::vector<std::string>& keys) {
  for (const auto& k : keys)
    if (k.size() > kMaxStoreKeyBytes)
      return invalidArgument("store key " + quoted(k) + " is " + std::to_string(k.size()) +
                             " bytes, more than the limit of " +
                             std::to_string(kMaxStoreKeyBytes));
  return Status();
}

std::string describeKeys(const std::vector<std::string>& keys) {
  std::string s;
  constexpr size_t kShown = 4;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) s += (i ? ", " : "") + quoted(keys[i]);
  if (keys.size() > kShown) s += ", ... (" + std::to_string(keys.size()) + " keys)";
  return s;
}

// Requests are encoded by encodeStoreRequest (store_protocol.h), the inverse of what the server
// decodes them with.
StoreRequest request(Op op, std::string key = {}, std::vector<std::string> keys = {}) {
  StoreRequest q;
  q.op = op;
  q.key = std::move(key);
  q.keys = std::move(keys);
  return q;
}

}  // namespace

Status StoreClient::set(const std::string& key, const std::vector<uint8_t>& value) {
  CHORUS_RETURN_IF_ERROR(checkKeys({key}));
  if (value.size() > kMaxStoreFrame - 64 - key.size())
    return invalidArgument("store value of " + std::to_string(value.size()) + " bytes for key " +
                           quoted(key) + " exceeds the 1 GiB frame limit");
  StoreRequest q = request(Op::kSet, key);
  q.value = value;
  return call(encodeStoreRequest(q), "set of key " + quoted(key), false).status();
}

StatusOr<std::vector<uint8_t>> StoreClient::get(const std::string& key) {
  CHORUS_RETURN_IF_ERROR(checkKeys({key}));
  return call(encodeStoreRequest(request(Op::kGet, key)), "get of key " + quoted(key), true);
}

StatusOr<int64_t> StoreClient::add(const std::string& key, int64_t delta) {
  CHORUS_RETURN_IF_ERROR(checkKeys({key}));
  StoreRequest q = request(Op::kAdd, key);
  q.delta = delta;
  std::string op = "add to key " + quoted(key);
  CHORUS_ASSIGN_OR_RETURN(std::vector<uint8_t> body, call(encodeStoreRequest(q), op, false));
  StatusOr<int64_t> value = decodeStoreAddReply(body);
  if (!value.ok()) return fail(value.status().withContext(op + ": the " + what_));
  return value;
}

StatusOr<std::vector<bool>> StoreClient::exists(const std::vector<std::string>& keys) {
  CHORUS_RETURN_IF_ERROR(checkKeys(keys));
  std::string op = "exists of " + describeKeys(keys);
  CHORUS_ASSIGN_OR_RETURN(std::vector<uint8_t> body,
                          call(encodeStoreRequest(request(Op::kExists, {}, keys)), op, false));
  StatusOr<std::vector<bool>> out = decodeStoreExistsReply(body, keys.size());
  if (!out.ok()) return fail(out.status().withContext(op + ": the " + what_));
  return out;
}

StatusOr<bool> StoreClient::check(const std::vector<std::string>& keys) {
  CHORUS_ASSIGN_OR_RETURN(std::vector<bool> present, exists(keys));
  for (bool p : present)
    if (!p) return false;
  return true;
}

StatusOr<std::vector<std::vector<uint8_t>>> StoreClient::multiGet(
    const std::vector<std::string>& keys) {
  CHORUS_RETURN_IF_ERROR(checkKeys(keys));
  std::string op = "multiGet of " + describeKeys(keys);
  CHORUS_ASSIGN_OR_RETURN(std::vector<uint8_t> body,
                          call(encodeStoreRequest(request(Op::kMultiGet, {}, keys)), op, true));
  return parseValues(body, keys.size(), op);
}

StatusOr<std::vector<std::vector<uint8_t>>> StoreClient::setAndMultiGet(
    const std::string& key, const std::vector<uint8_t>& value,
    const std::vector<std::string>& keys) {
  CHORUS_RETURN_IF_ERROR(checkKeys({key}));
  CHORUS_RETURN_IF_ERROR(checkKeys(keys));
  if (value.size() > kMaxStoreFrame / 2)
    return invalidArgument("store value of " + std::to_string(value.size()) + " bytes for key " +
                           quoted(key) + " exceeds the 512 MiB limit of setAndMultiGet");
  StoreRequest q = request(Op::kSetMultiGet, key, keys);
  q.value = value;
  std::string op = "setAndMultiGet of " + describeKeys(keys);
  CHORUS_ASSIGN_OR_RETURN(std::vector<uint8_t> body, call(encodeStoreRequest(q), op, true));
  return parseValues(body, keys.size(), op);
}

StatusOr<std::vector<std::vector<uint8_t>>> StoreClient::parseValues(
    const std::vector<uint8_t>& body, size_t count, const std::string& op) {
  auto out = decodeStoreValuesReply(body, count);
  if (!out.ok()) return fail(out.status().withContext(op + ": the " + what_));
  return out;
}

}  // namespace chorus::bootstrap
