// Shrink: a communicator of the ranks that remain after some are excluded — typically those that
// failed. Unlike split, it does not run over the parent's connections: after a fault they are
// cancelled, and the excluded ranks would never answer. The survivors meet again through the
// job's bootstrap store (a new scope of keys per shrink), exactly as at creation; ranks keep
// their order. The store lives in the process that made the unique id (or rank 0 with the
// environment bootstrap), so that process must be among the survivors: when it is gone the
// shrink fails with the bootstrap's error naming the store's address, within the timeout.
#include <algorithm>
#include <cstdio>

#include "src/bootstrap/bootstrap.h"
#include "src/core/comm_internal.h"
#include "src/core/communicator.h"

namespace chorus {

Status Communicator::shrink(std::span<const int> exclude, std::unique_ptr<Communicator>* out) {
  out->reset();
  std::vector<bool> gone(static_cast<size_t>(nranks_), false);
  for (int r : exclude) {
    if (r < 0 || r >= nranks_)
      return invalidArgument("excluded rank " + std::to_string(r) + " is not a rank of this " +
                             std::to_string(nranks_) + "-rank communicator");
    if (r == rank_)
      return invalidArgument("rank " + std::to_string(r) +
                             " excludes itself (only the ranks that stay call chorusCommShrink)");
    if (gone[static_cast<size_t>(r)])
      return invalidArgument("rank " + std::to_string(r) + " is excluded twice");
    gone[static_cast<size_t>(r)] = true;
  }
  if (!job_)
    return internalError("this communicator has no bootstrap store to shrink through");
  int newRank = 0, n = 0;
  for (int r = 0; r < nranks_; ++r) {
    if (gone[static_cast<size_t>(r)]) continue;
    if (r == rank_) newRank = n;
    ++n;
  }
  const uint64_t seq = ++shrinkSeq_;
  const uint64_t salt = mixId(mixId(commId_, 0x4b524853 /* "SHRK" */), seq);
  char scope[64];
  std::snprintf(scope, sizeof(scope), "shrink-%016llx-%llu",
                static_cast<unsigned long long>(commId_), static_cast<unsigned long long>(seq));
  auto what = [&] {
    return "chorusCommShrink (rank " + std::to_string(rank_) + " -> " + std::to_string(newRank) +
           " of " + std::to_string(n) + ")";
  };
  auto boot = bootstrap::Bootstrap::create(*job_, newRank, n, timeoutSeconds_, false, scope);
  if (!boot.ok()) return boot.status().withContext(what());

  // Every survivor must have excluded the same ranks: the same count is already checked (the
  // store refuses a different nranks), the same set here.
  std::vector<uint8_t> mine;
  for (int r = 0; r < nranks_; ++r) mine.push_back(gone[static_cast<size_t>(r)] ? 1 : 0);
  auto all = (*boot)->allGather(mine);
  if (!all.ok()) return all.status().withContext(what());
  for (int r = 0; r < n; ++r) {
    if ((*all)[static_cast<size_t>(r)] == mine) continue;
    std::string theirs;
    for (size_t k = 0; k < (*all)[static_cast<size_t>(r)].size(); ++k)
      if ((*all)[static_cast<size_t>(r)][k])
        theirs += (theirs.empty() ? "" : ",") + std::to_string(k);
    std::string ours;
    for (int k = 0; k < nranks_; ++k)
      if (gone[static_cast<size_t>(k)]) ours += (ours.empty() ? "" : ",") + std::to_string(k);
    return invalidUsage(what() + ": new rank " + std::to_string(r) + " excludes ranks {" +
                        theirs + "}, this rank excludes {" + ours + "}");
  }
  auto child = create(std::move(boot).value(), *job_, newRank, n, salt);
  if (!child.ok()) return child.status().withContext(what());
  (*child)->setTimeout(timeoutSeconds_);
  *out = std::move(child).value();
  return Status();
}

}  // namespace chorus
