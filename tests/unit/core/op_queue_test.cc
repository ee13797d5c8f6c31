// The operation queue's progress at the call (src/core/op_queue.h): poke() advances the head
// while it completes without waiting, keeps a part-run request at the head, stops at requests
// that cannot run in parts, and whoever runs the head next resumes it. Requests here are
// scripted: advance() completes on a chosen call, run() records that it resumed. The queues have
// no progress thread, so only the test's own calls move them.
#include "src/core/op_queue.h"

#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace chorus {
namespace {

// Completes at its `needed`-th advance(); run() finishes it whatever advance() did before.
struct Scripted final : Request {
  Scripted(std::vector<std::string>* log, std::string name, int needed)
      : log(log), name(std::move(name)), needed(needed) {}
  Status run() override {
    log->push_back(name + (advances > 0 ? ":resumed" : ":run"));
    return Status();
  }
  bool advance(Status* out) override {
    if (needed <= 0) return false;  // cannot run in parts
    ++advances;
    log->push_back(name + ":advance" + std::to_string(advances));
    if (advances < needed) return false;
    *out = Status();
    return true;
  }
  std::vector<std::string>* log;
  std::string name;
  int needed;  // 0: never in parts
  int advances = 0;
};

struct Failing final : Request {
  Status run() override { return internalError("never reached"); }
  bool advance(Status* out) override {
    *out = invalidUsage("rank 1 called something else");
    return true;
  }
};

template <class T>
bool done(const std::unique_ptr<T>& r, Status* s = nullptr) {
  return r->test(s);
}

TEST(OpQueue, PokeCompletesTheHeadsThatNeedNoWaitInOrder) {
  std::vector<std::string> log;
  OpQueue q(nullptr, false);
  auto a = std::make_unique<Scripted>(&log, "a", 1);
  auto b = std::make_unique<Scripted>(&log, "b", 1);
  q.enqueue(a.get(), false);
  q.enqueue(b.get(), false);
  q.poke();
  EXPECT_TRUE(done(a));
  EXPECT_TRUE(done(b));
  EXPECT_EQ(log, (std::vector<std::string>{"a:advance1", "b:advance1"}));
  q.poke();  // an empty queue: nothing
  EXPECT_EQ(log.size(), 2u);
}

TEST(OpQueue, PartRunHeadStaysFirstAndBlocksWhatFollows) {
  std::vector<std::string> log;
  OpQueue q(nullptr, false);
  auto a = std::make_unique<Scripted>(&log, "a", 3);
  auto b = std::make_unique<Scripted>(&log, "b", 1);
  q.enqueue(a.get(), false);
  q.enqueue(b.get(), false);
  q.poke();
  q.poke();
  EXPECT_FALSE(done(a));
  EXPECT_FALSE(done(b));  // b never advanced past a part-run a
  q.poke();
  EXPECT_TRUE(done(a));
  EXPECT_TRUE(done(b));
  EXPECT_EQ(log, (std::vector<std::string>{"a:advance1", "a:advance2", "a:advance3",
                                           "b:advance1"}));
}

TEST(OpQueue, WaitResumesAPartRunHead) {
  std::vector<std::string> log;
  OpQueue q(nullptr, false);
  auto a = std::make_unique<Scripted>(&log, "a", 5);
  auto b = std::make_unique<Scripted>(&log, "b", 5);
  q.enqueue(a.get(), false);
  q.enqueue(b.get(), false);
  q.poke();
  EXPECT_TRUE(q.wait(b.get()).ok());
  EXPECT_TRUE(done(a));
  EXPECT_EQ(log, (std::vector<std::string>{"a:advance1", "a:resumed", "b:run"}));
}

// setStartEarly: the thread that completes a request advances the next one before it returns
// (its data goes out before the caller comes back for it); without it, nothing runs ahead.
TEST(OpQueue, CompletingARequestAdvancesTheNextWhenStartingEarly) {
  for (bool early : {false, true}) {
    SCOPED_TRACE(early ? "start early" : "not early");
    std::vector<std::string> log;
    OpQueue q(nullptr, false);
    q.setStartEarly(early);
    auto a = std::make_unique<Scripted>(&log, "a", 0);
    auto b = std::make_unique<Scripted>(&log, "b", 2);
    auto c = std::make_unique<Scripted>(&log, "c", 2);
    q.enqueue(a.get(), false);
    q.enqueue(b.get(), false);
    q.enqueue(c.get(), false);
    EXPECT_TRUE(q.wait(a.get()).ok());
    EXPECT_FALSE(done(b));  // advanced once: it needs a second part
    if (early) {
      EXPECT_EQ(log, (std::vector<std::string>{"a:run", "b:advance1"}));
    } else {
      EXPECT_EQ(log, (std::vector<std::string>{"a:run"}));
    }
    log.clear();
    EXPECT_TRUE(q.wait(b.get()).ok());
    if (early) {
      EXPECT_EQ(log, (std::vector<std::string>{"b:resumed", "c:advance1"}));
    } else {
      EXPECT_EQ(log, (std::vector<std::string>{"b:run"}));
    }
    EXPECT_TRUE(q.wait(c.get()).ok());
    EXPECT_EQ(q.queued(), 0u);
  }
}

// A request that failed leaves the next alone: the communicator is unusable, and whoever runs
// the next learns that from its own run.
TEST(OpQueue, AFailedRequestDoesNotAdvanceTheNext) {
  struct FailingRun final : Request {
    Status run() override { return remoteError("rank 1 is gone"); }
  };
  std::vector<std::string> log;
  OpQueue q(nullptr, false);
  q.setStartEarly(true);
  auto f = std::make_unique<FailingRun>();
  auto b = std::make_unique<Scripted>(&log, "b", 1);
  q.enqueue(f.get(), false);
  q.enqueue(b.get(), false);
  EXPECT_EQ(q.wait(f.get()).code(), Code::kRemoteError);
  EXPECT_TRUE(log.empty());
  EXPECT_FALSE(done(b));
  EXPECT_TRUE(q.wait(b.get()).ok());
  EXPECT_EQ(log, (std::vector<std::string>{"b:run"}));
}

TEST(OpQueue, PokeStopsAtARequestThatCannotRunInParts) {
  std::vector<std::string> log;
  OpQueue q(nullptr, false);
  auto a = std::make_unique<Scripted>(&log, "a", 0);
  auto b = std::make_unique<Scripted>(&log, "b", 1);
  q.enqueue(a.get(), false);
  q.enqueue(b.get(), false);
  q.poke();
  EXPECT_FALSE(done(a));
  EXPECT_FALSE(done(b));
  EXPECT_TRUE(log.empty());
  EXPECT_TRUE(q.wait(b.get()).ok());
  EXPECT_EQ(log, (std::vector<std::string>{"a:run", "b:run"}));
}

TEST(OpQueue, AFailureFoundByAdvanceIsTheRequestsResultAndReported) {
  std::vector<std::string> reported;
  OpQueue q([&](const Status& s) { reported.push_back(s.message()); }, false);
  auto f = std::make_unique<Failing>();
  q.enqueue(f.get(), false);
  q.poke();
  Status s;
  ASSERT_TRUE(done(f, &s));
  EXPECT_EQ(s.code(), Code::kInvalidUsage);
  EXPECT_EQ(reported, (std::vector<std::string>{"rank 1 called something else"}));
}

TEST(OpQueue, FailQueuedEndsAPartRunHead) {
  std::vector<std::string> log;
  OpQueue q(nullptr, false);
  auto a = std::make_unique<Scripted>(&log, "a", 3);
  q.enqueue(a.get(), false);
  q.poke();
  q.failQueued(remoteError("aborted"));
  Status s;
  ASSERT_TRUE(done(a, &s));
  EXPECT_EQ(s.code(), Code::kRemoteError);
  q.poke();  // nothing left to advance
  EXPECT_EQ(log, (std::vector<std::string>{"a:advance1"}));
}

// An abort on another thread while a poke advances the head: the head is not finished under the
// poke (its owner could free it), and the abort's second call, with the execution lock, ends it.
struct AbortedWhileAdvancing final : Request {
  Status run() override { return internalError("never reached"); }
  bool advance(Status*) override {
    q->failQueued(remoteError("aborted"));  // what abort() does first, from another thread
    doneDuringAdvance = test(nullptr);
    return false;
  }
  OpQueue* q = nullptr;
  bool doneDuringAdvance = true;
};

TEST(OpQueue, FailQueuedLeavesTheHeadAPokeIsAdvancingToTheCallWithTheLock) {
  OpQueue q(nullptr, false);
  auto a = std::make_unique<AbortedWhileAdvancing>();
  auto b = std::make_unique<Scripted>(nullptr, "b", 1);
  a->q = &q;
  q.enqueue(a.get(), false);
  q.enqueue(b.get(), false);
  q.poke();
  EXPECT_FALSE(a->doneDuringAdvance);
  EXPECT_FALSE(done(a));
  EXPECT_TRUE(done(b));  // behind the head: failed at once
  EXPECT_EQ(q.queued(), 1u);
  {
    std::lock_guard<FutexMutex> exec(q.execMutex());
    q.failQueued(remoteError("aborted"));
  }
  Status s;
  ASSERT_TRUE(done(a, &s));
  EXPECT_EQ(s.code(), Code::kRemoteError);
  EXPECT_EQ(q.queued(), 0u);
}

TEST(OpQueue, PokeNeverWaitsForTheExecutionLock) {
  std::vector<std::string> log;
  OpQueue q(nullptr, false);
  auto a = std::make_unique<Scripted>(&log, "a", 1);
  q.enqueue(a.get(), false);
  {
    std::lock_guard<FutexMutex> busy(q.execMutex());  // another thread is running an operation
    q.poke();
  }
  EXPECT_FALSE(done(a));
  EXPECT_TRUE(log.empty());
  q.poke();
  EXPECT_TRUE(done(a));
}

}  // namespace
}  // namespace chorus
