#include "src/core/op_queue.h"

#include "src/base/thread_name.h"

namespace chorus {

bool Request::test(Status* out) {
  if (!done_.load(std::memory_order_acquire)) return false;
  if (out) *out = status_;
  return true;
}

void Request::finish(Status s) {
  status_ = std::move(s);
  done_.store(true, std::memory_order_release);
}

OpQueue::~OpQueue() {
  {
    std::lock_guard<std::mutex> lock(queueMu_);
    stopping_ = true;
  }
  queueCv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

bool OpQueue::runNext() {
  std::shared_ptr<Request> req;
  {
    std::lock_guard<std::mutex> lock(queueMu_);
    if (queue_.empty()) return false;
    req = std::move(queue_.front());
    queue_.pop_front();
  }
  Status s = req->run();
  if (!s.ok() && report_) report_(s);
  req->finish(std::move(s));
  queued_.fetch_sub(1, std::memory_order_acq_rel);
  return true;
}

void OpQueue::poke() {
  std::unique_lock<std::mutex> exec(execMu_, std::try_to_lock);
  if (!exec.owns_lock()) return;
  for (;;) {
    std::shared_ptr<Request> req;
    {
      std::lock_guard<std::mutex> lock(queueMu_);
      if (queue_.empty()) return;
      req = queue_.front();  // stays queued while part-run: only the head may be started
    }
    Status s;
    if (!req->advance(&s)) return;
    {
      std::lock_guard<std::mutex> lock(queueMu_);
      // failQueued() (abort, from another thread) may have finished and removed it meanwhile.
      if (queue_.empty() || queue_.front() != req) return;
      queue_.pop_front();
    }
    if (!s.ok() && report_) report_(s);
    req->finish(std::move(s));
    queued_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void OpQueue::enqueue(std::shared_ptr<Request> req, bool urgent) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(queueMu_);
    queue_.push_back(std::move(req));
    queued_.fetch_add(1, std::memory_order_acq_rel);
    noteActivity();
    if (urgent) urgentQueued_ = true;
    if (!worker_.joinable() && progressThread_) {
      workerTicking_ = true;
      lastWork_ = std::chrono::steady_clock::now();
      worker_ = std::thread([this] {
        nameThisThread("chorus-progress");
        workerLoop();
      });
    }
    wake = urgent || !workerTicking_;
    if (wake) workerTicking_ = true;  // it will tick from its next wake-up on
  }
  if (wake) queueCv_.notify_one();
}

Status OpQueue::wait(const std::shared_ptr<Request>& req) {
  Status s;
  if (req->test(&s)) return s;
  noteActivity();
  {
    // The usual case, a caller completing its requests in order: the first operation this
    // thread runs is its own (or it finished meanwhile), and the worker need not be told to
    // stand aside for a single step.
    std::lock_guard<std::mutex> exec(execMu_);  // waits out an operation the worker is running
    const bool ran = runNext();  // false: nothing queued, so ours has finished
    if (!ran || req->test(&s)) {
      req->test(&s);
      return s;
    }
  }
  waiters_.fetch_add(1, std::memory_order_acq_rel);
  while (!req->test(&s)) {
    std::lock_guard<std::mutex> exec(execMu_);
    if (!runNext()) break;
  }
  noteActivity();
  waiters_.fetch_sub(1, std::memory_order_acq_rel);
  // What is left is the worker's again. It is ticking (work came in within kIdleMs), so no
  // wake-up: a caller that waits for its requests one after another (the usual pattern) runs
  // them itself, without a system call or a hand-off per request.
  req->test(&s);
  return s;
}

void OpQueue::failQueued(const Status& why) {
  std::lock_guard<std::mutex> lock(queueMu_);
  for (auto& item : queue_) {
    item->finish(why);
    queued_.fetch_sub(1, std::memory_order_acq_rel);
  }
  queue_.clear();
}

void OpQueue::workerLoop() {
  std::unique_lock<std::mutex> lock(queueMu_);
  uint64_t seen = activity_.load(std::memory_order_relaxed);
  while (true) {
    if (stopping_ && queue_.empty() && waiters_.load() == 0) return;
    const uint64_t act = activity_.load(std::memory_order_relaxed);
    const bool callerAway = act == seen;  // nothing started or waited for since we last looked
    seen = act;
    // The worker keeps the time of the last activity it saw (at its tick's resolution), so
    // that posting a call reads no clock.
    if (!callerAway || !queue_.empty()) lastWork_ = std::chrono::steady_clock::now();
    if (!queue_.empty() && waiters_.load() == 0 && (urgentQueued_ || callerAway || stopping_)) {
      urgentQueued_ = false;
      lock.unlock();
      {
        std::lock_guard<std::mutex> exec(execMu_);
        runNext();
      }
      lock.lock();
      continue;
    }
    // Stand aside while the caller runs the queue itself. Tick while work keeps coming (or is
    // queued), so enqueue() need not wake us; sleep until woken once it has stopped.
    const auto now = std::chrono::steady_clock::now();
    if (now - lastWork_ < std::chrono::milliseconds(kIdleMs) || !queue_.empty()) {
      workerTicking_ = true;
      queueCv_.wait_for(lock, std::chrono::milliseconds(kTickMs));
    } else {
      workerTicking_ = false;
      queueCv_.wait(lock, [&] { return stopping_ || workerTicking_ || !queue_.empty(); });
    }
  }
}

}  // namespace chorus
