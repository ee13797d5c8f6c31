// Ordered execution of a communicator's operations, and the progress thread.
//
// Operations run in the order they were started, on whichever thread gets to them:
//   - a blocking call runs inline on the caller's thread when nothing is queued (no thread hop
//     on the latency path);
//   - a nonblocking call is queued; the progress thread runs queued operations while the caller
//     computes; a thread that waits runs them itself, in order, and the progress thread stands
//     aside meanwhile, so completing a request never needs a thread hand-off;
//   - posting or testing a call also progresses the queue's head as far as it goes without
//     waiting (poke(): MPI's progress at the call), for requests that can run in parts — a
//     small collective on the host window publishes its data at once and completes at a later
//     post or test as soon as its peers' data is there. A part-run request stays at the head
//     until it completes, and whoever runs it next (a waiter, the progress thread) resumes it.
// An operation is popped only while the execution lock is held, which keeps the order.
//
// Waking the progress thread costs a system call on the caller and a context switch; for a
// small operation that the caller waits for right away (the common nonblocking pattern, and
// what a latency benchmark does) that is most of the operation's time. So the thread is woken
// at once only for operations worth it (`urgent`: predicted to take longer than a wake-up), or
// when it sleeps without a timeout. While operations keep coming it sleeps in ticks of
// kTickMs and looks at the queue after each; after kIdleMs without work it sleeps until woken.
//
// The worker runs a small operation only once the caller has left the queue alone for a whole
// tick (no call started, no wait) — the caller went off to compute, and the operation must
// progress without it. A caller that is still posting or waiting runs its operations itself:
// a worker that took one then would hold the execution lock while the caller blocks on it, and
// on a machine with as many ranks as cores would take a peer's core as well (it tripled the
// nonblocking 8 B all-reduce of a 2-rank benchmark). So a small operation the caller never
// waits for starts within two ticks; an urgent one at once.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "src/base/status.h"

namespace chorus {

/// A queued operation and its completion. The operation lives in the request (one allocation
/// per nonblocking call).
class Request {
 public:
  virtual ~Request() = default;
  /// Never blocks; *out gets the result once done.
  bool test(Status* out);

 protected:
  /// Runs the operation (called once, in order, with the execution lock held), resuming it if
  /// advance() ran part of it.
  virtual Status run() = 0;
  /// Progresses the operation without waiting (execution lock held, the request at the head):
  /// true once it has completed, with its result in *out. False: it needs to wait (then run()
  /// or a later advance() continues it). Requests that cannot run in parts keep the default.
  virtual bool advance(Status* /*out*/) { return false; }

 private:
  friend class OpQueue;
  void finish(Status s);
  std::atomic<bool> done_{false};
  Status status_;
};

class OpQueue {
 public:
  static constexpr int kTickMs = 2;
  static constexpr int kIdleMs = 200;

  /// `report` receives the failure of every queued operation (the last-error text).
  /// `progressThread` false: no thread of its own (tests drive the queue alone).
  explicit OpQueue(std::function<void(const Status&)> report, bool progressThread = true)
      : report_(std::move(report)), progressThread_(progressThread) {}
  ~OpQueue();

  /// Runs `work` in order with everything queued before it; inline when nothing is queued.
  template <class F>
  Status runOrdered(F&& work) {
    {
      std::lock_guard<std::mutex> exec(execMu_);
      if (queued_.load(std::memory_order_acquire) == 0) return work();
    }
    struct Fn final : Request {
      explicit Fn(F& f) : f_(f) {}
      Status run() override { return f_(); }
      F& f_;
    };
    auto req = std::make_shared<Fn>(work);
    enqueue(req, false);
    return wait(req);  // `work` outlives the request's run: wait() returns after it
  }
  /// Queues `req`; `urgent` wakes the progress thread now.
  void enqueue(std::shared_ptr<Request> req, bool urgent);
  /// Completes `req`, running queued operations on this thread until it is done.
  Status wait(const std::shared_ptr<Request>& req);
  /// Advances queued operations, in order, while they complete without waiting. Never blocks:
  /// does nothing when another thread holds the execution lock.
  void poke();
  /// Operations queued and not yet finished (the one running included).
  size_t queued() const { return queued_.load(std::memory_order_acquire); }
  /// Fails every queued operation with `why` (abort).
  void failQueued(const Status& why);
  /// Held while an operation runs.
  std::mutex& execMutex() { return execMu_; }

 private:
  bool runNext();  // caller holds execMu_
  void workerLoop();

  std::function<void(const Status&)> report_;
  const bool progressThread_;
  std::mutex execMu_;
  std::mutex queueMu_;
  std::condition_variable queueCv_;
  std::deque<std::shared_ptr<Request>> queue_;
  std::atomic<size_t> queued_{0};
  // Threads inside wait(); the worker stands aside while > 0. Atomic, not under queueMu_: the
  // worker only reads it when it looks at the queue, and nobody waits for it to change.
  std::atomic<int> waiters_{0};
  bool stopping_ = false;
  bool workerTicking_ = false;  // the worker sleeps in ticks (no wake-up needed)
  bool urgentQueued_ = false;   // an urgent operation was queued: the worker runs at once
  // Bumped by every enqueue and wait: unchanged over a tick means the caller is elsewhere.
  // A load and a store, not an atomic increment (the most expensive instruction on the path of
  // a small nonblocking call): two bumps that race lose one, but the value still changes.
  void noteActivity() {
    activity_.store(activity_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  std::atomic<uint64_t> activity_{0};
  std::chrono::steady_clock::time_point lastWork_;
  std::thread worker_;
};

}  // namespace chorus
