// The catalogue of schedule builders: every algorithm with its name and a one-line description.
//
// The tuner picks from here, CHORUS_ALGO overrides by name, chorus-info lists the table, and the
// unit tests run the symbolic checker over every entry. Names are short and unique per
// collective ("ring"); the qualified form "<coll>:<name>" ("allreduce:ring", collName() spelling)
// is accepted wherever a name is looked up. Schedule::algo carries the short name.
#pragma once

#include <span>
#include <string_view>

#include "algorithms/common/schedule.h"

namespace chorus::algo {

struct AlgoInfo {
  sched::Coll coll;
  const char* name;         // unique within coll, e.g. "ring"
  const char* description;  // one line, for chorus-info and logs
  // Returns the rank's schedule, not yet finalized (see makeSchedule()).
  sched::Schedule (*build)(const sched::CollDesc&, int rank, int nranks);
};

// Every registered algorithm, grouped by collective.
std::span<const AlgoInfo> allAlgorithms();

// The algorithm named `name` ("ring" or "allreduce:ring") for `coll`, or nullptr.
const AlgoInfo* findAlgorithm(sched::Coll coll, std::string_view name);

// The algorithm to use when nothing overrides the choice, or nullptr when `coll` has none
// (kSendRecv). For now every collective has exactly one algorithm; the cost model in
// src/tuning/ will replace this rule.
// What the rule may rely on besides the call itself.
struct Platform {
  int nranks = 1;
  // Every rank can read every other's memory (shared memory with cross-memory attach), so the
  // one-sided direct algorithms run.
  bool oneSided = false;
  // Size of the host staging slots when all ranks share a host (0: none): all-reduces up to it
  // run one-shot through the slots.
  uint64_t stagingBytes = 0;
  // The staging segment also has two-shot round areas: all-reduces above stagingBytes run
  // two-shot through them, even without cross-memory attach.
  bool stagedTwoShot = false;
};
const AlgoInfo* defaultAlgorithm(sched::Coll coll, const sched::CollDesc& d, const Platform& p);
// A platform without shared memory: defaultAlgorithm(coll, d, Platform{nranks}).
const AlgoInfo* defaultAlgorithm(sched::Coll coll, const sched::CollDesc& d, int nranks);

// build() followed by finalize(): what an executor runs.
sched::Schedule makeSchedule(const AlgoInfo& algo, const sched::CollDesc& d, int rank, int nranks);

}  // namespace chorus::algo
