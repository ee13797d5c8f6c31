#include "src/core/op_queue.h"

#include "src/base/thread_name.h"

namespace chorus {

void Request::finish(Status s) {
  status_ = std::move(s);
  done_.store(true, std::memory_order_release);
}

OpQueue::~OpQueue() {
  {
    std::lock_guard<std::mutex> lock(sleepMu_);
    stopping_ = true;
  }
  sleepCv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

bool OpQueue::hasQueued() {
  std::lock_guard<SpinLock> lock(queueLock_);
  return !queue_.empty();
}

bool OpQueue::runNext() {
  Request* req;
  {
    std::lock_guard<SpinLock> lock(queueLock_);
    if (queue_.empty()) return false;
    req = queue_.front();
    queue_.pop_front();
    countQueued();
  }
  Status s = req->run();
  const bool ok = s.ok();
  if (!ok && report_) report_(s);
  req->finish(std::move(s));  // its owner may free it from here on
  // The next call starts now, before this thread goes back to its caller (see the file comment).
  if (ok && startEarly_ && queued_.load(std::memory_order_relaxed) > 0) advanceHead();
  return true;
}

void OpQueue::poke() {
  std::unique_lock<FutexMutex> exec(execMu_, std::try_to_lock);
  if (exec.owns_lock()) advanceHead();
}

void OpQueue::advanceHead() {
  for (;;) {
    Request* req;
    {
      std::lock_guard<SpinLock> lock(queueLock_);
      if (queue_.empty()) return;
      req = queue_.front();  // stays queued while part-run: only the head may be started
      advancing_ = req;      // failQueued() leaves it alone: its owner must not free it yet
    }
    Status s;
    const bool completed = req->advance(&s);
    {
      std::lock_guard<SpinLock> lock(queueLock_);
      advancing_ = nullptr;
      if (!completed) return;
      queue_.pop_front();  // still the head: failQueued() skipped it, and only we pop here
      countQueued();
    }
    if (!s.ok() && report_) report_(s);
    req->finish(std::move(s));
  }
}

void OpQueue::enqueue(Request* req, bool urgent) {
  {
    std::lock_guard<SpinLock> lock(queueLock_);
    queue_.push_back(req);
    countQueued();
  }
  noteActivity();
  if (!progressThread_) return;
  if (!workerStarted_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(sleepMu_);
    if (!worker_.joinable()) {
      workerTicking_.store(true);
      lastWork_ = std::chrono::steady_clock::now();
      worker_ = std::thread([this] {
        nameThisThread("chorus-progress");
        workerLoop();
      });
      workerStarted_.store(true, std::memory_order_release);
    }
  }
  // A ticking worker finds the call at its next tick; a sleeping one (or an urgent call) needs
  // the wake-up. See workerTicking_ for why reading it without the mutex loses no wake-up.
  if (!urgent && workerTicking_.load()) return;
  {
    std::lock_guard<std::mutex> lock(sleepMu_);
    if (urgent) urgentQueued_ = true;
    workerTicking_.store(true);  // it will tick from its next wake-up on
  }
  sleepCv_.notify_one();
}

Status OpQueue::wait(Request* req) {
  if (!req->done()) {
    noteActivity();
    bool more;
    {
      // The usual case, a caller completing its requests in order: the first operation this
      // thread runs is its own (or it finished meanwhile), and the worker need not be told to
      // stand aside for a single step.
      std::lock_guard<FutexMutex> exec(execMu_);  // waits out an operation the worker runs
      more = runNext() && !req->done();  // runNext false: nothing queued, so ours has finished
    }
    if (more) {
      waiters_.fetch_add(1, std::memory_order_acq_rel);
      while (!req->done()) {
        std::lock_guard<FutexMutex> exec(execMu_);
        if (!runNext()) break;
      }
      noteActivity();
      waiters_.fetch_sub(1, std::memory_order_acq_rel);
      // What is left is the worker's again. It is ticking (work came in within kIdleMs), so no
      // wake-up: a caller that waits for its requests one after another (the usual pattern)
      // runs them itself, without a system call or a hand-off per request.
    }
  }
  Status s;
  req->test(&s);
  return s;
}

void OpQueue::failQueued(const Status& why) {
  std::lock_guard<SpinLock> lock(queueLock_);
  // A head that poke() is advancing on another thread stays: finishing it would let its owner
  // free it under poke's feet. It is failed by the call made with the execution lock held.
  const bool keepHead = advancing_ && !queue_.empty() && queue_.front() == advancing_;
  for (size_t i = keepHead ? 1 : 0; i < queue_.size(); ++i)
    queue_[i]->finish(why);  // its owner may free it from here on: the deque holds the pointer
  queue_.erase(queue_.begin() + (keepHead ? 1 : 0), queue_.end());
  countQueued();
}

void OpQueue::workerLoop() {
  std::unique_lock<std::mutex> lock(sleepMu_);
  uint64_t seen = activity_.load(std::memory_order_relaxed);
  while (true) {
    const bool queuedNow = hasQueued();
    if (stopping_ && !queuedNow && waiters_.load() == 0) return;
    const uint64_t act = activity_.load(std::memory_order_relaxed);
    const bool callerAway = act == seen;  // nothing started or waited for since we last looked
    seen = act;
    // The worker keeps the time of the last activity it saw (at its tick's resolution), so
    // that posting a call reads no clock.
    if (!callerAway || queuedNow) lastWork_ = std::chrono::steady_clock::now();
    if (queuedNow && waiters_.load() == 0 && (urgentQueued_ || callerAway || stopping_)) {
      urgentQueued_ = false;
      lock.unlock();
      {
        std::lock_guard<FutexMutex> exec(execMu_);
        runNext();
      }
      lock.lock();
      continue;
    }
    // Stand aside while the caller runs the queue itself. Tick while work keeps coming (or is
    // queued), so enqueue() need not wake us; sleep until woken once it has stopped.
    const auto now = std::chrono::steady_clock::now();
    if (now - lastWork_ < std::chrono::milliseconds(kIdleMs) || queuedNow) {
      workerTicking_.store(true);
      sleepCv_.wait_for(lock, std::chrono::milliseconds(kTickMs));
    } else {
      // Cleared before the last look at the queue (in the predicate, under queueLock_): a push
      // after that look sees it cleared and wakes us.
      workerTicking_.store(false);
      sleepCv_.wait(lock, [&] { return stopping_ || workerTicking_.load() || hasQueued(); });
    }
  }
}

}  // namespace chorus
