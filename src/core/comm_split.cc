// Split: a collective over the parent that makes a communicator of each colour.
//
// Four all-gathers over the parent (its own collectives, in order with its other calls):
//   1. colour and key: every rank learns the members of its colour and its new rank;
//   2. the length of each member's new bootstrap record (its transports, made by the parent's
//      transports' forSplit(), listen first), then
//   3. the records themselves, padded to the longest;
//   4. each member's vote (comm_create.cc), after it has connected to its new peers: the child
//      agrees on what its selection relies on among its own members, so a split of one host's
//      ranks gets that host's shared-memory paths even when the parent spans several hosts.
// Ranks with a negative colour take part in every round and get no communicator.
#include <algorithm>
#include <cstring>

#include "src/base/logging.h"
#include "src/bootstrap/peer_info.h"
#include "src/core/comm_internal.h"
#include "src/core/communicator.h"

namespace chorus {

Status Communicator::splitType(topo::GroupKind kind, int key, std::unique_ptr<Communicator>* out) {
  // Every rank computes every rank's colour from the same layout: the groups are the layout's.
  const topo::SplitSpec spec = layout_->split(kind, rank_);
  return split(spec.color, key, out);
}

Status Communicator::split(int color, int key, std::unique_ptr<Communicator>* out) {
  out->reset();
  return queue_.runOrdered([&]() -> Status {
    CHORUS_RETURN_IF_ERROR(checkUsable());
    const uint64_t seq = ++splitSeq_;
    const uint64_t childId =
        mixId(mixId(commId_, seq), static_cast<uint64_t>(static_cast<int64_t>(color)));
    auto allGather = [&](const void* mine, void* all, uint64_t bytes) {
      CollArgs ag;
      ag.coll = sched::Coll::kAllGather;
      ag.send = mine;
      ag.recv = all;
      ag.count = bytes;
      ag.dtype = DataType::kUint8;
      return runNow(ag);
    };

    // 1. Membership.
    struct Member {
      int32_t color;
      int32_t key;
    };
    const Member me{color, key};
    std::vector<Member> all(static_cast<size_t>(nranks_));
    CHORUS_RETURN_IF_ERROR(allGather(&me, all.data(), sizeof(Member)));
    std::vector<int> members;
    for (int r = 0; r < nranks_; ++r)
      if (all[static_cast<size_t>(r)].color == color && color >= 0) members.push_back(r);
    std::stable_sort(members.begin(), members.end(), [&](int x, int y) {
      return all[static_cast<size_t>(x)].key < all[static_cast<size_t>(y)].key;
    });
    int newRank = -1;
    for (size_t i = 0; i < members.size(); ++i)
      if (members[i] == rank_) newRank = static_cast<int>(i);

    // 2-3. The members' new records.
    std::unique_ptr<Communicator> child;
    std::vector<uint8_t> record;
    if (color >= 0) {
      child.reset(new Communicator(newRank, static_cast<int>(members.size())));
      child->commId_ = childId;
      child->job_ = job_;
      child->timeoutSeconds_ = timeoutSeconds_;
      child->spinUs_ = spinUs_;
      child->yieldUs_ = yieldUs_;
      child->chunkBytes_ = chunkBytes_;
      child->mask_ = mask_;
      child->model_ = model_;
      PeerInfo self = peers_->record(rank_);
      self.rank = newRank;
      self.endpoints.clear();
      TransportContext ctx;
      ctx.rank = newRank;
      ctx.nranks = static_cast<int>(members.size());
      ctx.commId = childId;
      ctx.self = identityOf(self);
      CHORUS_ASSIGN_OR_RETURN(child->peers_, Peers::createForSplit(*peers_, ctx, &self));
      record = bootstrap::serializePeerInfo(self);
    }
    const uint64_t myLength = record.size();
    std::vector<uint64_t> lengths(static_cast<size_t>(nranks_));
    CHORUS_RETURN_IF_ERROR(allGather(&myLength, lengths.data(), sizeof(uint64_t)));
    const uint64_t longest = *std::max_element(lengths.begin(), lengths.end());
    record.resize(longest, 0);
    std::vector<uint8_t> records(static_cast<size_t>(nranks_) * longest);
    if (longest > 0) CHORUS_RETURN_IF_ERROR(allGather(record.data(), records.data(), longest));

    // 4. Connect, then agree among the members.
    Vote vote;
    if (child) {
      std::vector<PeerInfo> infos;
      for (size_t i = 0; i < members.size(); ++i) {
        const size_t r = static_cast<size_t>(members[i]);
        CHORUS_ASSIGN_OR_RETURN(PeerInfo p, bootstrap::deserializePeerInfo(
                                                records.data() + r * longest, lengths[r]));
        if (p.rank != static_cast<int>(i))
          return internalError("split: member " + std::to_string(i) + "'s record claims rank " +
                               std::to_string(p.rank));
        infos.push_back(std::move(p));
      }
      CHORUS_RETURN_IF_ERROR(child->peers_->setRecords(std::move(infos)));
      CHORUS_RETURN_IF_ERROR(child->buildLayout().withContext("split"));
      CHORUS_RETURN_IF_ERROR(child->peers_->connectEagerly().withContext("split"));
      PeerInfo scratch = peers_->record(rank_);
      CHORUS_ASSIGN_OR_RETURN(HostFacts facts, hostFacts(&scratch));
      vote = Vote::of(*child->peers_, facts.cores, facts.nicMbps);
    }
    const std::vector<uint8_t> mine = vote.encode();
    std::vector<uint8_t> votes(static_cast<size_t>(nranks_) * Vote::kBytes);
    CHORUS_RETURN_IF_ERROR(allGather(mine.data(), votes.data(), Vote::kBytes));
    if (!child) return Status();
    std::vector<Vote> theirs;
    for (int r : members) {
      const auto at = votes.begin() + static_cast<int64_t>(static_cast<size_t>(r) * Vote::kBytes);
      CHORUS_ASSIGN_OR_RETURN(Vote v, Vote::decode(std::vector<uint8_t>(at, at + Vote::kBytes)));
      theirs.push_back(v);
    }
    child->agreed_ = Vote::combine(theirs, chunkBytes_);
    CHORUS_RETURN_IF_ERROR(child->setupWindow().withContext("split"));
    child->finishSetup();
    CHORUS_LOG(INFO, INIT) << "split: rank " << rank_ << " -> rank " << newRank << "/"
                           << members.size() << " (color " << color << ", key " << key << ")";
    *out = std::move(child);
    return Status();
  });
}

}  // namespace chorus
