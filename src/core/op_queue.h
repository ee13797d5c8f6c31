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
//     Where requests can run in parts (setStartEarly), the thread that has just completed one
//     also advances the next before it returns, so the next call's data goes out before the
//     return to the caller, the request's release and the next wait rather than after them
//     (a small gain when the core-to-core latency is low, none when it is high:
//     docs/performance.md).
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

#include "src/base/block_pool.h"
#include "src/base/futex_mutex.h"
#include "src/base/spin_lock.h"
#include "src/base/status.h"

namespace chorus {

/// A queued operation and its completion. The operation lives in the request: one block of
/// the block pool per nonblocking call (src/base/block_pool.h), owned by whoever started the
/// call (the C API's handle is the request itself). The queue holds plain pointers: a request
/// leaves the queue before it is finished, and nobody touches it after finish(), so its owner
/// may free it as soon as test() says it is done — no reference counts on the call's path.
class Request {
 public:
  virtual ~Request() = default;
  /// Never blocks; *out gets the result once done.
  bool test(Status* out) {
    if (!done()) return false;
    if (out) *out = status_;
    return true;
  }
  bool done() const { return done_.load(std::memory_order_acquire); }

  static void* operator new(size_t bytes) { return pool::allocate(bytes); }
  static void operator delete(void* p, size_t bytes) { pool::release(p, bytes); }

  /// A word for the owner (the C API keeps there the communicator handle the call was made
  /// on); the queue never reads it.
  void* owner = nullptr;

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
      std::lock_guard<FutexMutex> exec(execMu_);
      if (queued_.load(std::memory_order_acquire) == 0) return work();
    }
    struct Fn final : Request {
      explicit Fn(F& f) : f_(f) {}
      Status run() override { return f_(); }
      F& f_;
    };
    Fn req(work);  // on the stack: wait() returns after it has finished
    enqueue(&req, false);
    return wait(&req);
  }
  /// Queues `req` (not owned; it must live until finished); `urgent` wakes the progress
  /// thread now.
  void enqueue(Request* req, bool urgent);
  /// Completes `req`, running queued operations on this thread until it is done.
  Status wait(Request* req);
  /// Advances queued operations, in order, while they complete without waiting. Never blocks:
  /// does nothing when another thread holds the execution lock.
  void poke();
  /// Operations queued and not yet taken to run (a part-run head included). With the execution
  /// lock held, 0 means every operation started so far has finished.
  size_t queued() const { return queued_.load(std::memory_order_acquire); }
  /// Fails every queued operation with `why` (abort), except a head that poke() is advancing
  /// on another thread at that moment; a call made holding the execution lock fails it too.
  void failQueued(const Status& why);
  /// Held while an operation runs.
  FutexMutex& execMutex() { return execMu_; }
  /// Requests may progress before they are run (Request::advance can do something): after a
  /// request completes, the next one is advanced at once. Set before the first enqueue.
  void setStartEarly(bool on) { startEarly_ = on; }

 private:
  bool runNext();  // caller holds execMu_
  void advanceHead();  // poke() with execMu_ held
  void workerLoop();

  std::function<void(const Status&)> report_;
  const bool progressThread_;
  bool startEarly_ = false;
  FutexMutex execMu_;  // one atomic instruction to take and to release (futex_mutex.h)
  // The queue itself, under a spin lock: it is held for a push or a pop, twice per nonblocking
  // call, where a mutex's lock and unlock cost more than the call's own bookkeeping.
  SpinLock queueLock_;
  std::deque<Request*> queue_;
  Request* advancing_ = nullptr;  // the head poke() is advancing
  // queue_.size(), readable without the lock. Written only under queueLock_, so a load and a
  // store, not an atomic read-modify-write.
  std::atomic<size_t> queued_{0};
  void countQueued() { queued_.store(queue_.size(), std::memory_order_release); }
  // Threads inside wait(); the worker stands aside while > 0. Atomic: the worker only reads it
  // when it looks at the queue, and nobody waits for it to change.
  std::atomic<int> waiters_{0};
  // The worker's sleep and wake-up. Lock order: sleepMu_, then queueLock_.
  std::mutex sleepMu_;
  std::condition_variable sleepCv_;
  bool stopping_ = false;       // under sleepMu_
  bool urgentQueued_ = false;   // under sleepMu_: an urgent operation was queued, run it at once
  // The worker sleeps in ticks (no wake-up needed). Written under sleepMu_; enqueue() reads it
  // after its push without the mutex: the worker clears it before it looks at the queue under
  // queueLock_ a last time, so either it sees the push or enqueue sees it cleared and wakes it.
  std::atomic<bool> workerTicking_{false};
  std::atomic<bool> workerStarted_{false};
  bool hasQueued();  // takes queueLock_
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
