#include "src/bootstrap/env.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <vector>

#include "src/base/config.h"
#include "src/base/logging.h"

namespace chorus::bootstrap {
namespace {

// A variable's value, "" when unset or empty. CHORUS_* go through the registry.
std::string env(std::string_view name) {
  if (name.starts_with("CHORUS_")) return config::isSet(name) ? config::getString(name) : "";
  std::string n(name);
  const char* s = std::getenv(n.c_str());
  return s ? s : "";
}
bool has(std::string_view name) { return !env(name).empty(); }

StatusOr<int> parseInt(std::string_view name, int64_t min) {
  std::string v = env(name);
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (errno || end == v.c_str() || *end != '\0' || x > INT_MAX)
    return invalidArgument(std::string(name) + "='" + v + "' is not an integer");
  if (x < min)
    return invalidArgument(std::string(name) + "=" + v + " is not >= " + std::to_string(min));
  return static_cast<int>(x);
}

// Variables that give the size of a PMIx job (PMIx itself exports only the rank).
constexpr const char* kPmixSizeVars[] = {"OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "PMI_SIZE"};

struct Launcher {
  const char* name;
  const char* rankVar;
  const char* sizeVar;  // nullptr: the first of kPmixSizeVars that is set
  const char* localRankVar;
  const char* localSizeVar;  // nullptr: none, or Slurm's SLURM_TASKS_PER_NODE
  bool outerOfTorchrun;      // may legitimately run torchrun inside it
};

constexpr Launcher kLaunchers[] = {
    {"chorus", "CHORUS_RANK", "CHORUS_NRANKS", "CHORUS_LOCAL_RANK", "CHORUS_LOCAL_NRANKS", false},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", false},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", true},
    {"PMIx", "PMIX_RANK", nullptr, nullptr, nullptr, true},
    {"MPICH/Hydra", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", true},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr, true},
};
constexpr int kTorchrun = 1;
constexpr int kSlurm = 5;

// What one launcher's variables say.
struct Reading {
  bool present = false;
  std::string rankVar, sizeVar;
  int rank = -1, size = 0, localRank = -1, localSize = -1;
};

const char* pmixSizeVar() {
  for (const char* v : kPmixSizeVars)
    if (has(v)) return v;
  return nullptr;
}

// The entry at index SLURM_NODEID of SLURM_TASKS_PER_NODE ("4(x2),3" = 4, 4, 3), or -1.
int slurmLocalSize() {
  std::string spec = env("SLURM_TASKS_PER_NODE");
  StatusOr<int> node = has("SLURM_NODEID") ? parseInt("SLURM_NODEID", 0) : StatusOr<int>(-1);
  if (spec.empty() || !node.ok() || *node < 0) return -1;
  long index = *node;
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t comma = spec.find(',', pos);
    std::string item = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    long tasks = std::strtol(item.c_str(), &end, 10);
    if (end == item.c_str() || tasks <= 0) return -1;
    long repeat = 1;
    if (*end == '(') {
      if (end[1] != 'x') return -1;
      char* end2 = nullptr;
      repeat = std::strtol(end + 2, &end2, 10);
      if (end2 == end + 2 || *end2 != ')' || end2[1] != '\0' || repeat <= 0) return -1;
    } else if (*end != '\0') {
      return -1;
    }
    if (index < repeat) return static_cast<int>(tasks);
    index -= repeat;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return -1;
}

StatusOr<Reading> readLauncher(int which) {
  const Launcher& l = kLaunchers[which];
  Reading out;
  out.rankVar = l.rankVar;
  const char* sizeVar = l.sizeVar ? l.sizeVar : pmixSizeVar();
  bool rankSet = has(l.rankVar);
  bool sizeSet = l.sizeVar ? has(l.sizeVar) : rankSet && sizeVar;
  if (!rankSet && !sizeSet) return out;
  if (rankSet && !sizeSet) {
    if (!l.sizeVar)
      return invalidArgument(std::string(l.rankVar) +
                             " is set but no job size is: PMIx exports only the rank; set "
                             "OMPI_COMM_WORLD_SIZE, SLURM_NTASKS or PMI_SIZE (or use "
                             "CHORUS_RANK/CHORUS_NRANKS)");
    return invalidArgument(std::string(l.rankVar) + " is set but " + l.sizeVar + " is not");
  }
  if (!rankSet) return invalidArgument(std::string(sizeVar) + " is set but " + l.rankVar + " is not");
  out.present = true;
  out.sizeVar = sizeVar;
  CHORUS_ASSIGN_OR_RETURN(out.rank, parseInt(l.rankVar, 0));
  CHORUS_ASSIGN_OR_RETURN(out.size, parseInt(sizeVar, 1));
  if (out.rank >= out.size)
    return invalidArgument(std::string(l.rankVar) + "=" + std::to_string(out.rank) +
                           " is not < " + sizeVar + "=" + std::to_string(out.size));
  if (l.localRankVar && has(l.localRankVar)) {
    CHORUS_ASSIGN_OR_RETURN(out.localRank, parseInt(l.localRankVar, 0));
  }
  if (l.localSizeVar && has(l.localSizeVar)) {
    CHORUS_ASSIGN_OR_RETURN(out.localSize, parseInt(l.localSizeVar, 1));
  } else if (which == kSlurm) {
    out.localSize = slurmLocalSize();
  }
  if (out.localRank >= 0 && out.localSize > 0 && out.localRank >= out.localSize) {
    std::string sizeName = l.localSizeVar ? l.localSizeVar : "SLURM_TASKS_PER_NODE";
    return invalidArgument(std::string(l.localRankVar) + "=" + std::to_string(out.localRank) +
                           " is not < " + sizeName + "=" + std::to_string(out.localSize));
  }
  return out;
}

struct Root {
  net::SockAddr addr;
  std::string material;  // as written, for the derived secret
  std::string source;
};

StatusOr<Root> readRoot(const std::string& launcherVars) {
  Root root;
  if (has("CHORUS_ROOT")) {
    std::string v = env("CHORUS_ROOT");
    StatusOr<net::SockAddr> a = net::parseHostPort(v);
    if (!a.ok())
      return invalidArgument("CHORUS_ROOT='" + v + "' is not a usable host:port: " +
                             a.status().message());
    root.addr = *a;
    root.material = "CHORUS_ROOT=" + v;
    root.source = "CHORUS_ROOT";
    return root;
  }
  bool addrSet = has("MASTER_ADDR"), portSet = has("MASTER_PORT");
  if (addrSet && !portSet) return invalidArgument("MASTER_ADDR is set but MASTER_PORT is not");
  if (portSet && !addrSet) return invalidArgument("MASTER_PORT is set but MASTER_ADDR is not");
  if (!addrSet)
    return invalidArgument(launcherVars +
                           " give rank and size, but no root address is set: set "
                           "CHORUS_ROOT=host:port (or MASTER_ADDR and MASTER_PORT)");
  CHORUS_ASSIGN_OR_RETURN(int port, parseInt("MASTER_PORT", 1));
  if (port > 65534)
    return invalidArgument("MASTER_PORT=" + std::to_string(port) +
                           " leaves no port for chorus, which uses MASTER_PORT+1 (at most 65534)");
  std::string host = env("MASTER_ADDR");
  StatusOr<net::SockAddr> a = net::resolve(host, static_cast<uint16_t>(port + 1));
  if (!a.ok())
    return invalidArgument("MASTER_ADDR='" + host + "' does not resolve: " + a.status().message());
  root.addr = *a;
  root.material = "MASTER_ADDR=" + host + ";MASTER_PORT=" + env("MASTER_PORT");
  root.source = "MASTER_ADDR, MASTER_PORT+1";
  return root;
}

constexpr const char* kJobIdVars[] = {"TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
                                      "SLURM_JOB_ID",        "SLURM_STEP_ID",
                                      "PMIX_NAMESPACE",      "OMPI_MCA_ess_base_jobid"};

}  // namespace

StatusOr<EnvJob> parseEnv() {
  constexpr int kCount = static_cast<int>(std::size(kLaunchers));
  // Every launcher's variables are read (and validated) up front, so a contradiction with a
  // lower-priority launcher is noticed even though its values are not used.
  std::vector<StatusOr<Reading>> readings;
  for (int i = 0; i < kCount; ++i) readings.push_back(readLauncher(i));

  int chosen = -1;
  for (int i = 0; i < kCount && chosen < 0; ++i) {
    if (!readings[i].ok()) return readings[i].status();
    if (readings[i]->present) chosen = i;
  }
  if (chosen < 0)
    return invalidArgument(
        "no rank/size found: set CHORUS_ROOT, CHORUS_RANK, CHORUS_NRANKS or launch with torchrun "
        "(MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), mpirun (OMPI_COMM_WORLD_RANK/SIZE, "
        "PMIX_RANK, PMI_RANK/PMI_SIZE) or srun (SLURM_PROCID, SLURM_NTASKS)");
  const Reading& mine = *readings[chosen];

  EnvJob job;
  job.rank = mine.rank;
  job.nranks = mine.size;
  job.localRank = mine.localRank;
  job.localNranks = mine.localSize;
  job.source = std::string(kLaunchers[chosen].name) + " (" + mine.rankVar + ", " + mine.sizeVar + ")";

  bool underTorchrun = has("TORCHELASTIC_RUN_ID");
  for (int i = 0; i < kCount; ++i) {
    if (i == chosen || !readings[i].ok() || !readings[i]->present) continue;
    const Reading& other = *readings[i];
    bool nested = underTorchrun && (chosen == kTorchrun || i == kTorchrun) &&
                  (kLaunchers[i].outerOfTorchrun || kLaunchers[chosen].outerOfTorchrun);
    if (other.size != mine.size || nested) {
      CHORUS_LOG(INFO, INIT) << "bootstrap: ignoring " << other.rankVar << "=" << other.rank
                             << " " << other.sizeVar << "=" << other.size
                             << " (an enclosing launcher's job)";
      continue;
    }
    if (other.rank != mine.rank)
      return invalidArgument(mine.rankVar + "=" + std::to_string(mine.rank) + " contradicts " +
                             other.rankVar + "=" + std::to_string(other.rank) + " (both with " +
                             std::to_string(mine.size) + " ranks)");
    // The same job seen by another launcher: it may know what ours does not.
    if (job.localRank < 0) job.localRank = other.localRank;
    if (job.localNranks < 0) job.localNranks = other.localSize;
  }
  if (job.localRank >= 0 && job.localNranks > 0 && job.localRank >= job.localNranks)
    job.localRank = -1;  // mixed from two sources that disagree: better unknown than wrong

  std::string launcherVars = mine.rankVar + " and " + mine.sizeVar;
  CHORUS_ASSIGN_OR_RETURN(Root root, readRoot(launcherVars));
  job.root = root.addr;
  job.source += ", root from " + root.source;

  if (has("CHORUS_JOB_SECRET")) {
    CHORUS_ASSIGN_OR_RETURN(job.secret,
                            secretFromHex(env("CHORUS_JOB_SECRET"), "CHORUS_JOB_SECRET"));
    job.secretSource = "CHORUS_JOB_SECRET";
  } else {
    std::string material = root.material;
    std::string names = root.source;
    for (const char* v : kJobIdVars) {
      if (!has(v)) continue;
      material += std::string(";") + v + "=" + env(v);
      names += std::string(", ") + v;
    }
    job.secret = deriveSecret(material);
    job.secretSource = "derived from " + names;
  }
  CHORUS_LOG(INFO, INIT) << "bootstrap from the environment: rank " << job.rank << " of "
                         << job.nranks << " (local " << job.localRank << " of "
                         << job.localNranks << ") from " << job.source << ", root "
                         << job.root.toString() << ", secret " << job.secretSource;
  return job;
}

}  // namespace chorus::bootstrap
