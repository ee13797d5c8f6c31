// chorusCommInitMPI: the unique id travels by MPI_Bcast; everything else is the normal init.
#include "chorus/chorus_mpi.h"

extern "C" chorusResult_t chorusCommInitMPI(chorusComm_t* comm, MPI_Comm mpiComm) {
  if (!comm) return chorusInvalidArgument;
  *comm = nullptr;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return chorusInvalidUsage;  // MPI_Init must come first
  int rank = 0, size = 0;
  if (MPI_Comm_rank(mpiComm, &rank) != MPI_SUCCESS || MPI_Comm_size(mpiComm, &size) != MPI_SUCCESS)
    return chorusInvalidArgument;
  chorusUniqueId id{};
  // Rank 0's result is broadcast with the id, so a failure there fails every rank alike.
  int rootResult = chorusSuccess;
  if (rank == 0) rootResult = chorusGetUniqueId(&id);
  if (MPI_Bcast(&rootResult, 1, MPI_INT, 0, mpiComm) != MPI_SUCCESS) return chorusSystemError;
  if (rootResult != chorusSuccess) return static_cast<chorusResult_t>(rootResult);
  if (MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, mpiComm) != MPI_SUCCESS) return chorusSystemError;
  return chorusCommInitRank(comm, size, id, rank);
}
