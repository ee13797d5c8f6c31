#include "tests/multiproc/failure_scenarios.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "chorus/chorus.h"
#include "tests/multiproc/harness.h"

namespace chorus::test {

std::string killedRankScenario(int nranks, size_t count, int smallCallsFirst, const Env& env,
                               double deadlineSeconds) {
  auto* killedAt = static_cast<double*>(sharedScratch(sizeof(double)));
  const int killAt = count > 1000 ? 2 : smallCallsFirst;
  auto out = runRanks(nranks, [=](chorusComm_t comm, int rank, int) -> std::string {
    std::vector<float> a(count, 1.f), b(count);
    const int victim = 1;
    for (int iter = 0; iter < 1000000; ++iter) {
      if (rank == victim && iter == killAt) {
        chorusRequest_t req = nullptr;
        RANK_OK(chorusIAllReduce(a.data(), b.data(), count, chorusFloat32, chorusSum, comm,
                                 nullptr, &req));
        if (count > 1000) ::usleep(30000);  // inside the collective
        *killedAt = monotonicSeconds();
        ::raise(SIGKILL);
      }
      chorusResult_t r = chorusAllReduce(a.data(), b.data(), count, chorusFloat32, chorusSum,
                                         comm, nullptr);
      if (r == chorusSuccess) continue;
      const double after = monotonicSeconds() - *killedAt;
      RANK_CHECK(r == chorusRemoteError, std::string("expected chorusRemoteError, got ") +
                                             chorusGetErrorString(r) + ": " +
                                             chorusGetLastError(comm));
      RANK_CHECK(*killedAt > 0 && after < 5.0,
                 "failure reported " + std::to_string(after) + " s after the kill");
      return "";
    }
    return "rank " + std::to_string(rank) + ": never noticed the dead rank";
  }, {.deadlineSeconds = deadlineSeconds, .env = env});
  std::string wrong;
  for (const RankOutcome& o : out) {
    const bool right = o.rank == 1 ? o.signal == SIGKILL : o.exited && o.exitCode == 0;
    if (!right || !o.leftovers.empty())
      wrong += (o.rank == 1 ? "(the victim, to end by SIGKILL) " : "") + summarize({o}) + "\n";
  }
  return wrong;
}

std::string abortFromAnotherThreadScenario(const Env& env) {
  auto out = runRanks(2, [](chorusComm_t comm, int rank, int) -> std::string {
    chorusComm_t sub = nullptr;
    RANK_OK(chorusCommSplit(comm, 0, rank, &sub));
    float x = 1, y = 0;
    if (rank == 1) {
      ::usleep(1500000);  // late: rank 0 aborts before this call
      chorusResult_t r = chorusAllReduce(&x, &y, 1, chorusFloat32, chorusSum, sub, nullptr);
      RANK_CHECK(r == chorusRemoteError, std::string("the peer of an aborted communicator must "
                                                     "fail, got ") + chorusGetErrorString(r));
      RANK_OK(chorusCommDestroy(sub));
      int64_t v = 1, sum = 0;
      RANK_OK(chorusAllReduce(&v, &sum, 1, chorusInt64, chorusSum, comm, nullptr));
      RANK_CHECK(sum == 2, "parent allreduce after the child was aborted");
      return "";
    }
    std::atomic<double> abortedAt{0};
    std::thread aborter([&] {
      ::usleep(200000);
      abortedAt = monotonicSeconds();
      chorusCommAbort(sub);
    });
    chorusResult_t r = chorusAllReduce(&x, &y, 1, chorusFloat32, chorusSum, sub, nullptr);
    const double after = monotonicSeconds() - abortedAt.load();
    aborter.join();
    RANK_CHECK(r == chorusRemoteError, std::string("expected chorusRemoteError, got ") +
                                           chorusGetErrorString(r));
    RANK_CHECK(after < 1.0, "the call returned " + std::to_string(after) + " s after the abort");
    // The parent communicator is untouched.
    int64_t v = 1, sum = 0;
    RANK_OK(chorusAllReduce(&v, &sum, 1, chorusInt64, chorusSum, comm, nullptr));
    RANK_CHECK(sum == 2, "parent allreduce after aborting the child");
    return "";
  }, {.deadlineSeconds = 60, .env = env});
  return summarize(out);
}

std::string leftBeforeSendingScenario(const Env& env) {
  auto out = runRanks(2, [](chorusComm_t comm, int rank, int) -> std::string {
    if (rank == 1) ::_exit(0);  // without the send rank 0 waits for
    float x = 0;
    const double t0 = monotonicSeconds();
    chorusResult_t r = chorusRecv(&x, 1, chorusFloat32, 1, comm, nullptr);
    RANK_CHECK(r == chorusRemoteError, std::string("expected chorusRemoteError, got ") +
                                           chorusGetErrorString(r));
    const std::string why = chorusGetLastError(comm);
    RANK_CHECK(why.find("rank 1") != std::string::npos, "error does not name rank 1: " + why);
    RANK_CHECK(monotonicSeconds() - t0 < 5.0, "took more than 5 s to notice");
    return "";
  }, {.deadlineSeconds = 60, .env = env});
  return summarize(out);
}

}  // namespace chorus::test
