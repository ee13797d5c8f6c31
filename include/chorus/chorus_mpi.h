/// chorus with MPI: create a communicator over an MPI communicator's processes.
///
/// Link chorus::mpi (libchorus_mpi). Rank 0 of `mpiComm` creates the unique id (its process
/// serves the rendezvous store) and MPI_Bcast's it; every process then joins with its MPI rank.
#ifndef CHORUS_CHORUS_MPI_H_
#define CHORUS_CHORUS_MPI_H_

#include <mpi.h>

#include "chorus/chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

/// Collective over `mpiComm`: *comm gets the same ranks and size as mpiComm.
chorusResult_t chorusCommInitMPI(chorusComm_t* comm, MPI_Comm mpiComm);

#ifdef __cplusplus
}
#endif

#endif  // CHORUS_CHORUS_MPI_H_
