// Reading a job description (root address, rank, size, secret) from the environment, for
// chorusCommInitFromEnv.
//
// Rank and size come from the first of these that is set:
//   1. chorus-run / by hand: CHORUS_RANK + CHORUS_NRANKS (+ CHORUS_LOCAL_RANK,
//      CHORUS_LOCAL_NRANKS), root CHORUS_ROOT=host:port.
//   2. torchrun: RANK + WORLD_SIZE (+ LOCAL_RANK, LOCAL_WORLD_SIZE), root MASTER_ADDR and
//      MASTER_PORT.
//   3. Open MPI's mpirun: OMPI_COMM_WORLD_RANK + OMPI_COMM_WORLD_SIZE
//      (+ OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE).
//   4. PMIx launchers (prterun, srun --mpi=pmix): PMIX_RANK. PMIx publishes the job size only
//      through its API, so the size comes from OMPI_COMM_WORLD_SIZE, SLURM_NTASKS or PMI_SIZE.
//   5. MPICH/Hydra: PMI_RANK + PMI_SIZE.
//   6. Slurm's srun: SLURM_PROCID + SLURM_NTASKS (+ SLURM_LOCALID; the local size is read from
//      SLURM_TASKS_PER_NODE, e.g. "4(x2),3", at index SLURM_NODEID).
// One of a pair without the other is an error that names both. A local rank or size the chosen
// launcher does not give is taken from another launcher's variables that describe the same job
// (same rank and size); otherwise it is -1 (unknown; topology detection finds it).
//
// Root address: CHORUS_ROOT if set (for every launcher), else MASTER_ADDR with port
// MASTER_PORT + 1. MASTER_PORT itself belongs to torch.distributed's TCPStore (torchrun's agent
// or the training script's rank 0 listens there), and our store speaks another protocol. Rank 0
// listens on that port on all interfaces; the others connect to the address.
//
// Contradictions. Launchers nest (torchrun inside srun, chorus-run inside an allocation), and an
// outer launcher's variables then describe a different, smaller job, so variables of different
// sizes are not compared. Two launchers reporting the same size but different ranks are a
// mistake (usually a rank variable exported for the whole job by hand), reported as
// "CHORUS_RANK=1 contradicts OMPI_COMM_WORLD_RANK=2". Under torchrun (TORCHELASTIC_RUN_ID set)
// outer launchers are never compared: torchrun's elastic rendezvous may number nodes in any order.
//
// Secret: CHORUS_JOB_SECRET (32 hex digits) when set; every rank must see the same value. When
// it is not set, the secret is derived by hashing the root address as written (not as resolved:
// a hostname may resolve differently on different hosts) together with the launcher's job
// identifiers that are set: TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT, SLURM_JOB_ID,
// SLURM_STEP_ID, PMIX_NAMESPACE, OMPI_MCA_ess_base_jobid. That is weaker than a random secret:
// anyone who can read these values (other users on a shared host, via /proc or the scheduler)
// can compute it. It still keeps a stray rank of another job, or of an earlier attempt of this
// one, out of the store. Jobs across untrusted networks should set CHORUS_JOB_SECRET.
#pragma once

#include <string>

#include "src/bootstrap/unique_id.h"
#include "src/base/socket_util.h"
#include "src/base/status.h"

namespace chorus::bootstrap {

struct EnvJob {
  net::SockAddr root;
  int rank = -1;
  int nranks = 0;
  int localRank = -1;    // -1 when unknown
  int localNranks = -1;  // -1 when unknown
  Secret secret{};
  // Where rank and size were found, e.g. "torchrun (RANK, WORLD_SIZE)".
  std::string source;
  // How the secret was obtained, e.g. "CHORUS_JOB_SECRET" or "derived from CHORUS_ROOT, SLURM_JOB_ID".
  std::string secretSource;
};

// kInvalidArgument naming the variables when they are missing, malformed or contradictory.
StatusOr<EnvJob> parseEnv();

}  // namespace chorus::bootstrap
